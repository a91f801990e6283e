"""The product's DoubleForest behind the baselines' interface, and the roster.

Each conjunction is one DoubleForest subscription (open lifetime, `overlaps`),
so that every contender holds exactly the same entries under the same keys.
Profiles are matched a batch at a time, as the engine does per micro-batch.
The forest runs twice: as the product (with its preloaded cells, which
`settle_profiles` fills for the regions the held profiles lie in, as a
restarted job does) and without cells (the forest alone).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import numpy as np

from benchmarks.baselines import KEY, BruteForce, Contender, Keys, RTree, SienaPoset
from matcher.boxes import Dims
from matcher.constraints import Conjunction
from matcher.double_forest import DoubleForest
from matcher.preload import settings
from matcher.profiles import Profile

ALWAYS = (-math.inf, math.inf)


class Forest(Contender):
    """`matcher.double_forest.DoubleForest`, the product (`cells`: with its
    preloaded cells, as shipped; without: the forest alone)."""

    name = "double-forest"
    batched = True

    def __init__(self, *, cells: bool = True) -> None:
        self.cells = cells
        if not cells:
            self.name = "forest-no-cells"
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

    @contextlib.contextmanager
    def _preloading(self) -> Iterator[None]:
        """The settings this contender's queries run under (cells on or off)."""
        with settings.configured(enabled=self.cells):
            yield

    def settle_subscriptions(self) -> None:
        self.df.sub_forest.settle()

    def settle_profiles(self) -> None:
        self.df.profile_forest.settle()

    def preload(self) -> None:
        """Fill the cells of the regions the held profiles lie in, the hottest
        first within the budget (`DoubleForest.settle`): what a job does as
        profiles visit, or after a restart."""
        with self._preloading():
            self.df.settle()

    def match_profile(self, profile: Profile) -> np.ndarray:
        return self.match_profiles([profile])[0]

    def match_profiles(self, profiles: list[Profile]) -> list[Keys]:
        with self._preloading():
            return self.df.match_profiles_grouped(profiles, [ALWAYS] * len(profiles), self.sub_keys)

    def preload_stats(self) -> dict[str, int]:
        """What the cells did since last asked: profiles asked and answered from
        cells, and the cells held and their bytes (`DoubleForest.preload_counts`)."""
        return self.df.preload_counts()

    def insert_profile(self, key: int, profile: Profile) -> None:
        slot = self.profile_slot[key] = self.df.add_profile(key, profile, *ALWAYS)
        self.profile_keys = _put(self.profile_keys, slot, key)

    def delete_profile(self, key: int) -> None:
        self.df.remove_profile(self.profile_slot.pop(key))

    def match_subscription(self, conj: Conjunction) -> np.ndarray:
        return self.match_subscriptions([conj])[0]

    def match_subscriptions(self, conjs: list[Conjunction]) -> list[Keys]:
        with self._preloading():
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
    "forest-no-cells": lambda dims: Forest(cells=False),
    "r-tree": RTree,
    "siena-poset": lambda dims: SienaPoset(),
}
