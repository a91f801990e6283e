"""The DoubleForest (SEMANTICS §7): subscriptions and profiles, both ordered
by covering, queried in both directions.

Items are kept in slots (small ints) so that every query answers with
arrays of slots; the caller keeps its own objects per slot (`handle`).
Lifetimes and validities are per entry, not per node: entries with different
intervals share a node, so the interval test runs on the entries a node
match yields, vectorized.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from matcher.boxes import FILTER_FILL, PROFILE_FILL, Dims
from matcher.constraints import Conjunction
from matcher.engines.gated import GatedFilters
from matcher.forest import Forest
from matcher.forest.arrays import Bounds, Ids, Mask
from matcher.forest.list_store import ELEMENT, SLICE_RUN, grown, run_positions
from matcher.preload import equality_index, preloader, settings
from matcher.preload import grid as preload_grid
from matcher.preload.equality_index import EqualityIndex
from matcher.preload.grid import Grid
from matcher.preload.path_costs import PathCosts
from matcher.preload.profile_cells import ProfileCells
from matcher.preload.subscription_cells import SubscriptionCells
from matcher.profiles import Profile

ALWAYS = (-np.inf, np.inf)
SAMPLE = 4096  # subscription nodes and held profiles sampled to choose a grid
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


@dataclass
class Routed:
    """How a batch of profiles is answered: `answered` from cells (`counts`
    entries each, `entries` in query order), `rest` by the forest; the batch's
    time is noted in `costs` (if measured) as the cost of `path`."""

    rest: Ids
    answered: Ids
    counts: Ids
    entries: Ids
    path: str
    costs: PathCosts | None

    def note(self, seconds: float, queries: int) -> None:
        if self.costs is not None:
            self.costs.note(self.path, seconds, queries)


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
        cells, index = self._cells(), self._index()
        for conj in conjunctions:
            entry = self._new_entry(slot, covers, valid_from, valid_to)
            if conj.pattern_tests:
                self.gated.add(entry, conj, covers=covers)
            else:
                node = self.sub_forest.add(conj, partial(self.dims.filter_box, conj), entry, slot)
                if cells is not None:
                    self._log_change(cells, entry, node, added=True)
                if index is not None:
                    if self.sub_forest.entries.count[node] == 1:
                        index.node_added(node)
                    else:  # (the index keeps each node's entries)
                        index.node_changed(node)
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
        cells, index = self._cells(), self._index()
        for entry in self.sub_entries[slot]:
            if entry in self.gated.held:
                self.gated.discard(entry)
            else:
                node = self.sub_forest.node_of(entry)
                if cells is not None:
                    self._log_change(cells, entry, node, added=False)
                self.sub_forest.discard(entry)
                if index is not None:
                    if self.sub_forest.keys[node] is None:
                        index.node_removed(node)
                    else:
                        index.node_changed(node)
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
        cells = self._profile_cells_now()
        if cells is not None:
            cells.add(slot, profile)
        return slot

    def _profile_cells_now(self) -> ProfileCells | None:
        pre = preloader.peek(self)
        return None if pre is None else pre.profile_cells

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
        cells = self._profile_cells_now()
        if cells is not None:
            cells.remove(slot)
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
        """`match_profiles` of the subscription forest's entries. Profiles inside a
        preloaded cell are answered from it (`matcher.preload`), the others by one
        descent of the forest; then O(entry pairs) to test their intervals."""
        if not profiles or not len(self.sub_forest):
            return _NO_PAIRS
        started = time.thread_time()
        span = np.asarray(intervals, dtype=float).reshape(-1, 2).T
        query_lo, query_hi = self._profile_matrix(profiles)
        routed = self._from_cells(profiles, query_lo, query_hi)
        if routed is None:
            index, costs = self._index_turn(query_lo, query_hi)
            queries, subs = self._forest_pairs(profiles, query_lo, query_hi, span, None, index)
            out = _unique_pairs(queries, subs, needed=self.multi_disjunct > 0)
            if costs is not None:
                path = "forest" if index is None else "index"
                costs.note(path, time.thread_time() - started, len(profiles))
            return out
        if not len(routed.answered):  # (the forest's turn)
            queries, subs = self._forest_pairs(profiles, query_lo, query_hi, span, None)
            out = _unique_pairs(queries, subs, needed=self.multi_disjunct > 0)
            routed.note(time.thread_time() - started, len(profiles))
            return out
        answered = np.repeat(routed.answered, routed.counts)
        queries, subs = self._cell_pairs(span, answered, routed.entries)
        if len(routed.rest):
            more, more_subs = self._forest_pairs(profiles, query_lo, query_hi, span, routed.rest)
            queries, subs = np.concatenate([queries, more]), np.concatenate([subs, more_subs])
            order = _grouping(queries)
            queries, subs = queries[order], subs[order]
        out = _unique_pairs(queries, subs, needed=self.multi_disjunct > 0)
        routed.note(time.thread_time() - started, len(profiles))
        return out

    def _forest_pairs(
        self,
        profiles: list[Profile],
        query_lo: Bounds,
        query_hi: Bounds,
        span: Span,
        which: Ids | None,
        index: EqualityIndex | None = None,
    ) -> tuple[Ids, Ids]:
        """(query index, sub slot) pairs of the profiles `which` (all if None) from
        a descent of the subscription forest (and the `index` for the point
        profiles, if given), grouped by query, repeats kept."""
        forest = self.sub_forest
        forest.need_covers = self.covers_entries > 0
        queries, nodes, covers = self._descend_profiles(profiles, query_lo, query_hi, which, index)
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
            if which is not None:
                queries = np.take(which, queries)
            keep = _within(span, queries, entries, self.entry_from, self.entry_to)
            if self.covers_entries:
                keep &= ~np.take(self.entry_covers, entries) | covers
            return queries[keep], np.take(self.entry_slot, entries[keep])
        return (queries if which is None else np.take(which, queries)), subs

    def _cell_pairs(self, span: Span, queries: Ids, entries: Ids) -> tuple[Ids, Ids]:
        """(query index, sub slot) of the (query, entry) pairs the cells found
        (their relations already tested): their intervals tested."""
        n = self.n_entries
        if not _all_within(span, self.entry_from[:n], self.entry_to[:n]):
            keep = _within(span, queries, entries, self.entry_from, self.entry_to)
            queries, entries = queries[keep], entries[keep]
        return queries.astype(ELEMENT), np.take(self.entry_slot, entries)

    def match_profiles_grouped(
        self,
        profiles: list[Profile],
        intervals: list[Interval],
        slot_map: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """`match_profiles` as one array per query: its subscription slots,
        or what the caller keeps per slot in `slot_map` (its keys, say).
        Profiles inside a preloaded cell are answered from it, the others by
        one descent, then O(distinct nodes' entries + answers).

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
        started = time.thread_time()
        query_lo, query_hi = self._profile_matrix(profiles)
        routed = self._from_cells(profiles, query_lo, query_hi)
        if routed is None:
            index, costs = self._index_turn(query_lo, query_hi)
            out = self._grouped_forest(profiles, query_lo, query_hi, None, slot_map, index)
            if costs is not None:
                path = "forest" if index is None else "index"
                costs.note(path, time.thread_time() - started, n)
            return out
        if not len(routed.answered):  # (the forest's turn)
            out = self._grouped_forest(profiles, query_lo, query_hi, None, slot_map)
            routed.note(time.thread_time() - started, n)
            return out
        # (one map from entry to what the caller keeps: a gather per answer, not two)
        entry_map = self.entry_slot[: self.n_entries]
        if slot_map is not None:
            entry_map = np.take(slot_map, entry_map.astype(np.intp))
        found = entry_map[routed.entries]  # (indexing takes int32 positions without a copy)
        out = [found[:0]] * n
        cut = np.r_[0, np.cumsum(routed.counts)].tolist()
        for query, a, b in zip(routed.answered.tolist(), cut, cut[1:], strict=False):
            out[query] = found[a:b]
        if len(routed.rest):
            more = self._grouped_forest(profiles, query_lo, query_hi, routed.rest, slot_map)
            for query, answer in zip(routed.rest.tolist(), more, strict=True):
                out[query] = answer
        routed.note(time.thread_time() - started, n)
        return out

    def _grouped_forest(
        self,
        profiles: list[Profile],
        query_lo: Bounds,
        query_hi: Bounds,
        which: Ids | None,
        slot_map: np.ndarray | None,
        index: EqualityIndex | None = None,
    ) -> list[np.ndarray]:
        """The grouped answers of the profiles `which` (all if None), in that order,
        from one descent (and the `index` for the point profiles, if given; no
        covers entries, no multi-disjunct subscriptions, every interval meeting
        every query's)."""
        n = len(profiles) if which is None else len(which)
        forest = self.sub_forest
        forest.need_covers = False
        if index is not None and which is None and _points(query_lo, query_hi).all():
            # Every profile a point: the index gives their entries' values grouped.
            counts, slots = self._index_grouped(profiles, query_lo, query_hi, index, slot_map)
            cut = np.r_[0, np.cumsum(counts)].tolist()
            return [slots[a:b] for a, b in zip(cut, cut[1:], strict=False)]
        queries, nodes, _ = self._descend_profiles(profiles, query_lo, query_hi, which, index)
        order = _grouping(queries)
        queries, nodes = queries[order], nodes[order]
        if int(np.take(forest.entries.count, nodes).sum()) < SLICE_RUN * len(nodes):
            # Few entries per node: one vectorized gather beats a run per pair.
            counts, subs = forest.entries.gather_counts(nodes, values=True)
            return _split(n, np.repeat(queries, counts), subs, slot_map)
        distinct, which_node = np.unique(nodes, return_inverse=True)
        counts, slots = forest.entries.gather_counts(distinct, values=True)
        if slot_map is not None:
            slots = np.take(slot_map, slots.astype(np.intp))
        # Every pair's run copied out in one gather whose offsets come from a
        # repeat, not a slice per pair concatenated.
        run = np.take(counts, which_node)
        starts = np.take(np.cumsum(counts) - counts, which_node)
        found = np.take(slots, run_positions(starts, run))
        cut = np.r_[0, np.cumsum(run)][np.searchsorted(queries, np.arange(n + 1))].tolist()
        return [found[a:b] for a, b in zip(cut, cut[1:], strict=False)]

    def _profile_matrix(self, profiles: list[Profile]) -> tuple[Bounds, Bounds]:
        """The profiles' boxes over the subscription columns, (columns × profiles)."""
        return self.dims.profile_matrix(profiles)

    def _descend_profiles(
        self,
        profiles: list[Profile],
        query_lo: Bounds,
        query_hi: Bounds,
        which: Ids | None,
        index: EqualityIndex | None = None,
    ) -> tuple[Ids, Ids, Mask]:
        """Every (query, subscription node) pair that overlaps, and covers, of the
        profiles `which` (all if None; the query indices are positions in it):
        the point profiles from the `index` if given, the others by a descent."""
        forest = self.sub_forest
        if which is not None:
            query_lo, query_hi = query_lo[:, which], query_hi[:, which]
            profiles = [profiles[i] for i in which.tolist()]

        def exact(query: int, node: int) -> tuple[bool, bool]:
            conj = forest.keys[node]
            return conj.overlaps(profiles[query]), conj.covers(profiles[query])

        points = None if index is None else _points(query_lo, query_hi)
        if points is None or not points.any():
            no_exact = np.zeros(len(profiles), dtype=bool)  # (a profile's box says it all)
            return forest.descend(query_lo, query_hi, no_exact, exact, queries_are_filters=False)
        at = np.flatnonzero(points)
        values, present = query_lo[:, at], query_lo[:, at] <= query_hi[:, at]

        def exact_at(query: int, node: int) -> tuple[bool, bool]:
            return exact(int(at[query]), node)

        forest.sync_columns()
        queries, nodes, covers = index.match(forest, values, present, exact_at)
        queries = np.take(at, queries)
        rest = np.flatnonzero(~points)
        preloader.of(self).count(0, 0, len(at))
        if not len(rest):
            return queries, nodes, covers
        more, more_nodes, more_covers = forest.descend(
            query_lo[:, rest],
            query_hi[:, rest],
            np.zeros(len(rest), dtype=bool),
            lambda query, node: exact(int(rest[query]), node),
            queries_are_filters=False,
        )
        return (
            np.concatenate([queries, np.take(rest, more)]),
            np.concatenate([nodes, more_nodes]),
            np.concatenate([covers, more_covers]),
        )

    def _index_grouped(
        self,
        profiles: list[Profile],
        query_lo: Bounds,
        query_hi: Bounds,
        index: EqualityIndex,
        slot_map: np.ndarray | None,
    ) -> tuple[Ids, np.ndarray]:
        """The subscription slots of the point profiles from the `index` (or what
        `slot_map` keeps for them), grouped by query: (how many each has, them)."""
        forest = self.sub_forest

        def exact(query: int, node: int) -> tuple[bool, bool]:
            conj = forest.keys[node]
            return conj.overlaps(profiles[query]), conj.covers(profiles[query])

        forest.sync_columns()
        present = query_lo <= query_hi
        preloader.of(self).count(0, 0, len(profiles))
        return index.match_grouped(forest, query_lo, present, exact, slot_map)

    # -- preloaded cells (matcher.preload) ----------------------------------

    def _cells(self) -> SubscriptionCells | None:
        """This space's filled cells, if it has a grid. O(1)."""
        pre = preloader.peek(self)
        return None if pre is None else pre.cells

    def _index(self) -> EqualityIndex | None:
        """This space's equality index, if built. O(1)."""
        pre = preloader.peek(self)
        return None if pre is None else pre.index

    def _index_turn(
        self, query_lo: Bounds, query_hi: Bounds
    ) -> tuple[EqualityIndex | None, PathCosts | None]:
        """For a batch that the cells do not answer: the equality index if it is
        its turn (most of the batch are points, the space is large enough, and
        the index measured cheaper than the forest, `PathCosts`), built first
        where missing; and the costs to note the batch in (None: not measured)."""
        config = settings.current()
        n = query_lo.shape[1]
        if not config.enabled or not n:
            return None, None
        pre = preloader.of(self)
        if self._live_entries() < config.min_entries:
            pre.index = None
            return None, None
        if 2 * int(_points(query_lo, query_hi).sum()) < n:
            return None, None
        costs = pre.costs_for(n, side="index", challenger="index") if config.measured else None
        if costs is not None and not costs.challenger_turn(ready=pre.index is not None):
            return None, costs
        if pre.index is None:
            if not self._build_index(pre, config):
                return None, costs
            costs = None  # (a batch that builds the index measures the build)
        return pre.index, costs

    def _build_index(self, pre: preloader.Preloader, config: settings.PreloadSettings) -> bool:
        """Build the equality index from the subscription forest, unless it would
        not fit the budget; whether it is built."""
        if equality_index.estimated_bytes(self.sub_forest) > config.budget_bytes:
            return False
        pre.index = EqualityIndex(self.sub_forest)
        return True

    def _log_change(self, cells: SubscriptionCells, entry: int, node: int, *, added: bool) -> None:
        columns, forest = cells.grid.columns, self.sub_forest
        cells.log(entry, added=added, lo=forest.lo[columns, node], hi=forest.hi[columns, node])

    def _live_entries(self) -> int:
        return self.n_entries - len(self.entry_free)

    def _grid_cells(
        self, query_lo: Bounds | None, query_hi: Bounds | None
    ) -> SubscriptionCells | None:
        """The space's cells, the grid chosen first where it is due (from a
        sample of the live subscriptions and of the held and asked profiles)."""
        config = settings.current()
        if not config.enabled:
            return None
        pre = preloader.of(self)
        live = self._live_entries()
        forest = self.sub_forest
        forest.sync_columns()
        if pre.due(live, config.min_entries):
            profile_lo, profile_hi = self._profile_sample(query_lo, query_hi)
            nodes = np.flatnonzero(forest.entries.count[: len(forest.keys)] > 0)
            if len(nodes) > SAMPLE:
                nodes = np.random.default_rng(0).choice(nodes, SAMPLE, replace=False)
            grid = preload_grid.choose(
                self.dims,
                forest.lo[:, nodes],
                forest.hi[:, nodes],
                forest.entries.count[nodes].astype(float),
                profile_lo,
                profile_hi,
                config.attributes,
                forest.exact[nodes],
                (live, SubscriptionCells.MEMBER_BYTES, config.budget_bytes),
            )
            pre.use(grid, live)
        return pre.cells

    def _profile_sample(
        self, query_lo: Bounds | None, query_hi: Bounds | None
    ) -> tuple[Bounds, Bounds]:
        """Boxes of up to SAMPLE held profiles of each kind (waiting, indexed) and
        of the queries asked, over the subscription columns, (columns × boxes)."""
        rng = np.random.default_rng(0)
        parts = []
        waiting = list(self._unindexed.values())
        if len(waiting) > SAMPLE:
            waiting = [waiting[i] for i in rng.choice(len(waiting), SAMPLE, replace=False)]
        if waiting:
            parts.append(self._profile_matrix(waiting))
        indexed = self._indexed_profile_boxes()
        if indexed is not None:
            lo, hi, _ = indexed
            if lo.shape[1] > SAMPLE:
                pick = rng.choice(lo.shape[1], SAMPLE, replace=False)
                lo, hi = lo[:, pick], hi[:, pick]
            parts.append((lo, hi))
        if query_lo is not None:
            parts.append((query_lo, query_hi))
        if not parts:
            empty = np.zeros((len(self.dims), 0))
            return empty, empty
        return np.concatenate([p[0] for p in parts], axis=1), np.concatenate(
            [p[1] for p in parts], axis=1
        )

    def _indexed_profile_boxes(self) -> tuple[Bounds, Bounds, np.ndarray] | None:
        """The boxes of the profile forest's nodes over the subscription columns
        (missing ones [inf, -inf]) and the profiles each holds; None if none."""
        forest = self._profile_forest
        nodes = np.flatnonzero(forest.entries.count[: len(forest.keys)] > 0)
        if not len(nodes):
            return None
        lo = np.full((len(self.dims), len(nodes)), PROFILE_FILL[0])
        hi = np.full((len(self.dims), len(nodes)), PROFILE_FILL[1])
        for key, column in self.profile_dims.columns.items():
            mine = self.dims.columns.get(key)
            if mine is not None and column < forest.lo.shape[0]:
                lo[mine], hi[mine] = forest.lo[column, nodes], forest.hi[column, nodes]
        return lo, hi, forest.entries.count[nodes]

    def _from_cells(
        self, profiles: list[Profile], query_lo: Bounds, query_hi: Bounds
    ) -> Routed | None:
        """Answer the profiles that lie inside filled cells from them, and say
        which the forest answers (`Routed`); None where the space has no grid.
        Counts each profile's visit of its cell, and on the cells' turn
        (`PathCosts`) fills the cells that are hot by now."""
        cells = self._grid_cells(query_lo, query_hi)
        if cells is None:
            pre = preloader.peek(self)
            if pre is not None:
                pre.count(len(profiles), 0)
            return None
        pre = preloader.of(self)
        keys, fits = cells.grid.keys(query_lo, query_hi)
        n = len(profiles)
        if fits.any():
            cells.visit(keys[fits])
        config = settings.current()
        costs = pre.costs_for(n) if config.measured else None
        everything = np.arange(n)
        if not fits.any() or (costs is not None and not costs.challenger_turn()):
            pre.count(n, 0)
            return Routed(
                everything, everything[:0], everything[:0], everything[:0], "forest", costs
            )
        forest, covers = self.sub_forest, self.entry_covers
        cells.trim_log()
        slots = np.full(n, -1, dtype=np.int64)
        slots[fits] = cells.slots_of(keys[fits])
        cold = np.unique(keys[fits & (slots < 0)])
        if len(cold):
            if cells.fill_hot(cold, config.fill_after, config.budget_bytes, forest, covers):
                costs = None  # (a batch that fills cells measures the fill, not the cells)
            slots[fits] = cells.slots_of(keys[fits])
        inside = cells.inside(query_lo, query_hi, slots)
        which = np.flatnonzero(inside)
        cells.catch_up(np.unique(slots[which]), forest, covers)

        def exact(query: int, node: int) -> tuple[bool, bool]:
            conj = forest.keys[node]
            return conj.overlaps(profiles[query]), conj.covers(profiles[query])

        counts, entries = cells.match(
            query_lo, query_hi, which, slots[which], forest, covers, exact
        )
        pre.count(n, len(which))
        return Routed(np.flatnonzero(~inside), which, counts, entries, "cells", costs)

    def settle(self) -> None:
        """Do now the work that the next queries would otherwise start with:
        both forests' index work (`Forest.settle`, the waiting profiles
        inserted), and the cells of the regions the held profiles lie in,
        counted as visits and filled the hottest first within the budget
        (`matcher.preload`): what a space rebuilds after a restart, or a
        bulk load ends with."""
        self.sub_forest.settle()
        self.profile_forest.settle()
        cells = self._grid_cells(None, None)
        held = self._indexed_profile_boxes()
        if cells is None:
            self._settle_index(held)
        if cells is None or held is None:
            return
        lo, hi, count = held
        keys, fits = cells.grid.keys(lo, hi)
        if not fits.any():
            return
        cells.visit(keys[fits], count[fits].astype(float))
        distinct = np.unique(keys[fits])
        cold = distinct[cells.slots_of(distinct) < 0]
        config = settings.current()
        cells.fill_hot(
            cold, config.fill_after, config.budget_bytes, self.sub_forest, self.entry_covers
        )

    def _settle_index(self, held: tuple[Bounds, Bounds, np.ndarray] | None) -> None:
        """In a space without a grid, build the equality index that the first
        batch of points would otherwise build, where the held profiles (if
        any) are mostly points, as `_index_turn` asks of a batch."""
        config = settings.current()
        if not config.enabled or self._live_entries() < config.min_entries:
            return
        pre = preloader.of(self)
        if pre.index is not None:
            return
        if held is not None:
            lo, hi, count = held
            if 2 * int(count[_points(lo, hi)].sum()) < int(count.sum()):
                return
        self._build_index(pre, config)

    def preload_counts(self) -> dict[str, int]:
        """Profiles asked and answered from cells since last asked (then zeroed),
        and the cells held now and their bytes (`matcher.preload`). O(1)."""
        return preloader.of(self).take_counts()

    def match_subscriptions(self, queries: list[SubscriptionQuery]) -> tuple[Ids, Ids]:
        """Subscriptions (held or not: conjunctions, covers?, from, to) against
        the held profiles: (query index, profile slot), sorted by query index.
        The waiting profiles inserted, one descent of the profile forest, then
        O(entry pairs) to test their intervals."""
        conjs = [c for conjunctions, *_ in queries for c in conjunctions]
        if not conjs or not len(self.profiles):
            return _NO_PAIRS
        owner = np.repeat(np.arange(len(queries)), [len(q[0]) for q in queries])
        several = len(conjs) > len(queries)
        started = time.thread_time()
        routed = self._profiles_from_cells(queries, conjs, owner)
        if routed is not None:
            path, costs, pairs = routed
            if pairs is not None:
                if costs is not None:
                    costs.note(path, time.thread_time() - started, len(conjs))
                return _unique_pairs(*pairs, needed=several)
        pairs = self._profile_forest_pairs(queries, conjs, owner)
        if routed is not None and routed[1] is not None:
            routed[1].note("forest", time.thread_time() - started, len(conjs))
        return _unique_pairs(*pairs, needed=several)

    def _profile_forest_pairs(
        self, queries: list[SubscriptionQuery], conjs: list[Conjunction], owner: Ids
    ) -> tuple[Ids, Ids]:
        """(query index, profile slot) pairs from a descent of the profile forest
        (the waiting profiles inserted first), repeats kept."""
        forest = self.profile_forest
        if not len(forest):
            return _NO_PAIRS
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
        return query_index, slots

    def _profiles_from_cells(
        self, queries: list[SubscriptionQuery], conjs: list[Conjunction], owner: Ids
    ) -> tuple[str, PathCosts | None, tuple[Ids, Ids] | None] | None:
        """The (query index, profile slot) pairs from the profile cells, where the
        space has a grid and it is the cells' turn: (the path taken, its costs,
        the pairs or None for the forest's turn); None without a grid."""
        cells = self._grid_cells(None, None)
        if cells is None:
            return None
        pre = preloader.of(self)
        config = settings.current()
        costs = pre.costs_for(len(conjs), side="profiles") if config.measured else None
        if costs is not None and not costs.challenger_turn():
            return "forest", costs, None
        boxes = [self.dims.filter_box(c, grow=False) for c in conjs]
        built = pre.profile_cells
        profile_cells = self._profile_cells(pre, cells.grid)
        if None in boxes or profile_cells is None:  # (a column no subscription has: the forest)
            return "forest", costs, None
        if profile_cells is not built:
            costs = None  # (a batch that built them measures the build, not the cells)
        filter_lo, filter_hi = self.dims.matrix([b for b, _ in boxes], FILTER_FILL)
        exact_box = np.array([e for _, e in boxes], dtype=bool)
        covers, start, end = np.array([q[1:] for q in queries], dtype=float).reshape(-1, 3).T
        conj_covers = np.take(covers, owner) > 0
        profiles = profile_cells.profiles

        def exact(query: int, slot: int) -> bool:
            profile = profiles[slot]
            return (
                conjs[query].covers(profile)
                if conj_covers[query]
                else conjs[query].overlaps(profile)
            )

        counts, slots = profile_cells.match(filter_lo, filter_hi, conj_covers, exact_box, exact)
        query_index = np.repeat(owner, counts)
        n = len(self.profiles.handles)
        held = (self.profile_from[:n], self.profile_to[:n])
        if not _all_within((start, end), *held):
            keep = _within((start, end), query_index, slots, self.profile_from, self.profile_to)
            query_index, slots = query_index[keep], slots[keep]
        return "cells", costs, (query_index, slots.astype(ELEMENT))

    def _profile_cells(self, pre: preloader.Preloader, grid: Grid) -> ProfileCells | None:
        """The profile cells over `grid`, built from every held profile on first
        use (and again when the subscription columns grow), their waiting changes
        applied; None where they would not fit the budget."""
        cells = pre.profile_cells
        columns = len(self.dims)
        if cells is None or cells.grid is not grid or cells.columns != columns:
            held = self._held_profiles()
            row = 4 + 16 * columns
            if len(held) * row > settings.current().budget_bytes:
                pre.profile_cells = None
                return None
            cells = pre.profile_cells = ProfileCells(grid, columns)
            for slot, profile in held:
                cells.add(slot, profile)
        cells.apply(self.dims)
        return cells

    def _held_profiles(self) -> list[tuple[int, Profile]]:
        """Every held profile with its slot, waiting or indexed. O(profiles)."""
        held = list(self._unindexed.items())
        forest = self._profile_forest
        for node, key in enumerate(forest.keys):
            if key is not None:
                held += [(int(slot), key) for slot in forest.entries.items(node).tolist()]
        return held

    def check_invariants(self) -> None:
        """Both forests' (`Forest.check_invariants`), and the preloaded cells'
        (`SubscriptionCells.check`). For tests."""
        self.sub_forest.check_invariants()
        self.profile_forest.check_invariants()
        cells = self._cells()
        if cells is not None:
            self.sub_forest.sync_columns()
            cells.check(self.sub_forest, self.entry_covers)
        profile_cells = self._profile_cells_now()
        if profile_cells is not None and profile_cells.columns == len(self.dims):
            profile_cells.check(self.dims, dict(self._held_profiles()))
        index = self._index()
        if index is not None:
            index.check(self.sub_forest)
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


def _points(query_lo: Bounds, query_hi: Bounds) -> Mask:
    """Which query boxes (columns × queries) are points: a value or nothing on
    each column."""
    return ((query_lo == query_hi) | (query_lo > query_hi)).all(axis=0)


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
