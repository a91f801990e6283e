"""Write match and dead-letter records to Kafka from `foreachBatch`, at least or exactly once.

The DataFrame has the columns `topic string, key binary (nullable), value
binary`; each Spark task writes its partition with its own producer
(`mapInArrow`), so the write scales with the tasks and needs no driver
round trip per record.

Guarantees, per micro-batch:

* `exactly_once=False` (default): at least once. An idempotent producer
  (`enable.idempotence`) keeps a task's records free of retry duplicates
  and in order per Kafka partition; but a task or batch that Spark re-runs
  after a failure writes its records again. Consumers can drop duplicates by
  `match_id`.

* `exactly_once=True`: each (query, batch id, Spark partition) is written
  in one Kafka transaction that commits at most once, so a `read_committed`
  consumer sees every record of a completed batch exactly once, whatever
  fails and is re-run (task retry, driver crash between the sink's commit
  and Spark's checkpoint commit, query restart). How:

  1. The task's `transactional.id` is `tsm-sink.<query name>.<partition>`.
     `init_transactions()` fences any earlier producer with that id (a
     zombie task) and completes or aborts its open transaction, so after it
     nothing of this (query, partition) is in flight.
  2. The transaction also commits a progress marker without an external
     store: the consumer-group offset of group
     `tsm-sink.<query name>.<query id>.<partition>` on the `tsm.sink-commits`
     anchor topic, set to batch id + 1 with `send_offsets_to_transaction`.
     Kafka makes that offset visible if and only if the transaction commits.
  3. Before writing, the task reads that offset (after step 1, so it is
     final); if it is beyond the batch id, the batch was committed by an
     earlier attempt and the task writes nothing.

  This relies on what Spark guarantees for a re-run (PLATFORM.md): the same
  batch id, and the same rows in the same partitions, which holds when the
  pipeline is deterministic (the job's is: ordered by key and position).
  The query id (kept in the checkpoint) is part of the marker, so a query
  restarted with a fresh checkpoint but the same name starts clean instead
  of skipping its new batches 0, 1, .... `read_uncommitted` consumers can
  still see records of aborted attempts.

A stage that makes its records in a Python worker can write them from there
instead, at least once (`DirectWriter`): the job's operator does so unless
it runs exactly once. Its records then never cross into the JVM and back
(at 100k subscriptions, 320k records and 92 MB a batch), and the worker keeps
one connected producer for all its batches, where the sink's task makes,
connects and closes one per batch. It waits for every acknowledgement before
its task ends, so before Spark commits the batch's state and offsets: a
batch that fails is run again and writes its records again, as a re-run
sink task would.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from connectors.config import SINK_COMMITS_TOPIC, confluent_config, producer_config

SINK_COLUMNS = "topic string, key binary, value binary"
# The same records packed: a row holds a run of records of one topic, in order
# (`keys[i]`, `values[i]`; a key may be null, a list may not). A stage that makes
# hundreds of thousands of records a batch (the job: tens per profile) hands Spark
# a few hundred rows instead: a row costs an UnsafeRow conversion in the JVM on its
# way out of the stage and an Arrow one into here, and more as a Python object.
PACKED_COLUMNS = "topic string, keys array<binary>, values array<binary>"
PACK_SIZE = 4096  # records per packed row (~1 MB of match records)
REPORT_SCHEMA = "partition int, written long, skipped boolean"
_REPORT_ARROW = pa.schema(
    [("partition", pa.int32()), ("written", pa.int64()), ("skipped", pa.bool_())]
)
# How long a transaction step (init, send offsets, commit) may take.
TXN_TIMEOUT_S = 60.0
# The sink's producers report failed deliveries only: it needs nothing of the
# others, and a report costs a Python callback per record (320k match records:
# 8-12% of the producing client's CPU, which the job's Python workers share).
_ONLY_ERRORS = {"delivery.report.only.error": True}
# Records between polls for delivery reports (errors only): a poll waits on the
# queue lock the client's threads hold while they batch and compress; 320k match
# records polled every 1,000 spent 0.1 s a batch in it.
POLL_EVERY = 20_000
# The most records a `DirectWriter` keeps (references to, about 30 MB of match
# records) to write again after its producer failed; a batch of 100k profiles at
# 100k subscriptions makes 6.4M, which a retried task writes again instead.
KEPT = 100_000


def write_batch(
    df: DataFrame,
    batch_id: int,
    bootstrap: str,
    *,
    query_name: str,
    exactly_once: bool = False,
    options: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Write `df` (`SINK_COLUMNS` or `PACKED_COLUMNS`) to Kafka from its tasks; call it
    from `foreachBatch`.

    Returns `{"written": records, "skipped": partitions already committed}`.
    In exactly-once mode the `tsm.sink-commits` topic must exist
    (`tsm topics create`, or `foreach_batch_writer` creates it).
    """
    options = dict(options or {})

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId()
        config = confluent_config(bootstrap, options)
        # Made before the first rows come, so that it gets its producer id while the
        # stages before this one still work: a new idempotent producer waits 500 ms
        # for it, a transactional one about 50 ms (librdkafka).
        made = _producer(config, **_transactional(query_name, partition, exactly_once))
        try:
            rows = _non_empty(batches)
        except BaseException:
            made[0].close()
            raise
        written, skipped = 0, False
        if rows is None:  # an empty partition needs no transaction
            made[0].close()
        elif exactly_once:
            query_id = context.getLocalProperty("sql.streaming.queryId") or "no-query"
            written, skipped = write_exactly_once(
                config, rows, query_name, query_id, partition, batch_id, made
            )
        else:
            written = write_idempotent(config, rows, made)
        yield pa.RecordBatch.from_pylist(
            [{"partition": partition, "written": written, "skipped": skipped}],
            schema=_REPORT_ARROW,
        )

    columns = ("topic", "keys", "values") if "values" in df.columns else ("topic", "key", "value")
    reports = df.select(*columns).mapInArrow(write_partition, REPORT_SCHEMA)
    rows = reports.collect()
    return {
        "written": sum(row.written for row in rows),
        "skipped": sum(row.skipped for row in rows),
    }


