"""Connectors against a real noida-db process and a real local Spark: no mocks.

CLI tests run `tsm` as a subprocess against a private broker; source and
sink tests share the session broker and Spark (conftest.py), each with its
own topics and checkpoint.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from connectors.broker import EmbeddedBroker, free_port
from connectors.config import confluent_config, kafka_python_config
from connectors.consume import consume_values
from connectors.errors import ProduceError
from connectors.producer import Producer

pytestmark = pytest.mark.integration


def tsm(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tsm_cli", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
    )


def read_topic(bootstrap: str, topic: str, read_committed: bool = True) -> list:
    """Every record of `topic` now, read by partition up to its end (no guessing timeouts)."""
    from confluent_kafka import Consumer, TopicPartition

    isolation = "read_committed" if read_committed else "read_uncommitted"
    consumer = Consumer(
        confluent_config(
            bootstrap,
            required={"group.id": "tests", "isolation.level": isolation, "log_level": 0},
        )
    )
    records = []
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        for p in partitions:
            tp = TopicPartition(topic, p, 0)
            end = consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
            consumer.assign([tp])
            while consumer.position([tp])[0].offset < end:
                for message in consumer.consume(end, timeout=0.2):
                    assert message.error() is None, message.error()
                    records.append(message)
    finally:
        consumer.close()
    return records


def produce(bootstrap: str, topic: str, values: list[bytes], keys: list | None = None) -> None:
    with Producer(confluent_config(bootstrap)) as producer:
        for i, value in enumerate(values):
            producer.produce(topic, value, None if keys is None else keys[i])


# --- CLI: broker, topics, produce, consume -----------------------------------------------


@pytest.fixture(scope="module")
def cli_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private broker: `tsm topics create` uses the fixed tsm topic names."""
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("cli-broker")) as broker:
        yield broker.bootstrap


def test_broker_start_status_stop(tmp_path: Path, bootstrap: str) -> None:
    data_dir, port = str(tmp_path / "broker"), free_port()
    started = tsm("broker", "start", "--port", str(port), "--data-dir", data_dir)
    assert started.returncode == 0, started.stderr
    try:
        assert started.stdout.decode().strip() == f"localhost:{port}"
        status = tsm("broker", "status", "--data-dir", data_dir)
        assert status.returncode == 0
        assert status.stdout.decode() == f"localhost:{port}\n"  # data only: the address
        assert f"running at localhost:{port}" in status.stderr.decode()
        again = tsm("broker", "start", "--port", str(port), "--data-dir", data_dir)
        assert again.returncode == 0 and again.stdout.decode().strip() == f"localhost:{port}"
        # Another data dir on a taken port: a clear error, not a hang.
        taken = bootstrap.rsplit(":", 1)[1]
        clash = tsm("broker", "start", "--port", taken, "--data-dir", str(tmp_path / "other"))
        assert clash.returncode != 0
        assert f"port {taken} is already in use" in clash.stderr.decode()
        beyond = tsm("broker", "start", "--port", "99999", "--data-dir", str(tmp_path / "other"))
        assert beyond.returncode == 2
        assert "expected a whole number from 1 to 65535, got '99999'" in beyond.stderr.decode()
        never = tsm("broker", "start", "--timeout", "0", "--data-dir", str(tmp_path / "other"))
        assert never.returncode == 2 and "positive number of seconds" in never.stderr.decode()
        # A pid file left behind by a broker of another data dir: not this one's.
        stale = tmp_path / "stale"
        stale.mkdir()
        record = json.loads((tmp_path / "broker" / "tsm-broker.json").read_text())
        (stale / "tsm-broker.json").write_text(json.dumps(record))
        status = tsm("broker", "status", "--data-dir", str(stale))
        assert status.returncode == 1 and status.stdout == b""
        assert b"not running" in status.stderr
        assert tsm("broker", "stop", "--data-dir", str(stale)).returncode == 0
        assert tsm("broker", "status", "--data-dir", data_dir).returncode == 0  # still up
        a_file = tmp_path / "a-file"
        a_file.write_text("")
        not_a_dir = tsm("broker", "stop", "--data-dir", str(a_file))
        assert not_a_dir.returncode == 0 and b"not running" in not_a_dir.stderr
    finally:
        stopped = tsm("broker", "stop", "--data-dir", data_dir)
    assert stopped.returncode == 0, stopped.stderr
    status = tsm("broker", "status", "--data-dir", data_dir)
    assert status.returncode == 1 and status.stdout == b""
    assert b"not running" in status.stderr
    assert (tmp_path / "broker" / "kafka.json").exists()  # SIGTERM saved the data


