"""A brute-force reference for SEMANTICS §2–§5, written from the definitions.

Nothing here uses the forests, `Constraint` or the relation methods of
`Conjunction`: atoms are evaluated on values as §1–§2 define them. A numeric
profile value is a closed interval; an atom's truth on it changes only at the
atom constants, so deciding "some point" (overlaps) or "every point" (covers)
needs only the interval ends, the constants inside it, and one point strictly
inside each gap between consecutive ones. The oracle engine keeps held records
in plain dicts and derives the §4 events by comparing the whole set of holding
pairs before and after each record.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import operator
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from matcher.constraints import Atom
from matcher.where import parse_where
from tests import pattern_oracle, selector_oracle

OPEN = math.inf
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COMPARE = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_PATTERN = {
    "prefix": str.startswith,
    "suffix": str.endswith,
    "contains": lambda s, p: p in s,
}


def kind(value: Any) -> str | None:
    """The §1 type of a point value: no coercion, and a bool is not a number."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "num"
    if isinstance(value, str):
        return "str"
    if isinstance(value, frozenset):
        return "tags"
    return None


# -- atoms on points ------------------------------------------------------------


def allows(atom: Atom, v: Any) -> bool:
    """Does the atom hold for the point value `v`?"""
    op, c = atom.op, atom.value
    if op == "exists":
        return True
    if op == "not":  # JMS's NOT over a test: true for a value of another type too
        return not allows(c, v)
    if op in pattern_oracle.HOLDS:
        return pattern_oracle.holds(op, c, v)
    if op == "like":  # a canonical pattern: `\\` makes the next character literal
        return isinstance(v, str) and like_regex(c).fullmatch(v) is not None
    if op in _PATTERN:
        return isinstance(v, str) and _PATTERN[op](v, c)
    if op.startswith("not_"):
        return isinstance(v, str) and not _PATTERN[op[4:]](v, c)
    if op == "in":
        return any(kind(x) == kind(v) and x == v for x in c)
    if op == "between":
        return kind(c[0]) == kind(v) and c[0] <= v <= c[1]
    return kind(c) == kind(v) and _COMPARE[op](v, c)


def like_regex(pattern: str) -> re.Pattern:
    parts = re.findall(r"\\.|.", pattern, re.DOTALL)
    table = {"%": ".*", "_": "."}
    return re.compile(
        "".join(re.escape(p[-1]) if len(p) == 2 else table.get(p, re.escape(p)) for p in parts),
        re.DOTALL,
    )


def _numbers(atoms: list[Atom]) -> set[float]:
    out = set()
    for a in atoms:
        if a.op == "not":
            out |= _numbers([a.value])
            continue
        values = a.value if isinstance(a.value, tuple) else (a.value,)
        out |= {float(x) for x in values if kind(x) == "num"}
    return out


def _with_gaps(points: set[float]) -> list[float]:
    """The points, plus one point strictly inside each gap between neighbours."""
    ordered = sorted(points)
    gaps = [a / 2 + b / 2 for a, b in itertools.pairwise(ordered)]
    return ordered + [m for m, a, b in zip(gaps, ordered, ordered[1:], strict=False) if a < m < b]


def witnesses(atoms: list[Atom], value: Any) -> list[Any]:
    """Points of a profile value that decide every atom (all of it for a point)."""
    if not isinstance(value, tuple):
        return [value]
    lo, hi = value
    return _with_gaps({lo, hi} | {x for x in _numbers(atoms) if lo <= x <= hi})


def value_overlaps(atoms: list[Atom], value: Any) -> bool:
    return any(all(allows(a, x) for a in atoms) for x in witnesses(atoms, value))


def value_covers(atoms: list[Atom], value: Any) -> bool:
    return all(all(allows(a, x) for a in atoms) for x in witnesses(atoms, value))


# -- filters and profiles -------------------------------------------------------


def by_attr(atoms: list[Atom]) -> dict[str, list[Atom]]:
    out: dict[str, list[Atom]] = {}
    for a in atoms:
        out.setdefault(a.attr, []).append(a)
    return out


def profile_value(raw: Any) -> Any:
    """A profile attribute as written in a record: numbers become intervals, a
    list of strings a tag set."""
    if isinstance(raw, bool | str):
        return raw
    if isinstance(raw, list | tuple) and all(isinstance(v, str) for v in raw):
        return frozenset(raw)
    if isinstance(raw, list | tuple):
        return (float(raw[0]), float(raw[1]))
    return (float(raw), float(raw))


