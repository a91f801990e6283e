"""The streaming job against a real broker and a real local Spark.

The expected output is always `matcher.engine.Engine` (what `tsm replay`
runs) on the same records, fed with the Kafka positions read back from the
topics, so that dead letters compare byte for byte too. Where the job's
batch boundaries equal the engine's (one data batch, or the same cuts), the
outputs must be equal as multisets of encoded records (SEMANTICS §5). Where
they cannot be equal (a crash and restart cuts batches elsewhere), the
workload is built so that nothing depends on the cuts (unique ids, nothing
late, nothing expiring) and the comparison is the set of
(event, subscription_id, profile_id, match_id).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from connectors.config import SINK_COMMITS_TOPIC, Topics, confluent_config
from connectors.consume import consume_values
from connectors.produce import produce_lines
from matcher.engine import Engine, Input
from matcher.events import encode
from matcher.records import Source
from matcher.sharding import cell_keys
from streaming.checkpoint_guard import ShardingChanged
from streaming.config import JobConfig
from streaming.placement import partition_of, spark_hash, spread_keys
from streaming.state.reader import committed_state

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000
REPO = Path(__file__).resolve().parents[2]


# -- workloads -----------------------------------------------------------------


def workload(
    seed: int, subs: int, profiles: int, churn: bool = True, spaces: tuple[str, ...] = ("a", "b")
) -> tuple[list[bytes], list[bytes]]:
    """Random subscriptions and profiles (JSON lines) on a numeric `x` and a `kind`.

    With `churn`: expiring lifetimes and validities, moved profiles (reused
    ids), retracts and unsubscribes. Without: unique ids, nothing expires.
    """
    rng = random.Random(seed)
    kinds = ("bus", "tram", "car")
    sub_lines, prof_lines = [], []
    for i in range(subs):
        lo = rng.randrange(0, 90)
        where = f"x BETWEEN {lo} AND {lo + rng.randrange(5, 40)}"
        if rng.random() < 0.4:
            where += f" AND kind = '{rng.choice(kinds)}'"
        ts = T0 + (rng.randrange(0, 5000) if churn else i)
        record = {"op": "subscribe", "id": f"s{i}", "space": rng.choice(spaces)}
        record |= {"subscriber": f"u{i % 7}", "where": where, "ts": ts}
        record["relation"] = rng.choice(("overlaps", "covers"))
        if churn and rng.random() < 0.3:
            record["valid_to"] = ts + rng.randrange(500, 4000)
        sub_lines.append(json.dumps(record).encode())
    for j in range(profiles):
        ts = T0 + (rng.randrange(0, 6000) if churn else 10_000 + j)
        ident = f"p{rng.randrange(profiles // 3)}" if churn else f"p{j}"
        space = rng.choice(spaces)
        if churn and rng.random() < 0.05:
            record = {"op": "retract", "id": ident, "space": space, "ts": ts}
        else:
            lo = rng.randrange(0, 100)
            record = {"op": "publish", "id": ident, "space": space, "ts": ts}
            record |= {"attrs": {"x": [lo, lo + rng.randrange(0, 10)], "kind": rng.choice(kinds)}}
            record |= {"payload": {"n": j}}
            if churn:
                record["valid_to"] = ts + rng.randrange(0, 3000)
            else:
                record["valid_to"] = None
        prof_lines.append(json.dumps(record).encode())
    if churn:
        for i in rng.sample(range(subs), subs // 10):
            sub = json.loads(sub_lines[i])
            unsub = {"op": "unsubscribe", "id": sub["id"], "space": sub["space"]}
            sub_lines.append(json.dumps(unsub | {"ts": sub["ts"] + 2000}).encode())
    return sub_lines, prof_lines


BAD_PROFILES = [
    b"{not json",
    b'{"op": "shout", "id": "p1", "space": "a", "ts": 1700000000000}',
    b'{"op": "publish", "space": "a", "attrs": {"x": 1}, "ts": 1700000000000}',
    b'{"op": "publish", "id": "p9", "space": "a", "attrs": {"x": [5, 1]}, "ts": 1700000000000}',
    b'{"op": "publish", "id": "p8", "space": "a", "attrs": {"x": NaN}, "ts": 1700000000000}',
    b"\xff\xfe not utf-8",
    # nested past json.loads' recursion, and a lone surrogate escape: each stopped the job
    b'{"op": "publish", "id": "p7", "space": "a", "ts": 1700000000000, "payload": '
    + b"[" * 20_000
    + b"]" * 20_000
    + b"}",
    b'{"op": "publish", "id": "p\\ud800", "space": "a", "attrs": {"x": 1}, "ts": 1700000000000}',
    # a ts past the 64-bit microseconds of the event-time column: it stopped the job too
    b'{"op": "publish", "id": "p6", "space": "a", "attrs": {"x": 1}, "ts": 1' + b"0" * 30 + b"}",
    # under Kafka's 1,000,000-byte message limit, but its match records (and, refused,
    # its dead letter) would not be: the producer failed the task at every retry
    b'{"op": "publish", "id": "p4", "space": "big", "attrs": {"x": 1}, "ts": 1700000000000, '
    + b'"payload": "'
    + b"x" * 999_800
    + b'"}',
]
# (what the one above would match)
MATCHES_ALL_BIG = (
    b'{"op": "subscribe", "id": "s", "space": "big", "subscriber": "u", "where": "TRUE", "ts": 1}'
)
# No ts, and a Kafka timestamp past what Spark's timestamps hold: the source reads it as none
NO_TS_FAR_STAMP = (b'{"op": "publish", "id": "p5", "space": "a", "attrs": {"x": 1}}', 2**62)
BAD_SUBSCRIPTIONS = [
    b'{"op": "subscribe", "id": "s9", "space": "a", "subscriber": "u", '
    b'"where": "x BETWEEN AND 3", "ts": 1700000000000}',
    b'{"op": "subscribe", "id": "s8", "subscriber": "u", "where": "TRUE", "ts": 1700000000000}',
]


# -- Kafka helpers -----------------------------------------------------------------


def make_topics(new_topic: Callable[..., str], bootstrap: str, partitions: int = 1) -> Topics:
    from connectors.admin import create_topics

    create_topics(bootstrap, {SINK_COMMITS_TOPIC: 1})
    return Topics(
        subscriptions=new_topic("subs", partitions),
        profiles=new_topic("profiles", partitions),
        matches=new_topic("matches", 2),
        deadletter=new_topic("deadletter", 1),
    )


def produce_stamped(bootstrap: str, topic: str, value: bytes, timestamp_ms: int) -> None:
    """One record with the Kafka timestamp given (CreateTime: any 64-bit number)."""
    from confluent_kafka import Producer

    producer = Producer(confluent_config(bootstrap))
    producer.produce(topic, value, timestamp=timestamp_ms)
    assert producer.flush(10) == 0


def read_back(bootstrap: str, topic: str) -> list[tuple[int, int, bytes, int]]:
    """Every record of `topic` as (partition, offset, value, timestamp), in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(confluent_config(bootstrap, required={"group.id": f"rb-{time.time()}"}))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        out = []
        for partition in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            while not out or out[-1][:2] != (partition, high - 1):
                for m in consumer.consume(500, timeout=1.0):
                    if m.error() is None:
                        out.append((partition, m.offset(), m.value() or b"", m.timestamp()[1]))
        return out
    finally:
        consumer.close()


