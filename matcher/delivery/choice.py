"""The policies' order of a group's eligible members (docs/DELIVERY.md §5).

`ranked` sorts the candidates for one profile: anycast and manycast by id,
faircast by how often each was served so far then id, bestcast by the
distance of each member's `near` to the profile then id.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from matcher.delivery.options import Options
from matcher.profiles import Profile


def distance(near: tuple[tuple[str, float], ...], profile: Profile) -> float:
    """The sum over `near`'s attributes (in name order) of the squared gap between
    `near`'s value and the profile's value set there; infinite where the profile
    lacks the attribute or holds a string or boolean. O(len(near))."""
    total = 0.0
    for name, x in near:
        value = profile.attrs.get(name)
        if not isinstance(value, tuple):
            return math.inf
        lo, hi = value
        gap = lo - x if x < lo else x - hi if x > hi else 0.0
        total += gap * gap
    return total


def ranked(
    policy: Options,
    candidates: Iterable[str],
    profile: Profile,
    options_of: Callable[[str], Options],
    served: Mapping[str, int],
) -> list[str]:
    """The candidates (subscription ids) best first. O(n log n)."""
    ids = sorted(candidates)
    if policy.mode == "faircast":
        return sorted(ids, key=lambda s: served.get(s, 0))
    if policy.mode == "bestcast":
        return sorted(ids, key=lambda s: distance(options_of(s).near, profile))
    return ids
