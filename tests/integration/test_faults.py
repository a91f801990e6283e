"""Nothing lost under faults (issue 31): the broker killed and restarted, the job
stopped by SIGINT and SIGTERM, the job killed twenty times, hostile bytes on Kafka.

Each runs `tsm run` as a subprocess against a real broker process and compares
what reached the topics with what `tsm replay` makes of the same input
(`job_harness`: the backlog, the job process, reading and comparing).
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

import pytest

from connectors.admin import create_topics
from connectors.broker import EmbeddedBroker
from connectors.config import Topics
from connectors.produce import produce_lines
from tests.integration.job_harness import (
    T0,
    JobProcess,
    assert_equals_replay,
    assert_no_failure,
    drop_duplicates,
    match_ids,
    read_topic,
    replay,
    stepped_workload,
    wait_until,
)
from tests.integration.test_job import make_topics, write_config

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Backlog:
    """Input topics that hold a stepped workload, and what `tsm replay` makes of it."""

    subscriptions: str
    profiles: str
    records: int
    expected: Counter  # the match records, as a multiset

    def topics(self, new_topic) -> Topics:
        """These inputs, and output topics of one's own."""
        return Topics(
            self.subscriptions, self.profiles, new_topic("matches", 2), new_topic("deadletter")
        )


@pytest.fixture(scope="module")
def backlog(bootstrap, new_topic, tmp_path_factory) -> Backlog:
    """The backlog the signal and kill tests share: 2 x 1,500 records on two
    partitions a topic (keyed by space, as `tsm produce` keys them)."""
    subs, profiles = stepped_workload(31, 1500)
    topics = make_topics(new_topic, bootstrap, partitions=2)
    produce_lines(bootstrap, topics.subscriptions, subs)
    produce_lines(bootstrap, topics.profiles, profiles)
    expected, dead = replay(subs, profiles, tmp_path_factory.mktemp("replay"))
    assert not dead and len(set(match_ids(expected))) == sum(expected.values()) > 1000
    return Backlog(topics.subscriptions, topics.profiles, len(subs) + len(profiles), expected)


def batches_done(job: JobProcess) -> list[int]:
    return [record["batch"] for record in job.batches()]


def rows_read(job: JobProcess) -> int:
    """Input records the job's batches took (not counting the source's watermark ticks)."""
    return sum(record["rows"] for record in job.batches())


def watermark_of(job: JobProcess) -> int | None:
    """The watermark of the last batch `job` logged (epoch ms), if any."""
    marks = [record["watermark"] for record in job.batches()]
    if not marks or marks[-1] is None:
        return None
    return round(datetime.fromisoformat(marks[-1].replace("Z", "+00:00")).timestamp() * 1000)


def wait_for_batches(job: JobProcess, count: int, timeout: float = 300) -> None:
    """Until `job` has logged `count` batches of its own (or ended)."""
    deadline = time.monotonic() + timeout
    while len(batches_done(job)) < count and job.running():
        assert time.monotonic() < deadline, f"no {count} batches in {timeout:g}s:\n{job.log()}"
        time.sleep(0.2)


# -- SIGINT and SIGTERM ------------------------------------------------------------------


@pytest.mark.slow
def test_sigint_and_sigterm_stop_between_batches(bootstrap, new_topic, backlog, tmp_path):
    """Ctrl-C (SIGINT to the process group) and SIGTERM (to the process) end the job
    between micro-batches with status 0; the restarts go on from the checkpoint and,
    at least once as the job writes by default, nothing reaches the topic twice."""
    topics = backlog.topics(new_topic)
    config = write_config(tmp_path / "tsm.toml", topics, max_records_per_trigger=300)
    checkpoint = tmp_path / "ck"
    rng = random.Random(4)
    seen = 0
    for signum, group in ((signal.SIGINT, True), (signal.SIGTERM, False)):
        job = JobProcess(bootstrap, config, checkpoint, log_path=tmp_path / f"{signum}.log")
        wait_for_batches(job, 1)
        time.sleep(rng.uniform(0, 2))  # (somewhere in a batch)
        job.send(signum, group=group)
        assert job.wait(120) == 0, job.log()
        said = job.log()
        assert "stopping after the current batch" in said
        assert_no_failure(said)
        done = batches_done(job)
        assert done and done[0] == seen, said  # went on where the last run stopped
        seen = done[-1] + 1
    final = JobProcess(bootstrap, config, checkpoint, "--available-now", log_path=tmp_path / "end")
    assert final.wait(300) == 0, final.log()
    assert batches_done(final)[0] == seen
    values = read_topic(bootstrap, topics.matches)
    ids = match_ids(values)
    assert len(set(ids)) == len(ids), f"{len(ids) - len(set(ids))} records written twice"
    assert_equals_replay(values, backlog.expected)
    assert read_topic(bootstrap, topics.deadletter) == []