def test_topics_create_is_idempotent(cli_bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    first = tsm("topics", "create", "--bootstrap", cli_bootstrap, "--partitions", "3")
    assert first.returncode == 0, first.stderr
    second = tsm("topics", "create", "--bootstrap", cli_bootstrap, "--partitions", "3")
    assert second.returncode == 0, second.stderr
    assert second.stderr.decode().count("exists") == 5
    admin = AdminClient(confluent_config(cli_bootstrap))
    topics = admin.list_topics(timeout=10).topics
    for name in ("tsm.subscriptions", "tsm.profiles", "tsm.matches", "tsm.deadletter"):
        assert len(topics[name].partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, "tsm.profiles")
    config = admin.describe_configs([resource])[resource].result()
    assert config["retention.ms"].value == "-1"


def test_unreachable_broker_is_a_clear_error() -> None:
    result = tsm("consume", "matches", "--bootstrap", f"localhost:{free_port()}", "--timeout", "1")
    assert result.returncode == 2
    assert "no Kafka broker answers" in result.stderr.decode()


def test_refused_client_setting_is_a_clear_error(cli_bootstrap: str) -> None:
    result = tsm("consume", "matches", "--bootstrap", cli_bootstrap, "--kafka", "foo=bar")
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        'tsm consume: error: Kafka client settings: No such configuration property: "foo"'
    ]


def test_produce_consume_round_trip(cli_bootstrap: str, tmp_path: Path) -> None:
    from kafka import KafkaConsumer, TopicPartition

    assert tsm("topics", "create", "--bootstrap", cli_bootstrap).returncode == 0
    good = [
        json.dumps({"op": "publish", "id": f"p{i}", "space": f"space-{i % 3}"}).encode()
        for i in range(30)
    ]
    bad = [b"not json", b'{"op": "publish", "id": "\xff\xfe"}', b'["no", "space"]']
    path = tmp_path / "profiles.jsonl"
    path.write_bytes(b"\n".join(good[:15] + bad) + b"\n\n" + b"\r\n".join(good[15:]) + b"\r\n")

    result = tsm("produce", "profiles", str(path), "--bootstrap", cli_bootstrap)
    assert result.returncode == 0, result.stderr
    assert "produced 33 records to tsm.profiles" in result.stderr.decode()
    from_stdin = tsm("produce", "profiles", "-", "--bootstrap", cli_bootstrap, stdin=good[0])
    assert from_stdin.returncode == 0, from_stdin.stderr

    # kafka-python as a second, independent client: values unchanged, keyed by space.
    consumer = KafkaConsumer(**kafka_python_config(cli_bootstrap), enable_auto_commit=False)
    try:
        consumer.assign(
            [
                TopicPartition("tsm.profiles", p)
                for p in consumer.partitions_for_topic("tsm.profiles")
            ]
        )
        consumer.seek_to_beginning()
        records = []
        deadline = time.monotonic() + 30
        while len(records) < 34 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
    finally:
        consumer.close()
    assert sorted(r.value for r in records) == sorted(good + bad + good[:1])
    partition_of_space: dict[bytes, set[int]] = {}
    for r in records:
        expected_key = json.loads(r.value)["space"].encode() if r.value in good else None
        assert r.key == expected_key
        partition_of_space.setdefault(r.key, set()).add(r.partition)
    assert all(len(ps) == 1 for key, ps in partition_of_space.items() if key is not None)


