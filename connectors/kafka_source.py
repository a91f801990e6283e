"""Kafka source for Spark Structured Streaming, as a Python Data Source (`tsm-kafka`).

Spark's JVM Kafka connector cannot be downloaded here (PLATFORM.md), so this
source plans and reads Kafka with confluent-kafka, and gives rows with
exactly the built-in source's schema (with `includeHeaders`), so that
`read_stream(..., source="native")` can swap in `format("kafka")` where the
connector is on the classpath.

Reading is exactly-once: the driver plans each micro-batch as offset ranges
(one `InputPartition` per topic-partition) and Spark writes the end offsets
(JSON, `{"topic": {"partition": offset}}`) to the checkpoint before the batch
runs; a batch re-run after a crash gets the same ranges back from the
checkpoint, and a range is read by offset, never by consumer-group position.

Options: `subscribe` (comma-separated topics), `kafka.bootstrap.servers` and
any other `kafka.<librdkafka setting>`, `startingOffsets` (`earliest`,
`latest` (default, like Spark) or JSON like `{"t":{"0":23,"1":-2}}`),
`maxRecordsPerTrigger`, `kafkaConsumer.pollTimeoutMs` (how long a task may
wait for records it knows exist; default 120000, as in Spark). A range whose
records were deleted (retention) fails the query, like Spark's default
`failOnDataLoss=true`.

Transactions: librdkafka reads `read_committed` by default, so the planner
sees the last stable offset and tasks skip aborted records and transaction
markers; a range's offsets can then hold fewer records than their count.

Event time (`eventTime = true`, the job's setting): batches are planned by the
records' event time (SEMANTICS §3, `matcher.watermark`). The driver reads each
partition's next records ahead (at most `maxRecordsPerTrigger` of each), keeps
their offsets and times (`ts`, read alone, or the Kafka timestamp) between
batches, and cuts a batch at a common time: every partition gives its records
up to it, in offset order. The offset it writes to the checkpoint
(`offsets.Mark`) adds the largest time read from each partition and the
batch's watermark: the smallest of those over the partitions that hold it back
(records left to read, or drained less than `eventTime.idleMs` ago, default
10000; an empty partition never; under Trigger.AvailableNow, none that reached
the run's end offset). Every row of the batch carries that watermark in an
extra column `watermark` (epoch ms, null before any time), so a re-run batch
carries the same; where the watermark moves with no record to read (a
partition went idle), the batch is one row with only `watermark` set. Topics
in `subscribe` order, then partition numbers, break ties of time (SEMANTICS
§5: the job names the subscriptions topic first). Checkpoints of the plain
form are read too. Spark's JVM connector (`source = "native"`) knows none of
this: its watermark is the largest time seen in any partition.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from connectors import offsets as off
from connectors.config import confluent_config, java_client_options
from matcher.watermark import NO_TIME, Idleness, event_time

NAME = "tsm-kafka"

# Spark's Kafka source schema with includeHeaders=true, field for field.
SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)

# With `eventTime`: the batch's watermark (before the allowed lateness), epoch ms.
EVENT_TIME_SCHEMA = StructType([*SCHEMA.fields, StructField("watermark", LongType())])

# Records per Arrow batch handed to Spark, and per consume() call.
CHUNK = 10_000
# How long a partition with nothing to read holds the watermark back (eventTime.idleMs).
DEFAULT_IDLE_MS = 10_000
# librdkafka timestamp type (0 none, 1 create, 2 log append) → Spark's (-1, 0, 1).
_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}
# A timestamp is any 64-bit count of milliseconds; one whose microseconds overflow 64
# bits (about 292,000 years from 1970) reads as null rather than failing the batch.
_MAX_MS = (2**63 - 1) // 1000


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets [start, end) of one topic-partition: one Spark task; `watermark`: the
    batch's, which every row carries (with `eventTime`)."""

    topic: str
    partition: int
    start: int
    end: int
    watermark: int | None = None


@dataclass(frozen=True)
class Tick(InputPartition):
    """A batch with no record whose watermark moved: one row carrying it."""

    watermark: int


