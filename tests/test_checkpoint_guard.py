"""A checkpoint keeps the sharding its state was built with (`streaming.checkpoint_guard`)."""

from __future__ import annotations

import json
import re

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


NET = """links = [["a", "b"]]
[sites.a]
bootstrap = "h:1"
[sites.b]
bootstrap = "h:2"
"""


def test_a_committed_site_checkpoint_refuses_other_producers(tmp_path):
    """A site's state keeps the network of its first batch: a producer added to the
    file, removed, moved or put in another order is refused, naming the change."""
    from matcher.routing.network import parse_network
    from streaming.checkpoint_guard import PRODUCERS_FILE, ProducersChanged, check_producers

    def net(producers: str):
        return parse_network(NET + producers)

    checkpoint = tmp_path / "cp"
    started = '[producers.q]\nsite = "a"\n[producers.r]\nsite = "b"\n'
    check_producers(str(checkpoint), net(""), "a")
    check_producers(str(checkpoint), net(started), "a")  # no state yet: replaced
    assert json.loads((checkpoint / PRODUCERS_FILE).read_text()) == [["q", "a"], ["r", "b"]]
    _commit(checkpoint)
    check_producers(str(checkpoint), net(started), "a")  # the same: goes on
    changed = {
        started + '[producers.z]\nsite = "b"\n': "producers changed: 'z' added (at site 'b');",
        '[producers.q]\nsite = "a"\n': "producers changed: 'r' removed;",
        '[producers.q]\nsite = "a"\n[producers.r]\nsite = "a"\n': "'r' moved from site 'b' to 'a'",
        '[producers.r]\nsite = "b"\n[producers.q]\nsite = "a"\n': "their order in the file",
    }
    for producers, said in changed.items():
        with pytest.raises(ProducersChanged, match=re.escape(said)) as refused:
            check_producers(str(checkpoint), net(producers), "a")
        assert str(refused.value).startswith("site 'a': ")
        assert "\n" not in str(refused.value)
