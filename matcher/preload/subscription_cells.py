"""Preloaded cells of the subscription side (the thesis's preloading, ch. 7).

A filled cell keeps every subscription entry whose box meets it (only those
can match a profile inside it), sorted into groups by what a profile inside
the cell still has to be asked about them:

- *sure*: the box covers the cell on every grid column. For `overlaps` and
  `covers` alike the entry holds on those columns for every profile inside.
- *edge (column, low or high)*: the box covers the cell but for one bound of
  one grid column, which lies inside it. The entry holds on the grid columns
  exactly when the profile's own bound passes that one (for `overlaps` of a
  low bound: the profile's high end at or above it; for `covers`: its low
  end), so the group is sorted by that bound and a binary search cuts it:
  the holding entries are one run.
- *corner (two columns, a bound of each)*: one bound inside the cell on each
  of two grid columns. Sorted by the first, cut by a search; the second bound,
  kept beside it, is tested on the run.
- *band (column)*: both bounds of one grid column inside the cell, the other
  columns covered. Sorted by the low bound, cut by a search; the high bound,
  kept beside it, is tested on the run, as a corner's second bound is.
- *mixed*: anything else (three bounds or more inside the cell, an exact
  box, other columns constrained in ways the cell does not keep, an entry
  added since the cell was sorted): every column it constrains is tested.

Each sure, edge, corner and band group comes twice: *free* entries constrain
nothing but the grid columns, *tested* ones constrain one other column too
(the cell's residual column, the one its entries constrain most: a vehicle's
kind, say), whose bounds are kept beside them and tested on the run. And each
comes once per relation, whose searches differ. So for a point or small
profile inside a cell the answer is a few runs of precomputed entries found
in O(log(cell)) steps, plus a test of the contiguous runs of the corner, band and
tested groups: its cost grows with the answer, not with the number of
subscriptions held.

Cells are filled (one descent of the forest with the loose cells as queries)
for the regions that profiles visit, the hottest first within the memory
budget, kept up to date from a log of subscription changes that each cell
reads when it is next asked, and dropped when cold.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

import numpy as np

from matcher.forest import Forest
from matcher.forest.arrays import Bounds, Ids, Mask
from matcher.forest.list_store import ELEMENT, grown
from matcher.preload import cell_answers
from matcher.preload.cell_pool import CellPool
from matcher.preload.grid import Grid

# (query index, node) -> (overlaps, covers) of an exact box
ExactTest = Callable[[int, int], tuple[bool, bool]]

FIELDS = {
    "entry": ELEMENT,  # the subscription entry
    "key": np.float64,  # the bound it is sorted by (edge and corner groups)
    "key2": np.float64,  # a corner's bound on its second column
    "res": np.float32,  # the value it allows on the cell's residual column (tested groups)
}
RESORT_SHARE = 8  # a cell re-sorts its members once its unsorted additions pass 1/8 of them
RESORT_MIN = 64  # ... and this many
DECAY_EVERY = 4  # visit scores halve after this many visits per scored cell
COLD = 0.25  # a filled cell whose score decays below this is dropped
LOG_SHARE = 4  # the change log is cut once longer than a quarter of the members held
LOG_MIN = 4096
ROW_BYTES = 96  # a cell's own rows and dict entries, besides its members


class SubscriptionCells:
    """The filled cells of one space over one grid.

    Invariants: `by_key` maps the key of every filled cell to its slot, whose
    `lo/hi` are its loose bounds. Such a cell's pool region holds, as of log
    position `log_pos[slot]`, exactly the live entries whose box meets its
    bounds, each once, in the group its box puts it in (an entry added since
    the last sort: in the mixed group); `res_column[slot]` is its residual
    column (-1: none) and `mixed_columns[slot]` marks every column a mixed
    member of it constrains. The log holds the subscription changes from
    `log_base` on, each with its box on the grid columns.
    """

    # a member's bytes in the pool, with its share of a region's room to grow
    MEMBER_BYTES = sum(np.dtype(t).itemsize for t in FIELDS.values()) * 9 // 8

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        k = len(grid.columns)
        pairs = list(combinations(range(k), 2))
        self.block = 1 + 2 * k + 4 * len(pairs) + k  # sure, edges, corners, bands
        self.mixed = 4 * self.block  # (relation, tested) × block, then mixed
        self.pool = CellPool(self.mixed + 1, FIELDS)
        self.pair_index = np.full((k, k), -1, dtype=np.int64)
        for i, (c1, c2) in enumerate(pairs):
            self.pair_index[c1, c2] = i
        # Per group: the grid column of its sort key and whether that is a high
        # bound, the same of a corner's second column (-1: none), its relation
        # (True: covers) and whether its members have a residual test.
        group = np.arange(self.mixed + 1)
        edge, kind = group % self.block, group // self.block
        self.group_column = np.full(len(group), -1)
        self.group_high = np.zeros(len(group), dtype=bool)
        self.group_column2 = np.full(len(group), -1)
        self.group_high2 = np.zeros(len(group), dtype=bool)
        is_edge = (edge >= 1) & (edge <= 2 * k) & (group < self.mixed)
        self.group_column[is_edge] = (edge[is_edge] - 1) // 2
        self.group_high[is_edge] = (edge[is_edge] - 1) % 2 == 1
        corner = (edge > 2 * k) & (edge < self.block - k) & (group < self.mixed)
        at = edge[corner] - 1 - 2 * k
        if len(pairs):
            first, second = np.array(pairs).T
            self.group_column[corner], self.group_column2[corner] = first[at // 4], second[at // 4]
            self.group_high[corner], self.group_high2[corner] = (at % 4) // 2 == 1, at % 2 == 1
        band = (edge >= self.block - k) & (group < self.mixed)
        self.group_column[band] = self.group_column2[band] = edge[band] - (self.block - k)
        self.group_high2[band] = True
        self.group_covers = (kind // 2 == 1) & (group < self.mixed)
        self.group_tested = (kind % 2 == 1) & (group < self.mixed)
        self.by_key: dict[int, int] = {}
        self.key = np.zeros(16, dtype=np.int64)
        self.lo = np.zeros((k, 16))
        self.hi = np.zeros((k, 16))
        self.log_pos = np.zeros(16, dtype=np.int64)
        self.added = np.zeros(16, dtype=np.int64)  # members appended unsorted
        self.res_column = np.full(16, -1, dtype=np.int64)
        self.mixed_columns = np.zeros((16, 1), dtype=bool)
        self.visits: dict[int, float] = {}
        self.visits_since_decay = 0
        self.log_entry: list[int] = []
        self.log_add: list[bool] = []
        self.log_box: list[tuple[float, ...]] = []
        self.log_base = 0

    # -- memory --------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Memory the filled cells hold: their members with their room to grow,
        their rows, and the change log. (Not the visit scores: a few dozen bytes
        per cell visited lately, halved away as visits move on.)"""
        rows = len(self.by_key) * (ROW_BYTES + 8 * self.pool.groups + self.mixed_columns.shape[1])
        log = len(self.log_entry) * (16 + 8 * len(self.grid.columns))
        return self.pool.nbytes + rows + log

    def __len__(self) -> int:
        return len(self.by_key)

    # -- visits and filling --------------------------------------------------

    def visit(self, keys: Ids, weights: np.ndarray | None = None) -> None:
        """Count visits of cells (a query in it, a held profile in it); scores
        halve every DECAY_EVERY visits per scored cell, and filled cells that
        go cold are dropped. O(distinct keys)."""
        distinct, which, counts = np.unique(keys, return_inverse=True, return_counts=True)
        if weights is not None:
            counts = np.bincount(which, weights, len(distinct))
        visits = self.visits
        for key, n in zip(distinct.tolist(), counts.tolist(), strict=True):
            visits[key] = visits.get(key, 0.0) + n
        self.visits_since_decay += int(counts.sum())
        if self.visits_since_decay > DECAY_EVERY * max(1024, len(visits)):
            self.visits_since_decay = 0
            for key in list(visits):
                visits[key] *= 0.5
                if visits[key] < COLD:
                    del visits[key]
                    slot = self.by_key.pop(key, None)
                    if slot is not None:
                        self.pool.release(slot)

    def slots_of(self, keys: Ids) -> Ids:
        """The slot of each key's filled cell, or -1. O(keys), a dict lookup per
        distinct key."""
        distinct, which = np.unique(keys, return_inverse=True)
        get = self.by_key.get
        slots = np.fromiter((get(k, -1) for k in distinct.tolist()), np.int64, len(distinct))
        return slots[which]

    def fill_hot(
        self, keys: Ids, fill_after: float, budget: int, forest: Forest, covers: np.ndarray
    ) -> int:
        """Fill the cells of `keys` (distinct, not filled) visited at least
        `fill_after` times, the hottest first, and then drop the coldest cells
        until the budget holds (new ones too, if they are the coldest); returns
        how many were filled. One descent of the forest for all of them."""
        scores = np.array([self.visits.get(k, 0.0) for k in keys.tolist()])
        hot = scores >= fill_after
        if not hot.any():
            return 0
        keys, scores = keys[hot], scores[hot]
        order = np.argsort(-scores, kind="stable")
        if self.by_key:  # at most as many as the budget has room for, at the mean size so far
            mean = max(1.0, self.pool.nbytes / len(self.by_key))
            room = int((budget - self.nbytes) / mean) + self._colder(float(scores.max()))
            order = order[: max(room, 1)]
        self._fill(keys[order], forest, covers)
        self._within(budget)
        return len(order)

    def _colder(self, score: float) -> int:
        return sum(1 for k in self.by_key if self.visits.get(k, 0.0) < score)

    def _within(self, budget: int) -> None:
        """Drop the coldest filled cells while over the budget. O(cells log cells)."""
        if self.nbytes <= budget:
            return
        for key in sorted(self.by_key, key=lambda k: self.visits.get(k, 0.0)):
            if self.nbytes <= budget:
                break
            self.pool.release(self.by_key.pop(key))

    def _fill(self, keys: Ids, forest: Forest, covers: np.ndarray) -> None:
        """Fill new cells: every entry whose box meets each loose cell, sorted
        into groups. O(descent + members × (columns + log members))."""
        if not len(keys):
            return
        slots = np.array([self._take(int(k)) for k in keys.tolist()], dtype=np.int64)
        lo, hi = self.grid.bounds(keys)
        self.lo[:, slots], self.hi[:, slots] = lo, hi
        self.log_pos[slots] = self.log_base + len(self.log_entry)
        columns = forest.lo.shape[0]
        query_lo = np.full((columns, len(keys)), -np.inf)
        query_hi = np.full((columns, len(keys)), np.inf)
        query_lo[self.grid.columns], query_hi[self.grid.columns] = lo, hi
        need_covers, forest.need_covers = forest.need_covers, False
        try:
            queries, nodes, _ = forest.descend(
                query_lo,
                query_hi,
                np.zeros(len(keys), dtype=bool),
                lambda query, node: (True, False),  # (an exact box may hold: tested later)
                queries_are_filters=False,
            )
        finally:
            forest.need_covers = need_covers
        counts, entries = forest.entries.gather_counts(nodes)
        which = np.repeat(queries, counts)
        self._sort_into(slots, which, entries, np.repeat(nodes, counts), forest, covers)

    def _take(self, key: int) -> int:
        slot = self.pool.take()
        self.by_key[key] = slot
        if slot >= len(self.key):
            n = 2 * len(self.key)
            self.key = grown(self.key, n, 0)
            self.log_pos = grown(self.log_pos, n, 0)
            self.added = grown(self.added, n, 0)
            self.res_column = grown(self.res_column, n, -1)
            self.lo = _grown_columns(self.lo, n)
            self.hi = _grown_columns(self.hi, n)
        self.key[slot] = key
        return slot

    def _sort_into(
        self, slots: Ids, which: Ids, entries: Ids, nodes: Ids, forest: Forest, covers: np.ndarray
    ) -> None:
        """Write the members of `slots` (member i belongs to `slots[which[i]]`),
        grouped and sorted, as their regions. O(members × columns + members log
        members)."""
        groups = self.mixed + 1
        group, key, key2, res = self._classify(slots, which, nodes, forest, covers, entries)
        cell_group = which * groups + group
        # by (cell, group), then residual value, then key: the key sort first,
        # then stable sorts (a residual value's rank is a small int)
        order = np.argsort(key, kind="stable")
        if res.any():
            distinct, rank = np.unique(res[order], return_inverse=True)
            order = order[np.argsort(cell_group[order] * len(distinct) + rank, kind="stable")]
        else:
            order = order[np.argsort(cell_group[order], kind="stable")]
        counts = np.bincount(cell_group, minlength=len(slots) * groups)
        self.pool.write(
            slots,
            counts.reshape(len(slots), groups),
            entry=entries[order],
            key=key[order],
            key2=key2[order],
            res=res[order],
        )
        self.added[slots] = 0

    def _columns(self, n: int) -> None:
        """Room in `mixed_columns` for `n` columns (the forest's grow) and every slot."""
        rows, have = self.mixed_columns.shape
        if n > have or rows < len(self.key):
            grown_ = np.zeros((max(rows, len(self.key)), max(n, have)), dtype=bool)
            grown_[:rows, :have] = self.mixed_columns
            self.mixed_columns = grown_

    def _classify(
        self, slots: Ids, which: Ids, nodes: Ids, forest: Forest, covers: np.ndarray, entries: Ids
    ) -> tuple[Ids, np.ndarray, np.ndarray, np.ndarray]:
        """Each member's group, sort keys and residual value in its cell; sets each
        cell's residual column and the columns its mixed members constrain.
        O(members × columns), one column at a time."""
        n, k = len(nodes), len(self.grid.columns)
        cells = slots[which]
        cuts = np.zeros(n, dtype=np.int8)
        band = np.zeros(n, dtype=bool)
        bad = np.take(forest.exact, nodes)
        key, key2 = np.zeros(n), np.zeros(n)
        first, high1 = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
        second, high2 = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
        for c, column in enumerate(self.grid.columns.tolist()):
            box_lo, box_hi = np.take(forest.lo[column], nodes), np.take(forest.hi[column], nodes)
            low = box_lo > np.take(self.lo[c], cells)
            high = box_hi < np.take(self.hi[c], cells)
            both = low & high  # (a band: its second key is its own high bound)
            cut = low | high
            bound = np.where(low, box_lo, box_hi)
            is_first, is_second = cut & (cuts == 0), (cut & (cuts == 1)) | (both & (cuts == 0))
            key = np.where(is_first, bound, key)
            first, high1 = np.where(is_first, c, first), np.where(is_first, ~low, high1)
            key2 = np.where(is_second, np.where(both, box_hi, bound), key2)
            second, high2 = np.where(is_second, c, second), np.where(is_second, high, high2)
            band |= both & (cuts == 0)
            cuts += cut.astype(np.int8) + both
        bad |= cuts > 2
        edge = np.where(cuts == 1, 1 + 2 * first + high1, 0)
        if k > 1:
            corner = (cuts == 2) & ~band
            pair = self.pair_index[first, second]  # (-1 off the corners: unused)
            edge = np.where(corner, 1 + 2 * k + 4 * pair + 2 * high1.astype(np.int64) + high2, edge)
        edge = np.where(band, self.block - k + first, edge)
        # residual: the one other column constrained (the cell's most common one)
        columns = forest.lo.shape[0]
        grid = set(self.grid.columns.tolist())
        residuals = np.zeros(n, dtype=np.int64)
        single = np.zeros(n, dtype=np.int64)
        constrained: dict[int, Mask] = {}
        for column in range(columns):
            box_lo, box_hi = np.take(forest.lo[column], nodes), np.take(forest.hi[column], nodes)
            constrained[column] = (box_lo > -np.inf) | (box_hi < np.inf)
            if column not in grid:
                residuals += constrained[column]
                single = np.where(constrained[column], column, single)
        one = residuals == 1
        votes = np.bincount(which[one] * columns + single[one], minlength=len(slots) * columns)
        votes = votes.reshape(len(slots), columns)
        res_column = np.where(votes.max(axis=1) > 0, np.argmax(votes, axis=1), -1)
        self.res_column[slots] = res_column
        kept = one & (single == np.take(res_column, which))
        res = np.zeros(n, dtype=np.float32)
        for column in np.unique(res_column[res_column >= 0]).tolist():
            at = np.flatnonzero(kept & (single == column))
            value = np.take(forest.lo[column], np.take(nodes, at))
            point = value == np.take(forest.hi[column], np.take(nodes, at))
            with np.errstate(over="ignore"):
                point &= value.astype(np.float32) == value  # (float32 holds it exactly)
            res[at[point]] = value[point]
            kept[at[~point]] = False
        bad |= (residuals > 0) & ~kept
        group = (np.take(covers, entries).astype(np.int64) * 2 + (residuals > 0)) * self.block
        group += edge
        group[bad] = self.mixed
        key[bad | (cuts == 0)] = 0.0
        key2[bad | (cuts < 2)] = 0.0
        res[bad] = 0.0
        self._columns(columns)
        self.mixed_columns[slots] = False
        if bad.any():
            for column, mask in constrained.items():
                self.mixed_columns[slots[np.unique(which[bad & mask])], column] = True
        return group, key, key2, res

    def drop_all(self) -> None:
        for slot in self.by_key.values():
            self.pool.release(slot)
        self.by_key.clear()

    # -- changes ------------------------------------------------------------

    def log(self, entry: int, *, added: bool, lo: np.ndarray, hi: np.ndarray) -> None:
        """Note an entry added or removed, with its box on the grid columns
        (read by each filled cell when next asked). O(1)."""
        self.log_entry.append(entry)
        self.log_add.append(added)
        self.log_box.append((*lo.tolist(), *hi.tolist()))

    def catch_up(self, slots: Ids, forest: Forest, covers: np.ndarray) -> None:
        """Bring the cells of `slots` (distinct) up to the end of the log: drop
        the entries removed since their position that met them, add the ones
        added (unsorted, to the mixed group), and re-sort a cell whose unsorted
        additions grew too many. O(log read × cells behind + members of the
        cells changed)."""
        end = self.log_base + len(self.log_entry)
        behind = slots[self.log_pos[slots] < end]
        if not len(behind):
            return
        first = int(self.log_pos[behind].min()) - self.log_base
        entry = np.array(self.log_entry[first:], dtype=np.int64)
        added = np.array(self.log_add[first:], dtype=bool)
        box = np.array(self.log_box[first:], dtype=float).reshape(len(entry), -1).T
        k = len(self.grid.columns)
        box_lo, box_hi = box[:k], box[k:]
        # an addition holds if it is its entry's last change in the log
        last = np.zeros(len(entry), dtype=bool)
        _, at = np.unique(entry[::-1], return_index=True)
        last[len(entry) - 1 - at] = True
        resort = []
        for slot in behind.tolist():
            since = int(self.log_pos[slot]) - self.log_base - first
            meets = (box_lo[:, since:] <= self.hi[:, slot, None]).all(axis=0)
            meets &= (box_hi[:, since:] >= self.lo[:, slot, None]).all(axis=0)
            events = since + np.flatnonzero(meets)
            self.log_pos[slot] = end
            if not len(events):
                continue
            gone = entry[events[~added[events]]]
            if len(gone):
                members = self.pool.members(slot)["entry"]
                self.pool.keep(slot, ~np.isin(members, gone))
            new = entry[events[added[events] & last[events]]]
            if len(new):
                self._append(slot, new, forest)
                if self.added[slot] > max(RESORT_MIN, self.pool.size(slot) // RESORT_SHARE):
                    resort.append(slot)
        if resort:
            self._resort(np.array(resort, dtype=np.int64), forest, covers)

    def _append(self, slot: int, entries: Ids, forest: Forest) -> None:
        nodes = np.take(forest.entries.owner, entries)
        constrained = (forest.lo[:, nodes] > -np.inf) | (forest.hi[:, nodes] < np.inf)
        self._columns(constrained.shape[0])
        self.mixed_columns[slot, : constrained.shape[0]] |= constrained.any(axis=1)
        zeros = np.zeros(len(entries))
        self.pool.append(slot, entry=entries, key=zeros, key2=zeros, res=zeros)
        self.added[slot] += len(entries)

    def _resort(self, slots: Ids, forest: Forest, covers: np.ndarray) -> None:
        parts = [self.pool.members(s)["entry"] for s in slots.tolist()]
        which = np.repeat(np.arange(len(slots)), [len(p) for p in parts])
        entries = np.concatenate(parts).astype(np.int64)
        self._sort_into(
            slots, which, entries, np.take(forest.entries.owner, entries), forest, covers
        )

    def trim_log(self) -> None:
        """Cut the log below the oldest position a filled cell still needs to
        read; once it is long, cells that far behind are dropped instead (they
        refill when hot again). O(cells + log)."""
        if not self.log_entry:
            return
        end = self.log_base + len(self.log_entry)
        slots = np.fromiter(self.by_key.values(), dtype=np.int64, count=len(self.by_key))
        oldest = int(self.log_pos[slots].min()) if len(slots) else end
        limit = max(LOG_MIN, self.pool.used // LOG_SHARE)
        if end - oldest > limit:
            cut = end - limit // 2
            for key in [k for k, s in self.by_key.items() if self.log_pos[s] < cut]:
                self.pool.release(self.by_key.pop(key))
            oldest = cut
        drop = oldest - self.log_base
        if drop > 0:
            del self.log_entry[:drop], self.log_add[:drop], self.log_box[:drop]
            self.log_base = oldest

    # -- queries ------------------------------------------------------------

    def inside(self, query_lo: Bounds, query_hi: Bounds, slots: Ids) -> Mask:
        """Whether each query box (columns × queries) lies inside the loose cell
        of its slot (-1: none) and is a point (or lacks the attribute) on the
        cell's residual column. O(queries × grid columns)."""
        ok = slots >= 0
        at = np.where(ok, slots, 0)
        glo, ghi = query_lo[self.grid.columns], query_hi[self.grid.columns]
        ok &= (glo >= self.lo[:, at]).all(axis=0) & (ghi <= self.hi[:, at]).all(axis=0)
        column = self.res_column[at]
        has = column >= 0
        if has.any():
            queries = np.flatnonzero(has)
            p_lo, p_hi = query_lo[column[has], queries], query_hi[column[has], queries]
            ok[has] &= (p_lo == p_hi) | (p_lo > p_hi)
        return ok

    def match(
        self,
        query_lo: Bounds,
        query_hi: Bounds,
        queries: Ids,
        slots: Ids,
        forest: Forest,
        covers: np.ndarray,
        exact: ExactTest,
    ) -> tuple[Ids, Ids]:
        """The entries that hold for query boxes lying inside their cells
        (`inside`; `queries` index the columns of `query_lo/hi`, `slots` are
        their cells, caught up): how many each query has, and all of them in
        query order. O(groups × queries × log(cell) + answers + corner members
        + mixed members × columns), in one compiled pass (`cell_answers`)."""
        pool = self.pool
        counts, entries, pending = cell_answers.answer(
            queries,
            slots,
            np.argsort(slots, kind="stable"),
            pool.start[slots],
            pool.ends,
            query_lo,
            query_hi,
            pool["entry"],
            pool["key"],
            pool["key2"],
            pool["res"],
            self.group_column,
            self.group_high,
            self.group_column2,
            self.group_high2,
            self.group_covers,
            self.group_tested,
            self.grid.columns,
            self.res_column,
            self.mixed_columns,
            forest.lo,
            forest.hi,
            forest.entries.owner,
            covers,
            forest.exact,
        )
        if not len(pending):
            return counts, entries
        # mixed members whose box is only a necessary condition: the conjunction decides
        which = np.searchsorted(np.cumsum(counts), pending, side="right")
        keep = np.ones(len(entries), dtype=bool)
        for at, i in zip(pending.tolist(), which.tolist(), strict=True):
            entry = int(entries[at])
            overlaps, covering = exact(int(queries[i]), int(forest.entries.owner[entry]))
            keep[at] = covering if covers[entry] else overlaps
        counts = counts - np.bincount(which[~keep[pending]], minlength=len(counts))
        return counts, np.compress(keep, entries)

    # -- checks -------------------------------------------------------------

    def check(self, forest: Forest, covers: np.ndarray) -> None:
        """Assert the invariants of every filled cell, caught up first: its
        members are the live entries whose box meets it, each once, in the
        group that box and relation say, sorted. O(cells × entries): for tests."""
        slots = np.array(sorted(self.by_key.values()), dtype=np.int64)
        self.catch_up(slots, forest, covers)
        live = np.flatnonzero(forest.entries.owner >= 0)
        nodes = forest.entries.owner[live]
        grid = self.grid.columns.tolist()
        for key, slot in self.by_key.items():
            assert self.key[slot] == key, f"cell {slot} has another key"
            lo, hi = self.grid.bounds(np.array([key]))
            assert (lo[:, 0] == self.lo[:, slot]).all() and (hi[:, 0] == self.hi[:, slot]).all()
            meets = np.ones(len(live), dtype=bool)
            for c, column in enumerate(grid):
                meets &= (forest.lo[column, nodes] <= hi[c, 0]) & (
                    forest.hi[column, nodes] >= lo[c, 0]
                )
            members = self.pool.members(slot)
            held = np.sort(members["entry"].astype(np.int64))
            assert len(np.unique(held)) == len(held), f"cell {slot} holds an entry twice"
            assert (held == np.sort(live[meets])).all(), f"cell {slot} holds other entries"
            ends = np.concatenate(([0], self.pool.ends[slot]))
            for g in range(self.mixed):
                part = slice(ends[g], ends[g + 1])
                for i, entry in enumerate(members["entry"][part].tolist()):
                    self._check_member(
                        slot,
                        g,
                        int(entry),
                        forest,
                        covers,
                        float(members["key"][part][i]),
                        float(members["key2"][part][i]),
                        float(members["res"][part][i]),
                    )
                order = np.lexsort((members["key"][part], members["res"][part]))
                assert (order == np.arange(len(order))).all(), f"group {g} of {slot} unsorted"

    def _check_member(
        self,
        slot: int,
        group: int,
        entry: int,
        forest: Forest,
        covers: np.ndarray,
        key: float,
        key2: float,
        res: float,
    ) -> None:
        """Assert that a sorted member belongs to its group, keys and residual
        value as its box and relation say."""
        node = int(forest.entries.owner[entry])
        assert not forest.exact[node], f"exact entry {entry} in a sorted group"
        assert bool(covers[entry]) == bool(self.group_covers[group]), f"{entry}: wrong relation"
        inside = []  # (grid column index, high?, bound) of the bounds inside the cell
        for c, column in enumerate(self.grid.columns.tolist()):
            if forest.lo[column, node] > self.lo[c, slot]:
                inside.append((c, False, forest.lo[column, node]))
            if forest.hi[column, node] < self.hi[c, slot]:
                inside.append((c, True, forest.hi[column, node]))
        expected = [
            (self.group_column[group], self.group_high[group]),
            (self.group_column2[group], self.group_high2[group]),
        ]
        expected = [(int(c), bool(h)) for c, h in expected if c >= 0]
        assert [(c, h) for c, h, _ in inside] == expected, f"{entry} in group {group}"
        if inside:
            assert key == inside[0][2], f"{entry}: wrong key"
        if len(inside) > 1:
            assert key2 == inside[1][2], f"{entry}: wrong second key"
        others = [
            column
            for column in range(forest.lo.shape[0])
            if column not in self.grid.columns.tolist()
            and (forest.lo[column, node] > -np.inf or forest.hi[column, node] < np.inf)
        ]
        if self.group_tested[group]:
            column = int(self.res_column[slot])
            assert others == [column], f"{entry}: residual columns {others}, cell's {column}"
            assert forest.lo[column, node] == forest.hi[column, node] == res, f"{entry}: res"
        else:
            assert not others, f"free entry {entry} constrains {others}"


def _grown_columns(array: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((array.shape[0], n), dtype=array.dtype)
    out[:, : array.shape[1]] = array
    return out