def _absent(group: list[Atom], name: str, attrs: dict[str, Any]) -> bool | None:
    """IS NULL on an attribute: whether the group holds (None: no IS NULL in it)."""
    if not any(a.op == "absent" for a in group):
        return None
    return name not in attrs and all(a.op == "absent" for a in group)


def overlaps(atoms: list[Atom], attrs: dict[str, Any]) -> bool:
    """§2 F overlaps P (`attrs` as `profile_value`s)."""
    return all(
        (_absent(g, a, attrs) if _absent(g, a, attrs) is not None else a in attrs)
        and (a not in attrs or value_overlaps(g, attrs[a]))
        for a, g in by_attr(atoms).items()
    )


def covers(atoms: list[Atom], attrs: dict[str, Any]) -> bool:
    """§2 F covers P."""
    return all(
        (_absent(g, a, attrs) if _absent(g, a, attrs) is not None else a in attrs)
        and (a not in attrs or value_covers(g, attrs[a]))
        for a, g in by_attr(atoms).items()
    )


def predicate_holds(dnf: list[list[Atom]], relation: str, attrs: dict[str, Any]) -> bool:
    test = covers if relation == "covers" else overlaps
    return any(test(conj, attrs) for conj in dnf)


def profile_covers(p1: dict[str, Any], p2: dict[str, Any]) -> bool:
    """§2: same attribute set, and P1's set contains P2's on every attribute."""
    if p1.keys() != p2.keys():
        return False
    for name, a in p1.items():
        b = p2[name]
        if isinstance(a, tuple) and isinstance(b, tuple):
            if not a[0] <= b[0] <= b[1] <= a[1]:
                return False
        elif kind(a) != kind(b) or a != b:
            return False
    return True


def universe(atoms: list[Atom]) -> list[Any]:
    """Candidate values of every type for deciding relations between filters.

    Exact for numbers and booleans (constants, gaps, and beyond both ends);
    for strings a finite set built from the constants, so a counterexample
    found in it is real but strings outside it are not tried.
    """
    nums = _numbers(atoms) or {0.0}
    nums |= {min(nums) - 1, max(nums) + 1}
    atoms = [a.value if a.op == "not" else a for a in atoms]
    texts = {a.value for a in atoms if isinstance(a.value, str)}
    texts |= {x for a in atoms if isinstance(a.value, tuple) for x in a.value if kind(x) == "str"}
    strings = {"", "a", "z", "za", "az"} | texts
    for t in texts:
        strings |= {t + "a", t + "z", "z" + t, t[:-1], t[1:]}
    for p, q in itertools.product(texts, repeat=2):
        strings |= {p + q, p + "z" + q}
    return _with_gaps(nums) + sorted(strings) + [False, True]


def filter_covers(f1: list[Atom], f2: list[Atom]) -> bool:
    """Siena covering: every attribute F1 constrains is constrained by F2 to a subset."""
    g1, g2 = by_attr(f1), by_attr(f2)
    for name, mine in g1.items():
        theirs = g2.get(name)
        if theirs is None:
            return False
        for u in universe(mine + theirs):
            if all(allows(a, u) for a in theirs) and not all(allows(a, u) for a in mine):
                return False
    return True


def filters_intersect(f1: list[Atom], f2: list[Atom]) -> bool:
    """Some profile point satisfies both filters (the advertisement relation)."""
    g1, g2 = by_attr(f1), by_attr(f2)
    return all(
        any(all(allows(a, u) for a in g1[name] + g2[name]) for u in universe(g1[name] + g2[name]))
        for name in g1.keys() & g2.keys()
    )


# -- the engine -------------------------------------------------------------------


def to_ms(value: Any) -> int:
    if isinstance(value, str):
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return (moment - _EPOCH) // timedelta(milliseconds=1)
    return int(value)


def dnf_of(record: dict[str, Any]) -> list[list[Atom]]:
    """A subscription's predicate as atoms (the JSON form is read directly; a
    `where` generated from a selector tree is evaluated from its tree instead,
    by `pair_holds`)."""
    if "where" in record:
        return parse_where(record["where"])
    return [
        [
            Atom(
                c["attr"],
                c["op"],
                tuple(c["value"]) if isinstance(c.get("value"), list) else c.get("value"),
            )
            for c in conj
        ]
        for conj in record["filter"]
    ]


