"""Preloaded cells of the profile side: the held profiles, each in the grid
cell that holds its centre, with its box over the subscription columns.

A subscription's query (a new or changed subscription asking which held
profiles it holds with) reads the cells its box meets: where a cell lies
inside the box on the grid columns, every profile in it holds there without
a test; the others are tested on those columns; and each other column the
subscription constrains is tested on the cells' contiguous boxes. Profiles
that no cell holds (without a grid attribute, wider than the margins, far
off) are kept apart and tested in full by every query. So a query reads
what its box meets and not the whole set, and a profile added or removed
(a tracked object that moved) costs a swap in one cell.

Changes wait in a list until the next query, which applies them in one pass.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from matcher.boxes import PROFILE_FILL, Dims
from matcher.forest.arrays import Bounds, Ids, Mask
from matcher.forest.list_store import ELEMENT, grown, run_positions
from matcher.preload.cell_pool import CellPool
from matcher.preload.grid import Grid
from matcher.profiles import Profile

# (query index, profile slot) -> whether the query's filter holds (its exact test)
ExactTest = Callable[[int, int], bool]

OUTSIDE = 0  # the cell of the profiles no cell holds
TABLE_SPAN = 1024  # cells a column's table spans at most; profiles beyond go outside
MAX_PAIRS = 1 << 22  # (query, cell) pairs enumerated at once


class ProfileCells:
    """Every held profile of one space: in the cell of its centre (a cell id
    from `table`, by cell index), or `OUTSIDE`.

    Invariants, once `apply` has run: a held profile's slot is in exactly one
    cell's region, at `position[slot]` of `cell_of[slot]`, with its box over
    the first `columns` subscription columns (missing attributes [inf, -inf]);
    `cell_of` is -1 for a slot not held; `table` maps cell indices (less
    `table_base`) to cell ids (-1: none), and `cell_lo/hi` are each cell's loose
    bounds; `profiles[slot]` is the profile held in a slot (for exact tests).
    """

    def __init__(self, grid: Grid, columns: int) -> None:
        self.grid = grid
        self.columns = columns
        fields: dict[str, type] = {"slot": ELEMENT}
        for c in range(columns):
            fields[f"lo{c}"] = np.float64
            fields[f"hi{c}"] = np.float64
        self.pool = CellPool(1, fields)
        k = len(grid.columns)
        self.pool.take()  # OUTSIDE
        self.cell_lo = np.zeros((k, 16))
        self.cell_hi = np.zeros((k, 16))
        self.table = np.full((1,) * k, -1, dtype=np.int64)
        self.table_base = np.zeros(k, dtype=np.int64)
        self.cell_of = np.full(16, -1, dtype=np.int64)
        self.position = np.zeros(16, dtype=np.int64)
        self.profiles: list[Profile | None] = []
        self.pending: list[tuple[int, Profile | None]] = []

    @property
    def nbytes(self) -> int:
        """Memory held: the profiles' boxes and slots, the table, the per-slot rows."""
        return self.pool.nbytes + self.table.nbytes + 24 * len(self.cell_of)

    # -- changes ------------------------------------------------------------

    def add(self, slot: int, profile: Profile) -> None:
        """A profile held in `slot` (applied at the next query). O(1)."""
        self.pending.append((slot, profile))

    def remove(self, slot: int) -> None:
        """The profile in `slot` is gone (applied at the next query). O(1)."""
        self.pending.append((slot, None))

    def apply(self, dims: Dims) -> None:
        """Apply the waiting changes: each slot's old profile leaves its cell,
        its last one (if held) enters the cell of its centre. O(changes ×
        columns), one box matrix for all the additions."""
        if not self.pending:
            return
        last: dict[int, Profile | None] = {}
        for slot, profile in self.pending:
            last[slot] = profile
        self.pending = []
        for slot in last:
            if slot < len(self.cell_of) and self.cell_of[slot] >= 0:
                self._remove(slot)
        added = [(slot, p) for slot, p in last.items() if p is not None]
        if added:
            self._add(dims, [s for s, _ in added], [p for _, p in added])

    def _remove(self, slot: int) -> None:
        cell, index = int(self.cell_of[slot]), int(self.position[slot])
        self.pool.swap_remove(cell, index)
        if index < self.pool.size(cell):
            moved = int(self.pool["slot"][self.pool.start[cell] + index])
            self.position[moved] = index
        self.cell_of[slot] = -1
        self.profiles[slot] = None

    def _add(self, dims: Dims, slots: list[int], profiles: list[Profile]) -> None:
        top = max(slots) + 1
        if top > len(self.cell_of):
            self.cell_of = grown(self.cell_of, top, -1)
            self.position = grown(self.position, top, 0)
        self.profiles.extend([None] * (top - len(self.profiles)))
        for slot, profile in zip(slots, profiles, strict=True):
            self.profiles[slot] = profile
        lo, hi = dims.profile_matrix(profiles)
        lo, hi = lo[: self.columns], hi[: self.columns]
        keys, fits = self.grid.keys(lo, hi)
        cells = np.full(len(slots), OUTSIDE, dtype=np.int64)
        for at in np.flatnonzero(fits).tolist():  # (a dict lookup per new profile)
            cells[at] = self._cell(int(keys[at]))
        if fits.any():  # (a cell's loose bounds are what decide, not the margins)
            bounds_lo, bounds_hi = self.cell_lo[:, cells], self.cell_hi[:, cells]
            grid_lo, grid_hi = lo[self.grid.columns], hi[self.grid.columns]
            inside = (grid_lo >= bounds_lo).all(axis=0) & (grid_hi <= bounds_hi).all(axis=0)
            cells[~inside] = OUTSIDE
        order = np.argsort(cells, kind="stable")
        slot_array = np.asarray(slots, dtype=np.int64)
        cut = np.flatnonzero(np.diff(cells[order])) + 1
        for part in np.split(order, cut):
            cell = int(cells[part[0]])
            n = self.pool.size(cell)
            values = {"slot": slot_array[part]}
            for c in range(self.columns):
                values[f"lo{c}"], values[f"hi{c}"] = lo[c, part], hi[c, part]
            self.pool.append(cell, **values)
            self.cell_of[slot_array[part]] = cell
            self.position[slot_array[part]] = n + np.arange(len(part))

    def _cell(self, key: int) -> int:
        """The id of the cell of `key`, made (with its table entry) if new, or
        OUTSIDE if its index lies too far from the others. O(1) amortized."""
        index = self._indices(np.array([key]))[:, 0]
        at = index - self.table_base
        if (at < 0).any() or (at >= np.array(self.table.shape)).any():
            if not self._widen(index):
                return OUTSIDE
            at = index - self.table_base
        cell = int(self.table[tuple(at)])
        if cell >= 0:
            return cell
        cell = self.pool.take()
        if cell >= self.cell_lo.shape[1]:
            n = 2 * self.cell_lo.shape[1]
            self.cell_lo = np.concatenate([self.cell_lo, np.zeros_like(self.cell_lo)], axis=1)[
                :, :n
            ]
            self.cell_hi = np.concatenate([self.cell_hi, np.zeros_like(self.cell_hi)], axis=1)[
                :, :n
            ]
        lo, hi = self.grid.bounds(np.array([key]))
        self.cell_lo[:, cell], self.cell_hi[:, cell] = lo[:, 0], hi[:, 0]
        self.table[tuple(at)] = cell
        return cell

    def _indices(self, keys: Ids) -> Ids:
        from matcher.preload.grid import INDEX_LIMIT, KEY_BITS

        shifts = KEY_BITS * np.arange(len(self.grid.columns), dtype=np.int64)
        return ((keys[None, :] >> shifts[:, None]) & ((1 << KEY_BITS) - 1)) - INDEX_LIMIT

    def _widen(self, index: Ids) -> bool:
        """Grow the table to hold cell `index`, unless a column would then span
        more than TABLE_SPAN cells. O(table)."""
        empty = (self.table < 0).all()
        base = index.copy() if empty else np.minimum(self.table_base, index)
        end = index + 1 if empty else np.maximum(self.table_base + self.table.shape, index + 1)
        if ((end - base) > TABLE_SPAN).any():
            return False
        table = np.full(tuple((end - base).tolist()), -1, dtype=np.int64)
        if not empty:
            at = tuple(
                slice(int(a), int(a) + n)
                for a, n in zip(self.table_base - base, self.table.shape, strict=True)
            )
            table[at] = self.table
        self.table, self.table_base = table, base
        return True

    # -- queries ------------------------------------------------------------

    def match(
        self,
        filter_lo: Bounds,
        filter_hi: Bounds,
        covers: Mask,
        exact: Mask,
        exact_test: ExactTest,
    ) -> tuple[Ids, Ids]:
        """The held profiles each filter box holds with (`filter_lo/hi`: (columns ×
        filters) over the subscription columns, [-inf, inf] where unconstrained;
        `covers` per filter its relation, `exact` whether its box is only a
        necessary condition): how many each has, and their slots in filter
        order. O(cells its box meets + profiles in them × columns it constrains)."""
        n = filter_lo.shape[1]
        queries, cells, inside = self._pairs(filter_lo, filter_hi)
        sizes = self.pool.ends[cells, -1]
        some = sizes > 0
        queries, cells, inside, sizes = queries[some], cells[some], inside[some], sizes[some]
        positions = run_positions(self.pool.start[cells], sizes)
        offset = np.cumsum(sizes) - sizes
        keep = np.ones(len(positions), dtype=bool)
        constrains = (filter_lo > -np.inf) | (filter_hi < np.inf)
        grid = set(self.grid.columns.tolist())
        any_covers = bool(covers.any())
        for column in np.flatnonzero(constrains.any(axis=1)).tolist():
            need = constrains[column, queries]
            if column in grid:
                need &= ~inside
            if not need.any():
                continue
            at = run_positions(offset[need], sizes[need])
            members = positions[at]
            p_lo = self.pool[f"lo{column}"][members]
            p_hi = self.pool[f"hi{column}"][members]
            f_lo = np.repeat(filter_lo[column, queries[need]], sizes[need])
            f_hi = np.repeat(filter_hi[column, queries[need]], sizes[need])
            ok = (p_lo <= f_hi) & (f_lo <= p_hi)
            if any_covers:
                covering = np.repeat(covers[queries[need]], sizes[need])
                ok &= ~covering | ((f_lo <= p_lo) & (p_hi <= f_hi))
            keep[at] &= ok
        slots = self.pool["slot"][positions]
        if exact.any():
            member_queries = np.repeat(queries, sizes)
            for i in np.flatnonzero(keep & exact[member_queries]).tolist():
                keep[i] = exact_test(int(member_queries[i]), int(slots[i]))
        kept = np.zeros(len(sizes), dtype=np.int64)
        if len(sizes):
            kept = np.add.reduceat(keep, offset, dtype=np.int64)
        return np.bincount(queries, kept, minlength=n).astype(np.int64), slots[keep]

    def _pairs(self, filter_lo: Bounds, filter_hi: Bounds) -> tuple[Ids, Ids, Mask]:
        """(filter, cell) pairs, filter-major, of the cells whose loose bounds meet
        each filter's box on the grid columns (and whether they lie inside it),
        the outside cell with every filter. The table's cells in each box's range
        are enumerated at most MAX_PAIRS at a time."""
        n = filter_lo.shape[1]
        parts, at = [], 0
        while at < n:
            step = max(1, min(n - at, MAX_PAIRS // max(1, self.table.size)))
            queries, cells, inside = self._chunk_pairs(
                filter_lo[:, at : at + step], filter_hi[:, at : at + step]
            )
            parts.append((queries + at, cells, inside))
            at += step
        if len(parts) == 1:
            return parts[0]
        return tuple(np.concatenate(arrays) for arrays in zip(*parts, strict=True))

    def _chunk_pairs(self, filter_lo: Bounds, filter_hi: Bounds) -> tuple[Ids, Ids, Mask]:
        n, k = filter_lo.shape[1], len(self.grid.columns)
        grid_lo, grid_hi = filter_lo[self.grid.columns], filter_hi[self.grid.columns]
        shape = np.array(self.table.shape)
        origin, width, margin = (
            a[:, None] for a in (self.grid.origin, self.grid.width, self.grid.margin)
        )
        with np.errstate(invalid="ignore", over="ignore"):
            first = np.floor((grid_lo - origin - margin) / width) - 1 - self.table_base[:, None]
            last = np.floor((grid_hi - origin + margin) / width) + 1 - self.table_base[:, None]
        first = np.clip(np.nan_to_num(first, nan=0.0), 0, shape[:, None] - 1).astype(np.int64)
        last = np.clip(np.nan_to_num(last, nan=0.0), -1, shape[:, None] - 1).astype(np.int64)
        count = np.maximum(last - first + 1, 0)
        total = count.prod(axis=0)
        queries = np.repeat(np.arange(n), total)
        flat = np.arange(int(total.sum())) - np.repeat(np.cumsum(total) - total, total)
        index = []
        for c in range(k - 1, -1, -1):  # (the last column varies fastest)
            span = np.repeat(count[c], total)
            index.append(np.repeat(first[c], total) + flat % np.maximum(span, 1))
            flat = flat // np.maximum(span, 1)
        index.reverse()
        cells = self.table[tuple(index)] if k else np.zeros(0, dtype=np.int64)
        found = cells > 0
        queries, cells = queries[found], cells[found]
        lo, hi = self.cell_lo[:, cells], self.cell_hi[:, cells]
        f_lo, f_hi = grid_lo[:, queries], grid_hi[:, queries]
        meets = ((lo <= f_hi) & (hi >= f_lo)).all(axis=0)
        inside = ((f_lo <= lo) & (hi <= f_hi)).all(axis=0)
        queries, cells, inside = queries[meets], cells[meets], inside[meets]
        if self.pool.size(OUTSIDE):
            queries = np.concatenate([queries, np.arange(n)])
            cells = np.concatenate([cells, np.full(n, OUTSIDE)])
            inside = np.concatenate([inside, np.zeros(n, dtype=bool)])
            order = np.argsort(queries, kind="stable")
            queries, cells, inside = queries[order], cells[order], inside[order]
        return queries, cells, inside

    # -- checks -------------------------------------------------------------

    def check(self, dims: Dims, held: dict[int, Profile]) -> None:
        """Assert the invariants against the held profiles by slot (changes
        applied first). O(profiles × columns): for tests."""
        self.apply(dims)
        slots = np.flatnonzero(self.cell_of >= 0)
        assert set(slots.tolist()) == set(held), "the cells hold other profiles"
        for slot in slots.tolist():
            cell, index = int(self.cell_of[slot]), int(self.position[slot])
            at = int(self.pool.start[cell]) + index
            assert index < self.pool.size(cell) and self.pool["slot"][at] == slot
            # (equal, not the same object: equal profiles share one forest node,
            # whose key is the first of them)
            assert self.profiles[slot] == held[slot]
            box = dims.profile_box(held[slot], grow=False)
            for c in range(self.columns):
                lo, hi = box.get(c, PROFILE_FILL)
                assert (self.pool[f"lo{c}"][at], self.pool[f"hi{c}"][at]) == (lo, hi)
            if cell != OUTSIDE:
                columns = self.grid.columns
                inside = all(
                    self.cell_lo[i, cell] <= box[col][0] and box[col][1] <= self.cell_hi[i, cell]
                    for i, col in enumerate(columns.tolist())
                )
                assert inside, f"profile {slot} lies outside its cell"
        sizes = sum(self.pool.size(c) for c in range(self.pool.slots))
        assert sizes == len(slots), "a cell holds a profile twice or a gone one"
