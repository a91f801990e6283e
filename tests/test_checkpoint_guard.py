"""A checkpoint keeps the sharding its state was built with (`streaming.checkpoint_guard`)."""

from __future__ import annotations

import json

import pytest

from streaming.checkpoint_guard import FILE, ShardingChanged, check_sharding
from streaming.config import build_sharding

CUTS = {"vehicles": {"attribute": "lat", "cuts": [60.0, 61.0]}}


def _commit(checkpoint) -> None:
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits" / "0").write_text("v1\n")


def test_a_new_checkpoint_takes_any_sharding_until_it_commits(tmp_path):
    checkpoint = tmp_path / "cp"
    check_sharding(str(checkpoint), build_sharding(CUTS))
    kept = json.loads((checkpoint / FILE).read_text())
    assert kept == {"vehicles": {"attribute": "lat", "cuts": [60.0, 61.0]}}
    check_sharding(str(checkpoint), build_sharding({}))  # no state yet: replaced
    assert json.loads((checkpoint / FILE).read_text()) == {}


def test_a_committed_checkpoint_refuses_other_cuts(tmp_path):
    checkpoint = tmp_path / "cp"
    check_sharding(str(checkpoint), build_sharding(CUTS))
    _commit(checkpoint)
    check_sharding(str(checkpoint), build_sharding(CUTS, partitions=4))  # names differ, cuts not
    grid = {"vehicles": {"attribute": "lat", "width": 1.0, "cells": 3, "origin": 59.0}}
    check_sharding(str(checkpoint), build_sharding(grid))  # the same cuts, written as a grid
    for other in (
        {"vehicles": {"attribute": "lat", "cuts": [60.0, 62.0]}},
        {"vehicles": {"attribute": "lon", "cuts": [60.0, 61.0]}},
        {},
        CUTS | {"ships": {"attribute": "lat", "cuts": [0.0]}},
    ):
        with pytest.raises(ShardingChanged, match="vehicles on lat at 60, 61") as caught:
            check_sharding(str(checkpoint), build_sharding(other))
        assert "start a new checkpoint" in str(caught.value)
    assert json.loads((checkpoint / FILE).read_text())["vehicles"]["cuts"] == [60.0, 61.0]


def test_a_checkpoint_from_before_the_guard_keeps_the_sharding_it_starts_with(tmp_path):
    checkpoint = tmp_path / "cp"
    _commit(checkpoint)  # committed, but no sharding file: its cuts are unknown
    check_sharding(str(checkpoint), build_sharding(CUTS))
    with pytest.raises(ShardingChanged, match="no space sharded"):
        check_sharding(str(checkpoint), build_sharding({}))
