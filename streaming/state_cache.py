"""A per-worker-process cache of live `SpaceMatcher`s, keyed by state key.

Spark reuses Python workers across micro-batches, so a matcher rebuilt from
the state store once can serve the key's next batches without reloading its
snapshot. The state store stays the truth: each entry is tagged with the
state version token that the processor wrote with it, and an entry whose tag
differs from the token now in the store (the key ran on another worker
meanwhile, or the batch is a re-run after a crash and the store rolled back)
is never used. A matcher is taken out while it is being changed, so that a
batch that fails half-way cannot leave a half-applied matcher behind.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

# Matchers kept per worker process; the least recently used goes first.
MAX_ENTRIES = 512

_entries: OrderedDict[str, tuple[int, Any]] = OrderedDict()


def take(key: str, token: int | None) -> Any | None:
    """Remove and return the matcher of `key` if it was cached for `token`, else None."""
    entry = _entries.pop(key, None)
    if entry is None or token is None or entry[0] != token:
        return None
    return entry[1]


def put(key: str, token: int, matcher: Any) -> None:
    """Cache `matcher` as the state of `key` at version `token`."""
    _entries[key] = (token, matcher)
    _entries.move_to_end(key)
    while len(_entries) > MAX_ENTRIES:
        _entries.popitem(last=False)


def drop(key: str) -> None:
    _entries.pop(key, None)
