"""What crosses a link (ROUTING §2), as plain JSON records a Kafka topic can carry.

Four kinds, each a dict with a `type`:

- `interest`: `op` add or remove, the `space` and one `filter` (a conjunction
  in the JSON filter form of SEMANTICS §6);
- `advert`: the same for an advertisement's filter;
- `profile`: a forwarded publish or retract, the record itself as the
  publisher's site holds it (`matcher.records.to_state`: id, ts, validity and
  payload kept, so that its version, and every `match_id`, is the same at
  every site);
- `watermark`: `plane` (advert, interest, profile or ask) and `ts`: every
  later record of that plane on this link has a `ts` of at least this;
- `ask` and `handover`: a client's move (`moves`): the new site's request and
  the old site's answer, relayed over the path between them;
- `member` and `delivered`: a subscription with delivery fields on its way to
  its space's selecting site, and the records made there on their way back to
  its home (`members`, docs/DELIVERY.md §9).

Each of the first three carries `key`, its place in event time: `[ts, class,
position, seq]` (`order.Key`), which the receiver merges its inputs by.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from matcher.constraints import Conjunction, Constraint, predicate_of
from matcher.filter_json import parse_filter
from matcher.records import OPEN, Publish, Retract, from_state, to_state
from matcher.routing import members
from matcher.routing.members import Delivered, Member
from matcher.routing.moves import Ask, Handover, message_of
from matcher.routing.order import Key


def filter_json(conj: Conjunction) -> list[dict[str, Any]]:
    """One conjunction as the atoms of the JSON filter form; `filter_of` reads it back
    as the same conjunction."""
    return [atom for attr, c in conj.constraints.items() for atom in _atoms(attr, c)]


def _atoms(attr: str, c: Constraint) -> list[dict[str, Any]]:
    if c.type is None:
        return [{"attr": attr, "op": "exists"}]
    if c.allowed is not None:
        return [{"attr": attr, "op": "in", "value": sorted(c.allowed)}]
    out = []
    if c.lo is not None and c.hi is not None and not c.lo_open and not c.hi_open:
        out.append({"attr": attr, "op": "between", "value": [c.lo, c.hi]})
    else:
        if c.lo is not None:
            out.append({"attr": attr, "op": ">" if c.lo_open else ">=", "value": c.lo})
        if c.hi is not None:
            out.append({"attr": attr, "op": "<" if c.hi_open else "<=", "value": c.hi})
    out += [{"attr": attr, "op": "!=", "value": v} for v in sorted(c.excluded)]
    for op, patterns in (
        ("prefix", c.prefixes),
        ("suffix", c.suffixes),
        ("contains", c.contains),
        ("not_prefix", c.not_prefixes),
        ("not_suffix", c.not_suffixes),
        ("not_contains", c.not_contains),
    ):
        out += [{"attr": attr, "op": op, "value": p} for p in patterns]
    if not out:  # a type and nothing else: any value of it
        value = -1.7976931348623157e308 if c.type == "num" else ""
        out.append({"attr": attr, "op": ">=", "value": value})
    return out


@functools.lru_cache(maxsize=1 << 16)
def filter_text(conj: Conjunction) -> str:
    """`filter_json` as compact JSON text, cached: a filter crosses many links."""
    return json.dumps(filter_json(conj), separators=(",", ":"), ensure_ascii=False)


def filter_of(atoms: list[dict[str, Any]]) -> Conjunction:
    """The conjunction of `filter_json` atoms (FilterError if they are not valid)."""
    return _filter_of_text(json.dumps(atoms, separators=(",", ":")))


@functools.lru_cache(maxsize=1 << 16)
def _filter_of_text(text: str) -> Conjunction:
    """`filter_of`, cached: a filter crosses many links, and its text is its identity."""
    atoms = json.loads(text)
    conjunctions = predicate_of(parse_filter([atoms]))
    if len(conjunctions) != 1:
        raise ValueError(f"not one satisfiable conjunction: {atoms!r}")
    return conjunctions[0]


@dataclass(frozen=True, slots=True)
class FilterChange:
    """An interest or advertisement change: add or remove one filter of a space."""

    type: str  # "interest" | "advert"
    op: str  # "add" | "remove"
    space: str
    filter: Conjunction
    key: Key

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "op": self.op,
            "space": self.space,
            "filter": filter_json(self.filter),
            "ts": self.key.ts,
            "key": self.key.to_json(),
        }


@dataclass(frozen=True, slots=True)
class ProfileForward:
    """A publish or retract sent on to a neighbour, in event time at `key` (a
    publish sent because interest grew is keyed just before that interest)."""

    record: Publish | Retract
    key: Key

    @property
    def space(self) -> str:
        return self.record.space

    def to_json(self) -> dict[str, Any]:
        r = self.record
        if isinstance(r, Publish):
            body = json.loads(to_state(r))
        else:
            body = {"op": "retract", "id": r.id, "space": r.space, "ts": r.ts}
        return {"type": "profile", "record": body, "key": self.key.to_json()}


@dataclass(frozen=True, slots=True)
class Watermark:
    plane: str
    ts: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "watermark", "plane": self.plane, "ts": _ts_json(self.ts)}


Message = FilterChange | ProfileForward | Watermark | Ask | Handover | Member | Delivered


def _ts_json(ts: float) -> int | None:
    return None if ts == OPEN else int(ts)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encode(message: Message) -> bytes:
    """A link record's bytes: `to_json` as compact JSON, UTF-8 (written from its
    parts: a filter's text and a held record's state are made once)."""
    if isinstance(message, FilterChange):
        head = {"type": message.type, "op": message.op, "space": message.space}
        text = _dumps(head)[:-1] + f',"filter":{filter_text(message.filter)}'
        tail = f',"ts":{message.key.ts},"key":{_dumps(message.key.to_json())}}}'
        return (text + tail).encode()
    if isinstance(message, ProfileForward) and isinstance(message.record, Publish):
        key = _dumps(message.key.to_json())
        return f'{_PUBLISH}{_state_text(message.record)},"key":{key}}}'.encode()
    return _dumps(message.to_json()).encode()


_PUBLISH = '{"type":"profile","record":'
_PUBLISH_BYTES = _PUBLISH.encode()
_STATES: dict[int, tuple[Publish, str]] = {}  # id -> (publish, its to_state): made once


def _state_text(pub: Publish) -> str:
    """`to_state` of a publish, made once for the object (a version crosses many
    links; the entry holds the object, so its id is not reused while there)."""
    held = _STATES.get(id(pub))
    if held is None or held[0] is not pub:
        held = _remember(pub, to_state(pub))
    return held[1]


def _remember(pub: Publish, text: str) -> tuple[Publish, str]:
    if len(_STATES) > 1 << 16:
        _STATES.clear()  # (a bound on memory: texts are remade on demand)
    held = _STATES[id(pub)] = (pub, text)
    return held


@functools.lru_cache(maxsize=1 << 14)
def _publish_of_text(text: str) -> Publish:
    """`from_state` of a forwarded publish's text, cached: the same version reaches
    many sites, and a record is never changed once made."""
    pub = from_state(text)
    assert isinstance(pub, Publish)
    _remember(pub, text)
    return pub


def decode(raw: bytes) -> Message:
    """Back from `encode`."""
    if raw.startswith(_PUBLISH_BYTES) and not raw.startswith(b'{"op":"retract"', len(_PUBLISH)):
        # (a forwarded publish: its record's text is the key of the parsed records)
        end = raw.rfind(b',"key":')
        key = Key.from_json(json.loads(raw[end + 7 : -1]))
        return ProfileForward(_publish_of_text(raw[len(_PUBLISH) : end].decode()), key)
    obj = json.loads(raw)
    kind = obj["type"]
    if kind in ("ask", "handover"):
        return message_of(obj)
    if kind in ("member", "delivered"):
        return members.message_of(obj)
    if kind == "watermark":
        return Watermark(obj["plane"], OPEN if obj["ts"] is None else obj["ts"])
    key = Key.from_json(obj["key"])
    if kind == "profile":
        body = obj["record"]
        if body["op"] == "retract":
            return ProfileForward(Retract(body["space"], body["id"], body["ts"]), key)
        return ProfileForward(from_state(json.dumps(body)), key)
    # (the filter's own text, as `encode` wrote it, is the key of the parsed filters)
    start, end = raw.find(b',"filter":'), raw.rfind(b',"ts":')
    if 0 < start < end:
        conj = _filter_of_text(raw[start + 10 : end].decode())
    else:
        conj = filter_of(obj["filter"])
    return FilterChange(kind, obj["op"], obj["space"], conj, key)
