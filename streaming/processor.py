"""The `StatefulProcessor` that runs one state key's `SpaceMatcher` inside Spark.

State per key, in the RocksDB state store:

- `meta`: a version token (random, rewritten on every change, so that a
  cached matcher is used only for the exact state it was built from), the
  change-log length, the event-time timer now registered, and the counts of
  held subscriptions and profiles (read by `tsm run` at start for its gauges);
- `snapshot`: the whole matcher (`state_cache.dump_snapshot`), rewritten
  only when the log is compacted;
- `log`: the held-set changes since the snapshot, from `drain_changes()`,
  so that a batch writes what it changed, never the whole index: one entry
  per batch, `(kind, position) → [token, [[kind, id, record or null],
  ...]]` (position: the log length before it, zero-padded; token: the
  version it makes), replayed in position order; and the snapshot's facts,
  `("snapshot", "token")` → the version it was written as, `("snapshot",
  "generation")` → which of the two batch kinds (`BATCH_KINDS`) the log
  since it uses, `("snapshot", "previous")` → the version the generation
  before it began at. (Earlier versions wrote one entry per change, `(kind,
  id) → record or null`, the latest change per id winning; such entries are
  replayed first.)

The log is compacted into a new snapshot when a batch would take it over
`snapshot_every` changes and replaying it would cost more than writing a
snapshot (`REPLAY_COST`, the log's `cost`): a snapshot costs time in proportion
to everything held, a replay in proportion to the changes and their kind. So
each change pays about its own replay again in snapshot writes, and a rebuild
replays at most about one snapshot write's worth on top of loading one. (A
count of a quarter of the held records, before, wrote a snapshot every 5,000
profiles at 10k subscriptions, 0.5-0.7 s every other batch in the pipeline
benchmark, and let a log of subscription changes take 3 snapshot writes to
replay.) The generation of the log that the snapshot ends is kept until the
next one, its last entry the compacting batch's changes; the one before it is
dropped.

A matcher is rebuilt (snapshot + log) only when the worker's cache has no
entry for the current token, and no older one that is in the log's history:
a key's batches land on either Python worker at random, so each worker's
cached matcher is often a batch or two behind, and is then brought up to
date with the log entries after its own (the entry that ends at its log
length must carry its token, or the snapshot's when that is 0), across the
last snapshot if need be.

Timers: one per key, at the next `valid_to` + 1 (Spark fires a timer once the
watermark reaches it; §3 evicts when `valid_to < watermark`). Lateness: the
watermark column is dropped before this stage, so Spark hands late rows over
instead of dropping them silently, and they are judged here against the
watermark in force at the batch start.
"""

from __future__ import annotations

import gc
import json
import random
from collections.abc import Iterator
from operator import itemgetter
from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from connectors.config import Topics
from connectors.kafka_sink import outlet, pack
from matcher.engine import SpaceMatcher, late_reason
from matcher.events import MatchWriter, encode
from matcher.records import Source, dead_letter, decode, from_state
from matcher.sharding import Sharding
from streaming import state_cache
from streaming.decode_stage import DEAD_LETTER_KEY, KIND_ORDER
from streaming.state_cache import dump_snapshot, load_snapshot

# connectors.kafka_sink.PACKED_COLUMNS: a batch's records in runs of PACK_SIZE a row
OUTPUT_DDL = "topic string, keys array<binary>, values array<binary>"
_KINDS = {order: kind for kind, order in KIND_ORDER.items()}
_ROW_COLUMNS = ("ts", "kord", "part", "off", "topic", "ktime", "value")
_ORDER = itemgetter(0, 1, 2, 3)
# The `log` key kinds of a batch's changes, by generation parity (the log since
# one snapshot is a generation; the one before it is kept, see `_compact`).
BATCH_KINDS = ("changes", "changes.1")
SNAPSHOT_KIND = "snapshot"  # the `log` key kind of the snapshot's version facts
# What replaying a logged change costs, in units of what one held record costs a
# snapshot's write (17-21 us; pipeline benchmark workload, in process): a profile
# is decoded and held, 28 us (its index insert waits for a subscription query);
# a subscription is also placed in the forest, 79 us among 10k, 242 us among 100k.
REPLAY_COST = {"profile": 1.5, "subscription": 8.0}


def _cost(changes: list) -> float:
    """What replaying `changes` costs (`REPLAY_COST`)."""
    return sum(REPLAY_COST[change[0]] for change in changes)


