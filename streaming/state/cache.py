"""A per-worker-process cache of live `SpaceMatcher`s, keyed by state key.

Spark reuses Python workers across micro-batches, so a matcher rebuilt from the
state store once can serve the key's next batches without loading its snapshot
again. The state store stays the truth: each entry is tagged with the state
version token it was saved as, and an entry whose tag differs from the token
now in the store (the key ran on another worker meanwhile, or the batch is a
re-run after a crash and the store rolled back) is never used as it is (it may
be brought up to date from the change log: `streaming.state.store`). A matcher
is taken out while it is being changed, so that a batch that fails half-way
cannot leave a half-applied matcher behind.

The cache is bounded by the weight of what it holds, the records of its
matchers: the least recently used go first while they hold more than
`MAX_HELD` between them, or number more than `MAX_ENTRIES`; the one just put
stays, however large. A held record takes 2-3 KB with its forest entries, so a
worker keeps about 2-3 GB at most; counting records, not matchers, lets a job of
many small spaces keep them all.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from matcher.engine import SpaceMatcher

MAX_ENTRIES = 100_000
MAX_HELD = 1_000_000


@dataclass(slots=True)
class Entry:
    """A cached matcher and the state version it is."""

    token: int  # the state version token
    log_len: int  # the change log's length at that version
    log_cost: float  # and its replay cost (`streaming.state.change_log.replay_cost`)
    matcher: SpaceMatcher
    held: int = 0  # len(matcher) when it was put (its weight until taken out)


class MatcherCache:
    """Entries by state key, least recently used first; `held` is their weight."""

    def __init__(self, max_held: int = MAX_HELD, max_entries: int = MAX_ENTRIES) -> None:
        self.max_held = max_held
        self.max_entries = max_entries
        self.held = 0
        self._entries: OrderedDict[str, Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[str]:
        """The keys, least recently used first."""
        return list(self._entries)

    def take(self, key: str) -> Entry | None:
        """Remove and return the entry of `key`, or None. O(1). The caller uses its
        matcher only if it can prove which state version it is."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.held -= entry.held
        return entry

    def put(self, key: str, entry: Entry) -> None:
        """Cache `entry` as the most recently used, replacing the key's, then drop the
        least recently used while over a bound (never the one just put). O(1) and
        O(1) per entry dropped."""
        self.take(key)
        entry.held = len(entry.matcher)
        self._entries[key] = entry
        self.held += entry.held
        while len(self._entries) > 1 and (
            len(self._entries) > self.max_entries or self.held > self.max_held
        ):
            self.held -= self._entries.popitem(last=False)[1].held

    def drop(self, key: str) -> None:
        self.take(key)


_worker = MatcherCache()


def worker_cache() -> MatcherCache:
    """This worker process's cache (one per process: Spark makes a processor per task)."""
    return _worker
