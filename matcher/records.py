"""Decoding and validating topic records (SEMANTICS §6, schema version 1).

Every problem becomes a `RecordError` whose message says what is wrong and
how to fix it; the caller turns it into a dead letter and goes on.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from matcher.constraints import MAX_WHERE_BYTES, Conjunction, predicate_of
from matcher.delivery.options import Options, options_of
from matcher.encoding import encode
from matcher.errors import FilterError, RecordError
from matcher.filter_json import parse_filter
from matcher.profiles import Profile
from matcher.times import MAX_MS, MIN_MS, epoch_ms
from matcher.where import parse_where

MAX_RECORD_BYTES = 1024 * 1024
# What goes out must fit in one Kafka message: 1,000,000 bytes is librdkafka's default
# `message.max.bytes` and about a broker's, and a record over it failed the producer
# at every retry of the task. Every match record carries the profile's payload and
# the names below, so those are bounded to leave room; dead letters bound themselves.
MAX_OUTPUT_BYTES = 1_000_000
MAX_PAYLOAD_BYTES = 900_000  # the payload as match records write it (compact JSON, UTF-8)
MAX_NAME_CHARS = 1024  # id, space, subscriber (at most 6 bytes a character, escaped)
_PAYLOAD_GROWTH = 5  # compact JSON of a parsed value is under 5x its text (1e15 ->
# 1000000000000000.0 is the most), so a record this much under the limit needs no check
# Arrays and objects a record may nest, itself included. A payload travels on in
# match records, snapshots and the change log, and a deeper one (1,000 levels fit in
# 1 MB) made json or pickle raise RecursionError there, stopping the job at every retry.
MAX_DEPTH = 64
OPEN = math.inf  # a missing valid_to: open-ended
MAX_INT = 2**1023  # larger integers do not convert to a float


@dataclass(frozen=True, slots=True)
class Source:
    """Where a record came from: a Kafka position or a file line."""

    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    file: str | None = None
    line: int | None = None

    @property
    def position(self) -> tuple[int, int]:
        if self.offset is not None:
            return (self.partition or 0, self.offset)
        return (0, self.line or 0)

    def to_json(self) -> dict[str, Any]:
        if self.file is not None:
            return {"file": self.file, "line": self.line}
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset}


@dataclass(slots=True)
class Subscribe:
    space: str
    id: str
    ts: int
    subscriber: str
    relation: str
    valid_from: int
    valid_to: float
    where: str | None
    filter: Any
    predicate: list[Conjunction]
    source: Source = field(default_factory=Source)
    options: Options | None = None  # its delivery fields (docs/DELIVERY.md), if any
    kind = "subscription"
    op = "subscribe"


@dataclass(slots=True)
class Unsubscribe:
    space: str
    id: str
    ts: int
    source: Source = field(default_factory=Source)
    kind = "subscription"
    op = "unsubscribe"


@dataclass(slots=True)
class Publish:
    space: str
    id: str
    ts: int
    profile: Profile
    valid_from: int
    valid_to: float
    payload: Any
    source: Source = field(default_factory=Source)
    kind = "profile"
    op = "publish"


@dataclass(slots=True)
class Retract:
    space: str
    id: str
    ts: int
    source: Source = field(default_factory=Source)
    kind = "profile"
    op = "retract"


Record = Subscribe | Unsubscribe | Publish | Retract
_OPS = {"subscription": ("subscribe", "unsubscribe"), "profile": ("publish", "retract")}


def _reject_constant(name: str) -> Any:
    raise RecordError(f"{name} is not allowed in a record: numbers must be finite")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise RecordError(f"number {text[:40]} is out of range: numbers must be finite")
    return number


def _bounded_int(text: str) -> int:
    number = int(text)
    if abs(number) > MAX_INT:
        raise RecordError(f"integer {text[:20]}... is out of range: numbers must be finite")
    return number


def _time(obj: dict, name: str, default: int | None) -> int | None:
    value = obj.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        raise RecordError(f"'{name}' must be epoch milliseconds or an ISO-8601 time, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise RecordError(f"'{name}' must be a finite number")
        if isinstance(value, float) and not value.is_integer():
            raise RecordError(
                f"'{name}' must be a whole number of epoch milliseconds, got {value!r}"
            )
        ms = int(value)
    elif isinstance(value, str):
        try:
            ms = epoch_ms(value)
        except ValueError:
            raise RecordError(
                f"'{name}' is not an ISO-8601 time: {value!r} "
                "(use e.g. '2026-11-22T10:00:00Z' or epoch milliseconds)"
            ) from None
    else:
        raise RecordError(f"'{name}' must be epoch milliseconds or an ISO-8601 time, got {value!r}")
    if not MIN_MS <= ms <= MAX_MS:
        hint = " (an open-ended valid_to is null)" if name == "valid_to" else ""
        raise RecordError(f"'{name}' {value!r} {_OUT_OF_RANGE}{hint}")
    return ms


_OUT_OF_RANGE = f"is outside the years 1 to 9999 (epoch milliseconds {MIN_MS} to {MAX_MS})"


def as_name(value: Any) -> str | None:
    """An `id`, `space` or `subscriber` value as the engine names it (an integer
    by its digits), or None if it is no name; producers key records by it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) and value else None


