"""The `StatefulProcessor` that runs one state key's `SpaceMatcher` inside Spark.

The operator keeps the Spark callbacks and the timers; the key's matcher comes
from, and goes back to, `streaming.state` (snapshot, change log, worker cache).

Timers: one per key, at the next `valid_to` + 1 (Spark fires a timer once the
watermark reaches it; §3 evicts when `valid_to < watermark`), in Spark's event
time (`streaming.spark_time`). Input: each row carries its record as the decode
stage decoded it (`matcher.admission.pack_record`), built back here without
parsing. Lateness: the watermark column is dropped before this stage, so Spark
hands late rows over instead of dropping them silently, and they are judged
here (`matcher.admission.late_letter`) against the watermark in force at the
batch start.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from connectors.config import Topics
from connectors.outlet import outlet, pack
from connectors.tenants import TenantRouting
from matcher.admission import dead_letter, in_order, late_letter, unpack_record
from matcher.encoding import encode
from matcher.engine import SpaceMatcher
from matcher.events import MatchWriter
from matcher.preload import settings as preload_settings
from matcher.records import Source
from matcher.sharding import Sharding
from streaming.decode_stage import DEAD_LETTER_KEY
from streaming.executors import executor_id, ran_counter
from streaming.listener import HISTOGRAMS
from streaming.spark_time import from_spark_ms, to_spark_ms
from streaming.state.store import MatcherStore, Meta

# connectors.sink_rows.PACKED_COLUMNS: a batch's records in runs of PACK_SIZE a row
OUTPUT_DDL = "topic string, keys array<binary>, values array<binary>"
_ROW_COLUMNS = ("ts", "part", "off", "topic", "value", "record")


def _freeze_heap() -> None:
    """Put what is alive now, mostly the worker's cached matchers, out of the cyclic
    GC's sight (`gc.freeze`), after collecting the young garbage.

    A batch allocates a few objects per match record (hundreds of thousands), so
    the GC runs full collections during it, and each one walks every object of the
    cached matchers (1.6M at 100k subscriptions, 0.7 s a walk). A matcher has no
    reference cycles (`tests/test_engine_properties.py`), so what is frozen is
    still freed by reference counting when it is dropped; a cache miss unfreezes
    everything (`streaming.state.store`) in case a cycle appears."""
    gc.collect(1)
    gc.freeze()


def _gc_off(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """`frames`, made with the cyclic GC off (reference counting frees all the
    garbage of a batch: its records make no cycles), and back on after."""
    if not gc.isenabled():  # (an earlier key's frames were not read to the end)
        yield from frames
        return
    _freeze_heap()
    gc.disable()
    try:
        yield from frames
    finally:
        gc.enable()


def _rows(frames: Iterator[pd.DataFrame]) -> list[tuple]:
    """A key's input rows as `(ts, part, off, topic, value, record)`."""
    columns: list[list] = [[] for _ in _ROW_COLUMNS]
    for frame in frames:
        for column, name in zip(columns, _ROW_COLUMNS, strict=True):
            column += frame[name].tolist()
    return list(zip(*columns, strict=True))


