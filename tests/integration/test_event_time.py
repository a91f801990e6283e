"""Event time under admission control and skew (SEMANTICS §3), real broker, real Spark.

A backlog in which one partition's event times lag the others' offset by
offset, read in micro-batches of 50, 150 and 1,000 records: the job must
refuse no record as late, and give exactly what `tsm replay` (the engine,
one batch) gives. Spark's own watermark, the largest ts seen anywhere, sent
hundreds of such records to the dead letters (PLATFORM.md).
"""

from __future__ import annotations

import json
import time
import zlib
from collections import Counter
from dataclasses import replace

import pytest

from connectors.config import confluent_config
from streaming.config import JobConfig
from streaming.spark_time import from_spark_text
from tests.integration.test_job import (
    T0,
    expected,
    inputs_of,
    make_topics,
    output,
    workload,
)

pytestmark = pytest.mark.integration


def produce_to(bootstrap: str, topic: str, partition: int, lines: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer(confluent_config(bootstrap))
    for line in lines:
        producer.produce(topic, line, partition=partition)
        producer.poll(0)
    assert producer.flush(30) == 0


def partition_of(line: bytes, heavy: float) -> int:
    """Records keyed by id, as producers key them: a `heavy` share of ids on partition 1."""
    ident = json.loads(line)["id"].encode()
    return int(zlib.crc32(ident) % 1000 < heavy * 1000)


def skewed_backlog(bootstrap: str, topics, seed: int) -> None:
    """The workload of `test_job` (expiring lifetimes and validities, moved profiles,
    retracts, unsubscribes) with every partition in ts order. Profiles partition 1
    holds three quarters of the profiles over the same time span, so offset by
    offset its times lag partition 0's; it is produced last, as if its producer
    were behind."""
    subs, profiles = workload(seed=seed, subs=600, profiles=2000)
    by_ts = lambda line: json.loads(line)["ts"]  # noqa: E731
    parts = {
        (topics.subscriptions, p): sorted((s for s in subs if partition_of(s, 0.5) == p), key=by_ts)
        for p in (0, 1)
    }
    parts |= {
        (topics.profiles, p): sorted((r for r in profiles if partition_of(r, 0.75) == p), key=by_ts)
        for p in (0, 1)
    }
    assert min(len(lines) for lines in parts.values()) > 250
    for (topic, partition), lines in sorted(parts.items(), key=lambda kv: kv[0][1]):
        produce_to(bootstrap, topic, partition, lines)


def run_available_now(spark, config: JobConfig) -> tuple[dict[str, int], list[int]]:
    """`tsm run --available-now` in this Spark session: the counters, and the input
    rows of each batch that read any."""
    from streaming import job
    from streaming.listener import Counters

    metrics = spark.sparkContext.accumulator({}, Counters())
    query = job.start(spark, config, metrics, available_now=True)
    query.awaitTermination()
    assert query.exception() is None
    done = [p for p in query.recentProgress if p["numInputRows"]]
    planning = sorted(p["durationMs"].get("latestOffset", 0) for p in done)
    print(f"  latestOffset median {planning[len(planning) // 2]} ms, max {planning[-1]} ms")
    return dict(metrics.value), [p["numInputRows"] for p in done]


def test_a_skewed_backlog_under_admission_control_loses_nothing(
    spark, bootstrap, new_topic, tmp_path
):
    topics = make_topics(new_topic, bootstrap, partitions=2)
    skewed_backlog(bootstrap, topics, seed=31)
    records = inputs_of(bootstrap, topics)
    want = expected([records])
    assert not want["deadletter"] and sum(want["matches"].values()) > 1000
    expiries = sum(json.loads(v)["reason"] == "expired" for v in want["matches"])
    assert expiries > 50  # (the watermark's timers have work to do)
    for limit in (50, 150, 1000):
        run_topics = replace(
            topics, matches=new_topic(f"matches-{limit}", 2), deadletter=new_topic("dead", 1)
        )
        config = JobConfig(
            bootstrap=bootstrap,
            topics=run_topics,
            checkpoint=str(tmp_path / f"ck-{limit}"),
            max_records_per_trigger=limit,
        )
        started = time.monotonic()
        counters, batches = run_available_now(spark, config)
        print(f"limit {limit}: {len(batches)} batches in {time.monotonic() - started:.1f} s")
        assert sum(batches) == len(records)
        assert max(batches) <= limit and len(batches) >= len(records) // limit
        got = output(bootstrap, run_topics)
        assert counters.get("late", 0) == 0 and not got["deadletter"]
        assert got == want


def test_an_idle_partition_stops_holding_the_watermark(spark, bootstrap, new_topic, tmp_path):
    """A running job: once every partition has been drained for `idle_ms`, a batch
    with no record moves the watermark to the largest ts read, and the event-time
    timers expire what that passes in a space that gets no more records."""
    topics = make_topics(new_topic, bootstrap, partitions=2)
    sub = {"op": "subscribe", "id": "s", "space": "quiet", "subscriber": "u", "where": "TRUE"}
    produce_to(bootstrap, topics.subscriptions, 0, [json.dumps(sub | {"ts": T0}).encode()])
    quiet = {"op": "publish", "id": "p", "space": "quiet", "attrs": {"x": 1}, "valid_to": T0 + 10}
    produce_to(bootstrap, topics.profiles, 0, [json.dumps(quiet | {"ts": T0}).encode()])
    busy = {"op": "publish", "id": "q", "space": "busy", "attrs": {"x": 1}, "ts": T0 + 5000}
    produce_to(bootstrap, topics.profiles, 1, [json.dumps(busy).encode()])
    config = JobConfig(
        bootstrap=bootstrap,
        topics=topics,
        checkpoint=str(tmp_path / "ck"),
        idle_ms=1500,
        trigger_interval="200 milliseconds",
    )
    from streaming import job
    from streaming.listener import Counters

    metrics = spark.sparkContext.accumulator({}, Counters())
    query = job.start(spark, config, metrics)
    try:
        deadline = time.monotonic() + 120
        events = Counter()
        while time.monotonic() < deadline and not events[("unmatch", "expired")]:
            assert query.exception() is None
            time.sleep(1.0)
            got = output(bootstrap, topics)["matches"]
            events = Counter((r["event"], r["reason"]) for r in map(json.loads, got.elements()))
    finally:
        query.stop()
    assert events == {("match", "new-profile"): 1, ("unmatch", "expired"): 1}
    # (Spark's event time counts from the year 1: `streaming.spark_time`)
    marks = [from_spark_text(p["eventTime"].get("watermark")) for p in query.recentProgress]
    assert "2023-11-14T22:13:25.000Z" in marks  # T0 + 5000: the largest ts read
    assert metrics.value.get("timers", 0) >= 1
