"""Many small growable lists of ints in one array, gathered in one vector op.

The forests keep every node's children and every node's entries here, so
that expanding a whole frontier of (query, node) pairs into (query, child)
pairs is a handful of numpy calls instead of a Python loop per node. Each
list owns a block with spare capacity; a full block moves to the end of the
array at double size (amortized O(1), like a dynamic array), and the array is
compacted when more than half of it is abandoned space. Every element lives
in exactly one list, so removal is a swap with the last element of its block.

Elements are 32-bit (node and entry ids stay far below 2**31): a batch's
matches are expanded into arrays of millions of them, and their width is
what those passes cost.
"""

from __future__ import annotations

import numpy as np

ELEMENT = np.int32
SLICE_RUN = 32  # mean elements per list above which a gather copies blocks


def run_positions(starts: np.ndarray, lengths: np.ndarray, dtype=np.int64) -> np.ndarray:
    """The positions of runs (start, length), concatenated: one repeat and one
    arange, not a slice per run."""
    ends = np.cumsum(lengths)
    out = np.repeat((starts - (ends - lengths)).astype(dtype, copy=False), lengths)
    out += np.arange(int(ends[-1]) if len(ends) else 0, dtype=dtype)
    return out


def _grow(a: np.ndarray, n: int, fill) -> np.ndarray:
    if n <= len(a):
        return a
    out = np.full(max(n, 2 * len(a), 16), fill, dtype=a.dtype)
    out[: len(a)] = a
    return out


class BlockStore:
    """Lists of elements, each element optionally carrying a value that is
    stored beside it, so that a gather can yield the values directly (one
    pass over a batch's matches instead of a gather and a lookup)."""

    __slots__ = ("data", "vals", "used", "wasted", "start", "count", "cap", "slot", "owner")

    def __init__(self, with_values: bool = False) -> None:
        self.data = np.zeros(64, dtype=ELEMENT)
        self.vals = np.zeros(64, dtype=ELEMENT) if with_values else None
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

    def add(self, lst: int, elem: int, value: int = 0) -> None:
        # (Python ints in between: numpy scalar arithmetic costs more)
        if lst >= len(self.count):
            self.reserve(lst + 1)
        if elem >= len(self.slot):
            self.slot, self.owner = _grow(self.slot, elem + 1, -1), _grow(self.owner, elem + 1, -1)
        n = int(self.count[lst])
        if n == self.cap[lst]:
            self._move(lst, max(4, 2 * n))
        pos = int(self.start[lst]) + n
        self.data[pos] = elem
        if self.vals is not None:
            self.vals[pos] = value
        self.slot[elem] = pos
        self.owner[elem] = lst
        self.count[lst] = n + 1

    def remove(self, elem: int) -> int:
        """Remove an element from its list; returns the list it was in."""
        lst = int(self.owner[elem])
        pos = int(self.slot[elem])
        n = int(self.count[lst]) - 1
        last = int(self.start[lst]) + n
        if last != pos:
            moved = int(self.data[last])
            self.data[pos] = moved
            if self.vals is not None:
                self.vals[pos] = self.vals[last]
            self.slot[moved] = pos
        self.count[lst] = n
        self.slot[elem] = -1
        self.owner[elem] = -1
        return lst

    def reorder(self, lst: int, order: np.ndarray, at: int = 0) -> None:
        """Permute one list from position `at` on: its element at + i
        becomes the old element at + order[i]."""
        s = int(self.start[lst]) + at
        block = slice(s, int(self.start[lst]) + int(self.count[lst]))
        self.data[block] = self.data[block][order]
        if self.vals is not None:
            self.vals[block] = self.vals[block][order]
        self.slot[self.data[block]] = np.arange(block.start, block.stop)

    def swap(self, lst: int, i: int, j: int) -> None:
        """Exchange the elements at positions i and j of one list."""
        s = int(self.start[lst])
        self.data[[s + i, s + j]] = self.data[[s + j, s + i]]
        if self.vals is not None:
            self.vals[[s + i, s + j]] = self.vals[[s + j, s + i]]
        self.slot[self.data[[s + i, s + j]]] = [s + i, s + j]

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
        if self.vals is not None:
            self.vals = _grow(self.vals, len(self.data), 0)
            self.vals[dest : dest + n] = self.vals[s : s + n]
        self.slot[self.data[dest : dest + n]] = np.arange(dest, dest + n)
        self.wasted += int(self.cap[lst])
        self.start[lst], self.cap[lst] = dest, new_cap
        self.used += new_cap

    def _compact(self) -> None:
        caps = self.cap
        new_start = np.cumsum(caps) - caps
        lists = np.flatnonzero(self.count)
        counts, idx = self._positions(lists)
        elems = np.take(self.data, idx)
        dest = run_positions(new_start[lists], counts)
        data = np.zeros(max(64, int(caps.sum()) * 2), dtype=ELEMENT)
        data[dest] = elems
        if self.vals is not None:
            vals = np.zeros(len(data), dtype=ELEMENT)
            vals[dest] = np.take(self.vals, idx)
            self.vals = vals
        self.slot[elems] = dest
        self.data, self.start = data, new_start
        self.used, self.wasted = int(caps.sum()), 0

    def gather_counts(
        self, lists: np.ndarray, values: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """All elements (or their values) of the given lists, in their order,
        and how many each list gave (so callers can `np.repeat` what they
        carry per list)."""
        src = self.vals if values else self.data
        counts = np.take(self.count, lists)
        total = int(counts.sum())
        if total == len(lists) and (not total or int(counts.min()) == 1):
            # One element per list (profiles rarely share a node): no runs.
            return counts, np.take(src, np.take(self.start, lists))
        if total >= SLICE_RUN * len(lists):
            # Long runs (entries shared by many subscriptions): copying
            # whole blocks beats computing an index per element.
            starts = np.take(self.start, lists).tolist()
            parts = [src[a : a + n] for a, n in zip(starts, counts.tolist(), strict=True)]
            return counts, np.concatenate(parts)
        counts, idx = self._positions(lists)
        return counts, np.take(src, idx)

    def _positions(self, lists: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        counts = np.take(self.count, lists)
        wide = np.int64 if len(self.data) >= 2**31 else np.int32
        return counts, run_positions(np.take(self.start, lists), counts, wide)
