"""Holding within a margin (docs/DELIVERY.md §3): hysteresis for a held pair.

A pair that held keeps holding while the intervals of its two records meet
and its filter overlaps the profile widened by the margin: each numeric value
`[lo, hi]` becomes `[lo - m, hi + m]` (m the margin on that attribute), other
values stay. So "some point within the margin of the profile satisfies the
filter", on each attribute, computed tests included.
"""

from __future__ import annotations

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