def foreach_batch_writer(
    bootstrap: str,
    query_name: str,
    *,
    exactly_once: bool = False,
    options: Mapping[str, str] | None = None,
) -> Callable[[DataFrame, int], None]:
    """A `foreachBatch` function writing each batch with `write_batch`.

    Creates the anchor topic of the exactly-once mode up front.
    """
    if exactly_once:
        from connectors.admin import create_topics

        create_topics(bootstrap, {SINK_COMMITS_TOPIC: 1}, options=options)

    def write(df: DataFrame, batch_id: int) -> None:
        write_batch(
            df,
            batch_id,
            bootstrap,
            query_name=query_name,
            exactly_once=exactly_once,
            options=options,
        )

    return write


class Packer:
    """One topic's records, `(key, value)`, handed on as `PACKED_COLUMNS` frames of
    whole runs of `PACK_SIZE` as soon as they fill (`add`), the rest at the end
    (`flush`): a stateful operator that yields them while it works gets its
    output written to Kafka by the sink's task meanwhile, not after it ends."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.count = 0  # records added
        self._records: list[tuple[bytes | None, bytes]] = []

    def add(self, records: list[tuple[bytes | None, bytes]]) -> Iterator[pd.DataFrame]:
        self._records += records
        self.count += len(records)
        if len(self._records) >= PACK_SIZE:
            yield self._frame(len(self._records) - len(self._records) % PACK_SIZE)

    def flush(self) -> Iterator[pd.DataFrame]:
        if self._records:
            yield self._frame(len(self._records))

    def _frame(self, cut: int) -> pd.DataFrame:
        records, self._records = self._records[:cut], self._records[cut:]
        runs = [records[i : i + PACK_SIZE] for i in range(0, cut, PACK_SIZE)]
        return pd.DataFrame(
            {
                "topic": [self.topic] * len(runs),
                "keys": [[k for k, _ in run] for run in runs],
                "values": [[v for _, v in run] for run in runs],
            }
        )


class DirectWriter:
    """`Packer`'s interface, but each record goes to Kafka as it is added, from the
    worker's shared producer, and `flush` waits for them all: its frames are
    always empty. The stage's task must read `flush` to the end before it ends.

    A producer that fails (fatally: e.g. its idempotence sequence lost when a
    topic was deleted and made again) fails every later call, so it is dropped,
    and the records added since the last flush are written again by a new one
    (at least once: some may be in Kafka twice), if they are at most `KEPT`;
    otherwise, or if that fails too, the error is the task's, and Spark runs it
    again."""

    def __init__(self, topic: str, config: Mapping[str, object]) -> None:
        self.topic = topic
        self.count = 0
        self._config = config
        self._key = _shared_key(config)  # (made once: `add` runs once per profile)
        # the records since the last flush, while they are at most KEPT; else None
        self._added: list[list[tuple[bytes | None, bytes]]] | None = []
        self._kept = 0

    def add(self, records: list[tuple[bytes | None, bytes]]) -> Iterator[pd.DataFrame]:
        if self._added is not None:
            self._kept += len(records)
            if self._kept <= KEPT:
                self._added.append(records)
            else:
                self._added = None
        try:
            self._produce(_shared(self._key, self._config)[0], records, self.count)
        except Exception as exc:
            self._again(exc)
        self.count += len(records)
        return iter(())

    def flush(self) -> Iterator[pd.DataFrame]:
        try:
            _acknowledged(*_shared(self._key, self._config))
        except Exception as exc:
            self._again(exc)
        self._added, self._kept = [], 0
        return iter(())

    def _produce(self, producer, records: list[tuple[bytes | None, bytes]], count: int) -> int:
        topic = self.topic
        return _produce(producer, ((topic, key, value) for key, value in records), count)

    def _again(self, error: Exception) -> None:
        _drop_shared(self._key)
        if self._added is None:
            raise error
        print(
            f"tsm: the Kafka producer failed ({error}); writing the records since the last "
            "flush again with a new one",
            file=sys.stderr,
        )
        producer, deliveries = _shared(self._key, self._config)
        try:
            for records in self._added:
                self._produce(producer, records, 0)
            _acknowledged(producer, deliveries)
        except BaseException:
            _drop_shared(self._key)
            raise


# A Python worker's producers for `DirectWriter`, by client configuration: one
# producer connected once serves every batch the worker runs. (A new idempotent
# producer waits 500 ms for its producer id before its first record is sent:
# librdkafka's PID timer, started before any broker connection is up.)
_SHARED: dict[tuple, tuple[object, _Deliveries]] = {}


def _shared_key(config: Mapping[str, object]) -> tuple:
    return tuple(sorted((name, str(value)) for name, value in config.items()))


def _shared(key: tuple, config: Mapping[str, object]) -> tuple[object, _Deliveries]:
    """The worker's producer for `config` (`key`: its `_shared_key`), made on first use."""
    entry = _SHARED.get(key)
    if entry is None:
        entry = _SHARED[key] = _producer(config)
    return entry