def test_produce_names_lines_too_large_for_kafka_and_sends_the_rest(
    cli_bootstrap: str, tmp_path: Path
) -> None:
    from connectors.admin import create_topics

    create_topics(cli_bootstrap, {"big-lines": 1})
    big = json.dumps({"op": "publish", "id": "big", "space": "s", "payload": "x" * 1_200_000})
    lines = [b'{"op": "publish", "id": "a", "space": "s"}', b"", big.encode(), b"[1]"]
    path = tmp_path / "profiles.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    result = tsm(
        "produce", "profiles", str(path), "--bootstrap", cli_bootstrap, "--topic", "big-lines"
    )
    said = result.stderr.decode()
    assert result.returncode == 2, said
    assert "2 records produced to big-lines" in said
    assert (
        f"1 line(s) too large for one Kafka message, not sent: line 3 ({len(big):,} bytes)" in said
    )
    got = list(consume_values(cli_bootstrap, "big-lines", from_beginning=True, timeout=5))
    assert sorted(got) == sorted([lines[0], lines[3]])

    # `tsm consume`: one JSON line per record; non-JSON values as JSON strings.
    shown = tsm(
        "consume", "matches", "--bootstrap", cli_bootstrap, "--topic", "tsm.profiles",
        "--from-beginning", "--max", "34",
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.decode().splitlines()
    assert len(lines) == 34
    parsed = [json.loads(line) for line in lines]
    assert sum(isinstance(p, dict) and "space" in p for p in parsed) == 31
    assert "not json" in parsed


def test_consume_read_committed_and_timeout(cli_bootstrap: str) -> None:
    assert tsm("topics", "create", "--bootstrap", cli_bootstrap).returncode == 0
    producer = Producer(confluent_config(cli_bootstrap), transactional_id="t-test")
    try:
        producer.init_transactions(10)
        for outcome in ("aborted", "committed"):
            producer.begin_transaction()
            for i in range(3):
                producer.produce("tsm.deadletter", json.dumps({outcome: i}).encode())
            if outcome == "aborted":
                producer.flush(10)  # on the broker, not just purged from the local queue
                producer.abort_transaction(10)
            else:
                producer.commit_transaction(10)
    finally:
        producer.close()
    args = ["consume", "deadletter", "--bootstrap", cli_bootstrap, "--from-beginning"]
    committed = tsm(*args, "--read-committed", "--timeout", "1")
    assert committed.returncode == 0, committed.stderr
    assert [json.loads(x) for x in committed.stdout.decode().splitlines()] == [
        {"committed": i} for i in range(3)
    ]
    everything = tsm(*args, "--timeout", "1")
    assert len(everything.stdout.decode().splitlines()) == 6
    # The quiet period starts once the group assigned the partitions (about half a
    # second here), so that a short one still reads what is there.
    short = tsm(*args, "--timeout", "0.3")
    assert len(short.stdout.decode().splitlines()) == 6
    for bad in ("0", "-1", "nan", "inf"):
        refused = tsm(*args, "--timeout", bad)
        assert refused.returncode == 2 and "positive number of seconds" in refused.stderr.decode()


# --- Spark source ------------------------------------------------------------------------


def test_offset_planning() -> None:
    """The source's offset arithmetic (pure; here because it is the source's contract)."""
    from connectors import offsets as off

    marks = {("a", 0): (0, 10), ("a", 1): (0, 3), ("b", 0): (5, 5), ("b", 1): (0, 100)}
    start = off.starting_offsets("earliest", marks)
    assert start == {"a": {"0": 0, "1": 0}, "b": {"0": 5, "1": 0}}
    assert off.starting_offsets("latest", marks)["b"] == {"0": 5, "1": 100}
    given = json.dumps({"a": {"0": -1, "1": 2}, "b": {"0": -2, "1": 7}})
    assert off.starting_offsets(given, marks) == {"a": {"0": 10, "1": 2}, "b": {"0": 5, "1": 7}}
    with pytest.raises(ValueError, match="every partition"):
        off.starting_offsets(json.dumps({"a": {"0": 1}}), marks)

    for limit in (1, 7, 57, 112, 113, 1000):
        end = off.flatten(off.next_end(start, marks, limit))
        taken = {tp: end[tp] - o for tp, o in off.flatten(start).items()}
        assert sum(taken.values()) == min(limit, 113)
        assert all(0 <= taken[tp] <= marks[tp][1] - off.flatten(start)[tp] for tp in taken)
    # A new partition is read from its low watermark in the same batch, its backlog
    # shared under a limit like any other's.
    grown = {**marks, ("c", 0): (4, 9)}
    assert off.next_end(start, grown, None)["c"] == {"0": 9}
    assert off.next_end(start, grown, 59)["c"] == {"0": 6}  # (5 of 118: 2.5 of 59)
    # Trigger.AvailableNow: nothing past the target, no partition born after it.
    capped = off.cap(grown, {("a", 0): 9, ("a", 1): 2, ("b", 0): 5, ("b", 1): 99})
    assert off.next_end(start, capped, None) == {"a": {"0": 9, "1": 2}, "b": {"0": 5, "1": 99}}


def run_available_now(stream, checkpoint: Path, on_batch=None) -> list[list[tuple]]:
    """Run `stream` to the end of the data present now; return each batch's rows."""
    batches: list[list[tuple]] = []

    def collect(df, batch_id: int) -> None:
        rows = [(r.topic, r.partition, r.offset, r.value) for r in df.collect()]
        if on_batch is not None:
            on_batch(batch_id, rows)
        batches.append(rows)

    query = (
        stream.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    return batches


def test_source_reads_each_record_once_across_restarts(
    spark, bootstrap: str, new_topic, tmp_path: Path
) -> None:
    from connectors.kafka_source import SCHEMA, read_stream

    topics = [new_topic("src-a", partitions=3), new_topic("src-b", partitions=2)]

    def produce_round(n: int, tag: str) -> set[bytes]:
        values = {t: [f"{tag}-{t}-{i}".encode() for i in range(n)] for t in topics}
        for t in topics:
            produce(bootstrap, t, values[t], keys=[str(i).encode() for i in range(n)])
        return {v for vs in values.values() for v in vs}

    first = produce_round(300, "r1")
    checkpoint = tmp_path / "checkpoint"
    stream = read_stream(spark, bootstrap, topics, max_records_per_trigger=250)
    assert stream.schema == SCHEMA

    batches = run_available_now(stream, checkpoint)
    assert [len(b) for b in batches] == [250, 250, 100]  # admission control, then the rest
    rows = [r for b in batches for r in b]
    assert sorted(r[3] for r in rows) == sorted(first)
    assert len({(t, p, o) for t, p, o, _ in rows}) == len(rows)

    # Restart after more data arrives; a batch fails once after reading:
    # the re-run must read exactly the same offset ranges.
    second = produce_round(200, "r2")
    attempts: dict[int, list[tuple]] = {}

    def fail_once(batch_id: int, rows: list[tuple]) -> None:
        if batch_id not in attempts:
            attempts[batch_id] = rows
            if len(attempts) == 1:
                raise RuntimeError("simulated crash")

    with pytest.raises(Exception, match="simulated crash"):
        run_available_now(stream, checkpoint, on_batch=fail_once)
    [failed_rows] = attempts.values()
    batches = run_available_now(stream, checkpoint, on_batch=fail_once)
    assert sorted(batches[0]) == sorted(failed_rows)
    rows = [r for b in batches for r in b]
    assert sorted(r[3] for r in rows) == sorted(second)
    assert all(len(b) <= 250 for b in batches)

    # A partition added to a topic is read from its start in the same batch as the
    # others (a batch later, its records could be late against what came with it).
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient(confluent_config(bootstrap))
    admin.create_partitions([NewPartitions(topics[1], 3)])[topics[1]].result(30)
    with Producer(confluent_config(bootstrap)) as producer:
        for partition in (2, 0):
            producer.produce(topics[1], f"grown-{partition}".encode(), partition=partition)
    [batch] = run_available_now(stream, checkpoint)
    assert sorted((p, v) for _t, p, _o, v in batch) == [(0, b"grown-0"), (2, b"grown-2")]


def test_source_starting_offsets_and_record_fields(
    spark, bootstrap: str, new_topic, tmp_path: Path
) -> None:
    from connectors.kafka_source import read_stream

    topic = new_topic("src-fields", partitions=2)
    with Producer(confluent_config(bootstrap)) as producer:
        for i in range(10):
            headers = [("h", b"\x00\x01"), ("empty", None)] if i == 0 else None
            key = b"k" if i % 2 else None
            producer.produce(topic, b"v%d" % i, key, partition=i % 2, headers=headers)
    starting = json.dumps({topic: {"0": 2, "1": -2}})
    stream = read_stream(spark, bootstrap, topic, starting_offsets=starting)
    rows = []
    query = (
        stream.writeStream.foreachBatch(lambda df, _id: rows.extend(df.collect()))
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    by_value = {r.value: r for r in rows}
    assert sorted(by_value) == sorted([b"v%d" % i for i in range(1, 10, 2)] + [b"v4", b"v6", b"v8"])
    odd = by_value[b"v1"]
    assert (odd.key, odd.topic, odd.partition, odd.offset) == (b"k", topic, 1, 0)
    assert odd.timestampType == 0 and odd.timestamp.year >= 2024 and odd.headers is None
    assert by_value[b"v4"].key is None and by_value[b"v4"].offset == 2


# --- Spark sink --------------------------------------------------------------------------


def sink_frame(spark, topic: str, n: int, partitions: int = 2):
    rows = [(topic, f"k{i % 5}".encode(), f"v{i}".encode()) for i in range(n)]
    return spark.createDataFrame(rows, "topic string, key binary, value binary").repartition(
        partitions
    )


def test_sink_idempotent_writes_every_record(spark, bootstrap: str, new_topic) -> None:
    from connectors.kafka_sink import write_batch

    topic = new_topic("sink-idem", partitions=3)
    report = write_batch(sink_frame(spark, topic, 500), 0, bootstrap, query_name="idem")
    assert report == {"written": 500, "skipped": 0}
    values = sorted(m.value() for m in read_topic(bootstrap, topic))
    assert values == sorted(f"v{i}".encode() for i in range(500))


def test_sink_exactly_once_skips_a_rerun_batch(spark, bootstrap: str, new_topic) -> None:
    from connectors.admin import create_topics
    from connectors.config import SINK_COMMITS_TOPIC
    from connectors.kafka_sink import write_batch

    create_topics(bootstrap, {SINK_COMMITS_TOPIC: 1})
    topic = new_topic("sink-eos", partitions=3)
    df = sink_frame(spark, topic, 400).cache()
    name = f"eos-{topic}"
    assert write_batch(df, 5, bootstrap, query_name=name, exactly_once=True) == {
        "written": 400,
        "skipped": 0,
    }
    rerun = write_batch(df, 5, bootstrap, query_name=name, exactly_once=True)
    assert rerun == {"written": 0, "skipped": 2}
    assert write_batch(df, 6, bootstrap, query_name=name, exactly_once=True)["written"] == 400
    values = sorted(m.value() for m in read_topic(bootstrap, topic))
    assert values == sorted([f"v{i}".encode() for i in range(400)] * 2)  # batches 5 and 6


def test_sink_exactly_once_aborts_a_failed_attempt(bootstrap: str, new_topic) -> None:
    import pyarrow as pa

    from connectors.admin import create_topics
    from connectors.config import SINK_COMMITS_TOPIC
    from connectors.kafka_sink import write_exactly_once

    create_topics(bootstrap, {SINK_COMMITS_TOPIC: 1})
    topic = new_topic("sink-abort", partitions=1)
    batch = pa.RecordBatch.from_pylist(
        [{"topic": topic, "key": None, "value": f"v{i}".encode()} for i in range(50)]
    )

    def dies_midway() -> Iterator[pa.RecordBatch]:
        yield batch
        time.sleep(1)  # the records reach the broker inside the open transaction
        raise RuntimeError("task killed")

    config = confluent_config(bootstrap)
    with pytest.raises(RuntimeError, match="task killed"):
        write_exactly_once(config, dies_midway(), "abort", "q1", 0, 3)
    assert write_exactly_once(config, iter([batch]), "abort", "q1", 0, 3) == (50, False)
    assert write_exactly_once(config, iter([batch]), "abort", "q1", 0, 3) == (0, True)
    assert len(read_topic(bootstrap, topic, read_committed=True)) == 50
    assert len(read_topic(bootstrap, topic, read_committed=False)) == 100  # the aborted try


def test_direct_writer_writes_in_order_and_recovers(bootstrap: str, new_topic, monkeypatch) -> None:
    """The operator's at-least-once output: records in order, nothing in the stage's
    frames, one producer per worker; a failed producer is dropped, not reused."""
    from connectors import outlet as outlet_module
    from connectors.admin import create_topics, delete_topics
    from connectors.errors import RecordTooLarge
    from connectors.outlet import DirectWriter, outlet, pack
    from connectors.producer_pool import WORKER_PRODUCERS

    topic = new_topic("direct", partitions=1)
    config = confluent_config(bootstrap)
    held = len(WORKER_PRODUCERS)
    records = [(f"k{i % 3}".encode(), f"v{i}".encode()) for i in range(300)]
    writer = outlet(topic, config)
    assert isinstance(writer, DirectWriter)
    frames = list(writer.add(records[:100])) + list(writer.add(records[100:]))
    frames += list(writer.flush())
    assert frames == [] and writer.count == 300
    assert list(pack(topic, [(None, b"last")], config)) == []  # the same producer
    assert len(WORKER_PRODUCERS) == held + 1
    got = [(m.key(), m.value()) for m in read_topic(bootstrap, topic)]
    assert got == [*records, (None, b"last")]
    # The topic deleted and made again: the producer's idempotence sequence is lost
    # (a fatal error); a new producer writes the records since the last flush again.
    delete_topics(bootstrap, [topic])
    create_topics(bootstrap, {topic: 1})
    list(pack(topic, records[:50], config))
    assert [(m.key(), m.value()) for m in read_topic(bootstrap, topic)] == records[:50]
    # Past KEPT records since the last flush, they are not kept: the task fails instead.
    monkeypatch.setattr(outlet_module, "KEPT", 30)
    delete_topics(bootstrap, [topic])
    create_topics(bootstrap, {topic: 1})
    with pytest.raises(ProduceError, match=r"^the Kafka producer failed: |not acknowledged"):
        list(pack(topic, records[:50], config))
    assert len(WORKER_PRODUCERS) == held
    monkeypatch.undo()
    with pytest.raises(RecordTooLarge, match="2,000,000 bytes"):  # over message.max.bytes, twice
        DirectWriter(topic, config).add([(None, b"x" * 2_000_000)])
    assert len(WORKER_PRODUCERS) == held  # the next task starts with a new producer
    list(pack(topic, [(None, b"after")], config))
    assert read_topic(bootstrap, topic)[-1].value() == b"after"
    WORKER_PRODUCERS.close()


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "idempotent"])
def test_pipeline_crash_after_sink_commit(
    spark, bootstrap: str, new_topic, tmp_path: Path, exactly_once: bool
) -> None:
    """Source → sink; the driver dies after the sink wrote batch 1 but before Spark
    committed it. On restart Spark re-runs batch 1: exactly-once writes it once."""
    from pyspark.sql import functions as F

    from connectors.kafka_sink import foreach_batch_writer
    from connectors.kafka_source import read_stream

    source, sink = new_topic("pipe-in", partitions=2), new_topic("pipe-out", partitions=2)
    produce(bootstrap, source, [f"r{i}".encode() for i in range(300)])
    stream = read_stream(spark, bootstrap, source, max_records_per_trigger=100).select(
        F.lit(sink).alias("topic"), "key", "value"
    )
    write = foreach_batch_writer(bootstrap, f"pipe-{sink}", exactly_once=exactly_once)
    crashed = []

    def write_then_crash(df, batch_id: int) -> None:
        write(df, batch_id)
        if batch_id == 1 and not crashed:
            crashed.append(batch_id)
            raise RuntimeError("driver died before the batch commit")

    def run() -> None:
        query = (
            stream.writeStream.foreachBatch(write_then_crash)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        finally:
            query.stop()

    with pytest.raises(Exception, match="driver died"):
        run()
    run()
    values = [m.value() for m in read_topic(bootstrap, sink)]
    expected = [f"r{i}".encode() for i in range(300)]
    if exactly_once:
        assert sorted(values) == sorted(expected)
    else:  # at least once: batch 1 (100 records) written twice
        assert sorted(set(values)) == sorted(expected) and len(values) == 400
