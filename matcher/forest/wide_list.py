"""The bounds of one wide child list, contiguous, and the sorted blocks that
index a long one.

A child list of WIDE children or more (the root set above all) keeps a copy
of its children's bounds as (columns × children) arrays in the list's own
order, so that scanning it is a brute-force scan over contiguous rows.

A list of BLOCKED children or more is also cut into blocks of `block_size`
children in Sort-Tile-Recursive order (the packed R-tree's bulk load), each
with its bounding box (the min of its lows, the max of its highs), so that a
query skips the blocks it misses. Children appended since the last sort form
an unsorted tail that every query scans; once it outgrows an eighth of the
list, the list is sorted again. A removal moves the last child into the
hole, and that block's box is widened to hold it before the boxes are read
next (a batch of removals pays one vector pass, not four numpy calls each):
boxes stay conservative, and once there have been more such widenings than
blocks, the list is sorted again (the boxes have loosened).

Inserts test a new box against the list (which children contain it, which
lie inside it) through the blocks too, so a list of SETTLED children or more
keeps its tail short: every RUN blocks of it are sorted into a run of blocks
of their own, merged with the runs before while those are not RATIO times
longer (a log-structured merge: a child is sorted again only a few times).
For the "inside" test each block also keeps its inner box (the max of its
lows, the min of its highs). A query's boxes in the blocks it meets are
found through the blocks' bit rows (`BlockBits`), made with the blocks and
set for each child a removal moves in, with the block boxes' widening.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from matcher.forest import tuning
from matcher.forest.arrays import Bounds, Ids
from matcher.forest.block_bits import BlockBits
from matcher.forest.box_kernels import nested_with
from matcher.forest.point_columns import PointColumns, is_point, spans

MAX_FINITE = 1e300  # bounds beyond this are the open ends of a box

Reorder = Callable[[Ids], None]  # permutes the child list to match a new order
ReorderFrom = Callable[[Ids, int], None]  # ... from a position on


class WideList:
    """One wide child list's bounds, in the list's order, and its block index.

    Invariants: `lo[:, :count]`, `hi[:, :count]` are the children's bounds in
    the list's order; the first `block_count` blocks of `block_size` children
    are indexed, and once the widenings `moved` asks for are applied (before
    any read of them), each block's box holds every child in it and its inner
    box lies inside every child's (both may be looser than exact, never
    tighter), and so are `bits`, the blocks' bit rows (None until the
    blocks are next read, if the list has blocks); `runs` are the first
    blocks of the sorted runs, ascending; `non_points` counts the boxes that
    are not points; `point_columns` is None since a change, else the list's
    `PointColumns` or False (not all points).
    """

    __slots__ = (
        "lo",
        "hi",
        "count",
        "block_lo",
        "block_hi",
        "inner_lo",
        "inner_hi",
        "runs",
        "block_count",
        "block_size",
        "sort_tried_at",
        "widenings",
        "point_columns",
        "non_points",
        "moved",
        "bits",
    )

    def __init__(self, lo: Bounds, hi: Bounds) -> None:
        """A list's bounds, unindexed. O(columns × children)."""
        self.count = lo.shape[1]
        capacity = max(2 * self.count, 64)
        self.lo = np.empty((lo.shape[0], capacity))
        self.hi = np.empty((lo.shape[0], capacity))
        self.lo[:, : self.count], self.hi[:, : self.count] = lo, hi
        self.block_count = self.widenings = 0
        self.sort_tried_at = 0  # the list's length when a sort last ran (or found no column)
        self.block_size = tuning.BLOCK
        self.block_lo = self.block_hi = np.empty((lo.shape[0], 0))
        self.inner_lo = self.inner_hi = np.empty((lo.shape[0], 0))
        self.runs: list[int] = []  # the first block of each sorted run
        self.point_columns: PointColumns | bool | None = None
        self.non_points = int(np.count_nonzero(~is_point(lo, hi)))
        self.moved: list[int] = []  # positions in blocks a removal moved a child into
        self.bits: BlockBits | None = None

    def sorted_points(self) -> PointColumns | None:
        """The list's sorted columns if every box is a point (or lacks the
        column), else None. O(1) once built for this version of the list;
        building it, O(columns × n log n)."""
        if self.point_columns is None:
            self.point_columns = (
                False if self.non_points else PointColumns(self.lo[:, : self.count])
            )
        return self.point_columns or None

    def append(self, lo: Bounds, hi: Bounds) -> None:
        """A child added at the end (of the unsorted tail). Amortized O(columns)."""
        self.point_columns = None
        if self.count == self.lo.shape[1]:
            self.lo = np.hstack([self.lo, np.empty_like(self.lo)])
            self.hi = np.hstack([self.hi, np.empty_like(self.hi)])
        self.lo[:, self.count], self.hi[:, self.count] = lo, hi
        self.non_points += spans(lo, hi)
        self.count += 1

    def swap_remove(self, index: int) -> None:
        """The child at `index` removed, the last child taking its place (as the
        child list's own removal does). O(columns); a block the last child
        moves into is widened to hold it before the boxes are read next."""
        self.point_columns = None
        self.count -= 1
        self.sort_tried_at = min(self.sort_tried_at, self.count)
        lo, hi = self.lo, self.hi
        self.non_points -= spans(lo[:, index], hi[:, index])
        lo[:, index], hi[:, index] = lo[:, self.count], hi[:, self.count]
        if self.block_count * self.block_size > self.count:
            self.block_count = self.count // self.block_size  # the last block became tail
            while self.runs and self.runs[-1] >= self.block_count:
                self.runs.pop()
        if index // self.block_size < self.block_count:
            self.widenings += 1
            self.moved.append(index)

    def _widen_moved(self, upto: int | None = None) -> None:
        """Widen the boxes of the blocks (below `upto`) that removals moved
        children into, to hold those children. O(columns × removals)."""
        if not self.moved:
            return
        positions = np.array(self.moved, dtype=np.int64)
        self.moved = []
        blocks = self.block_count if upto is None else min(upto, self.block_count)
        positions = positions[positions < blocks * self.block_size]
        if not len(positions):
            return
        at = (slice(None), positions // self.block_size)
        lo, hi = self.lo[:, positions], self.hi[:, positions]  # (the children there now)
        np.minimum.at(self.block_lo, at, lo)
        np.maximum.at(self.block_hi, at, hi)
        np.maximum.at(self.inner_lo, at, lo)
        np.minimum.at(self.inner_hi, at, hi)
        if self.bits is not None:
            self.bits.widen(positions, lo, hi)

    def best_refill(self, index: int) -> int | None:
        """If `index` lies in a block of a list the inserts keep in blocks: the
        position of a child at the end of the unsorted tail whose box widens
        that block's box least, to fill the hole a removal leaves (None if the
        tail is empty). O(columns × block_size)."""
        block, cut, n = index // self.block_size, self.block_count * self.block_size, self.count
        if n < tuning.SETTLED or block >= self.block_count or cut >= n - 1:
            return None
        # (the block's box as stored, even if not yet widened for a child a removal
        # moved in: the choice only keeps the block tight, and the box is widened
        # before a read)
        cut = max(cut, n - self.block_size)  # (the last few suffice: a removal stays cheap)
        lo, hi = self.lo[:, cut:n], self.hi[:, cut:n]
        box_lo, box_hi = self.block_lo[:, block, None], self.block_hi[:, block, None]
        # (computed only where the box sticks out: no inf - inf)
        out = np.subtract(box_lo, lo, out=np.zeros(lo.shape), where=lo < box_lo)
        out += np.subtract(hi, box_hi, out=np.zeros(hi.shape), where=hi > box_hi)
        return cut + int(out.sum(axis=0).argmin())

    def swap(self, i: int, j: int) -> None:
        """Exchange two children of the unsorted tail. O(columns)."""
        self.point_columns = None
        self.lo[:, [i, j]], self.hi[:, [i, j]] = self.lo[:, [j, i]], self.hi[:, [j, i]]

    def sort_tail_into_runs(self, reorder: ReorderFrom) -> None:
        """After an append to a list the inserts keep in blocks: sort the tail
        into a run once it is RUN blocks long, merged with the runs before it
        while they are not RATIO times longer. Amortized O(columns × log n) a
        child: each is sorted again only a few times."""
        size = self.block_size
        tail = self.count - self.block_count * size
        if (
            self.count < tuning.SETTLED
            or tail < tuning.RUN * size
            or self.count - self.sort_tried_at < tuning.RUN * size
        ):
            return
        first = self.block_count
        while self.runs and (first - self.runs[-1]) * size < tuning.RATIO * (
            self.count - first * size
        ):
            first = self.runs.pop()
        self._sort_from(first, reorder)
        self.sort_tried_at = self.count  # (no sortable column: not tried again until it grows)

    def indexed_blocks(self, reorder: Reorder) -> int:
        """How many leading blocks are indexed, sorting the list again first
        (through `reorder`, which permutes the child list to match) when the
        unsorted tail has grown too long or removals have loosened the boxes.
        O(1), or O(columns × n log n) when it sorts."""
        if self.count < tuning.BLOCKED:
            self.block_count = 0
            return 0
        grown = max(self.block_size, self.count // 8)
        tail = self.count - self.block_count * self.block_size
        if (
            tail > grown and self.count - self.sort_tried_at > grown
        ) or self.widenings > self.block_count:
            self._sort(reorder)
            self.sort_tried_at = self.count  # (no sortable column: not tried again until it grows)
        self._widen_moved()
        if self.block_count and self.bits is None:
            self._make_bits(0)
        return self.block_count

    def nested_with(self, box_lo: Bounds, box_hi: Bounds, *, inside: bool) -> Ids:
        """The positions of the children whose boxes contain the box [box_lo,
        box_hi] (or with `inside` lie inside it): through the blocks in a list
        the inserts keep in blocks, else by a scan. O(columns × (blocks +
        candidates + tail)), or O(columns × n) by the scan."""
        lo, hi = self.lo[:, : self.count], self.hi[:, : self.count]
        if self.count < tuning.SETTLED or not self.block_count:
            return nested_with(lo, hi, box_lo, box_hi, inside=inside)
        cut = self.block_count * self.block_size
        tail = nested_with(lo[:, cut:], hi[:, cut:], box_lo, box_hi, inside=inside) + cut
        positions = self._candidates(box_lo, box_hi, inside=inside)
        if len(positions) * tuning.SCAN_SHARE > cut:  # the blocks hardly prune: scan them whole
            positions = None
            lo, hi = lo[:, :cut], hi[:, :cut]
        found = nested_with(lo, hi, box_lo, box_hi, inside=inside, positions=positions)
        return np.concatenate([found, tail])

    def _candidates(self, box_lo: Bounds, box_hi: Bounds, *, inside: bool) -> Ids:
        """Positions of the children that may contain the box (or lie inside
        it) among the blocks': those of the blocks whose boxes allow it."""
        self._widen_moved()
        blocks, size = self.block_count, self.block_size
        if inside:
            ok = (self.inner_lo[:, :blocks] >= box_lo[:, None]).all(axis=0)
            ok &= (self.inner_hi[:, :blocks] <= box_hi[:, None]).all(axis=0)
        else:
            ok = (self.block_lo[:, :blocks] <= box_lo[:, None]).all(axis=0)
            ok &= (self.block_hi[:, :blocks] >= box_hi[:, None]).all(axis=0)
        return (np.flatnonzero(ok)[:, None] * size + np.arange(size)).ravel()

    def _sort(self, reorder: Reorder) -> None:
        self.widenings = 0
        self._sort_from(0, lambda order, at: reorder(order))

    def _sort_from(self, first: int, reorder: ReorderFrom) -> None:
        """Sort the children from block `first` on into blocks (the rest of a
        block stays tail), through `reorder(order, at)`, which permutes the
        child list from position `at` to match."""
        self._widen_moved(first)  # (the blocks before `first` stay; the rest are made anew)
        n, size, at = self.count, self.block_size, first * self.block_size
        lo, hi = self.lo[:, at:n], self.hi[:, at:n]
        order = tiled_order(lo, hi, size)
        self.runs = [r for r in self.runs if r < first]
        if order is None:
            self.block_count = first
            return
        reorder(order, at)
        self.point_columns = None
        self.lo[:, at:n], self.hi[:, at:n] = lo[:, order], hi[:, order]
        self.block_count = n // size
        if self.block_count > first:
            self.runs.append(first)
        cut = self.block_count * size
        shape = (lo.shape[0], self.block_count - first, size)
        new_lo, new_hi = self.lo[:, at:cut].reshape(shape), self.hi[:, at:cut].reshape(shape)
        self.block_lo = np.hstack([self.block_lo[:, :first], new_lo.min(axis=2)])
        self.block_hi = np.hstack([self.block_hi[:, :first], new_hi.max(axis=2)])
        self.inner_lo = np.hstack([self.inner_lo[:, :first], new_lo.max(axis=2)])
        self.inner_hi = np.hstack([self.inner_hi[:, :first], new_hi.min(axis=2)])
        self._make_bits(0 if self.bits is None or not first else first)

    def _make_bits(self, first: int) -> None:
        """The bit rows of the blocks from `first` on made anew (from 0: the
        edges too, from the whole list). O(columns × ROWS × those children)."""
        size, cut = self.block_size, self.block_count * self.block_size
        if not first:
            self.bits = BlockBits(self.lo[:, : self.count], self.hi[:, : self.count], size)
        at = first * size
        self.bits.rebuild_from(first, self.lo[:, at:cut], self.hi[:, at:cut])

    def check(self, name: str) -> None:
        """Assert the invariants (the block boxes' once widened), naming the
        list `name` if one fails. O(columns × n): for tests."""
        lo, hi = self.lo[:, : self.count], self.hi[:, : self.count]
        assert self.non_points == np.count_nonzero(~is_point(lo, hi)), f"{name}: non-points"
        self._widen_moved()
        blocks, size = self.block_count, self.block_size
        shape = (lo.shape[0], blocks, size)
        lo, hi = lo[:, : blocks * size].reshape(shape), hi[:, : blocks * size].reshape(shape)
        assert (self.block_lo[:, :blocks] <= lo.min(axis=2)).all(), f"{name}: block box"
        assert (self.block_hi[:, :blocks] >= hi.max(axis=2)).all(), f"{name}: block box"
        assert (self.inner_lo[:, :blocks] >= lo.max(axis=2)).all(), f"{name}: inner box"
        assert (self.inner_hi[:, :blocks] <= hi.min(axis=2)).all(), f"{name}: inner box"
        if self.bits is not None:
            cut = blocks * size
            self.bits.check(self.lo[:, :cut], self.hi[:, :cut], blocks, name)


def tiled_order(lo: Bounds, hi: Bounds, size: int) -> Ids | None:
    """Sort-Tile-Recursive order (the packed R-tree's bulk load): sorted on the
    centres of the first column, cut into slabs, each slab sorted on the next
    column and cut again, so that consecutive runs of `size` boxes are tight on
    every column that is finite on nearly every box. None if none is.
    O(columns × n log n)."""
    centres = []
    for col in range(lo.shape[0]):
        col_lo, col_hi = lo[col], hi[col]
        finite = (np.abs(col_lo) < MAX_FINITE) & (np.abs(col_hi) < MAX_FINITE)
        centre = np.where(finite, col_lo, 0.0) + np.where(finite, col_hi, 0.0)  # (no inf - inf)
        if finite.mean() >= tuning.FINITE_SHARE and np.ptp(centre) > 0:
            centres.append(centre)
    if not centres:
        return None
    groups = [np.arange(lo.shape[1])]
    for level, centre in enumerate(centres):
        left = len(centres) - level
        cut_groups = []
        for group in groups:
            group = group[np.argsort(centre[group], kind="stable")]
            blocks = -(-len(group) // size)
            slabs = max(1, round(blocks ** (1 / left)))
            step = -(-blocks // slabs) * size
            cut_groups += [group[i : i + step] for i in range(0, len(group), step)]
        groups = cut_groups
    return np.concatenate(groups)