def test_a_signal_while_the_job_starts_stops_it(bootstrap, new_topic, backlog, tmp_path):
    """SIGTERM before the first batch (the JVM and the session starting): status 0,
    nothing written, and a restart reads the backlog from the start."""
    topics = backlog.topics(new_topic)
    config = write_config(tmp_path / "tsm.toml", topics)
    job = JobProcess(bootstrap, config, tmp_path / "ck", log_path=tmp_path / "run.log")
    time.sleep(2.0)
    job.send(signal.SIGTERM)
    assert job.wait(120) == 0, job.log()
    assert_no_failure(job.log())
    assert job.batches() == []
    assert read_topic(bootstrap, topics.matches) == []


# -- the broker killed and restarted -----------------------------------------------------

OUTAGE_S = 10.0


def kill_broker(broker: EmbeddedBroker, job: JobProcess) -> EmbeddedBroker:
    """SIGKILL the broker under the running job, and start it again on the same port
    and data after `OUTAGE_S`.

    noida-db loses about the last second of acknowledged writes on SIGKILL
    (PLATFORM.md), which no client can make up for; so the job is frozen for
    2.5 s first, and the broker dies with everything it acknowledged on disk, as
    a Kafka broker that keeps its acknowledged writes would."""
    frozen = job.freeze()
    time.sleep(2.5)
    assert broker.process is not None
    broker.process.kill()
    broker.process.wait()
    job.thaw(frozen)
    time.sleep(OUTAGE_S)
    return EmbeddedBroker(data_dir=broker.data_dir, port=broker.port).start()


@pytest.mark.slow
def test_broker_killed_and_restarted_under_the_job(tmp_path):
    """The broker SIGKILLed and restarted on the same data, once in the middle of a
    batch and once while the job waits for input: the job waits for it and goes on,
    and after duplicates are dropped its matches equal replay's."""
    subs, profiles = stepped_workload(11, 1000)
    expected, _ = replay(subs, profiles, tmp_path / "replay")
    broker = EmbeddedBroker(data_dir=tmp_path / "broker").start()
    try:
        names = iter(range(100))

        def new_topic(prefix: str, partitions: int = 1) -> str:
            name = f"{prefix}-{next(names)}"
            create_topics(broker.bootstrap, {name: partitions})
            return name

        topics = make_topics(new_topic, broker.bootstrap, partitions=2)
        produce_lines(broker.bootstrap, topics.subscriptions, subs[:600])
        produce_lines(broker.bootstrap, topics.profiles, profiles[:600])
        broker.stop()  # (SIGTERM: noida-db saves everything)
        broker = EmbeddedBroker(data_dir=broker.data_dir, port=broker.port).start()
        config = write_config(
            tmp_path / "tsm.toml", topics, max_records_per_trigger=150, idle_ms=1000
        )
        job = JobProcess(broker.bootstrap, config, tmp_path / "ck", log_path=tmp_path / "run.log")
        try:
            wait_for_batches(job, 2)
            time.sleep(random.Random(11).uniform(0, 1.5))
            broker = kill_broker(broker, job)  # in a batch
            wait_until(lambda: rows_read(job) >= 1200, job)
            broker = kill_broker(broker, job)  # while the job waits for input
            # The rest arrives while the job is frozen, so that it finds both topics
            # filled: were it to read the subscriptions alone, the watermark would
            # pass the profiles still to come and they would be late (SEMANTICS §3).
            frozen = job.freeze()
            produce_lines(broker.bootstrap, topics.subscriptions, subs[600:])
            produce_lines(broker.bootstrap, topics.profiles, profiles[600:])
            job.thaw(frozen)
            wait_until(lambda: rows_read(job) >= 2000, job)
            # and the watermark at the last record's time: its timers fired (idle_ms)
            last = max(json.loads(line)["ts"] for line in subs + profiles)
            wait_until(lambda: watermark_of(job) == last, job)
            job.send(signal.SIGTERM)
            assert job.wait(120) == 0, job.log()
        finally:
            if job.running():
                job.kill()
        assert_no_failure(job.log())
        values = read_topic(broker.bootstrap, topics.matches)
        assert_equals_replay(drop_duplicates(values), expected)
        assert read_topic(broker.bootstrap, topics.deadletter) == []
    finally:
        broker.stop()


