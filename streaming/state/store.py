"""Where a state key's `SpaceMatcher` is kept between batches.

Per key, in Spark's state store (RocksDB), three state variables:

- `meta`: a version token (random, rewritten on every change, so that a cached
  matcher is used only for the exact state it was built from), the change
  log's length, the event-time timer now registered, and the counts of held
  subscriptions and profiles (read by `tsm run` at start for its gauges);
- `snapshot`: the whole matcher (`streaming.state.codec`), rewritten only when
  the log is compacted;
- `log`: the changes since (`streaming.state.change_log`).

A batch's matcher comes from the worker's cache when it holds the current
version; else from a cached version the log leads on from (a key's batches
land on either Python worker at random, so a worker's cached matcher is often
a batch or two behind): the entries after it are replayed, across the last
snapshot if need be; else it is rebuilt from the snapshot and the log.
"""

from __future__ import annotations

import gc
import random
from dataclasses import dataclass
from typing import Any

from matcher.engine import SpaceMatcher
from matcher.sharding import Sharding
from streaming.state import change_log
from streaming.state.cache import Entry, MatcherCache, worker_cache
from streaming.state.codec import dump_snapshot, load_snapshot

META_SCHEMA = "token long, log_len int, timer long, subs int, profiles int"


@dataclass(slots=True)
class Meta:
    """A key's `meta` row, and the replay cost of its log (not stored: known from
    the log, or from the cached matcher)."""

    token: int | None = None  # None: the key has no state
    log_len: int = 0
    timer: int | None = None  # the event-time timer registered, in ms
    held: tuple[int, int] = (0, 0)  # (subscriptions, profiles) counted for the gauges
    log_cost: float = 0.0


class MatcherStore:
    """The state variables of the key Spark is running (its handle scopes them),
    with the worker's cache in front.

    `counts` (the batch's metrics, `streaming.listener.COUNTERS`) get how the
    matcher was had (`cache_hits`, `cache_catch_ups`, `cache_misses`), the
    snapshots written, and the changes of the live gauges."""

    def __init__(
        self,
        handle: Any,
        sharding: Sharding,
        snapshot_every: int,
        cache: MatcherCache | None = None,
    ) -> None:
        self.sharding = sharding
        self.snapshot_every = snapshot_every
        self.cache = worker_cache() if cache is None else cache
        self.meta_state = handle.getValueState("meta", META_SCHEMA)
        self.snapshot = handle.getValueState("snapshot", "blob binary")
        self.log = change_log.ChangeLog(
            handle.getMapState("log", "kind string, id string", "rec string")
        )

    def meta(self) -> Meta:
        # exists() first: get() of an absent value logs a warning on the JVM side.
        value = self.meta_state.get() if self.meta_state.exists() else None
        if value is None:
            return Meta()
        held = (value[3] or 0, value[4] or 0)  # (what the gauges summed for this key)
        return Meta(token=value[0], log_len=value[1], timer=value[2], held=held)

    def matcher(self, skey: str, meta: Meta, counts: dict[str, int]) -> SpaceMatcher:
        """The key's matcher at the version `meta` says: cached (O(1)), caught up
        (O(log entries) to read the log, and the replay of those after the cached
        version), or rebuilt (the snapshot's load and the log's replay). Sets
        `meta.log_cost`."""
        cached, matcher = self.cache.take(skey), None
        if cached is not None and meta.token is not None:
            if cached.token == meta.token:
                counts["cache_hits"] = 1
                matcher, meta.log_cost = cached.matcher, cached.log_cost
            else:
                matcher = self._catch_up(cached, meta)
                counts["cache_catch_ups" if matcher is not None else "cache_misses"] = 1
        else:
            counts["cache_misses"] = 1
        if matcher is None:
            # (the processor froze the cached matchers out of the cyclic GC's sight:
            # a full collection may now reclaim what the dropped one held)
            gc.unfreeze()
            matcher = self._rebuild(skey, meta)
        # The live gauges are the sum of the keys' `meta` counts (at start), so they
        # travel as the changes of those: minus the old ones here, plus the new in `save`.
        counts["subscriptions"], counts["profiles"] = (-n for n in meta.held)
        return matcher

    def _rebuild(self, skey: str, meta: Meta) -> SpaceMatcher:
        """Snapshot + change log → matcher; a key with no state gets a new one."""
        snapshot = self.snapshot.get() if self.snapshot.exists() else None
        if snapshot is not None:
            matcher = load_snapshot(snapshot[0])
        else:
            sharding = self.sharding
            matcher = SpaceMatcher(sharding.space_of(skey), skey, sharding.cell_of(skey))
        log = self.log.read()
        for changes in log.since_snapshot():
            change_log.replay(matcher, changes)
        matcher.drain_changes()
        meta.log_cost = log.cost
        return matcher

    def _catch_up(self, cached: Entry, meta: Meta) -> SpaceMatcher | None:
        """The cached matcher brought up to the current version with the log entries
        after its own; None if the log does not lead there from it."""
        log = self.log.read()
        steps = log.steps((cached.log_len, cached.token), (meta.log_len, meta.token))
        if steps is None:
            return None
        for changes in steps:
            change_log.replay(cached.matcher, changes)
        cached.matcher.drain_changes()
        meta.log_cost = log.cost
        return cached.matcher

    def save(self, skey: str, matcher: SpaceMatcher, meta: Meta, counts: dict[str, int]) -> None:
        """Persist the matcher's changes since it was had (a log entry, or a new
        snapshot), `meta` (its timer as the caller set it) and the new counts, and
        cache it; a key that holds nothing any more has its state cleared.
        O(changes), or a snapshot's write (O(held)) when the log is compacted."""
        changes = matcher.drain_changes()
        before = meta.token
        if changes or before is None:
            meta.token = random.getrandbits(62)
        held = len(matcher)
        if changes and held:  # (an emptied key's state is cleared below)
            logged, cost = meta.log_len + len(changes), change_log.replay_cost(changes)
            if change_log.should_compact(logged, meta.log_cost + cost, held, self.snapshot_every):
                first = before is None
                close = change_log.closes_generation(cost, held, first_batch=first)
                self.snapshot.update((dump_snapshot(matcher),))
                self.log.start_generation(meta.token, (meta.log_len, changes) if close else None)
                meta.log_len, meta.log_cost = 0, 0.0
                counts["snapshots"] = 1
            else:
                self.log.append(meta.log_len, meta.token, changes, self.log.generation())
                meta.log_len, meta.log_cost = logged, meta.log_cost + cost
        # Every cell of a sharded space holds all of its records: the first one counts them.
        counted = self.sharding.is_first(skey)
        meta.held = (len(matcher.subs), len(matcher.profiles)) if counted else (0, 0)
        if not held:
            self.meta_state.clear()
            self.snapshot.clear()
            self.log.clear()
            self.cache.drop(skey)
        else:
            self.meta_state.update((meta.token, meta.log_len, meta.timer, *meta.held))
            self.cache.put(skey, Entry(meta.token, meta.log_len, meta.log_cost, matcher))
        counts["subscriptions"] += meta.held[0]
        counts["profiles"] += meta.held[1]
