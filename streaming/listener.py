"""Per-batch metrics of the running job, and the flag that stops it between batches.

Spark's progress reports rows and state-store sizes; what only the
processor knows (matches, dead letters, late records, cache hits, timers)
travels back in one accumulator of counters, which the driver reads after
each batch and reports as the batch's difference.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

from pyspark.accumulators import AccumulatorParam
from pyspark.sql.streaming import StreamingQueryListener

COUNTERS = (
    "rows",
    "matches",
    "dead_letters",
    "late",
    "keys",
    "timers",
    "cache_hits",
    "cache_misses",
    "snapshots",
    "subscriptions",
    "profiles",
)


class Counters(AccumulatorParam):
    """An accumulator of named counts (a dict), added key by key."""

    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, value1: dict[str, int], value2: dict[str, int]) -> dict[str, int]:
        for name, count in value2.items():
            value1[name] = value1.get(name, 0) + count
        return value1


def batch_summary(progress: dict[str, Any], counters: dict[str, int]) -> dict[str, Any]:
    """One flat record of a batch: Spark's progress plus this batch's counters."""
    state = progress.get("stateOperators") or [{}]
    hits, misses = counters.get("cache_hits", 0), counters.get("cache_misses", 0)
    return {
        "batch": progress.get("batchId"),
        "input_rows": progress.get("numInputRows", 0),
        "input_rows_per_s": round(progress.get("inputRowsPerSecond") or 0.0, 1),
        "processed_rows_per_s": round(progress.get("processedRowsPerSecond") or 0.0, 1),
        "batch_ms": (progress.get("durationMs") or {}).get("triggerExecution"),
        "watermark": (progress.get("eventTime") or {}).get("watermark"),
        **{name: counters.get(name, 0) for name in COUNTERS},
        "cache_hit_rate": round(hits / (hits + misses), 3) if hits + misses else None,
        "state_rows": sum(op.get("numRowsTotal", 0) for op in state),
        "state_bytes": sum(op.get("memoryUsedBytes", 0) for op in state),
    }


class ProgressLogger(StreamingQueryListener):
    """Writes one JSON line per batch of the named query to `out` (stderr by default).

    `on_batch(summary)` is called after each line, e.g. to check a stop flag
    or to collect the summaries in a test.
    """

    def __init__(
        self,
        query_name: str,
        metrics: Any,
        out: TextIO | None = None,
        on_batch: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.query_name = query_name
        self.metrics = metrics
        self.out = out or sys.stderr
        self.on_batch = on_batch
        self._seen: dict[str, int] = {}

    def onQueryStarted(self, event: Any) -> None:
        if event.name == self.query_name:
            self._write({"query": event.name, "id": str(event.id), "run_id": str(event.runId)})

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        if progress.get("name") != self.query_name:
            return
        total = dict(self.metrics.value)
        delta = {name: total.get(name, 0) - self._seen.get(name, 0) for name in total}
        self._seen = total
        summary = batch_summary(progress, delta)
        self._write(summary)
        if self.on_batch is not None:
            self.on_batch(summary)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:
            self._write({"query": self.query_name, "failed": event.exception.splitlines()[0]})

    def _write(self, record: dict[str, Any]) -> None:
        print(json.dumps(record, default=str), file=self.out, flush=True)
