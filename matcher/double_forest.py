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

from matcher.boxes import FILTER_FILL, PROFILE_FILL, Dims
from matcher.constraints import Conjunction
from matcher.engines.gated import GatedFilters
from matcher.forest import Forest
from matcher.forest.arrays import Ids, Mask
from matcher.forest.list_store import ELEMENT, SLICE_RUN, grown, run_positions
from matcher.profiles import Profile

ALWAYS = (-np.inf, np.inf)
_EMPTY = np.zeros(0, dtype=ELEMENT)
_NO_PAIRS = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))  # (never written to)

Interval = tuple[float, float]  # (valid_from, valid_to)
Span = tuple[np.ndarray, np.ndarray]  # the queries' (valid_from, valid_to), one cell each
# A subscription asked about: (its conjunctions, covers?, valid_from, valid_to)
SubscriptionQuery = tuple[list[Conjunction], bool, float, float]


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
    """Held subscriptions and profiles, each in a covering forest.

    Invariants: each held subscription has one entry per conjunction, on the
    node of that conjunction in `sub_forest`, carrying its slot (or, for a
    conjunction with pattern tests, held by `gated`); the entry
    arrays (`entry_slot`, `entry_covers`, `entry_from`, `entry_to`) describe
    it, and a free entry's interval is ALWAYS (it lets every query past, so
    batch-wide tests need not exclude it). Each held profile is either in the
    profile forest (its entry is its slot) or waiting in `_unindexed`, never
    both; `profile_from`/`profile_to` hold its interval (ALWAYS for a free
    slot). `multi_disjunct` counts the subscriptions of several conjunctions,
    `covers_entries` the entries of `covers` subscriptions.
    """

    def __init__(self) -> None:
        # Each forest has the columns of its own side's attributes (the string
        # codes shared): a query tests only the columns that the other side's
        # boxes constrain or have, so profiles that each bring an attribute of
        # their own (a sensor's id as its name) add no column to the
        # subscriptions' profile queries.
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
        # Filters with pattern tests (MATCHES, TOPIC, HAS, XPATH): their tests indexed.
        self.gated = GatedFilters(codes)
        self.subs = _Slots()
        self.profiles = _Slots()
        self.sub_entries: list[list[int]] = []  # slot -> its entry ids (one per disjunct)
        self.entry_free: list[int] = []
        self.entry_slot = np.zeros(16, dtype=ELEMENT)  # per entry: its subscription's slot
        self.entry_covers = np.zeros(16, dtype=bool)
        self.entry_from = np.zeros(16)
        self.entry_to = np.zeros(16)
        self.n_entries = 0
        self.multi_disjunct = 0  # subscriptions with more than one conjunction
        self.covers_entries = 0  # entries of `covers` subscriptions
        self.profile_from = np.zeros(16)  # per profile slot
        self.profile_to = np.zeros(16)

    # -- subscriptions ------------------------------------------------------

    def add_subscription(
        self,
        handle: Any,
        conjunctions: list[Conjunction],
        covers: bool,
        valid_from: float,
        valid_to: float,
    ) -> int:
        """Hold a subscription; returns its slot. One `Forest.add` a conjunction."""
        slot = self.subs.take(handle)
        while len(self.sub_entries) <= slot:
            self.sub_entries.append([])
        entries = []
        for conj in conjunctions:
            entry = self._new_entry(slot, covers, valid_from, valid_to)
            if conj.pattern_tests:
                self.gated.add(entry, conj, covers=covers)
            else:
                self.sub_forest.add(conj, partial(self.dims.filter_box, conj), entry, slot)
            entries.append(entry)
        self.sub_entries[slot] = entries
        self.multi_disjunct += len(entries) > 1
        self.covers_entries += len(entries) if covers else 0
        return slot

    def _new_entry(self, slot: int, covers: bool, valid_from: float, valid_to: float) -> int:
        if self.entry_free:
            entry = self.entry_free.pop()
        else:
            entry = self.n_entries
            self.n_entries += 1
            if entry >= len(self.entry_slot):
                n = entry + 1
                self.entry_slot = grown(self.entry_slot, n, 0)
                self.entry_covers = grown(self.entry_covers, n, False)
                self.entry_from = grown(self.entry_from, n, 0.0)
                self.entry_to = grown(self.entry_to, n, 0.0)
        self.entry_slot[entry], self.entry_covers[entry] = slot, covers
        self.entry_from[entry], self.entry_to[entry] = valid_from, valid_to
        return entry

    def remove_subscription(self, slot: int) -> None:
        """Drop a held subscription. One `Forest.discard` a conjunction."""
        self.multi_disjunct -= len(self.sub_entries[slot]) > 1
        entries = self.sub_entries[slot]
        if entries and self.entry_covers[entries[0]]:
            self.covers_entries -= len(entries)
        for entry in self.sub_entries[slot]:
            if entry in self.gated.held:
                self.gated.discard(entry)
            else:
                self.sub_forest.discard(entry)
            self.entry_free.append(entry)
            self.entry_from[entry], self.entry_to[entry] = ALWAYS  # lets every query past

        self.sub_entries[slot] = []
        self.subs.give_back(slot)

    # -- profiles -----------------------------------------------------------

    def add_profile(self, handle: Any, profile: Profile, valid_from: float, valid_to: float) -> int:
        """Hold a profile; returns its slot. O(1): it waits outside the profile
        forest until a subscription's query reads that forest."""
        slot = self.profiles.take(handle)
        n = slot + 1
        self.profile_from = grown(self.profile_from, n, 0.0)
        self.profile_to = grown(self.profile_to, n, 0.0)
        self.profile_from[slot], self.profile_to[slot] = valid_from, valid_to
        self._unindexed[slot] = profile
        return slot

    @property
    def profile_forest(self) -> Forest:
        """The profile forest, every profile held in it (those added since it was
        last asked for are inserted first: one `Forest.add` each)."""
        if self._unindexed:
            forest, box = self._profile_forest, self._profile_box
            for slot, profile in self._unindexed.items():
                forest.add(profile, partial(box, profile), slot)
            self._unindexed.clear()
        return self._profile_forest

    def _profile_box(self, profile: Profile) -> tuple[dict, bool]:
        return self.profile_dims.profile_box(profile), False  # (its box says it all)

    def remove_profile(self, slot: int) -> None:
        """Drop a held profile. O(1) if it waits outside the profile forest,
        else one `Forest.discard`."""
        if self._unindexed.pop(slot, None) is None:
            self._profile_forest.discard(slot)
        self.profiles.give_back(slot)
        self.profile_from[slot], self.profile_to[slot] = ALWAYS

    # -- queries ------------------------------------------------------------

    def match_profiles(self, profiles: list[Profile], intervals: list[Interval]) -> tuple[Ids, Ids]:
        """Profiles (held or not) against the subscriptions: (query index, sub
        slot), sorted by query index. `_match_forest`, and `GatedFilters.match`
        where filters have pattern tests, then O(their pairs) to test intervals."""
        queries, subs = self._match_forest(profiles, intervals)
        if not len(self.gated) or not profiles:
            return queries, subs
        gated_queries, entries, covers = self.gated.match(profiles)
        span = np.asarray(intervals, dtype=float).reshape(-1, 2).T
        keep = _within(span, gated_queries, entries, self.entry_from, self.entry_to)
        keep &= ~np.take(self.entry_covers, entries) | covers
        if not len(queries):
            return gated_queries[keep], np.take(self.entry_slot, entries[keep])
        queries = np.concatenate([queries, gated_queries[keep]])
        subs = np.concatenate([subs, np.take(self.entry_slot, entries[keep])])
        if self.multi_disjunct:
            return _unique_pairs(queries, subs, needed=True)
        order = _grouping(queries)  # (each part is grouped by query already)
        return queries[order], subs[order]

    def _match_forest(self, profiles: list[Profile], intervals: list[Interval]) -> tuple[Ids, Ids]:
        """`match_profiles` of the subscription forest's entries. One descent of
        the forest, then O(entry pairs) to test their intervals."""
        if not profiles or not len(self.sub_forest):
            return _NO_PAIRS
        forest = self.sub_forest
        forest.need_covers = self.covers_entries > 0
        queries, nodes, covers = self._descend_profiles(profiles)
        span = np.asarray(intervals, dtype=float).reshape(-1, 2).T
        n = self.n_entries
        if not self.covers_entries and _all_within(span, self.entry_from[:n], self.entry_to[:n]):
            # Every node match holds for all its entries: their subscription
            # slots are read straight from the store, one pass.
            queries, subs, _ = _expand_entries(
                forest, queries, nodes, covers, with_covers=False, values=True
            )
        else:
            queries, entries, covers = _expand_entries(
                forest, queries, nodes, covers, with_covers=self.covers_entries > 0
            )
            keep = _within(span, queries, entries, self.entry_from, self.entry_to)
            if self.covers_entries:
                keep &= ~np.take(self.entry_covers, entries) | covers
            subs = np.take(self.entry_slot, entries[keep])
            queries = queries[keep]
        return _unique_pairs(queries, subs, needed=self.multi_disjunct > 0)

    def match_profiles_grouped(
        self,
        profiles: list[Profile],
        intervals: list[Interval],
        slot_map: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """`match_profiles` as one array per query: its subscription slots,
        or what the caller keeps per slot in `slot_map` (its keys, say).
        One descent, then O(distinct nodes' entries + answers).

        Where nodes hold many entries, without a (query, entry) pair array: a
        popular node is matched by many queries of a batch, so each distinct
        node's slots are gathered (and mapped) once, and the pairs' runs are
        copied from those in query order.
        """
        n = len(profiles)
        if not n or not (len(self.sub_forest) or len(self.gated)):
            return [_EMPTY if slot_map is None else slot_map[:0] for _ in range(n)]
        span = np.asarray(intervals, dtype=float).reshape(-1, 2).T
        held = self.n_entries
        simple = not self.covers_entries and not self.multi_disjunct and not len(self.gated)
        if not (simple and _all_within(span, self.entry_from[:held], self.entry_to[:held])):
            queries, subs = self.match_profiles(profiles, intervals)
            return _split(n, queries, subs, slot_map)
        forest = self.sub_forest
        forest.need_covers = False
        queries, nodes, _ = self._descend_profiles(profiles)
        order = _grouping(queries)
        queries, nodes = queries[order], nodes[order]
        if int(np.take(forest.entries.count, nodes).sum()) < SLICE_RUN * len(nodes):
            # Few entries per node: one vectorized gather beats a run per pair.
            counts, subs = forest.entries.gather_counts(nodes, values=True)
            return _split(n, np.repeat(queries, counts), subs, slot_map)
        distinct, which = np.unique(nodes, return_inverse=True)
        counts, slots = forest.entries.gather_counts(distinct, values=True)
        if slot_map is not None:
            slots = np.take(slot_map, slots.astype(np.intp))
        # Every pair's run copied out in one gather whose offsets come from a
        # repeat, not a slice per pair concatenated.
        run = np.take(counts, which)
        found = np.take(slots, run_positions(np.take(np.cumsum(counts) - counts, which), run))
        cut = np.r_[0, np.cumsum(run)][np.searchsorted(queries, np.arange(n + 1))].tolist()
        return [found[a:b] for a, b in zip(cut, cut[1:], strict=False)]

    def _descend_profiles(self, profiles: list[Profile]) -> tuple[Ids, Ids, Mask]:
        """Every (profile index, subscription node) pair that overlaps, and covers."""
        boxes = [self.dims.profile_box(p, grow=False) for p in profiles]
        query_lo, query_hi = self.dims.matrix(boxes, PROFILE_FILL)
        forest = self.sub_forest

        def exact(query: int, node: int) -> tuple[bool, bool]:
            conj = forest.keys[node]
            return conj.overlaps(profiles[query]), conj.covers(profiles[query])

        no_exact = np.zeros(len(profiles), dtype=bool)  # (a profile's box says it all)
        return forest.descend(query_lo, query_hi, no_exact, exact, queries_are_filters=False)

    def match_subscriptions(self, queries: list[SubscriptionQuery]) -> tuple[Ids, Ids]:
        """Subscriptions (held or not: conjunctions, covers?, from, to) against
        the held profiles: (query index, profile slot), sorted by query index.
        The waiting profiles inserted, one descent of the profile forest, then
        O(entry pairs) to test their intervals."""
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
        query_lo, query_hi = self.profile_dims.matrix([b for b, _ in boxes], FILTER_FILL)
        query_exact = np.array([e for _, e in boxes], dtype=bool)

        def exact(query: int, node: int) -> tuple[bool, bool]:
            profile = forest.keys[node]
            return conjs[query].overlaps(profile), conjs[query].covers(profile)

        covers, start, end = np.array([q[1:] for q in queries], dtype=float).reshape(-1, 3).T
        # Without `covers` queries the descent may accept a node's subtree by box
        # containment alone: right only for queries whose box says everything.
        forest.need_covers = bool(covers.any() or query_exact.any())
        conj_index, nodes, node_covers = forest.descend(
            query_lo, query_hi, query_exact, exact, queries_are_filters=True
        )
        conj_index, slots, node_covers = _expand_entries(
            forest, conj_index, nodes, node_covers, with_covers=bool(covers.any())
        )
        query_index = np.take(owner, conj_index)
        n = len(self.profiles.handles)
        held = (self.profile_from[:n], self.profile_to[:n])
        if covers.any() or not _all_within((start, end), *held):
            keep = _within((start, end), query_index, slots, self.profile_from, self.profile_to)
            if covers.any():
                keep &= (np.take(covers, query_index) == 0) | node_covers
            query_index, slots = query_index[keep], slots[keep]
        return _unique_pairs(query_index, slots, needed=several)

    def check_invariants(self) -> None:
        """Both forests' (`Forest.check_invariants`). For tests."""
        self.sub_forest.check_invariants()
        self.profile_forest.check_invariants()
        self.gated.check_invariants()


def _expand_entries(
    forest: Forest,
    queries: Ids,
    nodes: Ids,
    covers: Mask,
    *,
    with_covers: bool,
    values: bool = False,
) -> tuple[Ids, Ids, Mask | None]:
    """(query, node) pairs to (query, entry) pairs (or entry values), grouped
    by query: the few node pairs are sorted, not the many entry pairs. The
    covers flags only `with_covers`."""
    order = _grouping(queries)
    queries, nodes = queries[order], nodes[order]
    counts, entries = forest.entries.gather_counts(nodes, values=values)
    covers = np.repeat(covers[order], counts) if with_covers else None
    return np.repeat(queries.astype(ELEMENT), counts), entries, covers


def _split(
    n: int, queries: Ids, items: np.ndarray, slot_map: np.ndarray | None
) -> list[np.ndarray]:
    """(query, item) pairs grouped by query as one array (view) per query,
    mapped through `slot_map` if given."""
    if slot_map is not None:
        items = np.take(slot_map, items.astype(np.intp, copy=False))
    bounds = np.searchsorted(queries, np.arange(n + 1, dtype=queries.dtype)).tolist()
    return [items[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _grouping(queries: Ids) -> Ids:
    """The stable order that groups pairs by query: as int16 when the batch
    allows, numpy sorts by radix (linear) instead of by merging."""
    if len(queries) and int(queries.max()) < 2**15:
        queries = queries.astype(np.int16)
    return np.argsort(queries, kind="stable")


def _all_within(span: Span, starts: np.ndarray, ends: np.ndarray) -> bool:
    """Whether every held item's interval meets every query's: one test per
    batch instead of one per pair (the common case: long-lived
    subscriptions). Free slots hold (-inf, inf), so they never fail it."""
    query_from, query_to = span
    return not len(starts) or bool(
        starts.max() <= query_to.min() and query_from.max() <= ends.min()
    )


def _within(span: Span, queries: Ids, items: Ids, starts: np.ndarray, ends: np.ndarray) -> Mask:
    """Which (query, item) pairs have intersecting intervals."""
    query_from, query_to = span
    keep = np.take(starts, items) <= np.take(query_to, queries)
    keep &= np.take(query_from, queries) <= np.take(ends, items)
    return keep


def _unique_pairs(a: Ids, b: Ids, *, needed: bool) -> tuple[Ids, Ids]:
    """Drop repeated pairs (an item matched through several disjuncts)."""
    if not needed or not len(a):
        return a, b
    width = int(b.max()) + 1
    keys = np.unique(a.astype(np.int64) * width + b)
    return keys // width, keys % width
