"""Write match and dead-letter records to Kafka from `foreachBatch`, at least or exactly once.

The DataFrame has either form of `sink_rows` (a record a row, or a run of one
topic's records a row); each Spark task writes its partition with its own
producer (`mapInArrow`), so the write scales with the tasks and needs no
driver round trip per record.

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

A stage can also write its records itself, at least once, from its Python
worker: `outlet.DirectWriter`.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql import DataFrame

from connectors.config import SINK_COMMITS_TOPIC, confluent_config
from connectors.errors import ProduceError
from connectors.producer import TIMEOUT_S, Producer
from connectors.sink_rows import is_packed, records

REPORT_SCHEMA = "partition int, written long, skipped boolean"
_REPORT_ARROW = pa.schema(
    [("partition", pa.int32()), ("written", pa.int64()), ("skipped", pa.bool_())]
)


def write_batch(
    df: DataFrame,
    batch_id: int,
    bootstrap: str,
    *,
    query_name: str,
    exactly_once: bool = False,
    options: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Write `df` (`sink_rows.SINK_COLUMNS` or `PACKED_COLUMNS`) to Kafka from its
    tasks; call it from `foreachBatch`.

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
        producer = Producer(
            config,
            transactional_id=_transactional_id(query_name, partition) if exactly_once else None,
        )
        try:
            rows = _non_empty(batches)
        except BaseException:
            producer.close()
            raise
        written, skipped = 0, False
        if rows is None:  # an empty partition needs no transaction
            producer.close()
        elif exactly_once:
            query_id = context.getLocalProperty("sql.streaming.queryId") or "no-query"
            written, skipped = write_exactly_once(
                config, rows, query_name, query_id, partition, batch_id, producer
            )
        else:
            written = write_idempotent(config, rows, producer)
        yield pa.RecordBatch.from_pylist(
            [{"partition": partition, "written": written, "skipped": skipped}],
            schema=_REPORT_ARROW,
        )

    columns = ("topic", "keys", "values") if is_packed(df.columns) else ("topic", "key", "value")
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


def _non_empty(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """The batches with rows, or None if there are none (the input is then fully read)."""
    rows = (batch for batch in batches if batch.num_rows)
    first = next(rows, None)
    return None if first is None else itertools.chain([first], rows)


def _produce_all(producer: Producer, batches: Iterator[pa.RecordBatch]) -> int:
    return sum(producer.produce_many(records(batch)) for batch in batches)


def _transactional_id(query_name: str, partition: int) -> str:
    """The producer's `transactional.id` of the exactly-once mode for one (query, partition)."""
    return f"tsm-sink.{query_name}.{partition}"


def write_idempotent(
    config: Mapping[str, object],
    batches: Iterator[pa.RecordBatch],
    producer: Producer | None = None,
) -> int:
    """Produce every row and wait for all acknowledgements; raise `ProduceError` if
    any failed. `producer`: the one to use (`Producer(config)`), closed here."""
    producer = producer or Producer(config)
    try:
        count = _produce_all(producer, batches)
        producer.flush()
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
    producer: Producer | None = None,
) -> tuple[int, bool]:
    """Write one (batch, partition) in a transaction unless an earlier attempt committed it.

    Returns (records written, skipped). See the module docstring for why
    this is exactly once. `producer`: the one to use, made with the
    `transactional_id` of (query_name, partition), closed here.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    anchor = TopicPartition(SINK_COMMITS_TOPIC, 0)
    producer = producer or Producer(
        config, transactional_id=_transactional_id(query_name, partition)
    )
    marker = Consumer(
        {
            **config,
            "group.id": f"tsm-sink.{query_name}.{query_id}.{partition}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        producer.init_transactions()
        done = marker.committed([anchor], timeout=TIMEOUT_S)[0].offset
        if done > batch_id:  # committed by an earlier attempt (no offset is negative)
            for _ in batches:  # let Spark finish feeding the task
                pass
            return 0, True
        producer.begin_transaction()
        try:
            count = _produce_all(producer, batches)
            progress = TopicPartition(SINK_COMMITS_TOPIC, 0, batch_id + 1)
            producer.send_offsets_to_transaction([progress], marker.consumer_group_metadata())
            producer.commit_transaction()
        except BaseException as exc:
            failed_delivery = producer.first_failure  # before abort() purges the queue
            with contextlib.suppress(KafkaException):  # e.g. fenced: nothing left to abort
                producer.abort_transaction()
            if failed_delivery is not None and isinstance(exc, KafkaException):
                raise ProduceError(  # the cause, not "commit failed"
                    f"batch {batch_id} aborted, a record failed: {failed_delivery}"
                ) from exc
            raise
        return count, False
    finally:
        marker.close()
        producer.close()
