"""A key's state as snapshot bytes, and back: a `SpaceMatcher` (the single-site
job's key), or a network site's whole `SiteJob` (`streaming.site_processor`).

A snapshot is `MAGIC`, the format version (2 bytes, big-endian), then a zstd
frame of the state's pickle. The pickle is plain pickle's (a matcher's is
`SpaceMatcher.dump`'s), but the held records and their filters (slots
dataclasses, whose default pickling looks up the dataclass fields once per
object) are reduced to one constructor call each: about half the time to
load; and a filter's or a profile's hash is taken again by the process that
loads it (`migrations`). zstd level 1 makes it a quarter of the size
(100k subscriptions: 102 MB to 25 MB) for 0.2 s more to write, and a rebuild
reads it from the state store in about half the time, which it spends on
decompressing it. Both directions run with the cyclic GC off: unpickling
allocates millions of objects, and the full collections they trigger take
several times as long as the load itself.

`load_snapshot` reads format 1 too, the unversioned forms written before the
header (a zstd frame, or a bare pickle: `SpaceMatcher.dump`), and upgrades
what older formats hold as it loads (`streaming.state.migrations`). Cost:
both directions linear in what the matcher holds.
"""

from __future__ import annotations

import contextlib
import copyreg
import dataclasses
import gc
import io
import pickle
from collections.abc import Iterator
from operator import attrgetter
from typing import Any

import zstandard

from matcher.constraints import Atom, Conjunction, Constraint
from matcher.engine import Held
from matcher.profiles import Profile
from matcher.records import Publish, Retract, Source, Subscribe, Unsubscribe
from streaming.state import migrations

# The format this version writes; `migrations` upgrades every earlier one.
FORMAT_VERSION = 12
MAGIC = b"tsm-snapshot\x00"
ZSTD_LEVEL = 1  # level 3 saves 2% more at 1.7x the time
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # format 1: a zstd frame
_PICKLE_MAGIC = b"\x80"  # format 1: a bare pickle (protocol 2 or later)
_UNVERSIONED = 1


class SnapshotError(ValueError):
    """A snapshot that this version cannot read; the message says why."""


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


# Classes pickled as one constructor call (`migrations` cannot upgrade their state:
# it has none apart from the arguments).
BY_INIT = {
    cls: getter
    for cls in (Held, Subscribe, Publish, Unsubscribe, Retract, Source, Constraint, Atom)
    if (getter := _by_init(cls)) is not None
}
# Plain __slots__ classes: rebuilt without __init__, their slots set from C.
_BY_SLOTS = {cls: cls.__slots__ for cls in (Conjunction, Profile)}


class _SnapshotPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        getter = BY_INIT.get(cls)
        if getter is not None:
            values = getter(obj)
            return cls, values if isinstance(values, tuple) else (values,)
        slots = _BY_SLOTS.get(cls)
        if slots is not None:
            return copyreg.__newobj__, (cls,), (None, {s: getattr(obj, s) for s in slots})
        return NotImplemented


class _SnapshotUnpickler(pickle.Unpickler):
    """Finds each class the pickle names where it lives now, as a stand-in that
    upgrades its instances' state when the snapshot's format is older
    (`migrations`). Asked once per class a snapshot names, not per object."""

    def __init__(self, file: io.BytesIO, version: int) -> None:
        super().__init__(file)
        self.version = version

    def find_class(self, module: str, name: str) -> Any:
        cls = super().find_class(*migrations.renamed(module, name))
        steps = migrations.upgrades(module, name, self.version)
        return migrations.upgrading(cls, steps) if steps else cls


@contextlib.contextmanager
def _gc_off() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def header(version: int = FORMAT_VERSION) -> bytes:
    return MAGIC + version.to_bytes(2, "big")


def dump_snapshot(state: Any) -> bytes:
    """The state (a `SpaceMatcher`, or any picklable object that holds matcher
    parts) as a snapshot of format `FORMAT_VERSION`."""
    out = io.BytesIO()
    with _gc_off():
        _SnapshotPickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(state)
    return header() + zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(out.getbuffer())


def snapshot_version(blob: bytes) -> int:
    """The format version a snapshot was written in (1: before versions were written)."""
    if blob.startswith(MAGIC):
        return int.from_bytes(blob[len(MAGIC) : len(MAGIC) + 2], "big")
    if blob.startswith((_ZSTD_MAGIC, _PICKLE_MAGIC)):
        return _UNVERSIONED
    raise SnapshotError(f"not a tsm snapshot (it starts with {bytes(blob[:16])!r})")


def load_snapshot(blob: bytes) -> Any:
    """The state of a snapshot of any format up to `FORMAT_VERSION`, upgraded (a
    `SpaceMatcher` where the snapshot is a single-site job's)."""
    version = snapshot_version(blob)
    if version > FORMAT_VERSION:
        raise SnapshotError(
            f"snapshot format {version} is newer than this tsm reads (up to {FORMAT_VERSION}): "
            "run the tsm version that wrote the checkpoint, or a later one"
        )
    body = memoryview(blob)[len(header()) :] if blob.startswith(MAGIC) else memoryview(blob)
    if body[:4] == _ZSTD_MAGIC:
        body = zstandard.ZstdDecompressor().decompress(body)
    with _gc_off():
        # (every format: filters and profiles take their hashes again, `migrations`)
        return _SnapshotUnpickler(io.BytesIO(body), version).load()
