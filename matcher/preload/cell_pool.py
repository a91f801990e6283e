"""The members of every filled cell in one set of arrays, cut into groups.

A cell's members lie in one region of the pool, group after group; the last
group (the mixed one) may grow in place into the region's spare room. So a
batch reads the members of many cells with one gather, and a cell is
rewritten without touching the others. A member is a row of named fields (one
array each: an entry id, its sort keys, ...). A region that outgrows its room
moves to the end at double size, and the pool is compacted when more than
half of it is abandoned regions, as `matcher.forest.list_store.ListStore`
does for its lists.
"""

from __future__ import annotations

import numpy as np

from matcher.forest.arrays import Ids
from matcher.forest.list_store import grown, run_positions

SLACK = 8  # a region's spare room: at least this, and an eighth of its members
MIN_POOL = 1024


class CellPool:
    """Regions of members, one per cell slot, each cut into `groups` groups.

    Invariant: the members of cell `c` are rows `start[c] : start[c] +
    ends[c, -1]` of every field, group `g` being `[ends[c, g-1], ends[c, g])`
    of them (from 0 for g = 0), in `capacity[c]` rows of room; a free slot has
    no room. `used` rows of the pool are given to regions, `wasted` of them to
    regions since moved or released."""

    def __init__(self, groups: int, fields: dict[str, type]) -> None:
        self.groups = groups
        self.fields = {name: np.zeros(MIN_POOL, dtype=dtype) for name, dtype in fields.items()}
        self.row_bytes = sum(array.itemsize for array in self.fields.values())
        self.used = 0
        self.wasted = 0
        self.start = np.zeros(16, dtype=np.int64)
        self.capacity = np.zeros(16, dtype=np.int64)
        self.ends = np.zeros((16, groups), dtype=np.int64)
        self.free: list[int] = []
        self.slots = 0  # slots ever handed out (free ones among them)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.fields[name]

    @property
    def nbytes(self) -> int:
        """Bytes of the regions in use (the live cells' members and room)."""
        return (self.used - self.wasted) * self.row_bytes

    def size(self, cell: int) -> int:
        return int(self.ends[cell, -1])

    def take(self) -> int:
        """A new empty cell slot. O(1) amortized."""
        if self.free:
            return self.free.pop()
        cell = self.slots
        self.slots += 1
        if cell >= len(self.start):
            n = 2 * len(self.start)
            self.start = grown(self.start, n, 0)
            self.capacity = grown(self.capacity, n, 0)
            ends = np.zeros((n, self.groups), dtype=np.int64)
            ends[: len(self.ends)] = self.ends
            self.ends = ends
        return cell

    def release(self, cell: int) -> None:
        """Give a cell's room and slot back. O(1)."""
        self.wasted += int(self.capacity[cell])
        self.capacity[cell] = 0
        self.ends[cell] = 0
        self.free.append(cell)
        self._maybe_compact()

    def write(self, cells: Ids, counts: np.ndarray, **values: np.ndarray) -> None:
        """Give `cells` new regions holding their members: `counts` is (cells ×
        groups), every field's `values` the members of all of them concatenated
        in (cell, group) order. Their old regions are abandoned. O(members)."""
        sizes = counts.sum(axis=1)
        room = sizes + np.maximum(SLACK, sizes >> 3)
        self.wasted += int(self.capacity[cells].sum())
        starts = self._allocate(int(room.sum())) + np.cumsum(room) - room
        self.start[cells], self.capacity[cells] = starts, room
        self.ends[cells] = np.cumsum(counts, axis=1)
        at = run_positions(starts, sizes)
        for name, array in self.fields.items():
            array[at] = values[name]
        self._maybe_compact()

    def append(self, cell: int, **values: np.ndarray) -> None:
        """Add members to the cell's last group. O(added), or O(members) when
        the region moves."""
        n, add = self.size(cell), len(next(iter(values.values())))
        if n + add > self.capacity[cell]:
            room = 2 * (n + add) + SLACK
            start = self._allocate(room)
            old = int(self.start[cell])
            for array in self.fields.values():
                array[start : start + n] = array[old : old + n]
            self.wasted += int(self.capacity[cell])
            self.start[cell], self.capacity[cell] = start, room
        at = int(self.start[cell]) + n
        for name, array in self.fields.items():
            array[at : at + add] = values[name]
        self.ends[cell, -1] += add
        self._maybe_compact()

    def keep(self, cell: int, mask: np.ndarray) -> None:
        """Keep only the members where `mask` (one per member, in order) holds,
        in their order. O(members)."""
        start, n = int(self.start[cell]), self.size(cell)
        for array in self.fields.values():
            kept = array[start : start + n][mask]
            array[start : start + len(kept)] = kept
        self.ends[cell] = np.concatenate(([0], np.cumsum(mask)))[self.ends[cell]]

    def swap_remove(self, cell: int, index: int) -> None:
        """Remove the cell's member at `index` (of a one-group pool), its last
        member taking its place. O(fields)."""
        start, last = int(self.start[cell]), self.size(cell) - 1
        if index != last:
            for array in self.fields.values():
                array[start + index] = array[start + last]
        self.ends[cell, -1] = last

    def members(self, cell: int) -> dict[str, np.ndarray]:
        """Views of a cell's members, field by field. O(1)."""
        start, n = int(self.start[cell]), self.size(cell)
        return {name: array[start : start + n] for name, array in self.fields.items()}

    def _allocate(self, n: int) -> int:
        at = self.used
        self.used += n
        size = len(next(iter(self.fields.values())))
        if self.used > size:
            size = max(self.used, 2 * size)
            for name, array in self.fields.items():
                self.fields[name] = grown(array, size, 0)
        return at

    def _maybe_compact(self) -> None:
        """Move every live region to the front when over half the pool is abandoned."""
        if self.wasted <= max(MIN_POOL, self.used // 2):
            return
        live = np.flatnonzero(self.capacity[: self.slots] > 0)
        room = self.capacity[live]
        old = run_positions(self.start[live], room)
        for name, array in self.fields.items():
            self.fields[name] = grown(array[old], MIN_POOL, 0)
        self.start[live] = np.cumsum(room) - room
        self.used, self.wasted = int(room.sum()), 0
