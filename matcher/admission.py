"""Admission: how a raw topic record reaches the batch of a state key.

    decode → (bad: dead letter) → lateness → state keys → order key

Every path into the matcher takes these steps through this module: `tsm
replay` (`matcher.engine.Engine.process_batch`) takes them all at once; the
Spark job takes the first and the state keys in its decode stage
(`streaming.decode_stage`), and lateness and order in its stateful operator
(`streaming.processor`), where the watermark of the batch is known. So the
job and the replay admit the same records for the same reasons.

A record is parsed once. The decode stage sends what a state key needs of the
record along with it, `pack_record(record)`: its fields as decoded, the
predicate as normalized constraints and the profile as normalized values,
which `unpack_record` builds back without parsing or checking anything again
(a sharded space's cells each unpack the same bytes). The bytes are a pickle
of plain values that the job's own decode stage made, never a user's. The
raw value travels too, since a late record's dead letter carries it as it
came.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from matcher.constraints import Conjunction, Constraint
from matcher.encoding import encode
from matcher.errors import RecordError
from matcher.profiles import Profile
from matcher.records import (
    MAX_OUTPUT_BYTES,
    Publish,
    Record,
    Retract,
    Source,
    Subscribe,
    Unsubscribe,
    decode,
)
from matcher.sharding import Sharding

MAX_REASON_CHARS = 1000  # a dead letter's reason (some quote the bad value)
RAW_KEPT_BYTES = 600_000  # a dead letter's raw past what fits: this much, as base64
# The order of kinds within one ts (SEMANTICS §5).
KIND_ORDER = {"subscription": 0, "profile": 1}


@dataclass(frozen=True, slots=True)
class Input:
    """One raw topic record: which topic kind, its bytes, where it came from."""

    kind: str  # "subscription" | "profile"
    raw: bytes | str
    source: Source
    timestamp: int | None = None  # the Kafka record timestamp, used when `ts` is missing


# -- decode, and the dead letter of what cannot be decoded ---------------------------


def decode_input(item: Input) -> Record | dict[str, Any]:
    """The record, or the dead letter (a dict) of one that cannot be accepted."""
    try:
        return decode(item.kind, item.raw, item.source, item.timestamp)
    except RecordError as exc:
        return dead_letter(str(exc), item.raw, item.source)


def dead_letter(reason: str, raw: bytes | str, source: Source) -> dict[str, Any]:
    """The dead-letter record: the reason, the original value and where it was.

    It fits a Kafka message (`MAX_OUTPUT_BYTES`) whatever the value: a reason is
    cut at `MAX_REASON_CHARS`, and a raw value that would not fit (a record over
    the size limit, say) is kept as its first `RAW_KEPT_BYTES`, base64, with
    `raw_truncated` and its whole size in `raw_bytes`."""
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1] + "…"
    letter = _dead_letter(reason, raw, source)
    # (escaped, a character of text is at most 6 bytes: most letters need no measuring)
    if 6 * len(raw) + 8 * MAX_REASON_CHARS > MAX_OUTPUT_BYTES:
        if len(encode(letter)) > MAX_OUTPUT_BYTES:
            data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
            letter["raw"] = _base64(data[:RAW_KEPT_BYTES])
            letter["raw_encoding"] = "base64"
            letter["raw_truncated"] = True
            letter["raw_bytes"] = len(data)
            letter["source"] = letter.pop("source")  # (last, as in every other letter)
    return letter


def _base64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _dead_letter(reason: str, raw: bytes | str, source: Source) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw.encode("utf-8")
            text, encoding = raw, "utf-8"
        except UnicodeEncodeError:  # (a lone surrogate: kept as its bytes)
            text, encoding = _base64(raw.encode("utf-8", "surrogatepass")), "base64"
    else:
        try:
            text, encoding = raw.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = _base64(raw), "base64"
    return {"reason": reason, "raw": text, "raw_encoding": encoding, "source": source.to_json()}


# -- lateness --------------------------------------------------------------------------


def is_late(ts: int, watermark: float) -> bool:
    """SEMANTICS §3: a record is late when its `ts` is below the watermark in force
    at the start of its batch (however that watermark is computed)."""
    return ts < watermark


def late_reason(ts: int, watermark: float, lateness_ms: int) -> str:
    """The dead-letter reason of a late record."""
    return (
        f"late: ts {ts} is below the watermark {int(watermark)} (allowed lateness {lateness_ms} ms)"
    )


def late_letter(
    ts: int, watermark: float, lateness_ms: int, raw: bytes | str, source: Source
) -> dict[str, Any] | None:
    """The dead letter of a record with time `ts` if it is late, else None."""
    if not is_late(ts, watermark):
        return None
    return dead_letter(late_reason(ts, watermark, lateness_ms), raw, source)


# -- state keys and order ---------------------------------------------------------------


def state_keys(record: Record, sharding: Sharding) -> Sequence[str]:
    """The state keys a record goes to: its space's, or every cell's of a sharded
    space (SEMANTICS §8)."""
    return sharding.keys_for(record)


def order_key(record: Record) -> tuple:
    """SEMANTICS §5: (ts, subscriptions before profiles, input position)."""
    return (record.ts, KIND_ORDER[record.kind], record.source.position)


def in_order(records: Iterable[Record]) -> list[Record]:
    """A state key's records of one batch in the order they are applied (§5)."""
    return sorted(records, key=order_key)


