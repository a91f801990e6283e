"""State written before `streaming.state` existed loads, upgraded, and goes on matching.

The fixtures in `tests/fixtures/state_v1` were written by earlier commits (format 1:
snapshots without a version header; see `make_fixtures.py` and
`make_old_snapshots.py` there): snapshots of each shape the matcher's state has
had, and one key's whole processor state (snapshot, change log of two
generations, meta) with the match records it had made. Loaded with today's code,
each must hold what a matcher built afresh from the same records holds and match
what follows as it does (that a fresh matcher matches as the spec says is
`tests/test_engine_properties.py`'s, against the oracle); the processor's records
before and after resuming must together be one matcher's for the whole input.
`tests/integration/test_state_resume.py` resumes the old Spark checkpoint.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from matcher.engine import SpaceMatcher
from matcher.events import encode
from matcher.records import Source, decode
from matcher.sharding import ShardSpec
from streaming.spark_time import to_spark_ms
from streaming.state import codec, migrations
from streaming.state.cache import MatcherCache
from streaming.state.change_log import BATCH_KINDS, SNAPSHOT_KIND
from streaming.state.codec import (
    FORMAT_VERSION,
    SnapshotError,
    dump_snapshot,
    load_snapshot,
    snapshot_version,
)
from tests.test_streaming_state import _halves, _processor, _Timer

FIXTURES = Path(__file__).parent / "fixtures" / "state_v1"
OLD_SNAPSHOTS = sorted(FIXTURES.glob("old-*.zst"))
WIDE = {"old-5282d2e-1.zst"}  # (its workload keeps a long list in sorted blocks)


def _json(name: str) -> dict:
    path = FIXTURES / name
    text = gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
    return json.loads(text)


def _decoded(pairs: list, offset: int = 0) -> list:
    return [
        decode(kind, json.dumps(row), Source(kind, 0, offset + i))
        for i, (kind, row) in enumerate(pairs)
    ]


def _held(matcher: SpaceMatcher) -> dict:
    """What a matcher holds: each record's version, and whether this key indexes it."""
    return {
        kind: {ident: (h.version, h.slot is not None) for ident, h in table.items()}
        for kind, table in (("subscription", matcher.subs), ("profile", matcher.profiles))
    }


def _agree(loaded: SpaceMatcher, fresh: SpaceMatcher, rest: list) -> int:
    """`loaded` holds what `fresh` does, its forests keep their invariants, and both
    make the same records for `rest` and then for evicting everything."""
    if len(loaded) < 1000:  # (the check is quadratic in a list's length)
        loaded.forest.check_invariants()
    assert _held(loaded) == _held(fresh)
    assert loaded.next_expiry() == fresh.next_expiry()
    got = loaded.apply_batch(rest) + loaded.expire(float("inf"))
    want = fresh.apply_batch(rest) + fresh.expire(float("inf"))
    assert got == want
    assert loaded.drain_changes() == fresh.drain_changes()
    return len(want)


@pytest.mark.parametrize("path", OLD_SNAPSHOTS, ids=lambda p: p.stem)
def test_a_snapshot_of_an_earlier_commit_loads_upgraded(path):
    """One snapshot per shape of the matcher's state since the snapshots' codec
    (the shims these upgrades replace): loaded, it is the matcher that its records
    build today, and again after a dump in today's format."""
    data = _json(f"old-records-{'wide' if path.name in WIDE else 'tracking'}.json.gz")
    blob = path.read_bytes()
    assert snapshot_version(blob) == 1
    records = _decoded(data["records"])
    rest = _decoded(data["rest"], len(records))

    def fresh() -> SpaceMatcher:
        matcher = SpaceMatcher(data["space"])
        for start, end in data["batches"]:
            matcher.apply_batch(records[start:end])
        matcher.expire(data["expire_to"])
        matcher.drain_changes()
        return matcher

    made = _agree(load_snapshot(blob), fresh(), rest)
    assert made > 400
    again = dump_snapshot(load_snapshot(blob))
    assert snapshot_version(again) == FORMAT_VERSION
    _agree(load_snapshot(again), fresh(), rest)