def wait_for_records(bootstrap: str, topic: str, job: subprocess.Popen, timeout: float) -> bool:
    """Whether `topic` got a record while `job` runs (polls end offsets, no idle fetch)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(confluent_config(bootstrap, required={"group.id": f"w-{time.time()}"}))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and job.poll() is None:
            ends = [
                consumer.get_watermark_offsets(TopicPartition(topic, p), 10) for p in partitions
            ]
            if any(high > low for low, high in ends):
                return True
            time.sleep(2.0)
        return False
    finally:
        consumer.close()


def inputs_of(bootstrap: str, topics: Topics) -> list[Input]:
    """Engine inputs with the Kafka positions the job sees."""
    items = []
    for kind, topic in (("subscription", topics.subscriptions), ("profile", topics.profiles)):
        for partition, offset, value, stamp in read_back(bootstrap, topic):
            items.append(Input(kind, value, Source(topic, partition, offset), stamp))
    return items


def expected(
    batches: list[list[Input]], lateness_ms: int = 0, engine: Engine | None = None
) -> dict[str, Counter]:
    """The engine's output per topic role, as multisets of encoded values."""
    engine = engine or Engine(lateness_ms=lateness_ms)
    out: dict[str, Counter] = {"matches": Counter(), "deadletter": Counter()}
    for batch in batches:
        for o in engine.process_batch(batch):
            out[o.topic][encode(o.value)] += 1
    return out


