"""Many small growable lists of ints in one array, gathered in one vector op.

The forests keep every node's children and every node's entries here, so
that expanding a whole frontier of (query, node) pairs into (query, child)
pairs is a handful of numpy calls instead of a Python loop per node. Each
list owns a block with spare capacity; a full block moves to the end of the
array at double size (amortized O(1), like a dynamic array), and the array is
compacted when more than half of it is abandoned space. Every element lives
in exactly one list, so removal is a swap with the last element of its block.
"""

from __future__ import annotations

import numpy as np


def _grow(a: np.ndarray, n: int, fill) -> np.ndarray:
    if n <= len(a):
        return a
    out = np.full(max(n, 2 * len(a), 16), fill, dtype=a.dtype)
    out[: len(a)] = a
    return out


class BlockStore:
    __slots__ = ("data", "used", "wasted", "start", "count", "cap", "slot", "owner")

    def __init__(self) -> None:
        self.data = np.zeros(64, dtype=np.int64)
        self.used = 0  # data[:used] is allocated to blocks (live or abandoned)
        self.wasted = 0
        self.start = np.zeros(16, dtype=np.int64)  # per list
        self.count = np.zeros(16, dtype=np.int64)
        self.cap = np.zeros(16, dtype=np.int64)
        self.slot = np.full(16, -1, dtype=np.int64)  # per element: where it is
        self.owner = np.full(16, -1, dtype=np.int64)  # per element: its list

    def __len__(self) -> int:
        return int(self.count.sum())

    def items(self, lst: int) -> np.ndarray:
        """The elements of one list (a view: copy before mutating the store)."""
        if lst >= len(self.count):
            return self.data[:0]
        s = self.start[lst]
        return self.data[s : s + self.count[lst]]

    def size(self, lst: int) -> int:
        return int(self.count[lst]) if lst < len(self.count) else 0

    def reserve(self, lists: int) -> None:
        """Make list ids below `lists` valid (empty until added to)."""
        if lists > len(self.count):
            self.start, self.count = _grow(self.start, lists, 0), _grow(self.count, lists, 0)
            self.cap = _grow(self.cap, lists, 0)

    def add(self, lst: int, elem: int) -> None:
        self.reserve(lst + 1)
        if elem >= len(self.slot):
            self.slot, self.owner = _grow(self.slot, elem + 1, -1), _grow(self.owner, elem + 1, -1)
        n = self.count[lst]
        if n == self.cap[lst]:
            self._move(lst, max(4, 2 * int(n)))
        pos = self.start[lst] + n
        self.data[pos] = elem
        self.slot[elem] = pos
        self.owner[elem] = lst
        self.count[lst] = n + 1

    def remove(self, elem: int) -> int:
        """Remove an element from its list; returns the list it was in."""
        lst = int(self.owner[elem])
        pos = self.slot[elem]
        last = self.start[lst] + self.count[lst] - 1
        moved = self.data[last]
        self.data[pos] = moved
        self.slot[moved] = pos
        self.count[lst] -= 1
        self.slot[elem] = -1
        self.owner[elem] = -1
        return lst

    def index_of(self, elem: int) -> int:
        """An element's position within its list."""
        return int(self.slot[elem] - self.start[self.owner[elem]])

    def owner_of(self, elem: int) -> int:
        return int(self.owner[elem]) if elem < len(self.owner) else -1

    def release(self, lst: int) -> None:
        """Forget an empty list's block (its node is gone)."""
        if lst < len(self.cap):
            self.wasted += int(self.cap[lst])
            self.cap[lst] = self.count[lst] = 0

    def _move(self, lst: int, new_cap: int) -> None:
        if self.wasted > 1024 and self.wasted * 2 > self.used:
            self._compact()
        s, n = int(self.start[lst]), int(self.count[lst])
        self.data = _grow(self.data, self.used + new_cap, 0)
        dest = self.used
        self.data[dest : dest + n] = self.data[s : s + n]
        self.slot[self.data[dest : dest + n]] = np.arange(dest, dest + n)
        self.wasted += int(self.cap[lst])
        self.start[lst], self.cap[lst] = dest, new_cap
        self.used += new_cap

    def _compact(self) -> None:
        caps = self.cap
        new_start = np.cumsum(caps) - caps
        lists = np.flatnonzero(self.count)
        owners, elems = self.gather(lists)
        counts = self.count[lists]
        offsets = np.arange(len(elems)) - np.repeat(np.cumsum(counts) - counts, counts)
        dest = new_start[lists][owners] + offsets
        data = np.zeros(max(64, int(caps.sum()) * 2), dtype=np.int64)
        data[dest] = elems
        self.slot[elems] = dest
        self.data, self.start = data, new_start
        self.used, self.wasted = int(caps.sum()), 0

    def gather(self, lists: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All elements of the given lists: (index into `lists`, element)."""
        counts = np.take(self.count, lists)
        total = int(counts.sum())
        if total == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        which = np.repeat(np.arange(len(lists)), counts)
        first = np.cumsum(counts) - counts
        idx = np.repeat(np.take(self.start, lists) - first, counts) + np.arange(total)
        return which, np.take(self.data, idx)
