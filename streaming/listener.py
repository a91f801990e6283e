"""Per-batch metrics of the running job, and the flag that stops it between batches.

Spark's progress reports rows and state-store sizes; what only the
processor knows (matches, dead letters, late records, cache hits, timers,
the profiles its preloaded cells answered, `matcher.preload`) travels back in
one accumulator of counters, which the driver reads after each batch and
reports as the batch's difference. `cells_bytes` is a sum over the keys a
batch ran: the memory their preloaded cells hold after it. The live subscription and
profile counts are gauges: the processor sends their changes, and the
starting point is summed from the checkpoint's state (`live_counts`).

The batch log is for machines: one JSON object a line, written as the
message of the logger `streaming.listener.batches` (`BATCH_LOG`), which the
CLI sends to stderr as it is, without a prefix and whatever the verbosity.

On a cluster a batch's line also says where state keys ran when that
changed: `"placed": {key: executor id}` for each key that ran on an executor
other than the one of its last batch (all of them in the first), so the log
shows which executor holds each space or shard cell, and when one moves
after an executor is lost (`streaming.executors`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pyspark.accumulators import AccumulatorParam
from pyspark.sql.streaming import StreamingQueryListener

from streaming.executors import parse_ran_counter
from streaming.spark_time import from_spark_text

COUNTERS = (
    "rows",
    "matches",
    "dead_letters",
    "late",
    "keys",
    "timers",
    "cache_hits",
    "cache_catch_ups",
    "cache_misses",
    "snapshots",
    "profiles_asked",
    "profiles_from_cells",
    "cells_bytes",
)
GAUGES = ("subscriptions", "profiles")
BATCH_LOG = logging.getLogger(f"{__name__}.batches")


HISTOGRAMS = "histograms:"  # a key's prefix: a space's histograms (docs/DELIVERY.md §7)


class Counters(AccumulatorParam):
    """An accumulator of named counts (a dict), added key by key; a value that is not
    a count (a space's histograms, under `HISTOGRAMS` + space) replaces the one before."""

    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, value1: dict[str, int], value2: dict[str, int]) -> dict[str, int]:
        for name, count in value2.items():
            if isinstance(count, int):
                value1[name] = value1.get(name, 0) + count
            else:
                value1[name] = count
        return value1


def live_counts(spark: Any, checkpoint: str) -> dict[str, int]:
    """Held subscriptions and profiles in the checkpoint's last committed state (0s if none).

    Reads the processor's `meta` state variable with Spark's state data source.
    """
    from streaming.state.reader import committed_state

    state = committed_state(spark, checkpoint, "meta")
    if state is None:
        return dict.fromkeys(GAUGES, 0)
    row = state.selectExpr(
        "coalesce(sum(value.subs), 0) AS subscriptions",
        "coalesce(sum(value.profiles), 0) AS profiles",
    ).first()
    return {name: int(row[name]) for name in GAUGES}


def batch_summary(
    progress: dict[str, Any], counters: dict[str, int], live: dict[str, int]
) -> dict[str, Any]:
    """One flat record of a batch: Spark's progress, this batch's counters, the live gauges."""
    state = progress.get("stateOperators") or [{}]
    hits, misses = counters.get("cache_hits", 0), counters.get("cache_misses", 0)
    asked, from_cells = counters.get("profiles_asked", 0), counters.get("profiles_from_cells", 0)
    return {
        "batch": progress.get("batchId"),
        "input_rows": progress.get("numInputRows", 0),
        "input_rows_per_s": round(progress.get("inputRowsPerSecond") or 0.0, 1),
        "processed_rows_per_s": round(progress.get("processedRowsPerSecond") or 0.0, 1),
        "batch_ms": (progress.get("durationMs") or {}).get("triggerExecution"),
        "watermark": from_spark_text((progress.get("eventTime") or {}).get("watermark")),
        **{name: counters.get(name, 0) for name in COUNTERS},
        "cache_hit_rate": round(hits / (hits + misses), 3) if hits + misses else None,
        "from_cells_share": round(from_cells / asked, 3) if asked else None,
        **{f"live_{name}": live.get(name, 0) for name in GAUGES},
        "state_rows": sum(op.get("numRowsTotal", 0) for op in state),
        "state_bytes": sum(op.get("memoryUsedBytes", 0) for op in state),
    }


def failure_reason(text: str) -> str:
    """The line of a query's exception that says what went wrong: where Spark wraps
    a Python error (the source's, a stage's), the Python exception after the
    traceback, not Spark's first line, which ends in "Traceback ... call last):"."""
    lines = text.strip().splitlines() or [""]
    for at, line in enumerate(lines):
        if line.rstrip().endswith("Traceback (most recent call last):"):
            raised = [x for x in lines[at + 1 :] if x.strip() and not x[0].isspace()]
            if raised:
                return raised[0].strip()
    return lines[0].strip()


class ProgressLogger(StreamingQueryListener):
    """Logs one JSON line per batch of the named query to `BATCH_LOG`, at INFO.

    `live` is the gauges' starting point (`live_counts`).
    """

    def __init__(
        self,
        query_name: str,
        metrics: Any,
        live: dict[str, int] | None = None,
    ) -> None:
        self.query_name = query_name
        self.metrics = metrics
        self.live = dict(live or {})
        self._seen: dict[str, int] = {}
        self._where: dict[str, str] = {}  # state key → the executor of its last batch

    def onQueryStarted(self, event: Any) -> None:
        if event.name == self.query_name:
            self._write({"query": event.name, "id": str(event.id), "run_id": str(event.runId)})

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        if progress.get("name") != self.query_name:
            return
        total = dict(self.metrics.value)
        histograms = {
            name[len(HISTOGRAMS) :]: total.pop(name)
            for name in list(total)
            if name.startswith(HISTOGRAMS)
        }
        delta = {name: total.get(name, 0) - self._seen.get(name, 0) for name in total}
        self._seen = total
        live = {name: self.live.get(name, 0) + total.get(name, 0) for name in GAUGES}
        summary = batch_summary(progress, delta, live) | {"histograms": histograms}
        placed = self._placed(delta)
        if placed:
            summary["placed"] = placed
        self._write(summary)

    def _placed(self, delta: dict[str, int]) -> dict[str, str]:
        """The keys that ran on another executor than in their last batch, and where."""
        placed = {}
        for name, count in delta.items():
            ran = parse_ran_counter(name) if count > 0 else None
            if ran is not None and self._where.get(ran[0]) != ran[1]:
                placed[ran[0]] = self._where[ran[0]] = ran[1]
        return dict(sorted(placed.items()))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception and "StopRequested" not in event.exception:  # a stop is no failure
            self._write({"query": self.query_name, "failed": failure_reason(event.exception)})

    def _write(self, record: dict[str, Any]) -> None:
        BATCH_LOG.info("%s", json.dumps(record, default=str))
