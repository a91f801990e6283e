"""Dims.profile_matrix: profiles as boxes, column by column, as matcher/boxes.py says."""

import numpy as np

from matcher.boxes import Dims
from matcher.constraints import BOOL, NUM, STR, TAGS
from matcher.profiles import Profile

INF = np.inf


def test_profile_matrix_puts_each_value_in_its_column_and_leaves_out_the_rest():
    dims = Dims()
    for attr, kind in (("speed", NUM), ("kind", STR), ("on", BOOL), ("tags", TAGS)):
        dims.column(attr, kind)
    assert dims.code("bus") == 0.0
    profiles = [
        Profile({"speed": 50, "kind": "bus", "on": True, "tags": ["a", "b"], "extra": 3}),
        Profile({"speed": [10, 20.5], "on": False}),
        Profile({"kind": "tram"}),  # a new string: interned, the next code
        Profile({"speed": "fast", "tags": 2}),  # no column for a string speed, nor numeric tags
    ]
    lo, hi = dims.profile_matrix(profiles)
    # (columns × profiles); a missing attribute is [inf, -inf]
    assert lo.tolist() == [
        [50.0, 10.0, INF, INF],
        [0.0, INF, 1.0, INF],
        [1.0, 0.0, INF, INF],
        [0.0, INF, INF, INF],
    ]
    assert hi.tolist() == [
        [50.0, 20.5, -INF, -INF],
        [0.0, -INF, 1.0, -INF],
        [1.0, 0.0, -INF, -INF],
        [0.0, -INF, -INF, -INF],
    ]
    assert dims.codes == {"bus": 0, "tram": 1}
    assert len(dims) == 4  # (no column grows for the attributes left out)


def test_an_empty_batch_is_a_matrix_of_no_profiles() -> None:
    dims = Dims()
    dims.column("speed", NUM)
    lo, hi = dims.profile_matrix([])
    assert lo.shape == hi.shape == (1, 0)