def _text(obj: dict, name: str, required: bool = True) -> str | None:
    value = obj.get(name)
    if value is None:
        if required:
            raise RecordError(f"missing '{name}'")
        return None
    text = as_name(value)
    if text is None:
        raise RecordError(f"'{name}' must be a non-empty string, got {value!r}")
    return text


def _parse_json(raw: bytes | str) -> dict:
    if isinstance(raw, str):
        try:
            raw = raw.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RecordError(f"record is not Unicode text (character {exc.start + 1})") from None
    if len(raw) > MAX_RECORD_BYTES:
        raise RecordError(f"record is {len(raw)} bytes; the limit is {MAX_RECORD_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"record is not UTF-8 text (byte {exc.start})") from None
    try:
        obj = _loads(raw, text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"malformed JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise RecordError(_too_deep()) from None
    if not isinstance(obj, dict):
        raise RecordError(f"a record must be a JSON object, got {type(obj).__name__}")
    # (counted in C first: a record with few brackets cannot nest deeply)
    if text.count("[") + text.count("{") > MAX_DEPTH and _nested_deeper(obj, MAX_DEPTH):
        raise RecordError(_too_deep())
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        _check_unicode(obj)
    version = obj.get("version", 1)
    if version != 1:
        raise RecordError(f"unsupported schema version {version!r}; this matcher reads version 1")
    return obj


def _loads(raw: bytes, text: str) -> Any:
    """`raw` (whose UTF-8 is `text`) parsed as `json.loads` with the hooks below
    parses it, by msgspec's decoder where it reads it: it reads the same values and
    refuses all that json refuses (and more: NaN, an unpaired surrogate escape, a
    number past the float range, deep nesting); where it refuses, or where an
    integer may pass `MAX_INT` (`_LONG_NUMBER`), json.loads reads it, so that
    every refusal keeps json's reason."""
    if _LONG_NUMBER.search(raw) is None:
        try:
            return _FAST_DECODE(raw)
        except (msgspec.MsgspecError, RecursionError):
            pass
    return json.loads(
        text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int
    )


_FAST_DECODE = msgspec.json.Decoder().decode
# 300 digits in a row: an integer near MAX_INT (2**1023, 308 digits) is left to json
_LONG_NUMBER = re.compile(rb"[0-9]{300}")


# a JSON escape of a UTF-16 surrogate: paired, json.loads makes one character of
# the two; alone, it leaves a code point that no UTF-8 output can carry
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _too_deep() -> str:
    return f"record nests arrays and objects deeper than {MAX_DEPTH} levels"


def _nested_deeper(obj: Any, levels: int) -> bool:
    """Whether `obj` has arrays or objects more than `levels` deep (itself the first)."""
    level = [obj]
    for _ in range(levels):
        level = [
            item
            for container in level
            for item in (container.values() if isinstance(container, dict) else container)
            if isinstance(item, dict | list)
        ]
        if not level:
            return False
    return True


def _check_unicode(obj: dict) -> None:
    """Refuse a record whose text holds an unpaired surrogate (a `\\udXXX` escape
    alone): its match records, state and dead letters could not be written."""
    try:
        encode(obj)
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end].encode("unicode_escape").decode("ascii")
        raise RecordError(
            f"record holds an unpaired UTF-16 surrogate escape ({bad}), which is not "
            "Unicode text: escape characters beyond U+FFFF as a pair, or write them as UTF-8"
        ) from None


def decode(
    kind: str, raw: bytes | str, source: Source = Source(), fallback_ts: int | None = None
) -> Record:
    """One topic record, validated; raises RecordError with the reason."""
    record = _record(kind, _parse_json(raw), source, fallback_ts)
    _check_output_size(record, len(raw) if isinstance(raw, bytes) else 4 * len(raw))
    return record


def _check_output_size(record: Record, raw_bytes: int) -> None:
    """Refuse a record whose match records could not fit in a Kafka message."""
    names = (("id", record.id), ("space", record.space))
    if isinstance(record, Subscribe):
        names += (("subscriber", record.subscriber),)
    for name, value in names:
        if len(value) > MAX_NAME_CHARS:
            raise RecordError(
                f"'{name}' is {len(value)} characters; the limit is {MAX_NAME_CHARS} "
                "(it goes into every match record)"
            )
    if isinstance(record, Publish) and raw_bytes * _PAYLOAD_GROWTH > MAX_PAYLOAD_BYTES:
        size = len(encode(record.payload))
        if size > MAX_PAYLOAD_BYTES:
            raise RecordError(
                f"'payload' is {size} bytes of JSON; the limit is {MAX_PAYLOAD_BYTES}, so "
                f"that each match record, which carries it, fits a {MAX_OUTPUT_BYTES}-byte "
                "Kafka message"
            )


def record_ts(obj: Mapping[str, Any], fallback_ts: int | None) -> int:
    """A parsed record's event time (SEMANTICS §3): its `ts`, or where that is missing or
    null, `fallback_ts` (the Kafka record timestamp) if it is in the years 1 to 9999.
    Raises RecordError."""
    if fallback_ts is not None and not MIN_MS <= fallback_ts <= MAX_MS:
        fallback_ts = None  # (a Kafka timestamp is any 64-bit number of milliseconds)
    ts = _time(obj, "ts", fallback_ts)
    if ts is None:
        raise RecordError(
            "missing 'ts' (and the record has no Kafka timestamp in the years 1 to 9999 to use)"
        )
    return ts


def _record(kind: str, obj: dict, source: Source, fallback_ts: int | None) -> Record:
    """A parsed record's fields, validated."""
    op = obj.get("op")
    if op not in _OPS[kind]:
        expected = " or ".join(repr(o) for o in _OPS[kind])
        raise RecordError(f"unknown op {op!r} on the {kind}s topic: expected {expected}")
    ident = _text(obj, "id")
    space = _text(obj, "space")
    ts = record_ts(obj, fallback_ts)
    if op == "unsubscribe":
        return Unsubscribe(space, ident, ts, source)
    if op == "retract":
        return Retract(space, ident, ts, source)
    valid_from = _time(obj, "valid_from", ts)
    # An explicit null is open-ended; an absent valid_to is open-ended for a
    # subscription and the single instant valid_from for a profile (§3).
    if "valid_to" in obj:
        valid_to = _time(obj, "valid_to", None)
    else:
        valid_to = None if op == "subscribe" else valid_from
    valid_to = OPEN if valid_to is None else valid_to
    if valid_from > valid_to:
        raise RecordError(f"valid_from {valid_from} is after valid_to {valid_to}")
    if op == "publish":
        attrs = obj.get("attrs", {})
        if not isinstance(attrs, dict):
            raise RecordError(f"'attrs' must be an object of attribute values, got {attrs!r}")
        return Publish(
            space, ident, ts, Profile(attrs), valid_from, valid_to, obj.get("payload"), source
        )
    return _subscribe(obj, space, ident, ts, valid_from, valid_to, source)


@functools.lru_cache(maxsize=8192)
def compile_where(where: str) -> tuple[Conjunction, ...]:
    """The predicate of a `where` text; cached, as popular filters repeat. The cache
    holds 8,192 texts, about 2 KB each: a stream of filters that never repeat (every
    subscription its own box) fills it once and then keeps it at that size."""
    if len(where.encode()) > MAX_WHERE_BYTES:
        raise FilterError(f"'where' is longer than the limit of {MAX_WHERE_BYTES} bytes")
    return tuple(predicate_of(parse_where(where)))


def _subscribe(obj, space, ident, ts, valid_from, valid_to, source) -> Subscribe:
    subscriber = _text(obj, "subscriber")
    relation = obj.get("relation")
    if relation is None:  # (absent or null: the default of §1)
        relation = "overlaps"
    elif relation not in ("overlaps", "covers"):
        raise RecordError(f"'relation' must be 'overlaps' or 'covers', got {relation!r}")
    where, flt = obj.get("where"), obj.get("filter")
    if (where is None) == (flt is None):
        raise RecordError("a subscription needs exactly one of 'where' and 'filter'")
    try:
        if where is not None:
            if not isinstance(where, str):
                raise RecordError(f"'where' must be a string, got {where!r}")
            predicate = list(compile_where(where))
        else:
            predicate = predicate_of(parse_filter(flt))
    except FilterError as exc:
        raise RecordError(f"bad {'where' if where is not None else 'filter'}: {exc}") from None
    options = options_of(obj, relation)
    return Subscribe(
        space,
        ident,
        ts,
        subscriber,
        relation,
        valid_from,
        valid_to,
        where,
        flt,
        predicate,
        source,
        options,
    )


def to_state(record: Subscribe | Publish) -> str:
    """The canonical compact JSON of a held record (what a state store keeps)."""
    base: dict[str, Any] = {"op": record.op, "id": record.id, "space": record.space}
    if isinstance(record, Subscribe):
        base["subscriber"] = record.subscriber
        if record.where is not None:
            base["where"] = record.where
        else:
            base["filter"] = record.filter
        base["relation"] = record.relation
    else:
        base["attrs"] = record.profile.to_json()
    base["valid_from"] = record.valid_from
    base["valid_to"] = None if record.valid_to == OPEN else record.valid_to
    base["ts"] = record.ts
    if isinstance(record, Subscribe) and record.options is not None:
        base |= record.options.to_json()
    if isinstance(record, Publish):
        base["payload"] = record.payload
    return json.dumps(base, separators=(",", ":"), ensure_ascii=False)


def from_state(text: str) -> Subscribe | Publish:
    """Back from `to_state` (never fails on what `to_state` wrote)."""
    obj = json.loads(text)
    kind = "subscription" if obj["op"] == "subscribe" else "profile"
    # (not `decode`: what it held once stays readable whatever limits came since)
    return _record(kind, obj, Source(), None)


def version_of(state: str) -> str:
    """A short digest of a held record's content (its `to_state`): its version in
    `match_id`s."""
    return hashlib.sha1(state.encode()).hexdigest()[:16]
