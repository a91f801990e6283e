"""The DoubleForest (SEMANTICS §7): subscriptions and profiles, both ordered
by covering, queried in both directions.

Items are kept in slots (small ints) so that every query answers with
arrays of slots; the caller keeps its own objects per slot (`handle`).
Lifetimes and validities are per entry, not per node: entries with different
intervals share a node, so the interval test runs on the entries a node
match yields, vectorized.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from matcher.blocks import ELEMENT, SLICE_RUN, _grow, run_positions
from matcher.boxes import FILTER_FILL, PROFILE_FILL, Dims
from matcher.constraints import Conjunction
from matcher.forest import Forest
from matcher.profiles import Profile

ALWAYS = (-np.inf, np.inf)
_EMPTY = np.zeros(0, dtype=ELEMENT)
_NO_PAIRS = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))  # (never written to)


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
        # Each forest has the columns of its own side's attributes (the string codes
        # shared): a query need not test the other side's. Profiles that each bring
        # an attribute of their own (a sensor's id as its name, say) grew one shared
        # set of columns, and every profile query against the subscriptions tested
        # all of them: 12 s for 1,000 such profiles, growing by 10 s a batch.
        codes: dict[str, int] = {}
        self.dims = Dims(codes)  # the attributes some filter constrains
        self.profile_dims = Dims(codes)  # the attributes some profile has
        # Subscription entries carry their subscription slot in the store.
        self.sub_forest = Forest(
            self.dims, FILTER_FILL, Conjunction.covers_filter, entry_values=True, box_order=True
        )
        self._profile_forest = Forest(
            self.profile_dims, PROFILE_FILL, Profile.covers, point_order=True
        )
        # Profiles added since the profile forest was last asked for, by slot: only
        # a subscription's query reads that forest, so a stream of profiles (a
        # tracked object's every report) is not indexed until one asks, and what
        # expires or is replaced before that never is.
        self._unindexed: dict[int, Profile] = {}
        self.subs = _Slots()
        self.profiles = _Slots()
        self.sub_entries: list[list[int]] = []  # slot -> its entry ids (one per disjunct)
        self.entry_free: list[int] = []
        self.e_sub = np.zeros(16, dtype=ELEMENT)
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
            self.sub_forest.add(conj, partial(self.dims.filter_box, conj), entry, slot)
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
            if entry >= len(self.e_sub):
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
            self.e_from[entry], self.e_to[entry] = ALWAYS  # lets every query past

        self.sub_entries[slot] = []
        self.subs.give_back(slot)

    # -- profiles -----------------------------------------------------------

    def add_profile(self, handle: Any, profile: Profile, valid_from: float, valid_to: float) -> int:
        slot = self.profiles.take(handle)
        n = slot + 1
        self.p_from, self.p_to = _grow(self.p_from, n, 0.0), _grow(self.p_to, n, 0.0)
        self.p_from[slot], self.p_to[slot] = valid_from, valid_to
        self._unindexed[slot] = profile
        return slot

    @property
    def profile_forest(self) -> Forest:
        """The profile forest, every profile held in it (those added since it was
        last asked for are inserted first)."""
        if self._unindexed:
            forest, box = self._profile_forest, self._profile_box
            for slot, profile in self._unindexed.items():
                forest.add(profile, partial(box, profile), slot)
            self._unindexed.clear()
        return self._profile_forest

    def _profile_box(self, profile: Profile) -> tuple[dict, bool]:
        return self.profile_dims.profile_box(profile), False  # (its box says it all)

    def remove_profile(self, slot: int) -> None:
        if self._unindexed.pop(slot, None) is None:
            self._profile_forest.discard(slot)
        self.profiles.give_back(slot)
        self.p_from[slot], self.p_to[slot] = ALWAYS

    # -- queries ------------------------------------------------------------

    def match_profiles(
        self, profiles: list[Profile], intervals: list[tuple[float, float]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Profiles (held or not) against the subscriptions: (query index, sub slot).

        Pairs come out sorted by query index.
        """
        if not profiles or not len(self.sub_forest):
            return _NO_PAIRS
        forest = self.sub_forest
        forest.need_covers = self.covers_entries > 0
        qi, nodes, cov = self._descend_profiles(profiles)
        span = np.asarray(intervals, dtype=float).reshape(-1, 2).T
        n = self.n_entries
        if not self.covers_entries and _all_within(span, self.e_from[:n], self.e_to[:n]):
            # Every node match holds for all its entries: their subscription
            # slots are read straight from the store, one pass.
            qi, subs, _ = _expand_entries(forest, qi, nodes, cov, False, values=True)
        else:
            qi, entries, cov = _expand_entries(forest, qi, nodes, cov, self.covers_entries > 0)
            keep = _within(span, qi, entries, self.e_from, self.e_to)
            if self.covers_entries:
                keep &= ~np.take(self.e_covers, entries) | cov
            subs = np.take(self.e_sub, entries[keep])
            qi = qi[keep]
        return _unique_pairs(qi, subs, self.multi_disjunct > 0)

    def match_profiles_grouped(
        self,
        profiles: list[Profile],
        intervals: list[tuple[float, float]],
        slot_map: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """`match_profiles` as one array per query: its subscription slots,
        or what the caller keeps per slot in `slot_map` (its keys, say).

        Where nodes hold many entries, without a (query, entry) pair array:
        a popular node is matched by many queries of a batch (2.1M entries
        from 17,000 node pairs but only 66,000 distinct entries, for 1000
        profiles at 100k nested), so each distinct node's slots are
        gathered (and mapped) once, and the pairs' runs are copied from
        those in query order.
        """
        n = len(profiles)
        if not n or not len(self.sub_forest):
            return [_EMPTY if slot_map is None else slot_map[:0] for _ in range(n)]
        span = np.asarray(intervals, dtype=float).reshape(-1, 2).T
        held = self.n_entries
        simple = not self.covers_entries and not self.multi_disjunct
        if not (simple and _all_within(span, self.e_from[:held], self.e_to[:held])):
            qi, subs = self.match_profiles(profiles, intervals)
            return _split(n, qi, subs, slot_map)
        forest = self.sub_forest
        forest.need_covers = False
        qi, nodes, _ = self._descend_profiles(profiles)
        order = _grouping(qi)
        qi, nodes = qi[order], nodes[order]
        if int(np.take(forest.entries.count, nodes).sum()) < SLICE_RUN * len(nodes):
            # Few entries per node: one vectorized gather beats a run per pair.
            counts, subs = forest.entries.gather_counts(nodes, values=True)
            return _split(n, np.repeat(qi, counts), subs, slot_map)
        distinct, which = np.unique(nodes, return_inverse=True)
        counts, slots = forest.entries.gather_counts(distinct, values=True)
        if slot_map is not None:
            slots = np.take(slot_map, slots.astype(np.intp))
        # Every pair's run copied out in one gather whose offsets come from a
        # repeat: concatenating 17,000 run slices per batch cost 1.5x more.
        run = np.take(counts, which)
        found = np.take(slots, run_positions(np.take(np.cumsum(counts) - counts, which), run))
        cut = np.r_[0, np.cumsum(run)][np.searchsorted(qi, np.arange(n + 1))].tolist()
        return [found[a:b] for a, b in zip(cut, cut[1:], strict=False)]

    def _descend_profiles(self, profiles: list[Profile]) -> tuple[np.ndarray, ...]:
        """Every (profile index, subscription node) pair that overlaps, and covers."""
        boxes = [self.dims.profile_box(p, grow=False) for p in profiles]
        q_lo, q_hi = self.dims.matrix(boxes, PROFILE_FILL)
        forest = self.sub_forest

        def exact(q: int, node: int) -> tuple[bool, bool]:
            conj = forest.keys[node]
            return conj.overlaps(profiles[q]), conj.covers(profiles[q])

        return forest.descend(q_lo, q_hi, np.zeros(len(profiles), dtype=bool), exact, qaf=False)

    def match_subscriptions(
        self, queries: list[tuple[list[Conjunction], bool, float, float]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Subscriptions (held or not: conjunctions, covers?, from, to) against
        the held profiles: (query index, profile slot), sorted by query index."""
        conjs = [c for conjunctions, *_ in queries for c in conjunctions]
        forest = self.profile_forest
        if not conjs or not len(forest):
            return _NO_PAIRS
        owner = np.repeat(np.arange(len(queries)), [len(q[0]) for q in queries])
        several = len(conjs) > len(queries)
        boxes = [self.profile_dims.filter_box(c, grow=False) for c in conjs]
        if None in boxes:  # constrains an attribute no held profile has: holds for none
            known = [i for i, box in enumerate(boxes) if box is not None]
            if not known:
                return _NO_PAIRS
            conjs, owner = [conjs[i] for i in known], owner[known]
            boxes = [boxes[i] for i in known]
        q_lo, q_hi = self.profile_dims.matrix([b for b, _ in boxes], FILTER_FILL)
        q_exact = np.array([e for _, e in boxes], dtype=bool)

        def exact(q: int, node: int) -> tuple[bool, bool]:
            profile = forest.keys[node]
            return conjs[q].overlaps(profile), conjs[q].covers(profile)

        covers, start, end = np.array([q[1:] for q in queries], dtype=float).reshape(-1, 3).T
        forest.need_covers = bool(covers.any())
        di, nodes, cov = forest.descend(q_lo, q_hi, q_exact, exact, qaf=True)
        di, slots, cov = _expand_entries(forest, di, nodes, cov, bool(covers.any()))
        qi = np.take(owner, di)
        n = len(self.profiles.handles)
        if covers.any() or not _all_within((start, end), self.p_from[:n], self.p_to[:n]):
            keep = _within((start, end), qi, slots, self.p_from, self.p_to)
            if covers.any():
                keep &= (np.take(covers, qi) == 0) | cov
            qi, slots = qi[keep], slots[keep]
        return _unique_pairs(qi, slots, several)

    def check_invariants(self) -> None:
        self.sub_forest.check_invariants()
        self.profile_forest.check_invariants()


def _expand_entries(
    forest: Forest,
    qi: np.ndarray,
    nodes: np.ndarray,
    cov: np.ndarray,
    with_cov: bool,
    values: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(query, node) pairs to (query, entry) pairs (or entry values),
    grouped by query: the few node pairs are sorted, not the many entry
    pairs. The covers flags only where asked for."""
    order = _grouping(qi)
    qi, nodes = qi[order], nodes[order]
    counts, entries = forest.entries.gather_counts(nodes, values)
    cov = np.repeat(cov[order], counts) if with_cov else None
    return np.repeat(qi.astype(ELEMENT), counts), entries, cov


def _split(n: int, qi: np.ndarray, items: np.ndarray, slot_map: np.ndarray | None) -> list:
    """(query, item) pairs grouped by query as one array (view) per query,
    mapped through `slot_map` if given."""
    if slot_map is not None:
        items = np.take(slot_map, items.astype(np.intp, copy=False))
    bounds = np.searchsorted(qi, np.arange(n + 1, dtype=qi.dtype)).tolist()
    return [items[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _grouping(qi: np.ndarray) -> np.ndarray:
    """The stable order that groups pairs by query: as int16 when the batch
    allows, numpy sorts by radix (linear) instead of by merging."""
    if len(qi) and int(qi.max()) < 2**15:
        qi = qi.astype(np.int16)
    return np.argsort(qi, kind="stable")


def _all_within(span, starts: np.ndarray, ends: np.ndarray) -> bool:
    """Whether every held item's interval meets every query's: one test per
    batch instead of one per pair (the common case: long-lived
    subscriptions). Free slots hold (-inf, inf), so they never fail it."""
    q_from, q_to = span
    return not len(starts) or bool(starts.max() <= q_to.min() and q_from.max() <= ends.min())


def _within(span, qi: np.ndarray, items: np.ndarray, starts, ends) -> np.ndarray:
    """Which (query, item) pairs have intersecting intervals."""
    q_from, q_to = span
    keep = np.take(starts, items) <= np.take(q_to, qi)
    keep &= np.take(q_from, qi) <= np.take(ends, items)
    return keep


def _unique_pairs(a: np.ndarray, b: np.ndarray, needed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Drop repeated pairs (an item matched through several disjuncts)."""
    if not needed or not len(a):
        return a, b
    width = int(b.max()) + 1
    keys = np.unique(a.astype(np.int64) * width + b)
    return keys // width, keys % width
