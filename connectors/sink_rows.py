"""The two forms of rows the Kafka sink takes, how a stage packs them, and how the
sink reads records back out of them.

* `SINK_COLUMNS`: a record a row, `topic, key, value` (the key may be null).
* `PACKED_COLUMNS`: a run of records of one topic a row, in order (`keys[i]`,
  `values[i]`; a key may be null, a list may not). A stage that makes hundreds
  of thousands of records a batch (the job: tens per profile) hands Spark a few
  hundred rows instead: a row costs an UnsafeRow conversion in the JVM on its
  way out of the stage and an Arrow one into the sink, and more as a Python
  object. `Packer` makes them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from connectors.producer import Record

SINK_COLUMNS = "topic string, key binary, value binary"
PACKED_COLUMNS = "topic string, keys array<binary>, values array<binary>"
PACK_SIZE = 4096  # records per packed row (~1 MB of match records)


class Packer:
    """One topic's records, `(key, value)`, handed on as `PACKED_COLUMNS` frames of
    whole runs of `PACK_SIZE` as soon as they fill (`add`), the rest at the end
    (`flush`): a stateful operator that yields them while it works gets its
    output written to Kafka by the sink's task meanwhile, not after it ends.

    Holds fewer than `PACK_SIZE` records between calls; `add` costs a list
    extend, and a frame per `PACK_SIZE` records it completes."""

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


def is_packed(columns: Iterable[str]) -> bool:
    """Whether rows with these columns are `PACKED_COLUMNS` (else `SINK_COLUMNS`)."""
    return "values" in columns


def records(batch: pa.RecordBatch) -> Iterable[Record]:
    """(topic, key, value) of each record of a batch of either form, in order."""
    if not is_packed(batch.schema.names):
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
