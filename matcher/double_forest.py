"""The DoubleForest (SEMANTICS §7): subscriptions and profiles, both ordered
by covering, queried in both directions.

Items are kept in slots (small ints) so that every query answers with
arrays of slots; the caller keeps its own objects per slot (`handle`).
Lifetimes and validities are per entry, not per node: entries with different
intervals share a node, so the interval test runs on the entries a node
match yields, vectorized.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from matcher.blocks import _grow
from matcher.boxes import FILTER_FILL, PROFILE_FILL, Dims
from matcher.constraints import Conjunction
from matcher.forest import Forest
from matcher.profiles import Profile


class _Slots:
    """Slot allocation with reuse, plus the caller's handle per slot."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.free: list[int] = []

    def take(self, handle: Any) -> int:
        if self.free:
            slot = self.free.pop()
            self.handles[slot] = handle
        else:
            slot = len(self.handles)
            self.handles.append(handle)
        return slot

    def give_back(self, slot: int) -> None:
        self.handles[slot] = None
        self.free.append(slot)

    def __len__(self) -> int:
        return len(self.handles) - len(self.free)


class DoubleForest:
    def __init__(self) -> None:
        self.dims = Dims()
        self.sub_forest = Forest(self.dims, FILTER_FILL, Conjunction.covers_filter)
        self.profile_forest = Forest(self.dims, PROFILE_FILL, Profile.covers)
        self.subs = _Slots()
        self.profiles = _Slots()
        self.sub_entries: list[list[int]] = []  # slot -> its entry ids (one per disjunct)
        self.entry_free: list[int] = []
        self.e_sub = np.zeros(16, dtype=np.int64)
        self.e_covers = np.zeros(16, dtype=bool)
        self.e_from = np.zeros(16)
        self.e_to = np.zeros(16)
        self.n_entries = 0
        self.multi_disjunct = 0  # subscriptions with more than one conjunction
        self.covers_entries = 0  # entries of `covers` subscriptions
        self.p_from = np.zeros(16)
        self.p_to = np.zeros(16)

    # -- subscriptions ------------------------------------------------------

    def add_subscription(
        self,
        handle: Any,
        conjunctions: list[Conjunction],
        covers: bool,
        valid_from: float,
        valid_to: float,
    ) -> int:
        slot = self.subs.take(handle)
        while len(self.sub_entries) <= slot:
            self.sub_entries.append([])
        entries = []
        for conj in conjunctions:
            entry = self._new_entry(slot, covers, valid_from, valid_to)
            bounds, exact = self.dims.filter_box(conj)
            self.sub_forest.add(conj, bounds, exact, entry)
            entries.append(entry)
        self.sub_entries[slot] = entries
        self.multi_disjunct += len(entries) > 1
        self.covers_entries += len(entries) if covers else 0
        return slot

    def _new_entry(self, slot: int, covers: bool, vf: float, vt: float) -> int:
        if self.entry_free:
            entry = self.entry_free.pop()
        else:
            entry = self.n_entries
            self.n_entries += 1
            n = entry + 1
            self.e_sub, self.e_covers = _grow(self.e_sub, n, 0), _grow(self.e_covers, n, False)
            self.e_from, self.e_to = _grow(self.e_from, n, 0.0), _grow(self.e_to, n, 0.0)
        self.e_sub[entry], self.e_covers[entry] = slot, covers
        self.e_from[entry], self.e_to[entry] = vf, vt
        return entry

    def remove_subscription(self, slot: int) -> None:
        self.multi_disjunct -= len(self.sub_entries[slot]) > 1
        entries = self.sub_entries[slot]
        if entries and self.e_covers[entries[0]]:
            self.covers_entries -= len(entries)
        for entry in self.sub_entries[slot]:
            self.sub_forest.discard(entry)
            self.entry_free.append(entry)
        self.sub_entries[slot] = []
        self.subs.give_back(slot)

    # -- profiles -----------------------------------------------------------

    def add_profile(self, handle: Any, profile: Profile, valid_from: float, valid_to: float) -> int:
        slot = self.profiles.take(handle)
        n = slot + 1
        self.p_from, self.p_to = _grow(self.p_from, n, 0.0), _grow(self.p_to, n, 0.0)
        self.p_from[slot], self.p_to[slot] = valid_from, valid_to
        self.profile_forest.add(profile, self.dims.profile_box(profile), False, slot)
        return slot

    def remove_profile(self, slot: int) -> None:
        self.profile_forest.discard(slot)
        self.profiles.give_back(slot)

    # -- queries ------------------------------------------------------------

    def match_profiles(
        self, profiles: list[Profile], intervals: list[tuple[float, float]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Profiles (held or not) against the subscriptions: (query index, sub slot).

        Pairs come out in no particular order.
        """
        if not profiles or not len(self.sub_forest):
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        boxes = [self.dims.profile_box(p) for p in profiles]
        q_lo, q_hi = self._dense(boxes, PROFILE_FILL)
        forest = self.sub_forest
        forest.need_covers = self.covers_entries > 0

        def exact(q: int, node: int) -> tuple[bool, bool]:
            conj = forest.keys[node]
            return conj.overlaps(profiles[q]), conj.covers(profiles[q])

        qi, nodes, cov = forest.descend(
            q_lo, q_hi, np.zeros(len(profiles), dtype=bool), exact, qaf=False
        )
        which, entries = forest.entries.gather(nodes)
        qi, cov = np.take(qi, which), np.take(cov, which)
        span = np.asarray(intervals, dtype=float).reshape(-1, 2).T
        keep = np.take(self.e_from, entries) <= np.take(span[1], qi)
        keep &= np.take(span[0], qi) <= np.take(self.e_to, entries)
        if self.covers_entries:
            keep &= ~np.take(self.e_covers, entries) | cov
        subs = np.take(self.e_sub, entries[keep])
        return _unique_pairs(qi[keep], subs, self.multi_disjunct > 0)

    def match_subscriptions(
        self, queries: list[tuple[list[Conjunction], bool, float, float]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Subscriptions (held or not: conjunctions, covers?, from, to) against
        the held profiles: (query index, profile slot), in no particular order."""
        conjs = [c for conjunctions, *_ in queries for c in conjunctions]
        if not conjs or not len(self.profile_forest):
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        owner = np.repeat(np.arange(len(queries)), [len(q[0]) for q in queries])
        boxes = [self.dims.filter_box(c) for c in conjs]
        q_lo, q_hi = self._dense([b for b, _ in boxes], FILTER_FILL)
        q_exact = np.array([e for _, e in boxes], dtype=bool)
        forest = self.profile_forest

        def exact(q: int, node: int) -> tuple[bool, bool]:
            profile = forest.keys[node]
            return conjs[q].overlaps(profile), conjs[q].covers(profile)

        di, nodes, cov = forest.descend(q_lo, q_hi, q_exact, exact, qaf=True)
        which, slots = forest.entries.gather(nodes)
        qi, cov = np.take(owner, np.take(di, which)), np.take(cov, which)
        covers, start, end = np.array([q[1:] for q in queries], dtype=float).reshape(-1, 3).T
        keep = np.take(start, qi) <= np.take(self.p_to, slots)
        keep &= np.take(self.p_from, slots) <= np.take(end, qi)
        if covers.any():
            keep &= (np.take(covers, qi) == 0) | cov
        return _unique_pairs(qi[keep], slots[keep], len(conjs) > len(queries))

    def _dense(self, boxes: list[dict], fill: tuple[float, float]):
        """Query boxes, column-major (columns × queries) like the forests'."""
        d = len(self.dims)
        lo = np.full((d, len(boxes)), fill[0])
        hi = np.full((d, len(boxes)), fill[1])
        for i, bounds in enumerate(boxes):
            for col, (a, b) in bounds.items():
                lo[col, i], hi[col, i] = a, b
        return lo, hi

    def check_invariants(self) -> None:
        self.sub_forest.check_invariants()
        self.profile_forest.check_invariants()


def _unique_pairs(a: np.ndarray, b: np.ndarray, needed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Drop repeated pairs (an item matched through several disjuncts)."""
    if not needed or not len(a):
        return a, b
    width = int(b.max()) + 1
    keys = np.unique(a * width + b)
    return keys // width, keys % width
