"""Binary search in many sorted segments of one array at once.

`np.searchsorted` searches one sorted array per call; a batch of profiles
asks dozens of segments each (every edge group of its cell), and a call
per segment would cost more than the search. Here every (segment, value)
question takes the same power-of-two steps in one vector step each
(branch-free binary search: a step is taken where the key it lands on is
still below the value), so a batch costs O(log(longest segment)) numpy
calls whatever the number of segments.
"""

from __future__ import annotations

import numpy as np

from matcher.forest.arrays import Ids


def search(keys: np.ndarray, start: Ids, end: Ids, values: np.ndarray, *, right: bool) -> Ids:
    """For each question i: the first position p in `keys[start[i]:end[i]]` (sorted
    ascending) whose key is above `values[i]` (`right`), or at least it (not
    `right`); `end[i]` if none is. Exact comparisons of the stored keys.
    O(questions × log(longest segment))."""
    at = np.asarray(start, dtype=np.int64).copy()
    end = np.asarray(end, dtype=np.int64)
    if not len(at):
        return at
    longest = int((end - at).max())
    below = np.less_equal if right else np.less
    # Invariant: every key in [start, at) is below the value, and at <= end. Steps
    # 2^(b-1), ..., 2, 1 add up to at least the longest segment.
    step = 1 << max(longest.bit_length() - 1, 0)
    probe = np.empty_like(at)
    ok = np.empty(len(at), dtype=bool)
    while step and longest:
        np.add(at, step - 1, out=probe)
        np.less(probe, end, out=ok)
        ok &= below(keys.take(probe, mode="clip"), values)
        np.add(at, step, out=at, where=ok)
        step >>= 1
    return at