# -- hostile bytes on Kafka ---------------------------------------------------------------

NOT_FINITE = ("1e999", "-1e400", "1" + "0" * 400)  # past a double: refused anywhere
OUT_OF_YEARS = (*NOT_FINITE, "123456789012345678901234567890")  # as a time
PATHOLOGICAL_WHERE = (
    "x BETWEEN AND 3",
    "x > 1 AND",
    "kind = 'bus",
    "x IN ()",
    "x > TIMESTAMP 'soon'",
    "x ~ 3",
    "))((",
    "x BETWEEN 1 AND 'z'",
    "(" * 300 + "x > 1" + ")" * 300,  # nested past the parser's limit
    " AND ".join(f"(a{i} = 1 OR b{i} = 2)" for i in range(7)),  # 128 conjunctions
    "x > 1 OR " * 8000 + "x > 2",  # over 64 KB
)
WRONG_TYPES = {
    "op": [7, None, "shout", ["publish"], {"op": "publish"}],
    "id": [[1], {}, True, "", 1.5],
    "space": [[1], {}, False, "", 2.5],
    "ts": ["yesterday", True, [1], {}],
    "where": [5, ["x > 1"], {}, True],
    "subscriber": [[], False, "", {}],
    "relation": ["near", 1, [], True, ""],
    "valid_to": ["soon", True, [1], {}],
    "attrs": ["x", [1, 2], 3, True],
}


def mutated(rng: random.Random, line: bytes) -> bytes:
    """A record that SEMANTICS §6 refuses, made from the good record `line`: cut
    short, a field of the wrong type, a number out of range, nested too deep, a
    pathological filter or profile, not UTF-8, not an object, or random bytes."""
    record = json.loads(line)
    op = record["op"]
    kind = rng.randrange(6)
    if kind == 0:  # (no proper prefix of a JSON object is JSON)
        return line[: rng.randrange(1, len(line) - 1)]
    if kind == 1:
        fields = ["op", "id", "space", "ts"]
        fields += {"subscribe": ["where", "subscriber", "relation", "valid_to"]}.get(op, [])
        fields += {"publish": ["attrs", "valid_to"]}.get(op, [])
        field = rng.choice(fields)
        record[field] = rng.choice(WRONG_TYPES[field])
        return json.dumps(record).encode()
    if kind == 2:
        field = rng.choice(["ts", "valid_to", "payload"])
        if field == "valid_to" and op in ("unsubscribe", "retract"):
            field = "ts"  # (they have no validity)
        huge = rng.choice(NOT_FINITE if field == "payload" else OUT_OF_YEARS)
        record[field] = {"n": "@"} if field == "payload" else "@"
        return json.dumps(record).replace('"@"', huge, 1).encode()
    if kind == 3:
        depth = rng.choice([65, 100, 1000, 30_000])  # (the last, past json's recursion)
        text = json.dumps(record | {"payload": "@"})
        return text.replace('"@"', "[" * depth + "]" * depth, 1).encode()
    if kind == 4:
        if op == "subscribe":
            record["where"] = rng.choice(PATHOLOGICAL_WHERE)
        elif op == "publish":
            record["attrs"] = rng.choice(
                [{"x": [9, 1]}, {f"a{i}": i for i in range(300)}, {"x": {"lo": 1}}]
            )
        else:
            record["op"] = op.upper()
        return json.dumps(record).encode()
    choice = rng.randrange(3)
    if choice == 0:
        at = rng.randrange(1, len(line) - 1)
        return line[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80"]) + line[at:]
    if choice == 1:
        return rng.choice([b"null", b"[1, 2]", b"3", b'"text"', b"true", b"{}"])
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 60)))