def _drop_shared(key: tuple) -> None:
    entry = _SHARED.pop(key, None)
    if entry is not None:
        with contextlib.suppress(Exception):
            entry[0].close()


Outlet = Packer | DirectWriter


def outlet(topic: str, direct: Mapping[str, object] | None = None) -> Outlet:
    """Where a stage's records of `topic` go: to Kafka from here (`DirectWriter`) when
    given a client configuration in `direct`, else out of the stage (`Packer`)."""
    return Packer(topic) if direct is None else DirectWriter(topic, direct)


def pack(
    topic: str,
    records: list[tuple[bytes | None, bytes]],
    direct: Mapping[str, object] | None = None,
) -> Iterator[pd.DataFrame]:
    """Records of one topic, in order, through `outlet(topic, direct)`."""
    out = outlet(topic, direct)
    yield from out.add(records)
    yield from out.flush()


def _records(batch: pa.RecordBatch) -> Iterable[tuple[str, bytes | None, bytes]]:
    """(topic, key, value) of each record of a batch of either sink form, in order."""
    if "values" not in batch.schema.names:
        return zip(
            batch.column("topic").to_pylist(),
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            strict=True,
        )
    keys, values = batch.column("keys"), batch.column("values")
    lengths = pc.list_value_length(values).to_pylist()
    if keys.null_count or values.null_count or lengths != pc.list_value_length(keys).to_pylist():
        raise ValueError("a packed sink row needs as many keys as values (lists, not null)")
    topics = batch.column("topic").to_pylist()
    return zip(
        itertools.chain.from_iterable(map(itertools.repeat, topics, lengths)),
        keys.flatten().to_pylist(),
        values.flatten().to_pylist(),
        strict=True,
    )