def _freeze_heap() -> None:
    """Put what is alive now, mostly the worker's cached matchers, out of the cyclic
    GC's sight (`gc.freeze`), after collecting the young garbage.

    A batch allocates a few objects per match record (hundreds of thousands), so
    the GC runs full collections during it, and each one walks every object of the
    cached matchers (1.6M at 100k subscriptions, 0.7 s a walk). A matcher has no
    reference cycles (`tests/test_engine_properties.py`), so what is frozen is
    still freed by reference counting when it is dropped; a cache miss unfreezes
    everything (`MatchProcessor._matcher`) in case a cycle appears."""
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
    """A key's input rows as `(ts, kord, part, off, topic, ktime, value)`, in the
    order of SEMANTICS §5 (ts, then subscriptions first, then topic position)."""
    columns: list[list] = [[] for _ in _ROW_COLUMNS]
    for frame in frames:
        for column, name in zip(columns, _ROW_COLUMNS, strict=True):
            column += frame[name].tolist()
    return sorted(zip(*columns, strict=True), key=_ORDER)


class _Log:
    """The `log` state read whole: each generation's batch entries by position,
    `(token, changes)`, and the snapshot's facts (`token`: the version it was
    written as; `generation`: the parity of the log since; `previous`: the
    version the generation before began at)."""

    def __init__(self) -> None:
        self.generations: dict[str, dict[int, tuple[int, list]]] = {k: {} for k in BATCH_KINDS}
        self.facts: dict[str, str] = {}
        self.legacy = 0.0  # the replay cost of the per-change entries of earlier versions

    @property
    def cost(self) -> float:
        """What replaying the log since the snapshot costs (`REPLAY_COST`)."""
        return self.legacy + sum(_cost(changes) for _, changes in self.current.values())

    def _token(self, name: str) -> int | None:
        return int(self.facts[name]) if name in self.facts else None

    @property
    def _parity(self) -> int:
        return int(self.facts.get("generation", 0))

    @property
    def current(self) -> dict[int, tuple[int, list]]:
        return self.generations[BATCH_KINDS[self._parity]]

    @property
    def previous(self) -> dict[int, tuple[int, list]]:
        return self.generations[BATCH_KINDS[1 - self._parity]]

    @property
    def base(self) -> int | None:
        return self._token("token")

    @property
    def previous_base(self) -> int | None:
        return self._token("previous")


def _chain(
    entries: dict[int, tuple[int, list]],
    base: int | None,
    start: tuple[int, int],
    end: tuple[int | None, int | None],
) -> list[list] | None:
    """The changes of the `entries` (one generation, beginning at version `base`)
    that take version `start` = (log length, token) to version `end` (the
    generation's last if its length is None), in order; None if either is not
    one of the generation's versions."""
    ends = {position + len(changes): token for position, (token, changes) in entries.items()}
    ends[0] = base
    last = max(ends) if end[0] is None else end[0]
    if start[0] > last or ends.get(start[0]) != start[1] or ends.get(last) != end[1]:
        return None
    return [entries[p][1] for p in sorted(entries) if start[0] <= p < last]


def _replay(matcher: Any, changes: list) -> None:
    for kind, ident, state in changes:
        matcher.restore(kind, ident, None if state is None else from_state(state))