def produce_records(bootstrap: str, topic: str, records: list[tuple]) -> None:
    """Each `(value, key, headers, timestamp)` as given: null values and keys, any
    bytes, values up to 8 MB (the producer's limit raised for them)."""
    from connectors.config import confluent_config
    from connectors.producer import Producer

    config = confluent_config(bootstrap, required={"message.max.bytes": 8_000_000})
    with Producer(config) as producer:
        for value, key, headers, stamp in records:
            producer.produce(topic, value, key, headers=headers, timestamp_ms=stamp)


@pytest.mark.slow
def test_hostile_bytes_on_kafka(bootstrap, new_topic, tmp_path):
    """10,000 mutated records, null values and keys, tombstones, bytes that are not
    UTF-8, a 5 MB value and headers, mixed into a good stream: each bad record is one
    dead letter with its reason and its Kafka position, the good ones are matched as
    `tsm replay` matches them alone, and the job runs to the end in one go.

    Every record is stamped (Kafka CreateTime) at the time of the good record it
    was made from, as a producer that writes as events happen would stamp it: a
    refused record with no readable `ts` (`{}`, a `ts` key cut by a bad byte) is
    placed in time by its Kafka timestamp (`matcher.watermark.event_time`), and
    a stamp of today among records of 2023 would move the watermark to today."""
    from matcher.admission import Input
    from matcher.encoding import encode
    from matcher.engine import Engine
    from matcher.records import Source

    rng = random.Random(5)
    topics = make_topics(new_topic, bootstrap)
    good_subs, good_profiles = stepped_workload(7, 500)
    headers = [("trace", b"\x00\xff\xfe"), ("empty", None), ("", b""), ("trace", b"again")]
    streams: dict[str, list[tuple]] = {}  # topic → (value, key, headers, bad)
    for topic, good in ((topics.subscriptions, good_subs), (topics.profiles, good_profiles)):
        records = [(line, None, None, json.loads(line)["ts"], False) for line in good]
        for _ in range(5000):
            origin = rng.choice(good)
            bad = mutated(rng, origin)
            key = rng.choice([None, b"a", b"\xff\x00", bad[:8]])
            at = rng.randrange(len(records) + 1)
            stamp = json.loads(origin)["ts"]
            records.insert(at, (bad, key, rng.choice([None, headers]), stamp, True))
        for at in rng.sample(range(len(records)), 50):  # good ones with headers and odd keys
            value, _key, _headers, stamp, bad = records[at]
            records[at] = (value, rng.choice([b"\xff\xfe", b""]), headers, stamp, bad)
        streams[topic] = records
    big = json.loads(good_profiles[0]) | {"id": "big", "payload": "x" * 5_000_000}
    specials = [
        (None, None, None, T0, True),  # a null value
        (None, b"b", None, T0, True),  # a tombstone
        (None, b"\xff", headers, T0, True),
        (b"\xff\xfe\xfd not utf-8 at all", None, None, T0, True),
        (json.dumps(big).encode(), b"a", headers, T0, True),  # 5 MB, over the 1 MiB limit
    ]
    for special in specials:
        records = streams[topics.profiles]
        records.insert(rng.randrange(len(records) + 1), special)
    for topic, records in streams.items():
        produce_records(bootstrap, topic, [r[:4] for r in records])
        assert read_topic(bootstrap, topic) == [r[0] for r in records]
    bad_positions = {
        (topic, at) for topic, records in streams.items() for at, r in enumerate(records) if r[4]
    }
    assert len(bad_positions) == 10_000 + len(specials)

    config = write_config(tmp_path / "tsm.toml", topics)
    job = JobProcess(
        bootstrap, config, tmp_path / "ck", "--available-now", log_path=tmp_path / "run.log"
    )
    assert job.wait(600) == 0, job.log()
    said = job.log()
    assert_no_failure(said)
    # one query start, and no task run again (no producer failed, no worker died)
    assert said.count('{"query": ') == 1 and "again with a new one" not in said, said

    dead = read_topic(bootstrap, topics.deadletter)
    letters = [json.loads(value) for value in dead]
    sources = {(d["source"]["topic"], d["source"]["offset"]) for d in letters}
    assert len(letters) == len(sources) == len(bad_positions)
    assert sources == bad_positions
    assert all(d["reason"] and "Traceback" not in d["reason"] for d in letters)
    # Each with the reason and the raw value that `tsm replay`'s engine gives it there
    # (a null value read as empty, as the source hands it on).
    kinds = {topics.subscriptions: "subscription", topics.profiles: "profile"}
    inputs = [
        Input(kinds[topic], value or b"", Source(topic, 0, at), stamp)
        for topic, records in streams.items()
        for at, (value, _key, _headers, stamp, _bad) in enumerate(records)
    ]
    reference = Engine().process_batch(inputs)
    assert Counter(dead) == Counter(encode(o.value) for o in reference if o.topic == "deadletter")

    matches = read_topic(bootstrap, topics.matches)
    alone, _ = replay(good_subs, good_profiles, tmp_path / "replay")
    assert sum(alone.values()) > 100
    assert_equals_replay(matches, alone)