@dataclass
class Held:
    record: dict[str, Any]
    kind: str  # "subscription" | "profile"
    valid_from: int
    valid_to: float
    dnf: list[list[Atom]] | None = None
    attrs: dict[str, Any] | None = None
    selector: tuple | None = None  # the tree a generated `where` was printed from

    @property
    def id(self) -> str:
        return str(self.record["id"])


def hold(kind_: str, record: dict[str, Any]) -> Held:
    ts = to_ms(record["ts"])
    vf = to_ms(record["valid_from"]) if record.get("valid_from") is not None else ts
    if "valid_to" not in record:
        vt = OPEN if kind_ == "subscription" else vf
    else:
        vt = OPEN if record["valid_to"] is None else to_ms(record["valid_to"])
    if kind_ == "subscription":
        tree = selector_oracle.SELECTORS.get(record.get("where"))
        if tree is not None:
            return Held(record, kind_, vf, vt, selector=tree)
        return Held(record, kind_, vf, vt, dnf=dnf_of(record))
    attrs = {n: profile_value(v) for n, v in record.get("attrs", {}).items()}
    return Held(record, kind_, vf, vt, attrs=attrs)


def pair_holds(sub: Held, prof: Held) -> bool:
    if max(sub.valid_from, prof.valid_from) > min(sub.valid_to, prof.valid_to):
        return False
    relation = sub.record.get("relation") or "overlaps"
    if sub.selector is not None:
        return selector_oracle.holds(sub.selector, relation, prof.attrs)
    return predicate_holds(sub.dnf, relation, prof.attrs)


def pair_end(sub: Held, prof: Held) -> float:
    """The end of the pair's validity: the intersection of the two intervals' (§6)."""
    return min(sub.valid_to, prof.valid_to)


def event(name: str, reason: str, sub: Held, prof: Held, ts: int) -> dict[str, Any]:
    """A match record without its `match_id` (compared separately)."""
    valid_to = pair_end(sub, prof)
    return {
        "event": name,
        "reason": reason,
        "space": sub.record["space"],
        "subscription_id": sub.id,
        "subscriber": sub.record["subscriber"],
        "profile_id": prof.id,
        "relation": sub.record.get("relation") or "overlaps",
        "valid_from": max(sub.valid_from, prof.valid_from),
        "valid_to": None if valid_to == OPEN else int(valid_to),
        "ts": ts,
        "payload": prof.record.get("payload"),
    }


class Space:
    """One space's held records, in dicts."""

    def __init__(self) -> None:
        self.held: dict[str, dict[str, Held]] = {"subscription": {}, "profile": {}}

    def pairs(self) -> dict[tuple[str, str], tuple[Held, Held]]:
        return {
            (s.id, p.id): (s, p)
            for s in self.held["subscription"].values()
            for p in self.held["profile"].values()
            if pair_holds(s, p)
        }

    def expire(self, until: float) -> list[dict[str, Any]]:
        out = []
        while True:
            due = [h for table in self.held.values() for h in table.values() if h.valid_to < until]
            if not due:
                return out
            h = min(due, key=lambda h: (h.valid_to, h.kind, h.id))
            before = self.pairs()
            del self.held[h.kind][h.id]
            out += [
                event("unmatch", "expired", s, p, int(h.valid_to))
                for (s, p) in before.values()
                if (s if h.kind == "subscription" else p) is h
            ]

    def apply(self, kind_: str, record: dict[str, Any]) -> list[dict[str, Any]]:
        """§3's expiry, then §4: the events of the change of the holding pairs."""
        ts = to_ms(record["ts"])
        out = self.expire(ts)
        ident, table = str(record["id"]), self.held[kind_]
        old = table.get(ident)
        if record["op"] in ("unsubscribe", "retract") and old is None:
            return out
        before = self.pairs()
        if record["op"] in ("unsubscribe", "retract"):
            del table[ident]
            reason = record["op"]
        else:
            table[ident] = hold(kind_, record)
            reason = "changed" if old else f"new-{kind_}"
        after = self.pairs()
        # "A change of a subscription's subscriber is an unmatch to the old subscriber
        # for every pair it held and a match to the new one."
        handed_over = (
            record["op"] == "subscribe"
            and old is not None
            and old.record["subscriber"] != record["subscriber"]
        )
        for key in sorted(before.keys() | after.keys()):
            if handed_over and key[0] == ident:
                if key in before:
                    out.append(event("unmatch", reason, *before[key], ts))
                if key in after:
                    out.append(event("match", reason, *after[key], ts))
            elif key in after and key not in before:
                out.append(event("match", reason, *after[key], ts))
            elif key in before and key not in after:
                out.append(event("unmatch", reason, *before[key], ts))
            elif record["op"] == "publish" and old is not None and key[1] == ident:
                # "the pair held before a change of the profile and still holds"
                out.append(event("update", reason, *after[key], ts))
            elif record["op"] == "subscribe" and old is not None and key[0] == ident:
                # "a pair that still holds emits update only where the end of its
                # validity (valid_to) moves, and nothing otherwise"
                if pair_end(*before[key]) != pair_end(*after[key]):
                    out.append(event("update", reason, *after[key], ts))
        return out