def _non_empty(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """The batches with rows, or None if there are none (the input is then fully read)."""
    rows = (batch for batch in batches if batch.num_rows)
    first = next(rows, None)
    return None if first is None else itertools.chain([first], rows)


class _Deliveries:
    """Delivery callback that keeps the first error, for a message that says why."""

    def __init__(self) -> None:
        self.first_error: object = None

    def __call__(self, err: object, _msg: object) -> None:
        if err is not None and self.first_error is None:
            self.first_error = err


def _produce(producer, records: Iterable[tuple[str, bytes | None, bytes]], count: int = 0) -> int:
    """Produce every (topic, key, value); returns `count` plus their number. The
    producer's `on_delivery` is in its configuration: a callback per record, and
    keyword arguments, cost a third more per call."""
    produce = producer.produce
    for topic, key, value in records:
        while True:
            try:
                produce(topic, value, key)
                break
            except BufferError:  # local queue full: let deliveries drain it
                producer.poll(0.1)
        count += 1
        if count % POLL_EVERY == 0:
            producer.poll(0)
    return count


def _produce_all(producer, batches: Iterator[pa.RecordBatch]) -> int:
    count = 0
    for batch in batches:
        count = _produce(producer, _records(batch), count)
    return count


def _producer(config: Mapping[str, object], **settings: object) -> tuple[object, _Deliveries]:
    """A `tsm` producer that reports failed deliveries only, and where it keeps the first."""
    from confluent_kafka import Producer

    deliveries = _Deliveries()
    producer = Producer(
        {**producer_config(config), **_ONLY_ERRORS, "on_delivery": deliveries, **settings}
    )
    return producer, deliveries


def _acknowledged(producer, deliveries: _Deliveries) -> None:
    """Wait for every record in flight; raise if any failed or is still unacknowledged."""
    from confluent_kafka import KafkaException

    try:
        remaining = producer.flush(TXN_TIMEOUT_S)
    except SystemError:  # confluent-kafka 2.x: a fatal error set while it calls back
        if deliveries.first_error is None:
            raise
        remaining = len(producer)
    if deliveries.first_error is not None:
        raise KafkaException(deliveries.first_error)
    if remaining:
        raise TimeoutError(f"{remaining} records not acknowledged within {TXN_TIMEOUT_S:g}s")


def _transactional(query_name: str, partition: int, exactly_once: bool = True) -> dict:
    """The producer settings of the exactly-once mode for one (query, partition)."""
    return {"transactional.id": f"tsm-sink.{query_name}.{partition}"} if exactly_once else {}


def write_idempotent(
    config: Mapping[str, object],
    batches: Iterator[pa.RecordBatch],
    made: tuple[object, _Deliveries] | None = None,
) -> int:
    """Produce every row and wait for all acknowledgements; raise if any failed.
    `made`: the producer to use (`_producer(config)`), closed here."""
    producer, deliveries = made or _producer(config)
    try:
        count = _produce_all(producer, batches)
        _acknowledged(producer, deliveries)
    finally:
        producer.close()
    return count


def write_exactly_once(
    config: Mapping[str, object],
    batches: Iterator[pa.RecordBatch],
    query_name: str,
    query_id: str,
    partition: int,
    batch_id: int,
    made: tuple[object, _Deliveries] | None = None,
) -> tuple[int, bool]:
    """Write one (batch, partition) in a transaction unless an earlier attempt committed it.

    Returns (records written, skipped). See the module docstring for why
    this is exactly once. `made`: the producer to use, with the settings of
    `_transactional(query_name, partition)`, closed here.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    anchor = TopicPartition(SINK_COMMITS_TOPIC, 0)
    producer, deliveries = made or _producer(config, **_transactional(query_name, partition))
    marker = Consumer(
        {
            **config,
            "group.id": f"tsm-sink.{query_name}.{query_id}.{partition}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        producer.init_transactions(TXN_TIMEOUT_S)
        done = marker.committed([anchor], timeout=TXN_TIMEOUT_S)[0].offset
        if done > batch_id:  # committed by an earlier attempt (no offset is negative)
            for _ in batches:  # let Spark finish feeding the task
                pass
            return 0, True
        producer.begin_transaction()
        try:
            count = _produce_all(producer, batches)
            progress = TopicPartition(SINK_COMMITS_TOPIC, 0, batch_id + 1)
            producer.send_offsets_to_transaction(
                [progress], marker.consumer_group_metadata(), TXN_TIMEOUT_S
            )
            producer.commit_transaction(TXN_TIMEOUT_S)
        except BaseException as exc:
            failed_delivery = deliveries.first_error  # before abort() purges the queue
            with contextlib.suppress(KafkaException):  # e.g. fenced: nothing left to abort
                producer.abort_transaction(TXN_TIMEOUT_S)
            if failed_delivery is not None and isinstance(exc, KafkaException):
                raise KafkaException(failed_delivery) from exc  # the cause, not "commit failed"
            raise
        return count, False
    finally:
        marker.close()
        producer.close()
