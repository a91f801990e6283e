"""A key's change log: the held-set changes since its snapshot, one entry per batch,
and the policy that turns the log into a new snapshot.

A batch writes what it changed (`SpaceMatcher.drain_changes`), never the whole
index. The `log` map state (key `(kind, id)`, value `rec`) holds:

- a batch's changes: `(BATCH_KINDS[generation], position)` → JSON `[token,
  [[kind, id, record state or null], ...]]`, where `position` is the log's
  length before the entry, zero-padded to 12 digits (replayed in that order),
  and `token` the state version the entry makes;
- the snapshot's facts: `("snapshot", "token")` → the version it was written
  as; `("snapshot", "generation")` → which of `BATCH_KINDS` the log since it
  uses (0 when absent); `("snapshot", "previous")` → the version the generation
  before it began at;
- entries of the first layout, one per change (`migrations.per_change_entry`),
  replayed before the rest until the next snapshot drops them.

The log since one snapshot is a generation. A compaction keeps the generation
it ends, its last entry the compacting batch's changes, and drops the one
before: a worker whose cached matcher is from that generation (the key's
previous batches ran on it) catches up across the snapshot instead of
rebuilding (`LogView.steps`). With two workers taking a key's batches by turns,
every compaction would otherwise cost the other one a rebuild (3-4 s at 100k
subscriptions).

When: a snapshot costs time in proportion to everything held, a replay in
proportion to the changes and their kind (`REPLAY_COST`). The log is compacted
when a batch would take it over `snapshot_every` changes and replaying it would
cost more than writing a snapshot (`should_compact`). So each change pays about
its own replay again in snapshot writes, and a rebuild replays at most about
one snapshot write's worth on top of loading one.
"""

from __future__ import annotations

import json
from typing import Any

from matcher.records import from_state
from streaming.state import migrations

# The `log` key kinds of a batch's changes, by generation parity.
BATCH_KINDS = ("changes", "changes.1")
SNAPSHOT_KIND = "snapshot"  # the `log` key kind of the snapshot's facts
# What replaying a logged change costs, in units of what one held record costs a
# snapshot's write (17-21 us in process): a profile is decoded and held, 28 us
# (its index insert waits for a subscription query); a subscription is also
# placed in the forest, 79 us among 10k, 242 us among 100k.
REPLAY_COST = {"profile": 1.5, "subscription": 8.0, "delivery": 0.5}

Change = tuple[str, str, str | None]  # (kind, id, the record's `to_state` or None)
Version = tuple[int | None, int | None]  # (log length, token); a None length: the generation's end


def replay_cost(changes: list[Change]) -> float:
    """What replaying `changes` costs (`REPLAY_COST`). O(len(changes))."""
    return sum(REPLAY_COST[change[0]] for change in changes)


def should_compact(log_len: int, log_cost: float, held: int, snapshot_every: int) -> bool:
    """Whether a log that a batch takes to `log_len` changes costing `log_cost` to
    replay becomes a snapshot instead, the matcher holding `held` records."""
    return log_len > snapshot_every and log_cost > held


def closes_generation(batch_cost: float, held: int, *, first_batch: bool) -> bool:
    """Whether the compacting batch's changes are logged as the last entry of the
    generation it ends (kept for workers to catch up along). Not when the batch is
    the key's first, nor when it costs a snapshot's write to replay by itself: a
    rebuild from the snapshot is about as quick as such a catch-up."""
    return not first_batch and batch_cost <= held


def replay(matcher: Any, changes: list[Change]) -> None:
    """Set each changed record in `matcher` as the change says, without matching."""
    for kind, ident, state in changes:
        if kind == "delivery":  # (an item of the delivery state: docs/DELIVERY.md)
            matcher.restore_delivery(ident, state)
        else:
            matcher.restore(kind, ident, None if state is None else from_state(state))


def _chain(
    entries: dict[int, tuple[int, list[Change]]],
    base: int | None,
    start: Version,
    end: Version,
) -> list[list[Change]] | None:
    """The changes of `entries` (one generation, beginning at version `base`) that
    take version `start` to version `end`, in order; None if either is not one of
    the generation's versions."""
    ends = {position + len(changes): token for position, (token, changes) in entries.items()}
    ends[0] = base
    last = max(ends) if end[0] is None else end[0]
    if start[0] > last or ends.get(start[0]) != start[1] or ends.get(last) != end[1]:
        return None
    return [entries[p][1] for p in sorted(entries) if start[0] <= p < last]