class OracleEngine:
    """§3–§5 over batches of `(kind, record dict, position)`, all valid JSON records.

    Each kind is one input partition (one file, as `tsm replay` reads them).
    `process_batch(items, pending)` returns the match records (without
    `match_id`) and the positions of the records it refused as late; `pending`
    maps the partitions (kinds) with records left after the batch to their next
    record's ts: they hold the watermark back (§3).
    """

    def __init__(self, lateness_ms: int = 0) -> None:
        self.lateness_ms = lateness_ms
        self.largest: dict[str, int] = {}  # the largest ts seen per partition
        self.mark = -math.inf  # the watermark before the lateness
        self.spaces: dict[str, Space] = {}

    def process_batch(self, items, pending=None) -> tuple[list[dict[str, Any]], list[Any]]:
        watermark = self.mark - self.lateness_ms
        accepted, late = [], []
        for kind_, record, position in items:
            ts = to_ms(record["ts"])
            self.largest[kind_] = max(self.largest.get(kind_, ts), ts)
            if ts < watermark:
                late.append(position)
                continue
            order = (ts, 0 if kind_ == "subscription" else 1, position)
            accepted.append((record["space"], order, kind_, record))
        out = []
        for space, _, kind_, record in sorted(accepted, key=lambda a: a[:2]):
            out += self.spaces.setdefault(space, Space()).apply(kind_, record)
        # §3: the smallest over the partitions that have records left of the largest ts
        # seen in each (one that has seen none: its next one's); with none left, the
        # largest seen; never down
        holds = [self.largest.get(kind_, upcoming) for kind_, upcoming in (pending or {}).items()]
        if holds and None not in holds:
            self.mark = max(self.mark, min(holds))
        elif not holds and self.largest:
            self.mark = max(self.mark, max(self.largest.values()))
        for space in sorted(self.spaces):
            out += self.spaces[space].expire(self.mark - self.lateness_ms)
        return out, late


