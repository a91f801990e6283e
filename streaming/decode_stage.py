"""The stateless stage before the state: decode, validate, key, and stamp event time.

Runs in `mapInArrow` on the Kafka rows, so that a bad record costs one row,
never a failed task. A good record becomes one row per state key (one per
shard cell it touches, SEMANTICS §8) carrying its event time `ts`, the §5
order fields and the raw value, which the processor decodes again: the raw
value, not a parsed form, is what a late record's dead letter must carry.
A bad record becomes one row under `DEAD_LETTER_KEY` whose value is already
the encoded dead letter; it passes the stateful stage untouched, so that the
source is read once and every output leaves through the one sink.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from connectors.config import Topics
from matcher.encoding import encode
from matcher.errors import RecordError
from matcher.records import Source, dead_letter, decode
from matcher.sharding import RESERVED, Sharding

# The key that groups the bad records of a batch: reserved, no space's key.
DEAD_LETTER_KEY = RESERVED + "deadletter"
# Order of kinds within one ts (SEMANTICS §5); dead letters have no order.
KIND_ORDER = {"subscription": 0, "profile": 1}
DEAD = 2

# The Kafka columns the stage reads.
INPUT_COLUMNS = ("topic", "partition", "offset", "timestamp", "value")

DECODED_SCHEMA = pa.schema(
    [
        ("skey", pa.string()),  # state key: space or space#cell
        ("space", pa.string()),
        ("ets", pa.timestamp("us", tz="UTC")),  # event time, for the watermark only
        ("ts", pa.int64()),  # event time, epoch ms
        ("kord", pa.int32()),  # 0 subscription, 1 profile, 2 dead letter
        ("topic", pa.string()),
        ("part", pa.int32()),
        ("off", pa.int64()),
        ("ktime", pa.int64()),  # Kafka timestamp, epoch ms: the fallback ts
        ("value", pa.binary()),  # raw record; for a dead letter, the encoded dead letter
    ]
)
DECODED_DDL = (
    "skey string, space string, ets timestamp, ts long, kord int, topic string, "
    "part int, off long, ktime long, value binary"
)


class DecodeStage:
    """The `mapInArrow` function; picklable, holds the topic roles and the sharding."""

    def __init__(self, topics: Topics, sharding: Sharding) -> None:
        self.kinds = {topics.subscriptions: "subscription", topics.profiles: "profile"}
        self.sharding = sharding

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield pa.RecordBatch.from_pylist(self.rows(batch), schema=DECODED_SCHEMA)

    def rows(self, batch: pa.RecordBatch) -> list[dict[str, Any]]:
        # Kafka timestamps as microseconds, not datetimes: a record's can be any 64-bit
        # number of milliseconds, past the years a datetime holds (decode refuses those)
        columns = {c: batch.column(c).to_pylist() for c in INPUT_COLUMNS if c != "timestamp"}
        columns["timestamp"] = batch.column("timestamp").cast(pa.int64()).to_pylist()
        out = []
        for topic, part, off, stamp, value in zip(
            *(columns[c] for c in INPUT_COLUMNS), strict=True
        ):
            ktime = None if stamp is None else stamp // 1000
            source = Source(topic=topic, partition=part, offset=off)
            base = {"topic": topic, "part": part, "off": off, "ktime": ktime}
            try:
                record = decode(self.kinds[topic], value or b"", source, fallback_ts=ktime)
            except RecordError as exc:
                letter = encode(dead_letter(str(exc), value or b"", source))
                out.append(base | {"skey": DEAD_LETTER_KEY, "kord": DEAD, "value": letter})
                continue
            row = base | {
                "space": record.space,
                "ets": record.ts * 1000,
                "ts": record.ts,
                "kord": KIND_ORDER[record.kind],
                "value": value,
            }
            out.extend(row | {"skey": key} for key in self.sharding.keys_for(record))
        return out