@pytest.mark.parametrize("name", ["snapshot.zst", "matcher.pickle"])
def test_a_sharded_cells_snapshot_of_1603d57_loads(name):
    """A cell of a sharded space, as `dump_snapshot` and `SpaceMatcher.dump` wrote it."""
    data = _json("snapshot-records.json.gz")
    spec = ShardSpec("x", tuple(data["cuts"]))
    fresh = SpaceMatcher("tracking", data["key"], (spec, 1))
    records = _decoded(data["records"])
    for start in range(0, len(records), 100):
        fresh.apply_batch(records[start : start + 100])
    fresh.expire(data["expired_to"])
    fresh.drain_changes()
    loaded = load_snapshot((FIXTURES / name).read_bytes())
    assert loaded.shard == fresh.shard and loaded.key == data["key"]
    rest = _decoded([("profile", row) for row in data["rest"]], len(records))
    assert _agree(loaded, fresh, rest) > 100


def test_every_upgrade_names_a_class_it_can_upgrade():
    """An upgrade sets attributes of an object restored from its state: its class
    (where it lives now) must exist, keep no `__setstate__` of its own, and not be
    one the codec rebuilds from constructor arguments."""
    assert migrations.upgraded_classes()
    for module, name in [*migrations.upgraded_classes(), *migrations.RENAMES.values()]:
        moved = migrations.renamed(module, name)
        cls = getattr(__import__(moved[0], fromlist=[moved[1]]), moved[1])
        assert dataclasses.is_dataclass(cls) or not hasattr(cls, "__setstate__"), cls
        # (only the hash of a filter or profile is taken again in the current format)
        current = migrations.upgrades(module, name, FORMAT_VERSION)
        assert current == () or current == (migrations._rehash,), (module, name)


def test_snapshots_the_codec_cannot_read_are_refused_with_a_reason():
    matcher = SpaceMatcher("s")
    blob = dump_snapshot(matcher)
    assert blob.startswith(codec.MAGIC) and snapshot_version(blob) == FORMAT_VERSION
    newer = codec.header(FORMAT_VERSION + 1) + blob[len(codec.header()) :]
    with pytest.raises(SnapshotError, match=f"format {FORMAT_VERSION + 1} is newer"):
        load_snapshot(newer)
    with pytest.raises(SnapshotError, match="not a tsm snapshot"):
        load_snapshot(b"PK\x03\x04 a zip")


# -- the processor's whole state ---------------------------------------------------------


def _restored(state: dict):
    """A processor on a fake state handle holding the fixture's state."""
    processor, handle, metrics = _processor(state["snapshot_every"])
    handle.states["meta"].update(state["meta"])
    handle.states["snapshot"].update((base64.b64decode(state["snapshot"]),))
    for kind, ident, rec in state["log"]:
        handle.states["log"].updateValue((kind, ident), (rec,))
    return processor, handle, metrics


def _emitted(frames, topics: dict[str, list[bytes]]) -> None:
    """Add the records of the processor's output `frames` to `topics`, by topic."""
    for frame in frames:
        for topic, values in zip(frame["topic"], frame["values"], strict=True):
            topics.setdefault(topic, []).extend(values)


def test_the_processor_resumes_from_the_state_of_1603d57():
    """The fixture's key (a snapshot, the log generation before it, the one since)
    resumes on two fresh workers: rebuilt from the old snapshot and log, then caught
    up or cached by turns, compacting into today's format. What it made before and
    after, and the final eviction, are byte for byte what one matcher makes of the
    whole input."""
    state = _json("processor-state.json.gz")
    batches, done, space = state["batches"], state["done"], state["space"]
    assert snapshot_version(base64.b64decode(state["snapshot"])) == 1
    kinds = {kind for kind, _, _ in state["log"]}
    assert {*BATCH_KINDS, SNAPSHOT_KIND} <= kinds
    processor, handle, metrics = _restored(state)
    workers = [MatcherCache(), MatcherCache()]
    after: dict[str, list[bytes]] = {}
    watermark = state["watermark"]
    for index, batch in enumerate(batches[done:]):
        processor.state.cache = workers[index % 2]
        frames = processor.handleInputRows(
            (space,), iter(_halves(batch["kind"], batch["rows"])), _Timer(to_spark_ms(watermark))
        )
        _emitted(frames, after)
        watermark = max(watermark, *(r["ts"] for r in batch["rows"]))
    end = 2**62
    _emitted(processor.handleExpiredTimer((space,), _Timer(to_spark_ms(end)), None), after)
    seen = [counts for counts in metrics.seen]
    assert seen[0].get("cache_misses") == 1  # (the first: rebuilt from the old state)
    assert any(c.get("cache_catch_ups") for c in seen) and any(c.get("snapshots") for c in seen)
    assert snapshot_version(handle.states["snapshot"].value[0]) == FORMAT_VERSION

    # One matcher, fed the whole input as the processor was (records below the
    # watermark at their batch's start are late).
    reference, expected, late, watermark = SpaceMatcher(space), [], 0, 0
    for batch in batches:
        kind = batch["kind"]
        topic = "s" if kind == "subscription" else "p"
        rows = [(i, r) for i, r in enumerate(batch["rows"]) if r["ts"] >= watermark]
        late += len(batch["rows"]) - len(rows)
        records = [decode(kind, json.dumps(r), Source(topic, 0, i)) for i, r in rows]
        expected += reference.expire(watermark) + reference.apply_batch(records)
        watermark = max(watermark, *(r["ts"] for r in batch["rows"]))
    expected += reference.expire(end)
    made = [line.encode() for line in state["outputs"]] + after["m"]
    assert made == [encode(e) for e in expected]
    assert len(state["outputs"]) > 1000 and len(after["m"]) > 500
    assert late and len(after["d"]) == late