class LogView:
    """The `log` state read whole: each generation's batch entries by position,
    `(token, changes)`, the snapshot's facts, and entries of the first layout."""

    def __init__(self) -> None:
        self.generations: dict[str, dict[int, tuple[int, list[Change]]]] = {
            kind: {} for kind in BATCH_KINDS
        }
        self.facts: dict[str, str] = {}
        self.per_change: list[Change] = []

    def _token(self, name: str) -> int | None:
        return int(self.facts[name]) if name in self.facts else None

    @property
    def generation(self) -> int:
        return int(self.facts.get("generation", 0))

    @property
    def current(self) -> dict[int, tuple[int, list[Change]]]:
        return self.generations[BATCH_KINDS[self.generation]]

    @property
    def previous(self) -> dict[int, tuple[int, list[Change]]]:
        return self.generations[BATCH_KINDS[1 - self.generation]]

    @property
    def cost(self) -> float:
        """What replaying the log since the snapshot costs (`REPLAY_COST`)."""
        entries = self.current.values()
        return replay_cost(self.per_change) + sum(replay_cost(c) for _, c in entries)

    def since_snapshot(self) -> list[list[Change]]:
        """The changes to replay on the snapshot, in order."""
        return [self.per_change] + [self.current[p][1] for p in sorted(self.current)]

    def steps(self, start: Version, now: Version) -> list[list[Change]] | None:
        """The changes that take a matcher at version `start` (log length, token) to
        `now`: from this generation, or from the one before the snapshot and then
        this one; None if `start` is in neither (two snapshots since, or a batch
        that did not commit) or the log has entries of the first layout.
        O(entries)."""
        if self.per_change:
            return None
        base = self._token("token")
        steps = _chain(self.current, base, start, now)
        if steps is None:  # from before the snapshot: its generation, then this one
            head = _chain(self.previous, self._token("previous"), start, (None, base))
            tail = _chain(self.current, base, (0, base), now)
            if head is None or tail is None:
                return None
            steps = head + tail
        return steps


class ChangeLog:
    """The `log` map state of the current key (Spark's `MapState`)."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def read(self) -> LogView:
        """The whole log. O(entries)."""
        log = LogView()
        for (kind, ident), (rec,) in self.state.iterator():
            if kind in BATCH_KINDS:
                token, changes = json.loads(rec)
                log.generations[kind][int(ident)] = (token, changes)
            elif kind == SNAPSHOT_KIND:
                log.facts[ident] = rec
            else:
                log.per_change.append(migrations.per_change_entry(kind, ident, rec))
        return log

    def generation(self) -> int:
        """The parity of the generation since the snapshot. O(1)."""
        key = (SNAPSHOT_KIND, "generation")
        return int(self.state.getValue(key)[0]) if self.state.containsKey(key) else 0

    def append(self, position: int, token: int, changes: list[Change], generation: int) -> None:
        """Log a batch's changes at `position` (the log's length before them), as the
        version `token`. O(len(changes))."""
        key = (BATCH_KINDS[generation], f"{position:012d}")
        # (each change is (kind, id, state text or None): JSON writes it as a list)
        self.state.updateValue(key, (json.dumps([token, changes]),))

    def start_generation(self, token: int, closing: tuple[int, list[Change]] | None) -> None:
        """The log side of a compaction into a snapshot written as version `token`:
        the generation before the one now ended is dropped, and the ended one too
        unless `closing` = (position, changes), its last entry, the compacting
        batch's changes. O(entries)."""
        keys = list(self.state.keys())
        facts = {
            ident: self.state.getValue((kind, ident))[0]
            for kind, ident in keys
            if kind == SNAPSHOT_KIND
        }
        generation = int(facts.get("generation", 0))
        kept = BATCH_KINDS[generation] if closing is not None else None
        for kind, ident in keys:
            if kind != SNAPSHOT_KIND and kind != kept:
                self.state.removeKey((kind, ident))
        if closing is not None:
            self.append(closing[0], token, closing[1], generation)
        if closing is not None and "token" in facts:
            self.state.updateValue((SNAPSHOT_KIND, "previous"), (facts["token"],))
        elif "previous" in facts:
            self.state.removeKey((SNAPSHOT_KIND, "previous"))
        self.state.updateValue((SNAPSHOT_KIND, "token"), (str(token),))
        self.state.updateValue((SNAPSHOT_KIND, "generation"), (str(1 - generation),))

    def clear(self) -> None:
        self.state.clear()