# -- a decoded record as it travels to the state keys -----------------------------------

_SUBSCRIBE, _PUBLISH, _UNSUBSCRIBE, _RETRACT = range(4)
_CONSTRAINT_FIELDS = attrgetter(*(f.name for f in fields(Constraint)))


def pack_record(record: Record) -> bytes:
    """A decoded record as bytes that `unpack_record` builds back without parsing:
    its fields, the predicate as its constraints, the profile as its normalized
    values (not its source, which the reader knows). Costs a pickle of those."""
    r = record
    if type(r) is Publish:
        fields_ = (_PUBLISH, r.space, r.id, r.ts, r.profile.attrs, r.valid_from, r.valid_to)
        return pickle.dumps((*fields_, r.payload), protocol=pickle.HIGHEST_PROTOCOL)
    if type(r) is Subscribe:
        predicate = [
            [(attr, _CONSTRAINT_FIELDS(c)) for attr, c in conj.constraints.items()]
            for conj in r.predicate
        ]
        fields_ = (_SUBSCRIBE, r.space, r.id, r.ts, r.subscriber, r.relation, r.valid_from)
        fields_ += (r.valid_to, r.where, r.filter, predicate, r.options)
        return pickle.dumps(fields_, protocol=pickle.HIGHEST_PROTOCOL)
    code = _UNSUBSCRIBE if type(r) is Unsubscribe else _RETRACT
    return pickle.dumps((code, r.space, r.id, r.ts), protocol=pickle.HIGHEST_PROTOCOL)


def unpack_record(data: bytes, source: Source) -> Record:
    """The record `pack_record` made, from `source`: equal to the one decoded, with
    nothing parsed or checked again (an unpickle, and a constructor call per
    constraint and per profile)."""
    fields_ = pickle.loads(data)
    code = fields_[0]
    if code == _PUBLISH:
        _, space, ident, ts, attrs, valid_from, valid_to, payload = fields_
        profile = Profile.from_normalized(attrs)
        return Publish(space, ident, ts, profile, valid_from, valid_to, payload, source)
    if code == _SUBSCRIBE:
        *head, predicate, options = fields_[1:]
        conjunctions = [
            Conjunction({attr: Constraint(*values) for attr, values in conj}) for conj in predicate
        ]
        return Subscribe(*head, conjunctions, source, options)
    if code == _UNSUBSCRIBE:
        return Unsubscribe(*fields_[1:], source)
    return Retract(*fields_[1:], source)