def by_pair(events: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """Events grouped per (space, subscription, profile), in their order: the order
    that matters to a subscriber; the order between different pairs is free."""
    out: dict[tuple, list[dict[str, Any]]] = {}
    for e in events:
        e = {k: v for k, v in e.items() if k != "match_id"}
        out.setdefault((e["space"], e["subscription_id"], e["profile_id"]), []).append(e)
    return out


def canonical(events: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(e, sort_keys=True) for e in events)


# -- random inputs (hypothesis strategies shared by the property tests) -----------

NUMS = (-1, 0, 0.5, 1, 2, 2.5, 3, 5, 7, 10)
TEXTS = ("", "a", "ab", "b", "ba", "abc", "bus", "it's")
TIMES = (1_795_341_600_000, 1_795_345_200_000, 1_795_348_800_000)  # 2026-11-22T10:00Z, 11:00, 12:00
TYPES = ("num", "time", "str", "bool")
ATTR_TYPES = {"x": "num", "y": "num", "t": "time", "s": "str", "b": "bool"}
_COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
_STRING_OPS = ("prefix", "suffix", "contains", "not_prefix", "not_suffix", "not_contains")


def _st():
    from hypothesis import strategies as st  # only the tests need hypothesis

    return st


@functools.cache
def values_of(type_: str):
    st = _st()
    return {
        "num": st.sampled_from(NUMS),
        "time": st.sampled_from(TIMES),
        "str": st.sampled_from(TEXTS),
        "bool": st.booleans(),
    }[type_]


@functools.cache
def atom_strategy(attr: str, type_: str):
    st = _st()
    v = values_of(type_)
    ops = [
        st.builds(Atom, st.just(attr), st.sampled_from(("=", "!=")), v),
        st.builds(
            Atom, st.just(attr), st.just("in"), st.lists(v, min_size=1, max_size=3).map(tuple)
        ),
        st.just(Atom(attr, "exists")),
    ]
    if type_ != "bool":
        pair = st.tuples(v, v).map(lambda p: tuple(sorted(p)))
        ops += [
            st.builds(Atom, st.just(attr), st.sampled_from(_COMPARISONS[2:]), v),
            st.builds(Atom, st.just(attr), st.just("between"), pair),
        ]
    if type_ == "str":
        texts = st.sampled_from([t for t in TEXTS if t])
        ops.append(st.builds(Atom, st.just(attr), st.sampled_from(_STRING_OPS), texts))
    return st.one_of(ops)


def atoms(types: tuple[str, ...] = TYPES, attrs=("x", "x", "x", "y", "t", "s", "s", "b")):
    """One atom; an attribute mostly gets its usual type, sometimes another one.

    `x` is drawn most, so that conjunctions often constrain one attribute twice.
    """
    st = _st()

    @st.composite
    def build(draw):
        attr = draw(st.sampled_from(attrs))
        usual = ATTR_TYPES[attr]
        type_ = (
            usual if usual in types and draw(st.integers(0, 5)) else draw(st.sampled_from(types))
        )
        return draw(atom_strategy(attr, type_))

    return build()


def conjunctions(types=TYPES, max_size: int = 3):
    return _st().lists(atoms(types), max_size=max_size)


def predicates(types=TYPES):
    return _st().lists(conjunctions(types), min_size=1, max_size=3)


def profile_attrs(types=TYPES):
    """Raw profile attributes as in a record: points, [lo, hi], strings, booleans."""
    st = _st()

    @st.composite
    def build(draw):
        out = {}
        for attr, usual in ATTR_TYPES.items():
            if not draw(st.integers(0, 4)):
                continue
            type_ = (
                usual
                if usual in types and draw(st.integers(0, 5))
                else draw(st.sampled_from(types))
            )
            value = draw(values_of(type_))
            if type_ in ("num", "time") and draw(st.booleans()):
                value = sorted([value, draw(values_of(type_))])
            out[attr] = value
        return out

    return build()


def subscription_fields(dnf: list[list[Atom]]):
    """A subscription's predicate (as `where` or `filter`), subscriber and relation,
    drawn for a record."""
    st = _st()

    @st.composite
    def build(draw):
        text = where_text(dnf)
        out = {"where": text} if text and draw(st.booleans()) else {"filter": filter_json(dnf)}
        out["subscriber"] = draw(st.sampled_from(("alice", "bob")))
        relation = draw(st.sampled_from((None, "overlaps", "covers")))
        return out | ({"relation": relation} if relation else {})

    return build()


def where_text(dnf: list[list[Atom]]) -> str | None:
    """The predicate in the `where` language (None where it has no such form)."""

    def lit(v):
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'"
        if v in TIMES:
            moment = _EPOCH + timedelta(milliseconds=v)
            return f"TIMESTAMP '{moment.isoformat(timespec='milliseconds')}'"
        return repr(v)

    def one(a: Atom) -> str:
        if a.op == "exists":
            return f"{a.attr} EXISTS"
        if a.op == "between":
            return f"{a.attr} BETWEEN {lit(a.value[0])} AND {lit(a.value[1])}"
        if a.op == "in":
            return f"{a.attr} IN ({', '.join(lit(v) for v in a.value)})"
        if a.op in _COMPARISONS:
            return f"{a.attr} {a.op} {lit(a.value)}"
        base = a.op.removeprefix("not_")
        pattern = a.value.replace("'", "''").replace("\\", "\\\\")
        pattern = pattern.replace("%", "\\%").replace("_", "\\_")
        like = {"prefix": f"{pattern}%", "suffix": f"%{pattern}", "contains": f"%{pattern}%"}[base]
        if a.op.startswith("not_"):  # a string without the pattern (JMS's NOT alone
            return f"({a.attr} LIKE '%' AND NOT {a.attr} LIKE '{like}')"  # takes any type)
        return f"{a.attr} LIKE '{like}'"

    if not dnf:
        return None
    return " OR ".join("(" + (" AND ".join(one(a) for a in c) or "TRUE") + ")" for c in dnf)


def filter_json(dnf: list[list[Atom]]) -> list[list[dict[str, Any]]]:
    def one(a: Atom) -> dict[str, Any]:
        out: dict[str, Any] = {"attr": a.attr, "op": a.op}
        if a.op != "exists":
            out["value"] = list(a.value) if isinstance(a.value, tuple) else a.value
        return out

    return [[one(a) for a in c] for c in dnf]
