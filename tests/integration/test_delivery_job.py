"""Delivery policies in the job (docs/DELIVERY.md): real broker, real Spark.

Noisy tracks crossing the edges of zones in groups of every mode, with
dwell, exit dwell and margins (`tsm gen noisy`), in an unsharded space and a
sharded one, read in micro-batches by two runs of the job, the second resuming
from the first's checkpoint (groups, pending dwells and margins in its state):
together they must give exactly what `tsm replay` (the engine) gives, pending
matches fired by their event-time timers.
"""

from __future__ import annotations

import json
import time

import pytest

from benchmarks.noisy_tracks import generate
from connectors.produce import produce_lines
from matcher.engine import Engine
from streaming.config import JobConfig, build_sharding
from tests.integration.test_job import expected, inputs_of, make_topics, output, run_in_process

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # (about a minute alone)


def test_the_job_equals_replay_with_delivery_policies(spark, bootstrap, new_topic, tmp_path):
    # (timers fall due at 500 ms past a report's second: told apart from reports)
    subs, profiles = generate(
        seed=5,
        n_subscriptions=64,
        n_profiles=900,
        group_size=5,
        dwell_ms=(0, 2500),
        exit_dwell_ms=(0, 1500, 3500),
    )
    lines = {"subs": [], "profiles": []}
    for space in ("zones", "cells"):  # `cells` is sharded on x
        lines["subs"] += [json.dumps(r | {"space": space}).encode() for r in subs]
        lines["profiles"] += [json.dumps(r | {"space": space}).encode() for r in profiles]
    by_ts = lambda line: json.loads(line)["ts"]  # noqa: E731
    topics = make_topics(new_topic, bootstrap)
    # The first run reads what comes before `cut`, the second the rest: nothing of
    # the second part is late, and the second run starts from the first one's state.
    cut = by_ts(sorted(lines["profiles"], key=by_ts)[len(lines["profiles"]) // 2])
    parts = [
        {
            kind: [line for line in kept if (by_ts(line) < cut) == first]
            for kind, kept in lines.items()
        }
        for first in (True, False)
    ]
    sharding = {"cells": {"attribute": "x", "width": 250, "cells": 4}}
    config = JobConfig(
        bootstrap=bootstrap,
        topics=topics,
        checkpoint=str(tmp_path / "ck"),
        max_records_per_trigger=800,
        sharding=sharding,
    )
    started = time.monotonic()
    for part in parts:
        produce_lines(bootstrap, topics.subscriptions, sorted(part["subs"], key=by_ts))
        produce_lines(bootstrap, topics.profiles, sorted(part["profiles"], key=by_ts))
        counters = run_in_process(spark, config)
    print(f"delivery job, two runs: {time.monotonic() - started:.1f} s, {counters}")
    engine = Engine(sharding=build_sharding(sharding))  # (as `tsm replay` with the config)
    want = expected([inputs_of(bootstrap, topics)], engine=engine)
    records = [json.loads(v) for v in want["matches"]]
    assert {r["reason"] for r in records} >= {"replaced", "new-profile", "changed"}
    timed = [r for r in records if r["ts"] % 1000 >= 500]
    assert {r["event"] for r in timed} == {"match", "unmatch"}  # (both timers fired)
    assert not want["deadletter"]
    assert output(bootstrap, topics) == want
