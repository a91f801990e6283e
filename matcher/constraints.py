"""Constraints on attributes and the relations between filters and profiles."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from matcher.engines.patterns import PATTERN_OPS, PatternTest
from matcher.errors import FilterError
from matcher.expressions import Computed
from matcher.like import matches

if TYPE_CHECKING:
    from matcher.profiles import Profile

OPS = frozenset(
    "= != < <= > >= between in prefix suffix contains exists "
    "not_prefix not_suffix not_contains".split()
) | frozenset(PATTERN_OPS)
"""The ops of both filter forms. The `where` language also gives `like` (a
general LIKE pattern), `not` (JMS's NOT over one of these: the attribute is
present and the atom in `value` does not hold, whatever the value's type) and
`absent` (IS NULL)."""

MAX_WHERE_BYTES = 64 * 1024
MAX_ATTRIBUTES = 256
MAX_CONJUNCTIONS = 64


@dataclass(frozen=True, slots=True)
class Atom:
    """One constraint as written: `attr op value`, before normalization
    (`value` is the negated `Atom` for op `not`)."""

    attr: str
    op: str
    value: Any = None


NUM, STR, BOOL, TAGS = "num", "str", "bool", "tags"
_MAX = sys.float_info.max


def type_of(value: Any) -> str | None:
    """The attribute type of a value; bools are not numbers (no coercion, §1)."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int | float):
        return NUM
    if isinstance(value, str):
        return STR
    if isinstance(value, tuple):  # a profile interval
        return NUM
    if isinstance(value, frozenset):  # a profile's tag set
        return TAGS
    return None


@dataclass(frozen=True, slots=True)
class Constraint:
    """The normalized set of values one conjunction allows for one attribute.

    Numbers are floats with closed bounds (an open bound is moved to the
    next float), so that the numeric part is exactly a box. A finite set
    (`=`, `IN`, every boolean constraint) is kept as `allowed` with the other
    parts already folded into it. `type` None means `exists` (any type).
    """

    type: str | None
    lo: Any = None
    lo_open: bool = False
    hi: Any = None
    hi_open: bool = False
    allowed: frozenset | None = None
    excluded: frozenset = frozenset()
    prefixes: tuple[str, ...] = ()
    suffixes: tuple[str, ...] = ()
    contains: tuple[str, ...] = ()
    not_prefixes: tuple[str, ...] = ()
    not_suffixes: tuple[str, ...] = ()
    not_contains: tuple[str, ...] = ()
    likes: tuple[str, ...] = ()
    not_likes: tuple[str, ...] = ()
    none_of: tuple[Constraint, ...] = ()

    # -- membership -------------------------------------------------------

    def allows(self, value: Any) -> bool:
        """Does this constraint hold for the point `value`?"""
        if self.none_of and any(n.allows(value) for n in self.none_of):
            return False
        if self.type is None:
            return True
        if type_of(value) != self.type or isinstance(value, tuple):
            return False
        if self.allowed is not None:
            return value in self.allowed
        return self._in_bounds(value) and value not in self.excluded and self._patterns_ok(value)

    def _in_bounds(self, v: Any) -> bool:
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            return False
        return not (self.hi is not None and (v > self.hi or (self.hi_open and v == self.hi)))

    def _patterns_ok(self, s: str) -> bool:
        return (
            all(s.startswith(p) for p in self.prefixes)
            and all(s.endswith(p) for p in self.suffixes)
            and all(p in s for p in self.contains)
            and not any(s.startswith(p) for p in self.not_prefixes)
            and not any(s.endswith(p) for p in self.not_suffixes)
            and not any(p in s for p in self.not_contains)
            and all(matches(p, s) for p in self.likes)
            and not any(matches(p, s) for p in self.not_likes)
        )

    # -- against a profile value (a point, or a closed numeric interval) ---

    def _settled(self, value: Any) -> bool | None:
        """The answer of both relations unless `value` is a numeric interval
        and this a numeric constraint (None: then it takes some arithmetic)."""
        if not isinstance(value, tuple):
            return self.allows(value)
        if self.type is None:
            return True
        return None if self.type == NUM else False

    def overlaps(self, value: Any) -> bool:
        """Does some point of `value` satisfy the constraint?"""
        if self.none_of and isinstance(value, tuple):
            return any(lo <= value[1] and value[0] <= hi for lo, hi in _number_set(self))
        settled = self._settled(value)
        if settled is not None:
            return settled
        a, b = value
        if self.allowed is not None:
            return any(a <= v <= b for v in self.allowed)
        lo = a if self.lo is None else max(a, self.lo)
        hi = b if self.hi is None else min(b, self.hi)
        if lo > hi:
            return False
        return lo < hi or lo not in self.excluded

    def covers(self, value: Any) -> bool:
        """Does every point of `value` satisfy the constraint?"""
        if self.none_of and isinstance(value, tuple):
            return _holds_all(_number_set(self), *value)
        settled = self._settled(value)
        if settled is not None:
            return settled
        a, b = value
        if self.allowed is not None:
            return a == b and a in self.allowed
        if (self.lo is not None and a < self.lo) or (self.hi is not None and b > self.hi):
            return False
        return not any(a <= e <= b for e in self.excluded)

    # -- against another constraint ----------------------------------------

    def covers_constraint(self, other: Constraint) -> bool:
        """Is every value `other` allows also allowed here (Siena's covering)?

        Sound, and complete for numbers, booleans, finite sets and the
        string forms the thesis uses; for unusual mixes of string patterns
        and string ranges it may answer False where covering holds, which
        only costs the forest some pruning.
        """
        if self.none_of and not all(_outside(other, n) for n in self.none_of):
            return False
        if self.type is None:
            return True
        if other.type != self.type:
            return False
        if other.allowed is not None:
            return all(self.allows(v) for v in other.allowed)
        if self.allowed is not None:
            return False
        if not self._bounds_cover(other):
            return False
        if any(e not in other.excluded and other.allows(e) for e in self.excluded):
            return False
        pre, suf = other.prefixes, other.suffixes
        return (
            all(any(q.startswith(p) for q in pre) for p in self.prefixes)
            and all(any(q.endswith(p) for q in suf) for p in self.suffixes)
            and all(any(p in q for q in pre + suf + other.contains) for p in self.contains)
            and all(
                any(p.startswith(q) for q in other.not_prefixes)
                or any(not q.startswith(p) and not p.startswith(q) for q in pre)
                for p in self.not_prefixes
            )
            and all(
                any(p.endswith(q) for q in other.not_suffixes)
                or any(not q.endswith(p) and not p.endswith(q) for q in suf)
                for p in self.not_suffixes
            )
            and all(any(q in p for q in other.not_contains) for p in self.not_contains)
            and all(p in other.likes for p in self.likes)
            and all(p in other.not_likes for p in self.not_likes)
        )

    def _bounds_cover(self, other: Constraint) -> bool:
        if self.lo is not None:
            if other.lo is None or other.lo < self.lo:
                return False
            if other.lo == self.lo and self.lo_open and not other.lo_open:
                return False
        if self.hi is not None:
            if other.hi is None or other.hi > self.hi:
                return False
            if other.hi == self.hi and self.hi_open and not other.hi_open:
                return False
        return True

    def intersect(self, other: Constraint) -> Constraint | None:
        """Both constraints at once, normalized; None when nothing satisfies both."""
        if self.none_of or other.none_of:
            both = replace(self, none_of=()).intersect(replace(other, none_of=()))
            return None if both is None else _absorbed(both, self.none_of + other.none_of)
        if self.type is None:
            return other
        if other.type is None:
            return self
        if self.type != other.type:
            return None
        if self.allowed is not None or other.allowed is not None:
            if self.allowed is not None and other.allowed is not None:
                values = self.allowed & other.allowed
            elif self.allowed is not None:
                values = frozenset(v for v in self.allowed if other.allows(v))
            else:
                values = frozenset(v for v in other.allowed if self.allows(v))
            return Constraint(self.type, allowed=values) if values else None
        lo, lo_open = _tighter(self.lo, self.lo_open, other.lo, other.lo_open, max)
        hi, hi_open = _tighter(self.hi, self.hi_open, other.hi, other.hi_open, min)
        return _normalized(
            Constraint(
                self.type,
                lo,
                lo_open,
                hi,
                hi_open,
                None,
                self.excluded | other.excluded,
                self.prefixes + other.prefixes,
                self.suffixes + other.suffixes,
                self.contains + other.contains,
                self.not_prefixes + other.not_prefixes,
                self.not_suffixes + other.not_suffixes,
                self.not_contains + other.not_contains,
                self.likes + other.likes,
                self.not_likes + other.not_likes,
            )
        )

    def describe(self) -> str:
        """A short readable form, for logs and error messages."""
        if self.none_of:
            outside = " ".join(f"not({n.describe()})" for n in self.none_of)
            return f"{replace(self, none_of=()).describe()} {outside}"
        if self.type is None:
            return "exists"
        if self.allowed is not None:
            return "in " + repr(sorted(self.allowed, key=repr))
        parts = []
        if self.lo is not None:
            parts.append((">" if self.lo_open else ">=") + repr(self.lo))
        if self.hi is not None:
            parts.append(("<" if self.hi_open else "<=") + repr(self.hi))
        parts += [f"!={e!r}" for e in sorted(self.excluded, key=repr)]
        for name in ("prefixes", "suffixes", "contains", "not_prefixes", "not_suffixes"):
            parts += [f"{name}:{p!r}" for p in getattr(self, name)]
        parts += [f"not_contains:{p!r}" for p in self.not_contains]
        parts += [f"like:{p!r}" for p in self.likes]
        parts += [f"not_like:{p!r}" for p in self.not_likes]
        return " ".join(parts) or f"is {self.type}"


def _tighter(
    bound: Any, is_open: bool, other: Any, other_open: bool, pick: Callable[[Any, Any], Any]
) -> tuple[Any, bool]:
    """The tighter of two bounds on one side (`pick`: max for lows, min for
    highs) with whether it is open; None is no bound."""
    if bound is None:
        return other, other_open
    if other is None or bound == other:
        return bound, is_open or (other_open if bound == other else False)
    chosen = pick(bound, other)
    return chosen, is_open if chosen == bound else other_open


def _strongest(patterns: tuple[str, ...], implies: Callable[[str, str], bool]) -> tuple[str, ...]:
    """Drop the patterns that another one implies (`implies(q, p)`: q makes p redundant)."""
    kept: list[str] = []
    for p in sorted(set(patterns)):
        if not any(implies(q, p) for q in kept):
            kept = [q for q in kept if not implies(p, q)] + [p]
    return tuple(sorted(kept))


def _normalized(c: Constraint) -> Constraint | None:
    """Canonical form: closed numeric bounds, points as finite sets, no dead parts."""
    lo, lo_open, hi, hi_open = c.lo, c.lo_open, c.hi, c.hi_open
    if c.type == NUM:
        if lo is not None and lo_open:
            lo, lo_open = math.nextafter(lo, math.inf), False
        if hi is not None and hi_open:
            hi, hi_open = math.nextafter(hi, -math.inf), False
    if lo is not None and hi is not None:
        if lo > hi or (lo == hi and (lo_open or hi_open)):
            return None
        if lo == hi:
            base = Constraint(c.type, allowed=frozenset([lo]))
            rest = replace(c, lo=None, hi=None, lo_open=False, hi_open=False, excluded=c.excluded)
            return base if rest.allows(lo) else None
    patterns = c.prefixes or c.suffixes or c.contains or c.not_prefixes or c.not_suffixes
    if not (patterns or c.likes or c.not_likes):
        if not c.not_contains and (lo, lo_open, hi, hi_open) == (c.lo, c.lo_open, c.hi, c.hi_open):
            excluded = frozenset(e for e in c.excluded if c._in_bounds(e))
            return c if excluded == c.excluded else replace(c, excluded=excluded)
        if c.allowed is None and not c.not_contains:  # moved bounds, no patterns: as below
            out = Constraint(c.type, lo, lo_open, hi, hi_open)
            excluded = frozenset(e for e in c.excluded if out.allows(e))
            return replace(out, excluded=excluded) if excluded else out
    prefixes = _strongest(c.prefixes, lambda q, p: q.startswith(p))
    suffixes = _strongest(c.suffixes, lambda q, p: q.endswith(p))
    if len(prefixes) > 1 or len(suffixes) > 1:
        return None  # two prefixes neither of which extends the other
    contains = _strongest(c.contains, lambda q, p: p in q)
    not_prefixes = _strongest(c.not_prefixes, lambda q, p: p.startswith(q))
    not_suffixes = _strongest(c.not_suffixes, lambda q, p: p.endswith(q))
    not_contains = _strongest(c.not_contains, lambda q, p: q in p)
    if any(p.startswith(n) for p in prefixes for n in not_prefixes):
        return None
    if any(s.endswith(n) for s in suffixes for n in not_suffixes):
        return None
    if any(n in p for p in prefixes + suffixes + contains for n in not_contains):
        return None
    likes, not_likes = tuple(sorted(set(c.likes))), tuple(sorted(set(c.not_likes)))
    if set(likes) & set(not_likes):
        return None
    out = Constraint(
        c.type,
        lo,
        lo_open,
        hi,
        hi_open,
        None,
        frozenset(),
        prefixes,
        suffixes,
        contains,
        not_prefixes,
        not_suffixes,
        not_contains,
        likes,
        not_likes,
    )
    excluded = frozenset(e for e in c.excluded if out.allows(e))
    return replace(out, excluded=excluded) if excluded else out


# -- JMS's NOT over a test: sets to lie outside of ------------------------------------


def _absorbed(c: Constraint, none_of: tuple[Constraint, ...]) -> Constraint | None:
    """`c` and outside each of `none_of`, normalized: a set of another type than
    `c`'s is dropped (no value of `c` is in it), one whose complement within
    `c`'s type is one constraint is intersected into `c`, and the rest is kept,
    sorted; None when nothing is left."""
    kept: list[Constraint] = []
    for n in dict.fromkeys(none_of):
        if c.type is not None and n.type is not None and n.type != c.type:
            continue
        if c.type is None:
            if n.type is None:
                return None  # outside "any value" is nothing
            kept.append(n)
            continue
        if c.allowed is not None:
            values = frozenset(v for v in c.allowed if not n.allows(v))
            if not values:
                return None
            c = Constraint(c.type, allowed=values)
            continue
        rest = _complement(n)
        if rest is _NOTHING:
            return None
        if rest is None:
            kept.append(n)
            continue
        c = c.intersect(rest)
        if c is None:
            return None
    if kept and c.type is not None and c.allowed is not None:
        values = frozenset(v for v in c.allowed if not any(n.allows(v) for n in kept))
        return Constraint(c.type, allowed=values) if values else None
    return replace(c, none_of=tuple(sorted(kept, key=repr))) if kept else c


_NOTHING = Constraint(None)  # (a marker: the complement is empty)


def _complement(n: Constraint) -> Constraint | None:
    """The values of `n`'s type that `n` does not allow, as one constraint;
    `_NOTHING` if there are none; None where one constraint cannot say it."""
    kind = n.type
    if n.none_of:
        return None
    if n.allowed is not None:
        if kind == BOOL:
            rest = frozenset((False, True)) - n.allowed
            return Constraint(BOOL, allowed=rest) if rest else _NOTHING
        return Constraint(kind, excluded=n.allowed)
    pattern_fields = {
        "prefixes": "not_prefixes",
        "suffixes": "not_suffixes",
        "contains": "not_contains",
        "likes": "not_likes",
        "not_prefixes": "prefixes",
        "not_suffixes": "suffixes",
        "not_contains": "contains",
        "not_likes": "likes",
    }
    used = [f for f in pattern_fields if getattr(n, f)]
    bounds = (n.lo is not None) + (n.hi is not None)
    if n.excluded:
        return None
    if not used and not bounds:
        return _NOTHING  # every value of the type
    if len(used) == 1 and not bounds and len(getattr(n, used[0])) == 1:
        field = pattern_fields[used[0]]
        rest = _normalized(replace(Constraint(kind), **{field: getattr(n, used[0])}))
    elif not used and bounds == 1:
        if n.lo is not None:
            rest = _normalized(Constraint(kind, hi=n.lo, hi_open=not n.lo_open))
        else:
            rest = _normalized(Constraint(kind, lo=n.hi, lo_open=not n.hi_open))
    else:
        return None
    return _NOTHING if rest is None else rest


def _outside(c: Constraint, n: Constraint) -> bool:
    """Is every value `c` allows outside `n`? Sound; exact for numbers,
    booleans and finite sets."""
    if c.type is not None and n.type is not None and c.type != n.type:
        return True
    if any(m.covers_constraint(n) for m in c.none_of):
        return True
    if c.type is None or n.type is None:
        return False
    if c.allowed is not None:
        return not any(n.allows(v) for v in c.allowed)
    return replace(c, none_of=()).intersect(n) is None


def _number_set(c: Constraint) -> list[tuple[float, float]]:
    """The doubles `c` allows, as sorted disjoint closed ranges."""
    if c.type not in (None, NUM):
        return []
    if c.type is None:
        ranges = [(-_MAX, _MAX)]
    elif c.allowed is not None:
        ranges = sorted((float(v), float(v)) for v in c.allowed)
    else:
        lo = -_MAX if c.lo is None else c.lo
        hi = _MAX if c.hi is None else c.hi
        if c.lo_open:
            lo = math.nextafter(lo, math.inf)
        if c.hi_open:
            hi = math.nextafter(hi, -math.inf)
        ranges = [(lo, hi)] if lo <= hi else []
        for e in sorted(c.excluded):
            ranges = _without(ranges, e, e)
    for n in c.none_of:
        for lo, hi in _number_set(n):
            ranges = _without(ranges, lo, hi)
    return ranges


def _without(ranges: list[tuple[float, float]], lo: float, hi: float) -> list:
    out = []
    for a, b in ranges:
        if b < lo or hi < a:
            out.append((a, b))
            continue
        if a < lo:
            out.append((a, math.nextafter(lo, -math.inf)))
        if hi < b:
            out.append((math.nextafter(hi, math.inf), b))
    return out


def _holds_all(ranges: list[tuple[float, float]], lo: float, hi: float) -> bool:
    """Do the ranges hold every double of [lo, hi]?"""
    reach = None  # the doubles from lo up to here are held
    for a, b in ranges:
        if b < lo:
            continue
        if reach is None:
            if a > lo:
                return False
        elif a > math.nextafter(reach, math.inf):
            return False
        reach = b if reach is None else max(reach, b)
        if reach >= hi:
            return True
    return False


def _number(value: Any, attr: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FilterError(f"{attr}: expected a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise FilterError(f"{attr}: {value!r} is not a finite number")
    return number


def _scalar(value: Any, attr: str) -> Any:
    kind = type_of(value)
    if kind == NUM:
        return _number(value, attr)
    if kind is None or isinstance(value, tuple):
        raise FilterError(f"{attr}: unsupported value {value!r}")
    return value


_PATTERN_FIELDS = {
    "prefix": "prefixes",
    "suffix": "suffixes",
    "contains": "contains",
    "not_prefix": "not_prefixes",
    "not_suffix": "not_suffixes",
    "not_contains": "not_contains",
}


def constraint_of(atom: Atom) -> Constraint | None:
    """One atom as a normalized constraint (None: it allows nothing)."""
    op, attr, value = atom.op, atom.attr, atom.value
    if op == "exists":
        return Constraint(None)
    if op == "not":
        inner = constraint_of(value)
        return Constraint(None) if inner is None else _absorbed(Constraint(None), (inner,))
    if op == "like":
        return Constraint(STR, likes=(value,))
    if op == "in":
        values = [_scalar(v, attr) for v in value]
        kinds = {type_of(v) for v in values}
        if len(kinds) > 1:
            raise FilterError(f"{attr}: an IN list must not mix types, got {list(value)!r}")
        return Constraint(kinds.pop(), allowed=frozenset(values)) if values else None
    if op == "between":
        lo, hi = (_scalar(v, attr) for v in value)
        if type_of(lo) != type_of(hi) or type_of(lo) == BOOL:
            raise FilterError(f"{attr}: BETWEEN needs two numbers or two strings")
        if lo > hi:
            raise FilterError(f"{attr}: BETWEEN {lo!r} AND {hi!r} is empty (lo > hi)")
        return _normalized(Constraint(type_of(lo), lo=lo, hi=hi))
    if op in ("prefix", "suffix", "contains", "not_prefix", "not_suffix", "not_contains"):
        if not isinstance(value, str):
            raise FilterError(f"{attr}: {op} needs a string, got {value!r}")
        field = _PATTERN_FIELDS[op]
        return _normalized(replace(Constraint(STR), **{field: (value,)}))
    v = _scalar(value, attr)
    kind = type_of(v)
    if op == "=":
        return Constraint(kind, allowed=frozenset([v]))
    if op == "!=":
        if kind == BOOL:
            return Constraint(BOOL, allowed=frozenset([not v]))
        return Constraint(kind, excluded=frozenset([v]))
    if kind == BOOL:
        raise FilterError(f"{attr}: booleans support only =, != and IN, not {op}")
    if op in ("<", "<="):
        return _normalized(Constraint(kind, hi=v, hi_open=op == "<"))
    if op in (">", ">="):
        return _normalized(Constraint(kind, lo=v, lo_open=op == ">"))
    raise FilterError(f"{attr}: unknown operator {op!r}")


class Conjunction:
    """A filter: one normalized constraint per attribute, hashable by content.

    Equal conjunctions are the same filter, so they share one forest node.
    Besides its `constraints` (each on an attribute that must be present), a
    filter may hold `absent` attributes (IS NULL) and `computed` tests
    (`matcher.expressions.Computed`, and the pattern tests of
    `matcher.engines.patterns`): residual tests, which its box cannot say,
    decided on the forest's candidates (positive pattern tests through their
    indexes: `matcher.engines.gated`).
    """

    __slots__ = ("constraints", "absent", "computed", "_key", "_hash")

    def __init__(
        self,
        constraints: dict[str, Constraint],
        absent: frozenset[str] = frozenset(),
        computed: tuple[Computed | PatternTest, ...] = (),
    ):
        self.constraints = dict(sorted(constraints.items()))
        self.absent = frozenset(absent)
        self.computed = tuple(sorted(set(computed), key=repr))
        key: tuple = tuple(self.constraints.items())
        if self.absent or self.computed:
            key += ((None, tuple(sorted(self.absent)), self.computed),)
        self._key = key
        self._hash = hash(key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Conjunction) and self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        parts = [f"{a} {c.describe()}" for a, c in self.constraints.items()]
        parts += [f"{a} IS NULL" for a in sorted(self.absent)]
        parts += [t.describe() for t in self.computed]
        return f"Conjunction({' AND '.join(parts) or 'TRUE'})"

    @property
    def pattern_tests(self) -> tuple[PatternTest, ...]:
        """Its positive pattern tests (MATCHES, TOPIC, HAS, XPATH not under NOT)."""
        return tuple(t for t in self.computed if isinstance(t, PatternTest) and not t.negate)

    def without(self, tests: tuple[PatternTest, ...]) -> Conjunction:
        """The filter less some of its residual tests (a wider filter)."""
        rest = tuple(t for t in self.computed if t not in tests)
        return Conjunction(self.constraints, self.absent, rest)

    @property
    def residual(self) -> bool:
        """Does the filter hold tests that no box can say (IS NULL, computed)?"""
        return bool(self.absent or self.computed)

    def overlaps(self, profile: Profile) -> bool:
        """Some point of the profile satisfies the filter (§2; a computed
        test on its own, by interval arithmetic: docs/SELECTORS.md)."""
        values = profile.attrs
        if not all(a in values and c.overlaps(values[a]) for a, c in self.constraints.items()):
            return False
        if self.absent or self.computed:
            return not any(a in values for a in self.absent) and all(
                True in t.truths(values) for t in self.computed
            )
        return True

    def covers(self, profile: Profile) -> bool:
        """Every point of the profile satisfies the filter (§2)."""
        values = profile.attrs
        if not all(a in values and c.covers(values[a]) for a, c in self.constraints.items()):
            return False
        if self.absent or self.computed:
            return not any(a in values for a in self.absent) and all(
                t.truths(values) == _TRUE for t in self.computed
            )
        return True

    def covers_filter(self, other: Conjunction) -> bool:
        """Siena's covering: every attribute constrained here is constrained
        by `other` to a subset of what is allowed here (and `other` has this
        filter's residual tests too: sound, not complete)."""
        theirs = other.constraints
        if not all(
            a in theirs and c.covers_constraint(theirs[a]) for a, c in self.constraints.items()
        ):
            return False
        if not self.absent <= other.absent:
            return False
        return all(_implied(test, other.computed) for test in self.computed)

    def intersects(self, other: Conjunction) -> bool:
        """Some profile point could satisfy both (the advertisement relation).

        Exact for numbers, booleans and finite sets; for string patterns it
        answers True unless the patterns visibly contradict; computed tests
        are not looked at.
        """
        theirs = other.constraints
        if self.absent & theirs.keys() or other.absent & self.constraints.keys():
            return False
        return all(
            c.intersect(theirs[a]) is not None for a, c in self.constraints.items() if a in theirs
        )


_TRUE = frozenset([True])


def _implied(test: Computed | PatternTest, tests: tuple[Computed | PatternTest, ...]) -> bool:
    """Does one of `tests` imply `test`? (Equal tests; a topic filter by a narrower one.)"""
    if test in tests:
        return True
    return isinstance(test, PatternTest) and any(
        isinstance(t, PatternTest) and test.covers_test(t) for t in tests
    )


def _pattern_test(atom: Atom) -> PatternTest | None:
    """The pattern test an atom is (`x MATCHES 'a'`, or NOT over one), or None."""
    if atom.op in PATTERN_OPS:
        return PatternTest(atom.attr, atom.op, atom.value)
    inner = atom.value
    if atom.op == "not" and isinstance(inner, Atom) and inner.op in PATTERN_OPS:
        return PatternTest(inner.attr, inner.op, inner.value, negate=True)
    return None


def _pattern_constraint(test: PatternTest) -> Constraint:
    """What a pattern test asks of its attribute's box: a tag set (HAS) or a
    string, present; any value for NOT over one."""
    if test.negate:
        return Constraint(None)
    return Constraint(TAGS if test.op == "has" else STR)


def conjunction_of(atoms: list[Atom | Computed]) -> Conjunction | None:
    """The conjunction of some atoms and computed tests; None when it can never hold."""
    merged: dict[str, Constraint] = {}
    absent: set[str] = set()
    computed: list[Computed | PatternTest] = []
    for atom in atoms:
        if isinstance(atom, Computed):
            computed.append(atom)
            continue
        if atom.op == "absent":
            absent.add(atom.attr)
            continue
        test = _pattern_test(atom)
        if test is not None:
            computed.append(test)
            c = _pattern_constraint(test)
        else:
            c = constraint_of(atom)
        if c is None:
            return None
        if atom.attr in merged:
            c = merged[atom.attr].intersect(c)
            if c is None:
                return None
        merged[atom.attr] = c
    if absent & merged.keys():
        return None
    return Conjunction(merged, frozenset(absent), tuple(computed))


def predicate_of(dnf: list[list[Atom | Computed]]) -> list[Conjunction]:
    """A predicate: its satisfiable, distinct conjunctions in a stable order."""
    out: dict[Conjunction, None] = {}
    for atoms in dnf:
        conj = conjunction_of(atoms)
        if conj is not None:
            out[conj] = None
    return list(out)
