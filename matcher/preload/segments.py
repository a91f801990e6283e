"""Binary search in many sorted segments of one array at once.

`np.searchsorted` searches one sorted array per call; a batch of profiles
asks dozens of segments each (every edge group of its cell), and a call
per segment would cost more than the search. Here every (segment, value)
question halves its own range in the same vector step, so a batch costs
O(log(longest segment)) numpy calls whatever the number of segments.
"""

from __future__ import annotations

import numpy as np

from matcher.forest.arrays import Ids


def search(keys: np.ndarray, start: Ids, end: Ids, values: np.ndarray, *, right: bool) -> Ids:
    """For each question i: the first position p in `keys[start[i]:end[i]]` (sorted
    ascending) whose key is above `values[i]` (`right`), or at least it (not
    `right`); `end[i]` if none is. Exact comparisons of the stored keys.
    O(questions × log(longest segment))."""
    lo = np.asarray(start, dtype=np.int64).copy()
    hi = np.asarray(end, dtype=np.int64).copy()
    if not len(lo):
        return lo
    longest = int((hi - lo).max())
    last = len(keys) - 1
    for _ in range(longest.bit_length()):
        open_ = lo < hi
        mid = (lo + hi) >> 1
        key = keys[np.minimum(mid, last)]
        below = (key <= values) if right else (key < values)
        below &= open_
        lo = np.where(below, mid + 1, lo)
        hi = np.where(below | ~open_, hi, mid)
    return lo
