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
from connectors.config import confluent_config

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

# Records per Arrow batch handed to Spark, and per consume() call.
CHUNK = 10_000
# librdkafka timestamp type (0 none, 1 create, 2 log append) → Spark's (-1, 0, 1).
_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}
# A timestamp is any 64-bit count of milliseconds; one whose microseconds overflow 64
# bits (about 292,000 years from 1970) reads as null rather than failing the batch.
_MAX_MS = (2**63 - 1) // 1000


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets [start, end) of one topic-partition: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int


class KafkaDataSource(DataSource):
    """`spark.readStream.format("tsm-kafka")`; see the module docstring for options."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

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
        self.client_options = {k: v for k, v in options.items() if k.startswith("kafka.")}
        self.starting = options.get("startingOffsets", "latest")
        limit = options.get("maxRecordsPerTrigger")
        self.max_rows = int(limit) if limit is not None else None
        if self.max_rows is not None and self.max_rows < 1:
            raise ValueError("maxRecordsPerTrigger must be at least 1")
        self.poll_timeout = int(options.get("kafkaConsumer.pollTimeoutMs", "120000")) / 1000
        self._planner = None  # confluent_kafka.Consumer, driver only
        self._target: dict[tuple[str, int], int] | None = None  # Trigger.AvailableNow
        self._latest: off.Offsets | None = None

    # --- driver ---------------------------------------------------------------

    def _config(self, group: str) -> dict[str, object]:
        bootstrap = self.client_options["kafka.bootstrap.servers"]
        return confluent_config(
            bootstrap,
            self.client_options,
            required={"group.id": group, "enable.auto.commit": False},
        )

    def _watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(low, high) of every partition of the subscribed topics; missing topics have none."""
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

    def initialOffset(self) -> off.Offsets:
        return off.starting_offsets(self.starting, self._watermarks())

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_rows is None else ReadMaxRows(self.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {tp: hi for tp, (_lo, hi) in self._watermarks().items()}

    def latestOffset(self, start: off.Offsets, limit: ReadLimit) -> off.Offsets:
        marks = self._watermarks()
        self._latest = off.canonical({tp: hi for tp, (_lo, hi) in marks.items()})
        if self._target is not None:
            marks = off.cap(marks, self._target)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return off.next_end(start, marks, max_rows)

    def reportLatestOffset(self) -> off.Offsets | None:
        return self._latest

    def partitions(self, start: off.Offsets, end: off.Offsets) -> list[OffsetRange]:
        begin, stops = off.flatten(start), off.flatten(end)
        new = [tp for tp in stops if tp not in begin]
        if new:  # partitions that appeared: read from their low watermark (`off.next_end`)
            marks = self._watermarks()
            begin.update((tp, marks[tp][0] if tp in marks else stops[tp]) for tp in new)
        return [
            OffsetRange(topic, partition, begin[(topic, partition)], stop)
            for (topic, partition), stop in stops.items()
            if stop > begin[(topic, partition)]
        ]

    def commit(self, end: off.Offsets) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None

    # --- executors ------------------------------------------------------------

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        return read_range(self._config("tsm-source-reader"), partition, self.poll_timeout)


def read_range(
    config: dict[str, object], part: OffsetRange, poll_timeout: float
) -> Iterator[pa.RecordBatch]:
    """Yield the records of `part` as Arrow record batches of the source schema.

    Asks `consume()` for at most the count still missing: asking for more
    blocks for the whole timeout at the end of every range (PLATFORM.md).
    Offsets without a record (transaction markers, aborted or compacted
    records) are recognised by the consumer's position passing them; such a
    gap at the end of a range costs one consume timeout.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(SCHEMA, timezone="UTC")
    # A deleted range must fail the query (Spark's failOnDataLoss), not be skipped.
    consumer = Consumer({**config, "auto.offset.reset": "error"})
    tp = TopicPartition(part.topic, part.partition, part.start)
    try:
        consumer.assign([tp])
        position = part.start
        deadline = time.monotonic() + poll_timeout
        while position < part.end:
            want = min(part.end - position, CHUNK)
            # Short: without gaps it returns as soon as `want` arrived anyway.
            messages = consumer.consume(want, timeout=0.2)
            errors = [m.error() for m in messages if m.error() is not None]
            if errors:
                raise KafkaException(errors[0])
            if messages and messages[-1].offset() >= part.end:  # past a gap in the range
                messages = [m for m in messages if m.offset() < part.end]
            if messages:
                yield _to_arrow(messages, schema)
                position = messages[-1].offset() + 1
                deadline = time.monotonic() + poll_timeout
            if len(messages) < want and position < part.end:
                position = max(position, consumer.position([tp])[0].offset)
            if position < part.end and time.monotonic() > deadline:
                raise TimeoutError(
                    f"{part.topic}-{part.partition}: offsets {position}..{part.end} not readable "
                    f"within {poll_timeout:g}s (kafkaConsumer.pollTimeoutMs)"
                )
    finally:
        consumer.close()


def _to_arrow(messages: list, schema: pa.Schema) -> pa.RecordBatch:
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
) -> DataFrame:
    """A streaming DataFrame of the records of `topics`, with Spark's Kafka schema.

    `source="python"` uses this module's `tsm-kafka` source; `"native"` uses
    Spark's JVM connector (needs `spark-sql-kafka-0-10` on the classpath).
    `options` are extra `kafka.*` client settings (and any source option).
    """
    topic_list = topics.split(",") if isinstance(topics, str) else list(topics)
    reader = spark.readStream
    if source == "python":
        spark.dataSource.register(KafkaDataSource)
        reader = reader.format(NAME)
        if max_records_per_trigger is not None:
            reader = reader.option("maxRecordsPerTrigger", str(max_records_per_trigger))
    elif source == "native":
        reader = reader.format("kafka").option("includeHeaders", "true")
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