# -- twenty SIGKILLs ------------------------------------------------------------------------


KILLS = 20


@pytest.mark.slow
def test_twenty_kills_lose_nothing(bootstrap, new_topic, backlog, tmp_path):
    """The job (driver, JVM, Python workers) SIGKILLed at 20 random points of one
    backlog read in batches of 50, each time restarted from its checkpoint, with
    `--exactly-once`: what reached the topic, read uncommitted and after duplicates
    are dropped, equals replay's (nothing lost); a read_committed reader sees no
    duplicate at all, and equals replay's too.

    (At least once, a restart after a SIGKILL is proven by test_job's and
    test_connectors' crash tests; the twenty kills run once, in the stricter mode,
    to keep the suite's time.)

    Every other kill falls in the start (the JVM's, the session's, the query's, the
    first batch's planning and Python workers), the others in the two batches after
    the first one a run finishes (reading, state, writing, commit). The last run,
    not killed, reads the rest of the backlog in batches of 1,000 (a batch size
    changed across a restart, as an operator may change it)."""
    topics = backlog.topics(new_topic)
    # (60 batches: a run killed after its first batch reads at most three, so twenty
    # kills cannot reach the end of the backlog before the last one)
    config = write_config(tmp_path / "tsm.toml", topics, max_records_per_trigger=50)
    flags = ["--available-now", "--exactly-once"]
    checkpoint, rng = tmp_path / "ck", random.Random(31)
    began = time.monotonic()
    job = JobProcess(bootstrap, config, checkpoint, *flags, log_path=tmp_path / "run-0.log")
    wait_for_batches(job, 1)
    startup = time.monotonic() - job.started  # (to the first batch's end)
    wait_for_batches(job, 2)
    batch = time.monotonic() - job.started - startup
    for kill in range(KILLS):
        if kill:
            log = tmp_path / f"run-{kill}.log"
            job = JobProcess(bootstrap, config, checkpoint, *flags, log_path=log)
            if kill % 2:
                wait_for_batches(job, 1)
                time.sleep(rng.uniform(0, 2 * batch))
            else:
                time.sleep(rng.uniform(0, startup))
        assert job.running(), f"the job ended before kill {kill + 1}:\n{job.log()}"
        job.kill()
    rest = [*flags, "--max-records-per-trigger", "1000"]
    final = JobProcess(bootstrap, config, checkpoint, *rest, log_path=tmp_path / "final.log")
    assert final.wait(600) == 0, final.log()
    assert "writes exactly once" in final.log()
    first = batches_done(final)[0]
    assert first > 10, final.log()  # (the kills were spread over the backlog)
    print(
        f"{KILLS} kills and restarts in {time.monotonic() - began:.0f}s, the last "
        f"run from batch {first} (start {startup:.1f}s, batch {batch:.1f}s)"
    )
    values = read_topic(bootstrap, topics.matches)
    assert_equals_replay(drop_duplicates(values), backlog.expected)
    committed = read_topic(bootstrap, topics.matches, read_committed=True)
    ids = match_ids(committed)
    assert len(set(ids)) == len(ids), f"{len(ids) - len(set(ids))} duplicates committed"
    assert_equals_replay(committed, backlog.expected)
    assert read_topic(bootstrap, topics.deadletter) == []
