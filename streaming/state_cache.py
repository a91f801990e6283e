"""A per-worker-process cache of live `SpaceMatcher`s, keyed by state key.

Spark reuses Python workers across micro-batches, so a matcher rebuilt from
the state store once can serve the key's next batches without reloading its
snapshot. The state store stays the truth: each entry is tagged with the
state version token that the processor wrote with it, and an entry whose tag
differs from the token now in the store (the key ran on another worker
meanwhile, or the batch is a re-run after a crash and the store rolled back)
is never used as it is (it may be brought up to date from the change log,
see `streaming.processor`). A matcher is taken out while it is being changed,
so that a batch that fails half-way cannot leave a half-applied matcher behind.

A miss rebuilds the matcher from its snapshot, so the snapshot's codec is
here too: `SpaceMatcher.dump`'s pickle, but with the held records and their
filters (slots dataclasses, whose default pickling looks up the dataclass
fields once per object) reduced to one constructor call each: about half the
time to load. The pickle is then zstd-compressed, so that RocksDB and the
checkpoint's change log hold a quarter of it: a 100k-subscription snapshot
shrinks from 102 MB to 25 MB for 0.2 s more to write; a rebuild reads it
from the store in 0.5-1.0 s instead of 1.1-1.9 s and spends about that
saving on decompressing it (pipeline benchmark, every batch a miss). Both
directions run with the cyclic GC off (the processor's input path has it
off already; its timer path did not): unpickling allocates millions of
objects, and the full collections they trigger took load from 0.9 s to
4.4-8 s (dump from 1.9 s to 3.2-4.7 s) at that size. `load_snapshot` reads
every form written before.
"""

from __future__ import annotations

import contextlib
import copyreg
import dataclasses
import gc
import io
import pickle
from collections import OrderedDict
from collections.abc import Iterator
from operator import attrgetter
from typing import Any

import zstandard

from matcher.constraints import Atom, Conjunction, Constraint
from matcher.engine import Held, SpaceMatcher
from matcher.profiles import Profile
from matcher.records import Publish, Retract, Source, Subscribe, Unsubscribe

ZSTD_LEVEL = 1  # level 3 saves 2% more at 1.7x the time
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # a zstd frame; a pickle starts with b"\x80"

# Matchers kept per worker process, the least recently used going first while
# they hold more than MAX_HELD records between them or number more than
# MAX_ENTRIES; the one just used stays. Counted in records, not matchers: a job
# of many small spaces keeps them all (5,000 spaces of up to 5 records, 5,000
# profiles a batch, 2 workers: under the former cap of 512 matchers, 35k of the
# 10 batches' key visits rebuilt from the snapshot and a batch took 4.7-4.8 s
# on average; kept, 4-5k and 4.2-4.3 s), and a few large ones are bounded by
# what they hold: a held record takes 2-3 KB with its forest entries (uniform
# and nested workloads, tracemalloc), so about 2-3 GB a worker at most.
MAX_ENTRIES = 100_000
MAX_HELD = 1_000_000


class _Cache(OrderedDict):
    """key → (version token, change-log length and replay cost at that version,
    matcher, its held records when cached); `held` sums the last."""

    def __init__(self) -> None:
        super().__init__()
        self.held = 0


_entries = _Cache()


def take(key: str) -> tuple[int, int, float, Any] | None:
    """Remove and return the entry of `key`, `(token, log length, log cost, matcher)`,
    or None. The caller uses the matcher only if it can prove which state version it is."""
    entry = _entries.pop(key, None)
    if entry is None:
        return None
    _entries.held -= entry[4]
    return entry[:4]


def put(key: str, token: int, log: tuple[int, float], matcher: Any) -> None:
    """Cache `matcher` as the state of `key` at version `token`, whose change log has
    `log` = (length, replay cost)."""
    take(key)
    _entries[key] = (token, *log, matcher, len(matcher))
    _entries.held += len(matcher)
    while len(_entries) > 1 and (len(_entries) > MAX_ENTRIES or _entries.held > MAX_HELD):
        _entries.held -= _entries.popitem(last=False)[1][4]


def drop(key: str) -> None:
    take(key)


# -- snapshots -----------------------------------------------------------------


def _by_init(cls: type) -> Any | None:
    """For a slots dataclass whose __init__ takes every field but those with a
    default that are not state (`Held.memo`), and does nothing else: the getter
    of its __init__ fields in order; else None (pickled as usual)."""
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields if f.init)
    rest = [f for f in fields if not f.init]
    plain = all(f.default is not dataclasses.MISSING for f in rest)
    plain = plain and not hasattr(cls, "__post_init__")
    slots = getattr(cls, "__slots__", None)
    return attrgetter(*names) if plain and slots == tuple(f.name for f in fields) else None


_BY_INIT = {
    cls: getter
    for cls in (Held, Subscribe, Publish, Unsubscribe, Retract, Source, Constraint, Atom)
    if (getter := _by_init(cls)) is not None
}
# Plain __slots__ classes: rebuilt without __init__, their slots set from C.
_BY_SLOTS = {cls: cls.__slots__ for cls in (Conjunction, Profile)}


class _SnapshotPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        getter = _BY_INIT.get(cls)
        if getter is not None:
            values = getter(obj)
            return cls, values if isinstance(values, tuple) else (values,)
        slots = _BY_SLOTS.get(cls)
        if slots is not None:
            return copyreg.__newobj__, (cls,), (None, {s: getattr(obj, s) for s in slots})
        return NotImplemented


@contextlib.contextmanager
def _gc_off() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def dump_snapshot(matcher: SpaceMatcher) -> bytes:
    """The matcher as a snapshot blob (what `SpaceMatcher.dump` holds, faster to
    load, compressed)."""
    out = io.BytesIO()
    with _gc_off():
        _SnapshotPickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(matcher)
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(out.getbuffer())


def load_snapshot(blob: bytes) -> SpaceMatcher:
    """A matcher from `dump_snapshot` or `SpaceMatcher.dump` (compressed or not)."""
    if blob[:4] == _ZSTD_MAGIC:
        blob = zstandard.ZstdDecompressor().decompress(blob)
    with _gc_off():
        return SpaceMatcher.load(blob)