class MatchProcessor(StatefulProcessor):
    """Per key: order the batch (SEMANTICS §5), apply, persist changes, keep one timer.

    Records go to Kafka from here as they are made when `direct` is a client
    configuration (`connectors.kafka_sink.DirectWriter`: the job's at-least-once
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
    ) -> None:
        self.direct = direct
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
        watermark = timerValues.getCurrentWatermarkInMs()
        counts = {"keys": 1, "rows": len(rows)}
        matcher, meta = self._matcher(skey, counts)
        late, batch = [], []
        # (every cell of a sharded space gets each record: the first one rejects it)
        rejects = self.sharding.is_first(skey)
        for ts, kord, part, off, topic, ktime, value in rows:
            source = Source(topic=topic, partition=part, offset=off)
            if ts < watermark:
                if rejects:
                    reason = late_reason(ts, watermark, self.lateness_ms)
                    late.append((None, encode(dead_letter(reason, value, source))))
                continue
            ktime = None if ktime != ktime else int(ktime)  # (NaN: no Kafka timestamp)
            batch.append(decode(_KINDS[kord], value, source, fallback_ts=ktime))
        out = outlet(self.matches_topic, self.direct)
        with matcher.writing(MatchWriter(matcher.space)):
            yield from out.add(matcher.expire(watermark))
            for events in matcher.iter_batch(batch):
                yield from out.add(events)
        yield from out.flush()
        counts["late"] = counts["dead_letters"] = len(late)
        self._save(skey, matcher, meta, out.count, counts)
        yield from pack(self.deadletter_topic, late, self.direct)

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        return _gc_off(self._expire(key[0], timerValues))

    def _expire(self, skey: str, timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        counts = {"timers": 1}
        meta = self._meta()
        meta["timer"] = None  # Spark deletes the timer that fired
        matcher, meta = self._matcher(skey, counts, meta)
        with matcher.writing(MatchWriter(matcher.space)):
            records = matcher.expire(timerValues.getCurrentWatermarkInMs())
        yield from pack(self.matches_topic, records, self.direct)
        self._save(skey, matcher, meta, len(records), counts)

    def close(self) -> None:
        pass

    # -- state ---------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        # exists() first: get() of an absent value logs a warning on the JVM side.
        value = self.meta.get() if self.meta.exists() else None
        if value is None:
            return {"token": None, "log_len": 0, "timer": None, "held": (0, 0)}
        held = (value[3] or 0, value[4] or 0)  # (what the gauges summed for this key)
        return {"token": value[0], "log_len": value[1], "timer": value[2], "held": held}

    def _matcher(self, skey: str, counts: dict, meta: dict | None = None) -> tuple[Any, dict]:
        """The key's matcher: from the worker cache if it holds this state version, else rebuilt."""
        meta = self._meta() if meta is None else meta
        cached, matcher = state_cache.take(skey), None
        if cached is not None and meta["token"] is not None:
            token, log_len, log_cost, matcher = cached
            if token == meta["token"]:
                counts["cache_hits"] = 1
                meta["log_cost"] = log_cost
            else:
                matcher = self._catch_up(matcher, token, log_len, meta)
                counts["cache_catch_ups" if matcher is not None else "cache_misses"] = 1
        else:
            counts["cache_misses"] = 1
        if matcher is None:
            gc.unfreeze()  # a full collection may then reclaim what the dropped one held
            matcher = self._rebuild(skey, meta)
        # The live-count gauges are the sum of the keys' `meta` counts (`live_counts`
        # at start), so they travel as the changes of those (the new ones: `_save`).
        counts["subscriptions"], counts["profiles"] = (-n for n in meta["held"])
        return matcher, meta

    def _rebuild(self, skey: str, meta: dict) -> Any:
        """Snapshot + change log → matcher; a key with no state gets a new one.
        Sets the log's replay cost in `meta`."""
        snapshot = self.snapshot.get() if self.snapshot.exists() else None
        if snapshot is not None:
            matcher = load_snapshot(snapshot[0])
        else:
            sharding = self.sharding
            matcher = SpaceMatcher(sharding.space_of(skey), skey, sharding.cell_of(skey))
        log = self._read_log(matcher)
        for position in sorted(log.current):
            _replay(matcher, log.current[position][1])
        matcher.drain_changes()
        meta["log_cost"] = log.cost
        return matcher

    def _read_log(self, matcher: Any) -> _Log:
        """The log; per-change entries of earlier versions are restored into `matcher`."""
        log = _Log()
        for (kind, ident), (rec,) in self.log.iterator():
            if kind in BATCH_KINDS:
                token, changes = json.loads(rec)
                log.generations[kind][int(ident)] = (token, changes)
            elif kind == SNAPSHOT_KIND:
                log.facts[ident] = rec
            else:  # one change, as earlier versions wrote them
                matcher.restore(kind, ident, None if rec is None else from_state(rec))
                log.legacy += REPLAY_COST[kind]
        return log

    def _catch_up(self, matcher: Any, token: int, log_len: int, meta: dict) -> Any | None:
        """`matcher`, cached at version `token` and log length `log_len`, brought up to
        the current version with the log entries after it, from this generation or
        the one before the snapshot; None if that version is in neither (two
        snapshots since, or a batch that did not commit). Sets the log's replay
        cost in `meta`."""
        probe = SpaceMatcher(matcher.space)  # for per-change entries: there must be none
        log = self._read_log(probe)
        if len(probe):
            return None
        now = meta["log_len"], meta["token"]
        steps = _chain(log.current, log.base, (log_len, token), now)
        if steps is None:  # cached before the snapshot: its generation, then this one
            head = _chain(log.previous, log.previous_base, (log_len, token), (None, log.base))
            tail = _chain(log.current, log.base, (0, log.base), now)
            if head is None or tail is None:
                return None
            steps = head + tail
        for changes in steps:
            _replay(matcher, changes)
        matcher.drain_changes()
        meta["log_cost"] = log.cost
        return matcher

    def _save(
        self,
        skey: str,
        matcher: Any,
        meta: dict,
        matches: int,
        counts: dict,
    ) -> None:
        """Persist the held-set changes, move the timer, cache the matcher, count
        the batch (`matches`: the match records it made)."""
        changes = matcher.drain_changes()
        before = meta["token"]
        if changes or before is None:
            meta["token"] = random.getrandbits(62)
        if changes and len(matcher):  # (an emptied key's state is cleared below)
            logged, cost = meta["log_len"] + len(changes), _cost(changes)
            if logged > self.snapshot_every and meta["log_cost"] + cost > len(matcher):
                # (a batch that costs a snapshot's write to replay by itself is not
                # worth a catch-up: a rebuild from the snapshot is about as quick)
                close = before is not None and cost <= len(matcher)
                self._compact(matcher, meta, changes if close else None)
                counts["snapshots"] = 1
            else:
                self._append(meta, changes, self._generation())
                meta["log_len"], meta["log_cost"] = logged, meta["log_cost"] + cost
        self._move_timer(matcher, meta)
        # Every cell of a sharded space holds all of its records: the first one counts them.
        held = (
            (len(matcher.subs), len(matcher.profiles)) if self.sharding.is_first(skey) else (0, 0)
        )
        if not len(matcher):
            self.meta.clear()
            self.snapshot.clear()
            self.log.clear()
            state_cache.drop(skey)
        else:
            self.meta.update((meta["token"], meta["log_len"], meta["timer"], *held))
            state_cache.put(skey, meta["token"], (meta["log_len"], meta["log_cost"]), matcher)
        counts["subscriptions"] += held[0]
        counts["profiles"] += held[1]
        counts["matches"] = matches
        self.metrics.add(counts)

    def _generation(self) -> int:
        """The parity of the log's generation (0 for checkpoints from before it)."""
        key = (SNAPSHOT_KIND, "generation")
        return int(self.log.getValue(key)[0]) if self.log.containsKey(key) else 0

    def _append(self, meta: dict, changes: list, generation: int) -> None:
        """Log a batch's changes at the log's end, as the version `meta["token"]`."""
        key = (BATCH_KINDS[generation], f"{meta['log_len']:012d}")
        # (each change is (kind, id, state text or None): JSON writes it as a list)
        self.log.updateValue(key, (json.dumps([meta["token"], changes]),))

    def _compact(self, matcher: Any, meta: dict, closing: list | None) -> None:
        """Write the matcher as the new snapshot and start a new log generation.

        The generation it ends is kept, with this batch's `closing` changes as
        its last entry, so that a worker whose cached matcher is from that
        generation (the key's previous batches ran on it) catches up instead of
        rebuilding from the snapshot: with two workers taking a key's batches by
        turns, every compaction would otherwise cost the other one a rebuild
        (3-4 s at 100k subscriptions). The generation before it is dropped, and
        so is the ended one when there is no `closing` (nothing to catch up to)."""
        keys = list(self.log.keys())
        facts = {
            ident: self.log.getValue((kind, ident))[0]
            for kind, ident in keys
            if kind == SNAPSHOT_KIND
        }
        generation = int(facts.get("generation", 0))
        kept = BATCH_KINDS[generation] if closing is not None else None
        for kind, ident in keys:
            if kind != SNAPSHOT_KIND and kind != kept:
                self.log.removeKey((kind, ident))
        if kept is not None:
            self._append(meta, closing, generation)
        self.snapshot.update((dump_snapshot(matcher),))
        if kept is not None and "token" in facts:
            self.log.updateValue((SNAPSHOT_KIND, "previous"), (facts["token"],))
        elif "previous" in facts:
            self.log.removeKey((SNAPSHOT_KIND, "previous"))
        self.log.updateValue((SNAPSHOT_KIND, "token"), (str(meta["token"]),))
        self.log.updateValue((SNAPSHOT_KIND, "generation"), (str(1 - generation),))
        meta["log_len"], meta["log_cost"] = 0, 0.0

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
