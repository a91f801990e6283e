"""The stateless stage before the state: decode, validate, key, and stamp event time.

Runs in `mapInArrow` on the Kafka rows, so that a bad record costs one row,
never a failed task. It takes the first steps of admission
(`matcher.admission`): a good record becomes one row per state key (one per
shard cell it touches, SEMANTICS §8) carrying its event time `ts`, the §5
order fields, the record as decoded (`admission.pack_record`: the operator builds it
back without parsing it again) and the raw value, which a late record's dead
letter carries. A bad record becomes one row under `DEAD_LETTER_KEY` whose
value is already the encoded dead letter; it passes the stateful stage
untouched, so that the source is read once and every output leaves through
the one sink.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from connectors.config import Topics
from matcher.admission import KIND_ORDER, Input, decode_input, pack_record, state_keys
from matcher.encoding import encode
from matcher.records import Source
from matcher.sharding import RESERVED, Sharding
from streaming.spark_time import to_spark_us

# The key that groups the bad records of a batch: reserved, no space's key.
DEAD_LETTER_KEY = RESERVED + "deadletter"
DEAD = 2  # the `kord` of a dead letter (`KIND_ORDER` for the others): it has no order

# The Kafka columns the stage reads.
INPUT_COLUMNS = ("topic", "partition", "offset", "timestamp", "value")
# The batch's watermark (epoch ms) from a source that plans by event time
# (`connectors.kafka_source`, `eventTime`); read where the input has it.
WATERMARK_COLUMN = "watermark"

DECODED_SCHEMA = pa.schema(
    [
        ("skey", pa.string()),  # state key: space or space#cell
        ("space", pa.string()),
        ("ets", pa.timestamp("us", tz="UTC")),  # for the watermark (`event_times`, `spark_time`)
        ("ts", pa.int64()),  # event time, epoch ms
        ("kord", pa.int32()),  # 0 subscription, 1 profile, 2 dead letter
        ("topic", pa.string()),
        ("part", pa.int32()),
        ("off", pa.int64()),
        ("value", pa.binary()),  # raw record; for a dead letter, the encoded dead letter
        ("record", pa.binary()),  # `admission.pack_record` of the record; null for a dead letter
    ]
)
DECODED_DDL = (
    "skey string, space string, ets timestamp, ts long, kord int, topic string, "
    "part int, off long, value binary, record binary"
)


class DecodeStage:
    """The `mapInArrow` function; picklable, holds the topic roles and the sharding."""

    def __init__(self, topics: Topics, sharding: Sharding) -> None:
        self.kinds = {topics.subscriptions: "subscription", topics.profiles: "profile"}
        self.sharding = sharding

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            rows = self.rows(batch)
            event_times(batch, rows)
            yield pa.RecordBatch.from_pylist(rows, schema=DECODED_SCHEMA)

    def rows(self, batch: pa.RecordBatch) -> list[dict[str, Any]]:
        # Kafka timestamps as microseconds, not datetimes: a record's can be any 64-bit
        # number of milliseconds, past the years a datetime holds (decode refuses those)
        columns = {c: batch.column(c).to_pylist() for c in INPUT_COLUMNS if c != "timestamp"}
        columns["timestamp"] = batch.column("timestamp").cast(pa.int64()).to_pylist()
        out = []
        for topic, part, off, stamp, value in zip(
            *(columns[c] for c in INPUT_COLUMNS), strict=True
        ):
            if topic is None:  # a source's Tick: the batch's watermark only (`event_times`)
                out.append({"skey": DEAD_LETTER_KEY, "kord": DEAD})
                continue
            ktime = None if stamp is None else stamp // 1000
            source = Source(topic=topic, partition=part, offset=off)
            base = {"topic": topic, "part": part, "off": off}
            record = decode_input(Input(self.kinds[topic], value or b"", source, ktime))
            if isinstance(record, dict):
                out.append(base | {"skey": DEAD_LETTER_KEY, "kord": DEAD, "value": encode(record)})
                continue
            row = base | {
                "space": record.space,
                "ets": to_spark_us(record.ts),
                "ts": record.ts,
                "kord": KIND_ORDER[record.kind],
                "value": value,
                "record": pack_record(record),
            }
            out.extend(row | {"skey": key} for key in state_keys(record, self.sharding))
        return out


def event_times(batch: pa.RecordBatch, rows: list[dict[str, Any]]) -> None:
    """Set `ets`, the column Spark's watermark is defined on, in the `rows` decoded
    from `batch`.

    From a source that plans by event time, every row gets the batch's watermark
    (SEMANTICS §3: the smallest over the input partitions of the largest ts read
    from each), so that Spark's watermark, the largest `ets` less the lateness,
    is exactly that after the batch; dead letters and ticks too, so that a batch
    of them moves it as well. Otherwise (Spark's own Kafka connector) a record's
    `ets` is its `ts`, and Spark's watermark the largest ts seen anywhere."""
    if WATERMARK_COLUMN not in batch.schema.names:
        return
    marks = batch.column(WATERMARK_COLUMN)
    mark = marks[0].as_py() if len(marks) else None  # (one per micro-batch)
    ets = None if mark is None else to_spark_us(mark)
    for row in rows:
        row["ets"] = ets
