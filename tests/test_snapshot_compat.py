"""Snapshots in checkpoints written by an earlier version of the code (the
fixtures of `tests/snapshot_workloads.py`) load, and the loaded matcher
matches the same as one built afresh from the same records.

The snapshots load through the job's codec (`streaming.state.codec`), which
finds the classes and their attributes that have moved or been renamed since
(`matcher.snapshot_names`, `streaming.state.migrations`), and also gives every
filter and profile the hash of its content in this process: a `Conjunction` and a
`Profile` keep their hash in a slot, and a `Conjunction`'s hash depends on
`hash(None)`, which Python 3.11 takes from None's address, so it differs from
one process to the next. Loaded as it was pickled, an equal filter sent after
the restore misses its node in `Forest.by_key` and gets a second node.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from matcher.double_forest import DoubleForest
from matcher.forest import ROOT, Forest
from matcher.forest.list_store import ListStore
from matcher.forest.point_columns import PointColumns
from matcher.forest.wide_list import WideList
from streaming.state.codec import load_snapshot
from tests import layouts
from tests.snapshot_workloads import BLOCKED_FROM, WORKLOADS, build, steps

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"


def _load(name: str):
    return load_snapshot((FIXTURES / f"{name}.pickle.zst").read_bytes())


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_a_snapshot_of_an_earlier_version_matches_like_a_fresh_matcher(name):
    with layouts.blocked_from(BLOCKED_FROM):
        loaded, fresh = _load(name), build(name)
        assert loaded.subs.keys() == fresh.subs.keys()
        assert loaded.profiles.keys() == fresh.profiles.keys()
        _holds_what_it_stands_for(name, loaded.forest)
        _, after = steps(name)
        for batch in after:
            events = loaded.apply_batch(batch)
            assert events == fresh.apply_batch(batch)
        assert events, "the last batch changed no pair: the comparison proves little"
        assert loaded.drain_changes() == fresh.drain_changes()
        assert loaded.expire(float("inf")) == fresh.expire(float("inf"))
        for side in ("sub_forest", "profile_forest"):  # (one node per distinct key)
            assert len(getattr(loaded.forest, side)) == len(getattr(fresh.forest, side))
        if name != "uniform":  # (its 1,400 roots take 10 s to check pair by pair)
            loaded.forest.check_invariants()


def _holds_what_it_stands_for(name: str, loaded: DoubleForest) -> None:
    """The loaded state has the parts whose layout changed (so the comparison
    after it reads them), each of its class as this version names it."""
    forests = (loaded.sub_forest, loaded._profile_forest)
    assert all(type(forest) is Forest for forest in forests)
    assert all(type(forest.children) is ListStore for forest in forests)
    wide = loaded.sub_forest.wide_lists[ROOT]
    assert type(wide) is WideList
    if name == "uniform":  # a root list in blocks, with removals' widenings pending
        assert wide.block_count and wide.moved and loaded.sub_forest._stale
    if name == "siena":  # a list of point profiles with its sorted columns
        points = loaded._profile_forest.wide_lists[ROOT].point_columns
        assert type(points) is PointColumns
    if name == "nested":  # profiles not yet in the profile forest
        assert loaded._unindexed
