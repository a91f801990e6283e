"""The `StatefulProcessor` that runs one state key's `SpaceMatcher` inside Spark.

State per key, in the RocksDB state store:

- `meta`: a version token (random, rewritten on every change, so that a
  cached matcher is used only for the exact state it was built from), the
  change-log length, the event-time timer now registered, and the counts of
  held subscriptions and profiles (read by `tsm run` at start for its gauges);
- `snapshot`: `SpaceMatcher.dump()`, rewritten only when the log is compacted;
- `log`: the held-set changes since the snapshot, `(kind, id) → record or
  null` (the latest change per id wins), written from `drain_changes()`, so
  that a batch writes what it changed, never the whole index.

A matcher is rebuilt (snapshot + log) only when the worker's cache has no
entry for the current token. Timers: one per key, at the next `valid_to` + 1
(Spark fires a timer once the watermark reaches it; §3 evicts when
`valid_to < watermark`). Lateness: the watermark column is dropped before
this stage, so Spark hands late rows over instead of dropping them silently,
and they are judged here against the watermark in force at the batch start.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from connectors.config import Topics
from matcher.engine import SpaceMatcher, encode, late_reason
from matcher.records import Source, dead_letter, decode, from_state, to_state
from matcher.sharding import Sharding
from streaming import state_cache
from streaming.decode_stage import DEAD_LETTER_KEY, KIND_ORDER

OUTPUT_DDL = "topic string, key binary, value binary"  # connectors.kafka_sink.SINK_COLUMNS
_KINDS = {order: kind for kind, order in KIND_ORDER.items()}


class MatchProcessor(StatefulProcessor):
    """Per key: order the batch (SEMANTICS §5), apply, persist changes, keep one timer."""

    def __init__(
        self,
        topics: Topics,
        sharding: Sharding,
        lateness_ms: int,
        snapshot_every: int,
        metrics: Any,
    ) -> None:
        self.matches_topic = topics.matches
        self.deadletter_topic = topics.deadletter
        self.sharding = sharding
        self.lateness_ms = lateness_ms
        self.snapshot_every = snapshot_every
        self.metrics = metrics  # an accumulator of counters (streaming.listener.Counters)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.meta = handle.getValueState(
            "meta", "token long, log_len int, timer long, subs int, profiles int"
        )
        self.snapshot = handle.getValueState("snapshot", "blob binary")
        self.log = handle.getMapState("log", "kind string, id string", "rec string")

    def handleInputRows(
        self, key: tuple, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        skey = key[0]
        if skey == DEAD_LETTER_KEY:
            out = [Row(topic=self.deadletter_topic, key=None, value=r.value) for r in rows]
            self.metrics.add({"dead_letters": len(out)})
            return iter(out)
        watermark = timerValues.getCurrentWatermarkInMs()
        rows = sorted(rows, key=lambda r: (r.ts, r.kord, r.part, r.off))
        counts = {"keys": 1, "rows": len(rows)}
        matcher, meta = self._matcher(skey, counts)
        records = matcher.expire(watermark)
        late, batch = [], []
        for row in rows:
            source = Source(topic=row.topic, partition=row.part, offset=row.off)
            if row.ts < watermark:
                reason = late_reason(row.ts, watermark, self.lateness_ms)
                late.append(dead_letter(reason, row.value, source))
                continue
            batch.append(decode(_KINDS[row.kord], row.value, source, fallback_ts=row.ktime))
        records.extend(matcher.apply_batch(batch))
        counts["late"] = len(late)
        counts["dead_letters"] = len(late)
        out = self._save(skey, matcher, meta, records, counts)
        out.extend(self._dead_letters(late))
        return iter(out)

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        skey = key[0]
        counts = {"timers": 1}
        meta = self._meta()
        meta["timer"] = None  # Spark deletes the timer that fired
        matcher, meta = self._matcher(skey, counts, meta)
        records = matcher.expire(timerValues.getCurrentWatermarkInMs())
        return iter(self._save(skey, matcher, meta, records, counts))

    def close(self) -> None:
        pass

    # -- state ---------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        # exists() first: get() of an absent value logs a warning on the JVM side.
        value = self.meta.get() if self.meta.exists() else None
        if value is None:
            return {"token": None, "log_len": 0, "timer": None}
        return {"token": value[0], "log_len": value[1], "timer": value[2]}

    def _matcher(self, skey: str, counts: dict, meta: dict | None = None) -> tuple[Any, dict]:
        """The key's matcher: from the worker cache if it holds this state version, else rebuilt."""
        meta = self._meta() if meta is None else meta
        matcher = state_cache.take(skey, meta["token"])
        if matcher is not None:
            counts["cache_hits"] = 1
        else:
            counts["cache_misses"] = 1
            matcher = self._rebuild(skey)
        # The live-count gauges travel as differences (added back in `_save`).
        counts["subscriptions"] = -len(matcher.subs)
        counts["profiles"] = -len(matcher.profiles)
        return matcher, meta

    def _rebuild(self, skey: str) -> Any:
        """Snapshot + change log → matcher; a key with no state gets a new one."""
        snapshot = self.snapshot.get() if self.snapshot.exists() else None
        if snapshot is not None:
            matcher = SpaceMatcher.load(snapshot[0])
        else:
            cell = self.sharding.cell_of(skey)
            matcher = SpaceMatcher(skey.rpartition("#")[0] if cell else skey, skey, cell)
        for (kind, ident), (rec,) in self.log.iterator():
            matcher.restore(kind, ident, None if rec is None else from_state(rec))
        matcher.drain_changes()
        return matcher

    def _save(
        self, skey: str, matcher: Any, meta: dict, records: list[dict], counts: dict
    ) -> list[Row]:
        """Persist the held-set changes, move the timer, cache the matcher, emit the matches."""
        changes = matcher.drain_changes()
        if changes:
            for kind, ident, record in changes:
                self.log.updateValue((kind, ident), (None if record is None else to_state(record),))
            meta["log_len"] += len(changes)
            if meta["log_len"] > self.snapshot_every:
                self.snapshot.update((matcher.dump(),))
                self.log.clear()
                meta["log_len"] = 0
                counts["snapshots"] = 1
        if changes or meta["token"] is None:
            meta["token"] = random.getrandbits(62)
        self._move_timer(matcher, meta)
        if not len(matcher):
            self.meta.clear()
            self.snapshot.clear()
            self.log.clear()
            state_cache.drop(skey)
        else:
            counts_held = (len(matcher.subs), len(matcher.profiles))
            self.meta.update((meta["token"], meta["log_len"], meta["timer"], *counts_held))
            state_cache.put(skey, meta["token"], matcher)
        counts["subscriptions"] += len(matcher.subs)
        counts["profiles"] += len(matcher.profiles)
        counts["matches"] = len(records)
        self.metrics.add(counts)
        return [
            Row(topic=self.matches_topic, key=r["subscriber"].encode(), value=encode(r))
            for r in records
        ]

    def _move_timer(self, matcher: Any, meta: dict) -> None:
        expiry = matcher.next_expiry()
        wanted = None if expiry is None else int(expiry) + 1
        if wanted == meta["timer"]:
            return
        if meta["timer"] is not None:
            self.handle.deleteTimer(meta["timer"])
        if wanted is not None:
            self.handle.registerTimer(wanted)
        meta["timer"] = wanted

    def _dead_letters(self, letters: Iterable[dict]) -> list[Row]:
        return [Row(topic=self.deadletter_topic, key=None, value=encode(d)) for d in letters]