def test_log_entries_of_the_first_layout_are_replayed_before_the_rest():
    """The first change log held one entry per changed record, `(kind, id) → record
    state or null` (the latest change winning), with no snapshot facts: they are
    replayed first, a cached matcher does not catch up across them, and the next
    compaction drops them."""
    from benchmarks.workloads import generate
    from tests.test_streaming_state import _batches, _check_batch

    subs, profiles = generate("tracking", 24, 200, 500)
    space = subs[0]["space"]
    processor, handle, metrics = _processor(10**9)  # (no snapshot: the log holds all)
    reference = SpaceMatcher(space)
    batches = _batches(subs, profiles)
    for kind, rows in batches[:6]:
        processor.state.cache = MatcherCache()
        _check_batch(processor, space, reference, kind, rows)
    log = handle.states["log"]
    latest = {}
    for key in sorted(k for k in log.entries if k[0] in BATCH_KINDS):
        for kind, ident, rec in json.loads(log.entries[key][0])[1]:
            latest[kind, ident] = rec
    log.entries = {key: (rec,) for key, rec in latest.items()}
    assert len(log.entries) > 100
    workers = [MatcherCache(), MatcherCache()]
    for index, (kind, rows) in enumerate(batches[6:9]):  # the third would catch up
        processor.state.cache = workers[index % 2]
        _check_batch(processor, space, reference, kind, rows)
    assert [c.get("cache_misses") for c in metrics.seen[6:9]] == [1, 1, 1]
    processor.state.snapshot_every = 0
    for kind, rows in batches[9:11]:
        processor.state.cache = MatcherCache()
        _check_batch(processor, space, reference, kind, rows)
    assert metrics.seen[9].get("snapshots")
    assert all(kind in (*BATCH_KINDS, SNAPSHOT_KIND) for kind, _ in log.entries)


def test_a_class_moved_since_is_found_by_its_old_name(monkeypatch):
    """A snapshot names its classes by module and name; one that moved since is found
    through `migrations.RENAMES`, in snapshots of the current format and of format 1."""
    import sys
    import types

    import matcher.forest.covering_tree as tree_module

    data = _json("old-records-tracking.json.gz")
    records = _decoded(data["records"])
    fresh = SpaceMatcher(data["space"])
    fresh.apply_batch(records)
    fresh.drain_changes()
    blobs = [dump_snapshot(fresh), (FIXTURES / "old-26bb769-1.zst").read_bytes()]
    moved = types.ModuleType("moved_forest")
    moved.Tree = tree_module.Forest
    monkeypatch.setitem(sys.modules, "moved_forest", moved)
    monkeypatch.delattr(tree_module, "Forest")
    for blob in blobs:
        with pytest.raises(AttributeError, match="Forest"):
            load_snapshot(blob)
    # (the current format names `covering_tree.Forest`; format 1, `matcher.forest.Forest`)
    for written in (("matcher.forest.covering_tree", "Forest"), ("matcher.forest", "Forest")):
        monkeypatch.setitem(migrations.RENAMES, written, ("moved_forest", "Tree"))
    loaded = [load_snapshot(blob) for blob in blobs]
    assert all(isinstance(m.forest.sub_forest, moved.Tree) for m in loaded)
    rest = _decoded(data["rest"], len(records))
    assert loaded[0].apply_batch(rest) == fresh.apply_batch(rest)
