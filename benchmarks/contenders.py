"""The product's DoubleForest behind the baselines' interface, and the roster.

Each conjunction is one DoubleForest subscription (open lifetime, `overlaps`),
so that every contender holds exactly the same entries under the same keys.
Profiles are matched a batch at a time, as the engine does per micro-batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from benchmarks.baselines import KEY, BruteForce, Contender, Keys, RTree, SienaPoset
from matcher.boxes import Dims
from matcher.constraints import Conjunction
from matcher.double_forest import DoubleForest
from matcher.profiles import Profile

ALWAYS = (-math.inf, math.inf)


class Forest(Contender):
    """`matcher.double_forest.DoubleForest`, the product."""

    name = "double-forest"
    batched = True

    def __init__(self) -> None:
        self.df = DoubleForest()
        self.sub_slot: dict[int, int] = {}
        self.profile_slot: dict[int, int] = {}
        # slot -> key, as arrays, so that answers are key arrays without a
        # Python loop per match (the scan's answer is `keys[rows]` too)
        self.sub_keys = np.zeros(16, dtype=KEY)
        self.profile_keys = np.zeros(16, dtype=KEY)

    def insert(self, key: int, conj: Conjunction) -> None:
        slot = self.sub_slot[key] = self.df.add_subscription(key, [conj], False, *ALWAYS)
        self.sub_keys = _put(self.sub_keys, slot, key)

    def delete(self, key: int) -> None:
        self.df.remove_subscription(self.sub_slot.pop(key))

    def settle_subscriptions(self) -> None:
        self.df.sub_forest.settle()

    def settle_profiles(self) -> None:
        self.df.profile_forest.settle()

    def match_profile(self, profile: Profile) -> np.ndarray:
        return self.match_profiles([profile])[0]

    def match_profiles(self, profiles: list[Profile]) -> list[Keys]:
        return self.df.match_profiles_grouped(profiles, [ALWAYS] * len(profiles), self.sub_keys)

    def insert_profile(self, key: int, profile: Profile) -> None:
        slot = self.profile_slot[key] = self.df.add_profile(key, profile, *ALWAYS)
        self.profile_keys = _put(self.profile_keys, slot, key)

    def delete_profile(self, key: int) -> None:
        self.df.remove_profile(self.profile_slot.pop(key))

    def match_subscription(self, conj: Conjunction) -> np.ndarray:
        return self.match_subscriptions([conj])[0]

    def match_subscriptions(self, conjs: list[Conjunction]) -> list[Keys]:
        qi, slots = self.df.match_subscriptions([([c], False, *ALWAYS) for c in conjs])
        return _group(len(conjs), qi, slots, self.profile_keys)


def _put(keys: np.ndarray, slot: int, key: int) -> np.ndarray:
    if slot >= len(keys):
        keys = np.concatenate([keys, np.zeros(max(slot + 1, len(keys)), dtype=KEY)])
    keys[slot] = key
    return keys


def _group(n: int, qi: np.ndarray, slots: np.ndarray, keys: np.ndarray) -> list[np.ndarray]:
    """(query, slot) pairs, grouped by query, as one array of keys per query."""
    bounds = np.searchsorted(qi, np.arange(n + 1, dtype=qi.dtype)).tolist()
    # (int32 indices take numpy's slow path: widen them first)
    found = np.take(keys, slots.astype(np.intp, copy=False))
    return [found[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


# name -> factory given the space's columns (registered beforehand)
CONTENDERS: dict[str, Callable[[Dims], Contender]] = {
    "brute-force": BruteForce,
    "double-forest": lambda dims: Forest(),
    "r-tree": RTree,
    "siena-poset": lambda dims: SienaPoset(),
}