def output(bootstrap: str, topics: Topics, read_committed: bool = False) -> dict[str, Counter]:
    return {
        role: Counter(
            consume_values(
                bootstrap,
                getattr(topics, role),
                from_beginning=True,
                timeout=3.0,
                read_committed=read_committed,
            )
        )
        for role in ("matches", "deadletter")
    }


def triples(values) -> set[tuple]:
    records = [json.loads(v) for v in values]
    return {(r["event"], r["subscription_id"], r["profile_id"], r["match_id"]) for r in records}


# -- running the job ------------------------------------------------------------------


def run_in_process(spark, config: JobConfig) -> dict[str, int]:
    """`tsm run --available-now` in this process's Spark session; returns the counters."""
    from streaming import job
    from streaming.listener import Counters

    metrics = spark.sparkContext.accumulator({}, Counters())
    query = job.start(spark, config, metrics, available_now=True)
    query.awaitTermination()
    assert query.exception() is None
    return dict(metrics.value)


def write_config(path: Path, topics: Topics, **settings) -> Path:
    lines = [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    lines += ["[topics]"] + [f'{k} = "{v}"' for k, v in vars(topics).items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def tsm_run(bootstrap: str, config: Path, checkpoint: Path, *flags: str) -> subprocess.Popen:
    """`tsm run` as a child in its own process group (so that a kill reaches the JVM)."""
    command = [sys.executable, "-m", "tsm_cli", "run", "--bootstrap", bootstrap]
    command += ["--config", str(config), "--checkpoint", str(checkpoint), *flags]
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    log = open(checkpoint.parent / f"run-{time.time():.0f}.log", "wb")  # noqa: SIM115
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


# -- tests ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_end_to_end_equals_replay(bootstrap, new_topic, tmp_path):
    """`tsm run --available-now` = the engine on the same records (one data batch);
    the output topics do not exist yet, and the job creates them as `tsm topics
    create` does."""
    made = make_topics(new_topic, bootstrap, partitions=2)
    topics = replace(made, matches=f"{made.matches}-new", deadletter=f"{made.deadletter}-new")
    subs, profiles = workload(seed=1, subs=60, profiles=400)
    produce_lines(bootstrap, topics.subscriptions, subs)
    produce_lines(bootstrap, topics.profiles, profiles)
    config = write_config(tmp_path / "tsm.toml", topics, lateness_ms=500)
    job = tsm_run(bootstrap, config, tmp_path / "ck", "--available-now")
    assert job.wait(timeout=240) == 0
    want = expected([inputs_of(bootstrap, topics)], lateness_ms=500)
    assert want["matches"] and sum(want["matches"].values()) > 100
    got = output(bootstrap, topics)
    assert got == want
    said = b"".join(log.read_bytes() for log in tmp_path.glob("run-*.log")).decode()
    for name in (topics.matches, topics.deadletter):
        assert f"created topic {name} (4 partitions, kept forever)" in said
    assert f"created topic {topics.profiles}" not in said
    admin = AdminClient(confluent_config(bootstrap))
    assert len(admin.list_topics(topics.matches, timeout=10).topics[topics.matches].partitions) == 4


@pytest.mark.slow
def test_bad_and_late_records_go_to_dead_letters(spark, bootstrap, new_topic, tmp_path):
    topics = make_topics(new_topic, bootstrap)
    subs, profiles = workload(seed=2, subs=20, profiles=80)
    produce_lines(
        bootstrap,
        topics.subscriptions,
        [MATCHES_ALL_BIG, *subs[:10], *BAD_SUBSCRIPTIONS, *subs[10:]],
    )
    produce_lines(bootstrap, topics.profiles, profiles[:40] + BAD_PROFILES + profiles[40:])
    produce_stamped(bootstrap, topics.profiles, *NO_TS_FAR_STAMP)
    config = JobConfig(
        bootstrap=bootstrap, topics=topics, checkpoint=str(tmp_path / "ck"), lateness_ms=1000
    )
    first = inputs_of(bootstrap, topics)
    run_in_process(spark, config)
    late = {"op": "publish", "id": "late", "space": "a", "ts": T0, "attrs": {"x": 1}}
    on_time = late | {"id": "on-time", "ts": T0 + 10_000}
    late_sub = {"op": "subscribe", "id": "late", "space": "a", "subscriber": "u", "where": "TRUE"}
    produce_lines(bootstrap, topics.profiles, [json.dumps(r).encode() for r in (late, on_time)])
    produce_lines(bootstrap, topics.subscriptions, [json.dumps(late_sub | {"ts": T0}).encode()])
    second = [i for i in inputs_of(bootstrap, topics) if i not in first]
    counters = run_in_process(spark, config)
    want = expected([first, second], lateness_ms=1000)
    got = output(bootstrap, topics)
    assert got == want
    reasons = [json.loads(v)["reason"] for v in got["deadletter"]]
    # and the one with no time, and the two late ones
    assert len(reasons) == len(BAD_PROFILES) + len(BAD_SUBSCRIPTIONS) + 1 + 2
    assert sum("no Kafka timestamp in the years 1 to 9999" in r for r in reasons) == 1
    assert sum(r.startswith("late:") for r in reasons) == 2
    assert counters["late"] == 2


def test_idle_space_is_cleaned_by_event_time_timers(spark, bootstrap, new_topic, tmp_path):
    """A space with no more records is expired when the watermark passes (§3)."""
    topics = make_topics(new_topic, bootstrap)
    idle_sub = {"op": "subscribe", "id": "s", "space": "idle", "subscriber": "u", "where": "TRUE"}
    idle_pub = {"op": "publish", "id": "p", "space": "idle", "attrs": {"x": 1}}
    busy = {"op": "publish", "id": "q", "space": "busy", "attrs": {"x": 1}}
    produce_lines(bootstrap, topics.subscriptions, [json.dumps(idle_sub | {"ts": T0}).encode()])
    lines = [idle_pub | {"ts": T0, "valid_to": T0 + 100}, busy | {"ts": T0 + 5000}]
    produce_lines(bootstrap, topics.profiles, [json.dumps(r).encode() for r in lines])
    config = JobConfig(bootstrap=bootstrap, topics=topics, checkpoint=str(tmp_path / "ck"))
    counters = run_in_process(spark, config)
    got = output(bootstrap, topics)
    assert got == expected([inputs_of(bootstrap, topics)])
    events = sorted((r["event"], r["reason"]) for r in map(json.loads, got["matches"]))
    assert events == [("match", "new-profile"), ("unmatch", "expired")]
    assert counters["timers"] >= 1


def test_times_before_1970_are_judged_as_in_replay(spark, bootstrap, new_topic, tmp_path):
    """Spark's watermark starts at 0: records before 1970 are on time in the job as in
    `tsm replay`, and one late before 1970 is late in both (`streaming.spark_time`)."""
    topics = make_topics(new_topic, bootstrap)
    old = -315_619_200_000  # 1960-01-01T00:00:00Z
    sub = {"op": "subscribe", "id": "s", "space": "a", "subscriber": "u", "where": "x > 0"}
    pub = {"op": "publish", "space": "a", "attrs": {"x": 1}, "valid_to": None}
    produce_lines(bootstrap, topics.subscriptions, [json.dumps(sub | {"ts": old}).encode()])
    first_profiles = [
        pub | {"id": "p", "ts": old + 10, "valid_to": old + 20},
        pub | {"id": "q", "ts": "1969-12-31T23:59:59.999Z"},
    ]
    produce_lines(bootstrap, topics.profiles, [json.dumps(r).encode() for r in first_profiles])
    config = JobConfig(
        bootstrap=bootstrap, topics=topics, checkpoint=str(tmp_path / "ck"), lateness_ms=5
    )
    first = inputs_of(bootstrap, topics)
    run_in_process(spark, config)
    # the watermark is now -1 - 5: -7 is late, -6 is not
    second_profiles = [pub | {"id": "r", "ts": -7}, pub | {"id": "t", "ts": -6}]
    produce_lines(bootstrap, topics.profiles, [json.dumps(r).encode() for r in second_profiles])
    second = [i for i in inputs_of(bootstrap, topics) if i not in first]
    counters = run_in_process(spark, config)
    got = output(bootstrap, topics)
    assert got == expected([first, second], lateness_ms=5)
    (letter,) = map(json.loads, got["deadletter"])
    assert letter["reason"].startswith("late: ts -7 is below the watermark -6")
    events = sorted((r["event"], r["profile_id"]) for r in map(json.loads, got["matches"]))
    assert events == [("match", "p"), ("match", "q"), ("match", "t"), ("unmatch", "p")]
    assert counters["late"] == 1


@pytest.mark.slow
def test_sharded_run_equals_unsharded(spark, bootstrap, new_topic, tmp_path):
    topics = make_topics(new_topic, bootstrap, partitions=2)
    # Spaces named as the cells of `a` (`a#2.8` where it is salted) and as the dead
    # letters' key are spaces of their own in either run.
    spaces = ("a", "b", "a#1", "a#2.8", "\x00deadletter")
    subs, profiles = workload(seed=3, subs=50, profiles=250, spaces=spaces)
    produce_lines(bootstrap, topics.subscriptions, subs)
    produce_lines(bootstrap, topics.profiles, profiles)
    plain_topics = Topics(
        topics.subscriptions, topics.profiles, new_topic("m-plain", 2), new_topic("d-plain")
    )
    plain = JobConfig(bootstrap=bootstrap, topics=plain_topics, checkpoint=str(tmp_path / "c1"))
    sharding = {"a": {"attribute": "x", "width": 25, "cells": 4}}
    sharded = JobConfig(
        bootstrap=bootstrap, topics=topics, checkpoint=str(tmp_path / "c2"), sharding=sharding
    )
    plain_counters = run_in_process(spark, plain)
    counters = run_in_process(spark, sharded)
    first = inputs_of(bootstrap, topics)
    # Records late in the sharded space reach every cell: each is one dead letter.
    late = {"op": "publish", "id": "late", "space": "a", "ts": T0, "attrs": {"x": 30}}
    late_sub = {"op": "subscribe", "id": "late", "space": "a", "subscriber": "u", "ts": T0}
    produce_lines(bootstrap, topics.profiles, [json.dumps(late).encode()])
    produce_lines(
        bootstrap, topics.subscriptions, [json.dumps(late_sub | {"where": "x > 1"}).encode()]
    )
    second = [i for i in inputs_of(bootstrap, topics) if i not in first]
    plain_late, sharded_late = run_in_process(spark, plain), run_in_process(spark, sharded)
    got, got_plain = output(bootstrap, topics), output(bootstrap, plain_topics)
    assert got == got_plain
    assert got == expected([first, second])
    assert sum(json.loads(v)["reason"].startswith("late:") for v in got["deadletter"]) == 2
    assert sharded_late["late"] == plain_late["late"] == 2
    # The live gauges count each held record once, however many cells hold it.
    for name in ("subscriptions", "profiles"):
        assert counters[name] == plain_counters[name] > 0
    assert counters["keys"] > 2  # the cells of `a` ran as keys of their own
    # ... on both partitions, each where `streaming.placement` said it would be.
    placed = cell_partitions(spark, sharded.checkpoint)
    assert sorted(placed) == sorted(spread_keys("a", 4, 2))
    assert sorted(placed.values()) == [0, 0, 1, 1]
    assert all(partition_of(key, 2) == part for key, part in placed.items())


def test_placement_hashes_as_spark_partitions(spark):
    """`streaming.placement` predicts Spark's hash partitioning of string keys."""
    rng = random.Random(6)
    alphabet = "ab#.09é日\U0001f600 "
    keys = ["".join(rng.choices(alphabet, k=rng.randrange(0, 14))) for _ in range(400)]
    frame = spark.createDataFrame([(k,) for k in keys], "k string").repartition(7, "k")
    got = frame.selectExpr("k", "hash(k)", "spark_partition_id()").collect()
    assert sorted((k, h, p) for k, h, p in got) == sorted(
        (k, spark_hash(k), partition_of(k, 7)) for k in keys
    )


def cell_partitions(spark, checkpoint: str) -> dict[str, int]:
    """The shuffle partition that holds each state key of space `a`'s cells."""
    state = committed_state(spark, checkpoint, "meta").select("key.skey", "partition_id")
    return {key: part for key, part in state.collect() if key.startswith("a#")}


def test_cells_keep_their_state_keys_across_restart(
    spark, bootstrap, new_topic, tmp_path, monkeypatch
):
    """A checkpoint whose cells have plain keys (written before cells were
    spread over partitions) keeps them: renaming would orphan their state."""
    from streaming import config as job_config

    topics = make_topics(new_topic, bootstrap)
    subs, profiles = workload(seed=5, subs=40, profiles=160, churn=False)
    sharding = {"a": {"attribute": "x", "width": 25, "cells": 4}}
    config = JobConfig(
        bootstrap=bootstrap, topics=topics, checkpoint=str(tmp_path / "ck"), sharding=sharding
    )
    produce_lines(bootstrap, topics.subscriptions, subs)
    produce_lines(bootstrap, topics.profiles, profiles[:80])
    with monkeypatch.context() as patch:
        plain = {"a": cell_keys("a", 4)}
        patch.setattr(job_config, "cell_names", lambda specs, partitions, held: plain)
        run_in_process(spark, config)
    assert sorted(cell_partitions(spark, config.checkpoint)) == plain["a"]
    assert spread_keys("a", 4, 2) != plain["a"]  # (else this test proves nothing)
    produce_lines(bootstrap, topics.profiles, profiles[80:])
    run_in_process(spark, config)
    assert sorted(cell_partitions(spark, config.checkpoint)) == plain["a"]
    got = output(bootstrap, topics)
    want = expected([inputs_of(bootstrap, topics)])
    assert triples(got["matches"]) == triples(want["matches"])
    assert sum(got["matches"].values()) == sum(want["matches"].values())
    recut = replace(config, sharding={"a": {"attribute": "x", "width": 20, "cells": 5}})
    with pytest.raises(ShardingChanged, match="a on x at 25, 50, 75"):  # (before any read)
        run_in_process(spark, recut)


def test_unusable_checkpoints_and_sources_are_clear_errors(spark, bootstrap, new_topic, tmp_path):
    """What `tsm run` reports in one line (a ValueError) rather than a traceback."""
    from connectors.kafka_source import read_stream
    from streaming.listener import live_counts

    topics = make_topics(new_topic, bootstrap)
    produce_lines(bootstrap, topics.profiles, [b"{}"])
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    config = JobConfig(bootstrap=bootstrap, topics=topics, checkpoint=str(a_file / "ck"))
    with pytest.raises(ValueError, match="cannot use .*a-file/ck as the checkpoint: Not a dir"):
        run_in_process(spark, config)
    native = replace(config, checkpoint=str(tmp_path / "ck"), source="native")
    with pytest.raises(ValueError, match="source native needs Spark's Kafka connector"):
        run_in_process(spark, native)
    # The checkpoint of another stateful query (an aggregation's state, no `meta`).
    other = tmp_path / "other"
    counts = read_stream(spark, bootstrap, [topics.profiles]).groupBy("partition").count()
    query = (
        counts.writeStream.outputMode("complete")
        .format("noop")
        .option("checkpointLocation", str(other))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    with pytest.raises(ValueError, match="does not hold this job's state"):
        live_counts(spark, str(other))


def test_kafka_python_clients(spark, bootstrap, new_topic, tmp_path):
    """Records produced and matches consumed with kafka-python, not librdkafka."""
    from kafka import KafkaConsumer, KafkaProducer

    from connectors.config import kafka_python_config

    topics = make_topics(new_topic, bootstrap)
    subs, profiles = workload(seed=4, subs=10, profiles=40, churn=False)
    producer = KafkaProducer(**kafka_python_config(bootstrap))
    try:
        for topic, lines in ((topics.subscriptions, subs), (topics.profiles, profiles)):
            for line in lines:
                producer.send(topic, line)
        producer.flush()
    finally:
        producer.close()
    config = JobConfig(bootstrap=bootstrap, topics=topics, checkpoint=str(tmp_path / "ck"))
    run_in_process(spark, config)
    consumer = KafkaConsumer(
        topics.matches,
        **kafka_python_config(bootstrap),
        auto_offset_reset="earliest",
        group_id=f"kp-{time.time()}",
        consumer_timeout_ms=3000,
    )
    try:
        messages = list(consumer)
    finally:
        consumer.close()
    got = Counter(m.value for m in messages)
    keys = {m.key for m in messages}
    assert got == expected([inputs_of(bootstrap, topics)])["matches"]
    assert got and not keys - {f"u{i}".encode() for i in range(7)}


@pytest.mark.slow
def test_crash_and_restart_from_checkpoint(bootstrap, new_topic, tmp_path):
    """SIGKILL mid-stream, restart: nothing missing once duplicates are dropped. At
    least once, the operator writes the records itself (`DirectWriter`). (Exactly
    once, the sink's transactions, is killed twenty times in test_faults.py.)"""
    topics = make_topics(new_topic, bootstrap, partitions=2)
    subs, profiles = workload(seed=5, subs=40, profiles=500, churn=False)
    produce_lines(bootstrap, topics.subscriptions, subs)
    produce_lines(bootstrap, topics.profiles, profiles)
    # Nothing is late and nothing expires, whatever the batch cuts (see the module doc).
    config = write_config(tmp_path / "tsm.toml", topics, lateness_ms=10**9)
    job = tsm_run(bootstrap, config, tmp_path / "ck", "--max-records-per-trigger", "60")
    try:
        # The first batch's output is out (the JVM and workers are up): kill a later batch.
        assert wait_for_records(bootstrap, topics.matches, job, timeout=600)
        time.sleep(1.0)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    # The re-run batch keeps its planned range; later ones may be cut elsewhere.
    restart = tsm_run(bootstrap, config, tmp_path / "ck", "--available-now")
    assert restart.wait(timeout=300) == 0
    said = b"".join(log.read_bytes() for log in tmp_path.glob("run-*.log"))
    assert b"writes at least once" in said
    want = triples(expected([inputs_of(bootstrap, topics)], lateness_ms=10**9)["matches"])
    assert triples(output(bootstrap, topics)["matches"]) == want
