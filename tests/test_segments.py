"""matcher.preload.segments.search against np.searchsorted, one segment at a time."""

import numpy as np
import pytest

from matcher.preload import segments


@pytest.mark.parametrize("right", [False, True])
def test_search_finds_what_searchsorted_finds_in_each_segment(right):
    rng = np.random.default_rng(7)
    lengths = rng.choice([0, 1, 2, 3, 7, 8, 9, 64, 65, 300], size=400)
    keys = np.concatenate([np.sort(rng.integers(0, 12, n)).astype(float) for n in lengths])
    ends = np.cumsum(lengths)
    starts = ends - lengths
    # every segment asked several times: below, at, between and above its keys
    which = np.repeat(np.arange(len(lengths)), 6)
    values = rng.integers(-1, 14, len(which)).astype(float)
    got = segments.search(keys, starts[which], ends[which], values, right=right)
    side = "right" if right else "left"
    want = [
        s + np.searchsorted(keys[s:e], v, side=side)
        for s, e, v in zip(starts[which], ends[which], values, strict=True)
    ]
    assert got.tolist() == want


def test_search_of_no_questions_and_of_empty_segments():
    keys, none = np.arange(5.0), np.zeros(0, dtype=int)
    assert segments.search(keys, none, none, np.zeros(0), right=True).size == 0
    at = np.array([2, 5])
    got = segments.search(keys, at, at, np.array([9.0, 0.0]), right=False)
    assert got.tolist() == [2, 5]