class KafkaDataSource(DataSource):
    """`spark.readStream.format("tsm-kafka")`; see the module docstring for options."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return EVENT_TIME_SCHEMA if _flag(self.options, "eventTime") else SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(self.options)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans batches on the driver (offsets, limits) and reads ranges on executors.

    Spark pickles a freshly made reader to the executors, so the driver's
    metadata consumer is created lazily and never travels.
    """

    def __init__(self, options: Mapping[str, str]):
        topics = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
        if not topics:
            raise ValueError("option `subscribe` (comma-separated topic names) is required")
        if "kafka.bootstrap.servers" not in options:
            raise ValueError("option `kafka.bootstrap.servers` is required")
        self.topics = sorted(set(topics))
        # (SEMANTICS §5's tie order of partitions: the topics as named, then by number)
        self.topic_rank = {topic: rank for rank, topic in enumerate(dict.fromkeys(topics))}
        self.client_options = {k: v for k, v in options.items() if k.startswith("kafka.")}
        self.starting = options.get("startingOffsets", "latest")
        limit = options.get("maxRecordsPerTrigger")
        self.max_rows = int(limit) if limit is not None else None
        if self.max_rows is not None and self.max_rows < 1:
            raise ValueError("maxRecordsPerTrigger must be at least 1")
        self.poll_timeout = int(options.get("kafkaConsumer.pollTimeoutMs", "120000")) / 1000
        self.event_time = _flag(options, "eventTime")
        self.idle_ms = int(options.get("eventTime.idleMs", DEFAULT_IDLE_MS))
        if self.idle_ms < 0:
            raise ValueError("eventTime.idleMs must be 0 or more")
        self._planner = None  # confluent_kafka.Consumer, driver only
        self._listed: set[tuple[str, int]] = set()  # partitions the broker has listed
        self._target: dict[tuple[str, int], int] | None = None  # Trigger.AvailableNow
        self._latest: off.Offsets | None = None
        self._ahead: dict[tuple[str, int], off.ReadAhead] = {}  # eventTime, driver only
        self._idleness = Idleness(self.idle_ms)

    # --- driver ---------------------------------------------------------------

    def _config(self, group: str) -> dict[str, object]:
        bootstrap = self.client_options["kafka.bootstrap.servers"]
        return confluent_config(
            bootstrap,
            self.client_options,
            # (a deleted range must fail the query, Spark's failOnDataLoss, not be skipped)
            required={"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "error"},
        )

    def _watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(low, high) of every partition of the subscribed topics; missing topics have none.

        A broker that does not answer (restarting, say) is waited for as a reading
        task waits for records (`_fetch`): up to the poll timeout, then the query fails.
        So is one whose metadata lacks a partition it listed before (a broker still
        loading its partitions after a restart): planned without it, a batch would
        let the watermark pass that partition's records, and they would be late."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.poll_timeout
        while True:
            try:
                marks = self._read_watermarks()
                missing = sorted(self._listed - marks.keys())
                if not missing:
                    self._listed |= marks.keys()
                    return marks
                problem = "the broker's metadata lacks partitions it listed: " + ", ".join(
                    f"{topic}[{partition}]" for topic, partition in missing
                )
            except KafkaException as exc:
                error = exc.args[0]
                if not _passing(error):
                    raise
                problem = error.str()
            if time.monotonic() > deadline:
                message = _unanswered(self.client_options, self.poll_timeout, problem)
                raise TimeoutError(message) from None
            time.sleep(1.0)

    def _read_watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        from confluent_kafka import Consumer, TopicPartition

        if self._planner is None:
            self._planner = Consumer(self._config("tsm-source-planner"))
        marks = {}
        for topic in self.topics:
            metadata = self._planner.list_topics(topic, timeout=10).topics[topic]
            if metadata.error is not None:  # not created yet: wait for it, like Spark
                continue
            for partition in metadata.partitions:
                marks[(topic, partition)] = self._planner.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=10, cached=False
                )
        return marks

    def initialOffset(self) -> dict:
        start = off.starting_offsets(self.starting, self._watermarks())
        return off.Mark(off.flatten(start)).to_json() if self.event_time else start

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_rows is None else ReadMaxRows(self.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {tp: hi for tp, (_lo, hi) in self._watermarks().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._listed.update(off.read_mark(start).positions)  # (read before: listed then)
        marks = self._watermarks()
        self._latest = off.canonical({tp: hi for tp, (_lo, hi) in marks.items()})
        if self._target is not None:
            marks = off.cap(marks, self._target)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if not self.event_time:
            return off.next_end(off.positions(start), marks, max_rows)
        mark = off.read_mark(start)
        ahead = {}
        for tp, (lo, hi) in marks.items():
            begin = mark.positions.get(tp, lo)
            if hi > begin:
                ahead[tp] = self._read_ahead(tp, begin, hi, max_rows)
        for tp in set(self._ahead) - set(ahead):
            del self._ahead[tp]
        now = time.monotonic() * 1000

        def holds(tp: tuple[str, int], waiting: bool, seen: bool) -> bool:
            if self._target is not None:  # AvailableNow: drained is drained for the run
                return waiting
            return self._idleness.holds(tp, waiting=waiting, seen=seen, now=now)

        order = self._tie_order
        end = off.plan_by_event_time(mark, marks, ahead, max_rows, order, holds)
        return end.to_json()

    def _tie_order(self, tp: tuple[str, int]) -> tuple[int, int]:
        return (self.topic_rank.get(tp[0], len(self.topic_rank)), tp[1])

    def _read_ahead(
        self, tp: tuple[str, int], begin: int, high: int, max_rows: int | None
    ) -> off.ReadAhead:
        """`tp`'s next records from `begin`, at least `max_rows` of them or all up to
        `high`, read on the driver once: what an earlier call read is kept."""
        read = self._ahead.get(tp)
        if read is None:
            read = self._ahead[tp] = off.ReadAhead(begin)
        read.move_to(begin)
        want = high - begin if max_rows is None else max_rows
        while len(read.offsets) < want and read.end < high:
            stop = min(high, read.end + want - len(read.offsets))
            offsets, times = [], []
            part = OffsetRange(tp[0], tp[1], read.end, stop)
            try:
                for messages in _fetch(self._planner, part, self.poll_timeout):
                    offsets += [m.offset() for m in messages]
                    times += [_event_time(m) for m in messages]
            finally:
                self._planner.unassign()  # (an assigned consumer fetches on: PLATFORM.md)
            read.add(offsets, times, stop)
        return read

    def reportLatestOffset(self) -> off.Offsets | None:
        return self._latest

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        first, last = off.read_mark(start), off.read_mark(end)
        begin, stops = first.positions, last.positions
        new = [tp for tp in stops if tp not in begin]
        if new:  # partitions that appeared: read from their low watermark (`off.next_end`)
            marks = self._watermarks()
            begin.update((tp, marks[tp][0] if tp in marks else stops[tp]) for tp in new)
        watermark = last.watermark if self.event_time else None
        ranges: list[InputPartition] = [
            OffsetRange(topic, partition, begin[(topic, partition)], stop, watermark)
            for (topic, partition), stop in sorted(stops.items())
            if stop > begin[(topic, partition)]
        ]
        if not ranges and watermark is not None and watermark != first.watermark:
            ranges.append(Tick(watermark))
        return ranges

    def commit(self, end: off.Offsets) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None

    # --- executors ------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        schema = EVENT_TIME_SCHEMA if self.event_time else SCHEMA
        if isinstance(partition, Tick):
            return iter([_tick(partition.watermark, schema)])
        return read_range(
            self._config("tsm-source-reader"), partition, self.poll_timeout, schema=schema
        )


def _flag(options: Mapping[str, str], name: str) -> bool:
    value = options.get(name, "false").strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, got {value!r}")
    return value == "true"


def _event_time(message: object) -> int:
    """A record's event time for the planner (`NO_TIME` for none), as the decode stage
    reads it: `ts`, or the Kafka timestamp where there is one."""
    kind, stamp = message.timestamp()
    found = event_time(message.value(), stamp if kind else None)
    return NO_TIME if found is None else found


def read_range(
    config: dict[str, object],
    part: OffsetRange,
    poll_timeout: float,
    schema: StructType = SCHEMA,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of `part` as Arrow record batches of `schema` (the source's)."""
    from confluent_kafka import Consumer
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    # A deleted range must fail the query (Spark's failOnDataLoss), not be skipped.
    consumer = Consumer({**config, "auto.offset.reset": "error"})
    try:
        for messages in _fetch(consumer, part, poll_timeout):
            yield _to_arrow(messages, arrow_schema, part.watermark)
    finally:
        consumer.close()


def _passing(error: object) -> bool:
    """Whether a Kafka client error is one to wait out: the broker unreachable for a
    while (down, restarting) or another error the client retries by itself."""
    from confluent_kafka import KafkaError

    waited = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT)
    return not error.fatal() and (error.code() in waited or error.retriable())


def _unanswered(options: Mapping[str, str], timeout: float, problem: str) -> str:
    """The one line of a broker that did not answer within the poll timeout."""
    return (
        f"Kafka at {options['kafka.bootstrap.servers']} did not answer within {timeout:g}s "
        f"(kafkaConsumer.pollTimeoutMs): {problem}"
    )


def _fetch(consumer: object, part: OffsetRange, poll_timeout: float) -> Iterator[list]:
    """Yield the records of `part` in offset order, in lists, with `consumer` assigned
    to it (and left so).

    Asks `consume()` for at most the count still missing: asking for more
    blocks for the whole timeout at the end of every range (PLATFORM.md).
    Offsets without a record (transaction markers, aborted or compacted
    records) are recognised by the consumer's position passing them; such a
    gap at the end of a range costs one consume timeout. A broker that is
    down (`_passing` errors) is waited for like records: up to `poll_timeout`
    since the last record came.
    """
    from confluent_kafka import KafkaException, TopicPartition

    tp = TopicPartition(part.topic, part.partition, part.start)
    consumer.assign([tp])
    position = part.start
    deadline = time.monotonic() + poll_timeout
    while position < part.end:
        want = min(part.end - position, CHUNK)
        # Short: without gaps it returns as soon as `want` arrived anyway.
        messages = consumer.consume(want, timeout=0.2)
        errors = [m.error() for m in messages if m.error() is not None]
        if errors:
            lasting = [e for e in errors if not _passing(e)]
            if lasting:
                raise KafkaException(lasting[0])
            messages = [m for m in messages if m.error() is None]
        if messages and messages[-1].offset() >= part.end:  # past a gap in the range
            messages = [m for m in messages if m.offset() < part.end]
        if messages:
            yield messages
            position = messages[-1].offset() + 1
            deadline = time.monotonic() + poll_timeout
        if len(messages) < want and position < part.end:
            position = max(position, consumer.position([tp])[0].offset)
        if position < part.end and time.monotonic() > deadline:
            raise TimeoutError(
                f"{part.topic}-{part.partition}: offsets {position}..{part.end} not readable "
                f"within {poll_timeout:g}s (kafkaConsumer.pollTimeoutMs)"
            )


def _tick(watermark: int, schema: StructType) -> pa.RecordBatch:
    """The one row of a `Tick`: every column null but `watermark`."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    columns = [pa.nulls(1, type=f.type) for f in arrow_schema][:-1]
    columns.append(pa.array([watermark], type=pa.int64()))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)


def _to_arrow(messages: list, schema: pa.Schema, watermark: int | None = None) -> pa.RecordBatch:
    """Column-wise conversion: one list comprehension per column is the fast path."""
    n = len(messages)
    topic, partition = messages[0].topic(), messages[0].partition()
    stamps = [m.timestamp() for m in messages]
    headers = [m.headers() or None for m in messages]
    columns = [
        [m.key() for m in messages],
        [m.value() for m in messages],
        [topic] * n,
        [partition] * n,
        [m.offset() for m in messages],
        [ts * 1000 if kind and -_MAX_MS <= ts <= _MAX_MS else None for kind, ts in stamps],
        [_TIMESTAMP_TYPES[kind] for kind, _ts in stamps],
        headers,
    ]
    if len(schema) > len(columns):  # EVENT_TIME_SCHEMA
        columns.append([watermark] * n)
    arrays = [pa.array(col, type=field.type) for col, field in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_stream(
    spark: SparkSession,
    bootstrap: str,
    topics: list[str] | str,
    starting_offsets: str = "earliest",
    max_records_per_trigger: int | None = None,
    options: Mapping[str, str] | None = None,
    source: str = "python",
    idle_ms: int | None = None,
) -> DataFrame:
    """A streaming DataFrame of the records of `topics`, with Spark's Kafka schema.

    `source="python"` uses this module's `tsm-kafka` source; `"native"` uses
    Spark's JVM connector (needs `spark-sql-kafka-0-10` on the classpath).
    `options` are extra `kafka.*` client settings (and any source option).
    `idle_ms` (python only) plans batches by event time (`eventTime`, with
    `eventTime.idleMs`), which adds the `watermark` column.
    """
    topic_list = topics.split(",") if isinstance(topics, str) else list(topics)
    reader = spark.readStream
    if source == "python":
        spark.dataSource.register(KafkaDataSource)
        reader = reader.format(NAME)
        if max_records_per_trigger is not None:
            reader = reader.option("maxRecordsPerTrigger", str(max_records_per_trigger))
        if idle_ms is not None:
            reader = reader.option("eventTime", "true").option("eventTime.idleMs", str(idle_ms))
    elif source == "native":
        reader = reader.format("kafka").option("includeHeaders", "true")
        options = java_client_options(options)  # (the JVM client's names)
        if max_records_per_trigger is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(max_records_per_trigger))
    else:
        raise ValueError(f"source must be 'python' or 'native', got {source!r}")
    reader = (
        reader.option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(t.strip() for t in topic_list))
        .option("startingOffsets", starting_offsets)
        .options(**dict(options or {}))
    )
    try:
        return reader.load()
    except AnalysisException as exc:
        if source != "native" or "KAFKA_DATA_SOURCE_NOT_ENABLED" not in str(exc):
            raise
        raise ValueError(
            "source native needs Spark's Kafka connector on the classpath (spark-submit "
            f"--packages org.apache.spark:spark-sql-kafka-0-10_2.13:{spark.version}); "
            "without it, use source python"
        ) from None