class MatchProcessor(StatefulProcessor):
    """Per key: order the batch (SEMANTICS §5), apply, persist changes, keep one timer.

    Records go to Kafka from here as they are made when `direct` is a client
    configuration (`connectors.outlet.DirectWriter`: the job's at-least-once
    mode), else out of the operator to the sink. The operator is
    `transformWithStateInPandas`: its output frames go on to the sink as they
    are yielded, so the sink's task writes the first match records to Kafka
    while this one still makes the rest (the Row API converts a key's whole
    output after the handler returns)."""

    def __init__(
        self,
        topics: Topics,
        sharding: Sharding,
        lateness_ms: int,
        snapshot_every: int,
        metrics: Any,
        direct: dict[str, object] | None = None,
        preload: dict[str, Any] | None = None,
        tenants: TenantRouting | None = None,
    ) -> None:
        self.direct = direct
        self.preload = preload or {}  # `matcher.preload.settings` values, set in `init`
        self.tenants = tenants  # match records to each tenant's topic (connectors.tenants)
        self.matches_topic = topics.matches
        self.deadletter_topic = topics.deadletter
        self.sharding = sharding
        self.lateness_ms = lateness_ms
        self.snapshot_every = snapshot_every
        self.metrics = metrics  # an accumulator of counters (streaming.listener.Counters)

    def init(self, handle: StatefulProcessorHandle) -> None:
        preload_settings.configure(**self.preload)  # (the worker's own process)
        self.handle = handle
        self.state = MatcherStore(handle, self.sharding, self.snapshot_every)
        self.executor = executor_id()  # (None in local mode: nothing to place)

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        skey = key[0]
        if skey == DEAD_LETTER_KEY:
            # (a row without a value only carried the batch's watermark: `event_times`)
            values = [v for frame in rows for v in frame["value"].tolist() if v is not None]
            self.metrics.add({"dead_letters": len(values)})
            return pack(self.deadletter_topic, [(None, v) for v in values], self.direct)
        return _gc_off(self._handle(skey, _rows(rows), timerValues))

    def _handle(
        self, skey: str, rows: list[tuple], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        watermark = from_spark_ms(timerValues.getCurrentWatermarkInMs())
        counts = {"keys": 1, "rows": len(rows)}
        matcher, meta = self._matcher(skey, counts)
        late, batch, raws = [], [], {}
        # (every cell of a sharded space gets each record: the first one rejects it)
        rejects = self.sharding.is_first(skey)
        for ts, part, off, topic, value, record in rows:
            source = Source(topic=topic, partition=part, offset=off)
            letter = late_letter(ts, watermark, self.lateness_ms, value, source)
            if letter is None:
                batch.append(unpack_record(record, source))
                raws[id(batch[-1])] = value
            elif rejects:
                late.append((None, encode(letter)))
        batch = in_order(batch)
        out = outlet(self.matches_topic, self.direct, self.tenants)
        with matcher.writing(MatchWriter(matcher.space)):
            yield from out.add(matcher.expire(watermark))
            for events in matcher.iter_batch(batch):
                yield from out.add(events)
        yield from out.flush()
        counts["late"] = len(late)
        # (subscribes whose group disagrees: docs/DELIVERY.md §1; every cell refuses them)
        for record, why in matcher.drain_refused():
            if rejects:
                late.append((None, encode(dead_letter(why, raws[id(record)], record.source))))
        counts["dead_letters"] = len(late)
        self._save(skey, matcher, meta, out.count, counts)
        yield from pack(self.deadletter_topic, late, self.direct)

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        return _gc_off(self._expire(key[0], timerValues))

    def _expire(self, skey: str, timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        counts = {"timers": 1}
        meta = self.state.meta()
        meta.timer = None  # Spark deletes the timer that fired
        matcher, meta = self._matcher(skey, counts, meta)
        with matcher.writing(MatchWriter(matcher.space)):
            records = matcher.expire(from_spark_ms(timerValues.getCurrentWatermarkInMs()))
        yield from pack(self.matches_topic, records, self.direct, self.tenants)
        self._save(skey, matcher, meta, len(records), counts)

    def close(self) -> None:
        pass

    # -- state ---------------------------------------------------------------

    def _matcher(
        self, skey: str, counts: dict, meta: Meta | None = None
    ) -> tuple[SpaceMatcher, Meta]:
        """The key's matcher and its state's `meta` (`streaming.state.store`)."""
        meta = self.state.meta() if meta is None else meta
        return self.state.matcher(skey, meta, counts), meta

    def _save(
        self, skey: str, matcher: SpaceMatcher, meta: Meta, matches: int, counts: dict
    ) -> None:
        """Move the timer, persist the state, count the batch (`matches`: the match
        records it made)."""
        self._move_timer(matcher, meta)
        self.state.save(skey, matcher, meta, counts)
        if self.sharding.is_first(skey) and matcher.subs:  # (every cell holds every record)
            counts[HISTOGRAMS + matcher.space] = matcher.histograms().summary()
        counts["matches"] = matches
        cells = matcher.forest.preload_counts()
        counts["profiles_asked"] = cells["profiles"]
        counts["profiles_from_cells"] = cells["profiles_from_cells"]
        counts["cells_bytes"] = cells["cells_bytes"]
        if self.executor is not None:
            counts[ran_counter(skey, self.executor)] = 1
        self.metrics.add(counts)

    def _move_timer(self, matcher: SpaceMatcher, meta: Meta) -> None:
        """Keep the key's one timer at its next expiry + 1 (none if nothing expires)."""
        expiry = matcher.next_expiry()
        wanted = None if expiry is None else to_spark_ms(expiry) + 1
        if wanted == meta.timer:
            return
        if meta.timer is not None:
            self.handle.deleteTimer(meta.timer)
        if wanted is not None:
            self.handle.registerTimer(wanted)
        meta.timer = wanted
