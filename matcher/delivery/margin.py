"""Holding within a margin (docs/DELIVERY.md §3): hysteresis for a held pair.

A pair that held keeps holding while the intervals of its two records meet
and its filter overlaps the profile widened by the margin: each numeric value
`[lo, hi]` becomes `[lo - m, hi + m]` (m the margin on that attribute), other
values stay. So "some point within the margin of the profile satisfies the
filter", on each attribute, computed tests included.
"""

from __future__ import annotations

from matcher.constraints import NUM, Conjunction, Constraint
from matcher.delivery.options import Options
from matcher.profiles import Profile
from matcher.records import Publish, Subscribe


def widened(profile: Profile, options: Options) -> Profile:
    """The profile with each numeric value widened by its attribute's margin. O(attributes)."""
    attrs = {}
    for name, value in profile.attrs.items():
        m = options.margin_of(name) if isinstance(value, tuple) else 0.0
        attrs[name] = (value[0] - m, value[1] + m) if m else value
    return Profile.from_normalized(attrs)


def holds_within_margin(sub: Subscribe, pub: Publish) -> bool:
    """Whether the pair holds within the subscription's margin (`overlaps` only: a
    margin needs it). O(the filter's tests)."""
    if max(sub.valid_from, pub.valid_from) > min(sub.valid_to, pub.valid_to):
        return False
    wide = widened(pub.profile, sub.options)
    return any(c.overlaps(wide) for c in sub.predicate)


def routing_filters(sub: Subscribe) -> list[Conjunction]:
    """The filters a network routes profiles by for `sub` (docs/DELIVERY.md §9): its
    own, or, with a margin, each widened so that it overlaps every profile the pair
    may hold within the margin. A superset: each numeric constraint on an attribute
    with a margin m becomes the closed range from its lowest allowed value less m to
    its highest plus m (a little more, so that rounding never narrows it), excluded
    values dropped; computed tests dropped. O(the filters' constraints)."""
    options = sub.options
    if options is None or options.margin is None:
        return list(sub.predicate)
    out: dict[Conjunction, None] = {}
    for conj in sub.predicate:
        constraints = {}
        for attr, c in conj.constraints.items():
            m = options.margin_of(attr)
            if m and c.type == NUM:
                c = _widened(c, m)
            constraints[attr] = c
        out[Conjunction(constraints, conj.absent)] = None
    return list(out)


def _widened(c: Constraint, m: float) -> Constraint:
    if c.allowed is not None:
        values = [float(v) for v in c.allowed]
        lo, hi = (min(values), max(values)) if values else (None, None)
    else:
        lo, hi = c.lo, c.hi
    slack = m * 1e-9
    lo = None if lo is None else lo - m - slack - abs(lo) * 1e-12
    hi = None if hi is None else hi + m + slack + abs(hi) * 1e-12
    return Constraint(NUM, lo=lo, hi=hi)
