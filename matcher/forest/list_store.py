"""Many small growable lists of ints in one array, gathered in one vector op.

The forests keep every node's children and every node's entries here, so
that expanding a whole frontier of (query, node) pairs into (query, child)
pairs is a handful of numpy calls instead of a Python loop per node. Each
list owns a region of the array with spare capacity; a full region moves to
the end of the array at double size (amortized O(1), like a dynamic array),
and the array is compacted when more than half of it is abandoned space.
Every element lives in exactly one list, so removal is a swap with the last
element of its region.

Elements are 32-bit (node and entry ids stay far below 2**31): a batch's
matches are expanded into arrays of millions of them, and their width is
what those passes cost.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

ELEMENT = np.int32
SLICE_RUN = 32  # mean elements per list above which a gather copies whole regions

Ids = npt.NDArray[np.integer]


def run_positions(
    starts: npt.NDArray[np.integer], lengths: npt.NDArray[np.integer], dtype: type = np.int64
) -> npt.NDArray[np.integer]:
    """The positions of runs (start, length), concatenated: one repeat and one
    arange, not a slice per run. O(total length)."""
    ends = np.cumsum(lengths)
    out = np.repeat((starts - (ends - lengths)).astype(dtype, copy=False), lengths)
    out += np.arange(int(ends[-1]) if len(ends) else 0, dtype=dtype)
    return out


def grown(array: np.ndarray, size: int, fill: Any) -> np.ndarray:
    """`array` if it holds `size` items, else a copy with room for at least
    `size` (twice its length, 16 at least), the new cells `fill`."""
    if size <= len(array):
        return array
    out = np.full(max(size, 2 * len(array), 16), fill, dtype=array.dtype)
    out[: len(array)] = array
    return out


class ListStore:
    """Lists of elements, each element optionally carrying a value that is
    stored beside it, so that a gather can yield the values directly (one
    pass over a batch's matches instead of a gather and a lookup).

    Invariant: each element is in at most one list, at `elements[position[e]]`,
    which lies in the region of its list `owner[e]`: the first `count[l]` of the
    `capacity[l]` cells from `start[l]`. A list's order is not kept by removals."""

    __slots__ = (
        "elements",
        "values",
        "used",
        "wasted",
        "start",
        "count",
        "capacity",
        "position",
        "owner",
    )

    def __init__(self, *, with_values: bool = False) -> None:
        self.elements = np.zeros(64, dtype=ELEMENT)
        self.values = np.zeros(64, dtype=ELEMENT) if with_values else None
        self.used = 0  # elements[:used] is allocated to regions (live or abandoned)
        self.wasted = 0
        self.start = np.zeros(16, dtype=np.int64)  # per list
        self.count = np.zeros(16, dtype=np.int64)
        self.capacity = np.zeros(16, dtype=np.int64)
        self.position = np.full(16, -1, dtype=np.int64)  # per element: where it is
        self.owner = np.full(16, -1, dtype=np.int64)  # per element: its list

    def __len__(self) -> int:
        return int(self.count.sum())

    def items(self, list_id: int) -> Ids:
        """The elements of one list (a view: copy before changing the store). O(1)."""
        if list_id >= len(self.count):
            return self.elements[:0]
        s = self.start[list_id]
        return self.elements[s : s + self.count[list_id]]

    def size(self, list_id: int) -> int:
        """How many elements one list holds. O(1)."""
        return int(self.count[list_id]) if list_id < len(self.count) else 0

    def reserve(self, lists: int) -> None:
        """Make list ids below `lists` valid (empty until added to). Amortized O(1)
        a list."""
        if lists > len(self.count):
            self.start, self.count = grown(self.start, lists, 0), grown(self.count, lists, 0)
            self.capacity = grown(self.capacity, lists, 0)

    def add(self, list_id: int, element: int, value: int = 0) -> None:
        """Append an element (not in any list) to a list, with the value it
        carries. Amortized O(1): a full region moves, at twice its size."""
        # (Python ints in between: numpy scalar arithmetic costs more)
        if list_id >= len(self.count):
            self.reserve(list_id + 1)
        if element >= len(self.position):
            self.position = grown(self.position, element + 1, -1)
            self.owner = grown(self.owner, element + 1, -1)
        n = int(self.count[list_id])
        if n == self.capacity[list_id]:
            self._move(list_id, max(4, 2 * n))
        pos = int(self.start[list_id]) + n
        self.elements[pos] = element
        if self.values is not None:
            self.values[pos] = value
        self.position[element] = pos
        self.owner[element] = list_id
        self.count[list_id] = n + 1

    def remove(self, element: int) -> int:
        """Remove an element from its list, the list's last element taking its
        place; returns the list it was in. O(1)."""
        list_id = int(self.owner[element])
        pos = int(self.position[element])
        n = int(self.count[list_id]) - 1
        last = int(self.start[list_id]) + n
        if last != pos:
            moved = int(self.elements[last])
            self.elements[pos] = moved
            if self.values is not None:
                self.values[pos] = self.values[last]
            self.position[moved] = pos
        self.count[list_id] = n
        self.position[element] = -1
        self.owner[element] = -1
        return list_id

    def reorder(self, list_id: int, order: Ids, at: int = 0) -> None:
        """Permute one list from position `at` on: its element at + i becomes
        the old element at + order[i]. O(elements moved)."""
        s = int(self.start[list_id]) + at
        region = slice(s, int(self.start[list_id]) + int(self.count[list_id]))
        self.elements[region] = self.elements[region][order]
        if self.values is not None:
            self.values[region] = self.values[region][order]
        self.position[self.elements[region]] = np.arange(region.start, region.stop)

    def swap(self, list_id: int, i: int, j: int) -> None:
        """Exchange the elements at positions i and j of one list. O(1)."""
        s = int(self.start[list_id])
        self.elements[[s + i, s + j]] = self.elements[[s + j, s + i]]
        if self.values is not None:
            self.values[[s + i, s + j]] = self.values[[s + j, s + i]]
        self.position[self.elements[[s + i, s + j]]] = [s + i, s + j]

    def index_of(self, element: int) -> int:
        """An element's position within its list. O(1)."""
        return int(self.position[element] - self.start[self.owner[element]])

    def owner_of(self, element: int) -> int:
        """The list an element is in, or -1. O(1)."""
        return int(self.owner[element]) if element < len(self.owner) else -1

    def release(self, list_id: int) -> None:
        """Forget an empty list's region (its node is gone). O(1)."""
        if list_id < len(self.capacity):
            self.wasted += int(self.capacity[list_id])
            self.capacity[list_id] = self.count[list_id] = 0

    def _move(self, list_id: int, new_capacity: int) -> None:
        if self.wasted > 1024 and self.wasted * 2 > self.used:
            self._compact()
        s, n = int(self.start[list_id]), int(self.count[list_id])
        self.elements = grown(self.elements, self.used + new_capacity, 0)
        dest = self.used
        self.elements[dest : dest + n] = self.elements[s : s + n]
        if self.values is not None:
            self.values = grown(self.values, len(self.elements), 0)
            self.values[dest : dest + n] = self.values[s : s + n]
        self.position[self.elements[dest : dest + n]] = np.arange(dest, dest + n)
        self.wasted += int(self.capacity[list_id])
        self.start[list_id], self.capacity[list_id] = dest, new_capacity
        self.used += new_capacity

    def _compact(self) -> None:
        capacities = self.capacity
        new_start = np.cumsum(capacities) - capacities
        lists = np.flatnonzero(self.count)
        counts, idx = self._positions(lists)
        elements = np.take(self.elements, idx)
        dest = run_positions(new_start[lists], counts)
        packed = np.zeros(max(64, int(capacities.sum()) * 2), dtype=ELEMENT)
        packed[dest] = elements
        if self.values is not None:
            values = np.zeros(len(packed), dtype=ELEMENT)
            values[dest] = np.take(self.values, idx)
            self.values = values
        self.position[elements] = dest
        self.elements, self.start = packed, new_start
        self.used, self.wasted = int(capacities.sum()), 0

    def gather_counts(self, lists: Ids, *, values: bool = False) -> tuple[Ids, Ids]:
        """All elements (or their values) of the given lists, in their order,
        and how many each list gave (so callers can `np.repeat` what they carry
        per list). O(lists + elements gathered)."""
        source = self.values if values else self.elements
        counts = np.take(self.count, lists)
        total = int(counts.sum())
        if total == len(lists) and (not total or int(counts.min()) == 1):
            # One element per list (profiles rarely share a node): no runs.
            return counts, np.take(source, np.take(self.start, lists))
        if total >= SLICE_RUN * len(lists):
            # Long runs (entries shared by many subscriptions): copying
            # whole regions beats computing an index per element.
            starts = np.take(self.start, lists).tolist()
            parts = [source[a : a + n] for a, n in zip(starts, counts.tolist(), strict=True)]
            return counts, np.concatenate(parts)
        counts, idx = self._positions(lists)
        return counts, np.take(source, idx)

    def _positions(self, lists: Ids) -> tuple[Ids, Ids]:
        counts = np.take(self.count, lists)
        wide = np.int64 if len(self.elements) >= 2**31 else np.int32
        return counts, run_positions(np.take(self.start, lists), counts, wide)
