"""The job's state and output encodings, without Spark: snapshots load back to the
same matcher, and the job's match records (`MatchWriter`) are `matcher.events.encode`."""

from __future__ import annotations

import dataclasses
import gc
import json

import pandas as pd
import pyarrow as pa
import zstandard

from benchmarks.workloads import generate
from connectors.outlet import pack
from connectors.sink_rows import PACK_SIZE, Packer
from connectors.sink_rows import records as sink_records
from matcher.engine import Held, SpaceMatcher
from matcher.events import MatchWriter, encode, event_dict
from matcher.records import Source, decode
from streaming.state import change_log
from streaming.state.cache import Entry, MatcherCache
from streaming.state.codec import dump_snapshot, header, load_snapshot


def _records(kind: str, rows: list[dict], topic: str) -> list:
    return [decode(kind, json.dumps(r), Source(topic, 0, i)) for i, r in enumerate(rows)]


def test_snapshot_loads_back_to_a_matcher_that_matches_the_same():
    subs, profiles = generate("nested", 3, 300, 200)
    matcher = SpaceMatcher(subs[0]["space"])
    matcher.apply_batch(_records("subscription", subs, "s"))
    matcher.apply_batch(_records("profile", profiles[:100], "p"))
    matcher.drain_changes()
    matcher.subs["s7"].memo = ("what a writer made of it",)
    copy = load_snapshot(dump_snapshot(matcher))
    assert copy.subs.keys() == matcher.subs.keys()
    assert copy.profiles.keys() == matcher.profiles.keys()
    assert copy.subs["s7"] == matcher.subs["s7"] and copy.subs["s7"].memo is None
    # the unversioned forms (format 1) still load: SpaceMatcher.dump, the zstd frame
    # alone, and the pickle in it
    assert load_snapshot(matcher.dump()).subs.keys() == matcher.subs.keys()
    frame = dump_snapshot(matcher)[len(header()) :]
    assert load_snapshot(frame).profiles.keys() == matcher.profiles.keys()
    plain = zstandard.ZstdDecompressor().decompress(frame)
    assert load_snapshot(plain).profiles.keys() == matcher.profiles.keys()
    rest = _records("profile", profiles[100:], "p")
    assert copy.apply_batch(rest) == matcher.apply_batch(rest)
    assert copy.drain_changes() == matcher.drain_changes()
    assert copy.expire(float("inf")) == matcher.expire(float("inf"))


def test_a_dropped_matcher_leaves_no_cyclic_garbage():
    """The processor freezes the cached matchers out of the cyclic GC's sight
    (`streaming.processor._freeze_heap`): that leaks nothing only while reference
    counting alone frees a matcher, built or loaded, and its output."""
    subs, profiles = generate("tracking", 5, 200, 300)
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        matcher = SpaceMatcher(subs[0]["space"])
        matcher.apply_batch(_records("subscription", subs, "s"))
        events = matcher.apply_batch(_records("profile", profiles, "p"))
        events += matcher.expire(float("inf"))
        assert events
        blob = dump_snapshot(matcher)
        del matcher, events
        assert gc.collect() == 0
        loaded = load_snapshot(blob)
        loaded.apply_batch(_records("profile", profiles[:50], "p"))
        del loaded
        assert gc.collect() == 0
    finally:
        if enabled:
            gc.enable()


def _written(matcher: SpaceMatcher, step) -> list:
    with matcher.writing(MatchWriter(matcher.space)):
        return step(matcher)


def test_match_writer_writes_the_engines_records_byte_for_byte():
    """The job's records (`MatchWriter`) are `encode` of the engine's event dicts,
    keyed by subscriber: new matches, updates, unmatches and expiries, odd text."""
    subs, profiles = generate("tracking", 11, 150, 400)
    odd = 'ü "quoted" \\ \n \u2028 \x00 😀'
    for i, sub in enumerate(subs[::7]):
        sub["subscriber"] = f"{odd}{i}"
    for i, prof in enumerate(profiles[::5]):
        prof["id"] = f"{odd}{prof['id']}"
        prof["payload"] = {"a": [1, 2.5, None, True, odd], "b": {"c": 1e300}, "i": i}
    profiles[3]["payload"] = None
    space = subs[0]["space"]
    plain, written = SpaceMatcher(space), SpaceMatcher(space)
    steps = [
        lambda m: m.apply_batch(_records("subscription", subs, "s")),
        lambda m: m.apply_batch(_records("profile", profiles[:250], "p")),
        lambda m: m.apply_batch(_records("profile", profiles[250:], "p")),
        lambda m: m.expire(float("inf")),
    ]
    total = 0
    for step in steps:
        events = step(plain)
        assert _written(written, step) == [(e["subscriber"].encode(), encode(e)) for e in events]
        total += len(events)
    assert total > 500
    assert not hasattr(written, "_writer") or written._writer is None  # (left the context)


def test_match_writer_takes_the_generic_path_for_unusual_times():
    subs, profiles = generate("uniform", 2, 20, 20)
    matcher = SpaceMatcher(subs[0]["space"])
    matcher.apply_batch(_records("subscription", subs, "s"))
    matcher.apply_batch(_records("profile", profiles, "p"))
    sub = next(iter(matcher.subs.values()))
    prof = next(iter(matcher.profiles.values()))
    odd = Held(dataclasses.replace(prof.record, valid_from=1.5), prof.version, prof.slot)
    writer = MatchWriter(matcher.space)
    for p, ts in ((prof, 7), (odd, 7), (prof, 7.25), (prof, True)):
        expected = encode(event_dict(matcher.space, "match", "changed", sub, p, ts))
        assert writer("match", "changed", sub, p, ts) == (sub.record.subscriber.encode(), expected)


def test_output_frames_pack_records_in_order():
    keys = [f"k{i}".encode() if i % 3 else None for i in range(2 * PACK_SIZE + 5)]
    values = [f"v{i}".encode() for i in range(len(keys))]
    records = list(zip(keys, values, strict=True))
    packer, frames = Packer("t"), []
    for i in range(0, len(records), 1000):  # a frame as soon as whole runs fill
        frames += list(packer.add(records[i : i + 1000]))
        assert (
            sum(len(v) for f in frames for v in f["values"]) == (i + 1000) // PACK_SIZE * PACK_SIZE
        )
    frames += list(packer.flush())
    assert packer.count == len(records) and list(packer.flush()) == []
    assert [len(v) for f in frames for v in f["values"]] == [PACK_SIZE, PACK_SIZE, 5]
    assert [k for f in frames for ks in f["keys"] for k in ks] == keys
    assert {t for f in frames for t in f["topic"]} == {"t"} and list(pack("t", [])) == []
    schema = pa.schema(
        [("topic", pa.string()), ("keys", pa.list_(pa.binary())), ("values", pa.list_(pa.binary()))]
    )
    frames += list(pack("u", [(b"x", b"y")]))
    batches = [pa.RecordBatch.from_pandas(f, schema=schema, preserve_index=False) for f in frames]
    assert [r for b in batches for r in sink_records(b)] == [("t", *kv) for kv in records] + [
        ("u", b"x", b"y")
    ]


# -- the processor on fake state -----------------------------------------------------------


class _Value:
    def __init__(self) -> None:
        self.value = None

    def exists(self) -> bool:
        return self.value is not None

    def get(self):
        return self.value

    def update(self, value) -> None:
        self.value = tuple(value)

    def clear(self) -> None:
        self.value = None


class _Map:
    def __init__(self) -> None:
        self.entries: dict = {}

    def updateValue(self, key, value) -> None:  # noqa: N802 (Spark's name)
        self.entries[tuple(key)] = tuple(value)

    def getValue(self, key):  # noqa: N802
        return self.entries.get(tuple(key))

    def containsKey(self, key) -> bool:  # noqa: N802
        return tuple(key) in self.entries

    def removeKey(self, key) -> None:  # noqa: N802
        del self.entries[tuple(key)]

    def iterator(self):
        return iter(sorted(self.entries.items(), reverse=True))  # no order promised

    def keys(self):
        return iter(sorted(self.entries, reverse=True))

    def clear(self) -> None:
        self.entries = {}


class _Handle:
    def __init__(self) -> None:
        self.states: dict = {}

    def getValueState(self, name, schema):  # noqa: N802
        return self.states.setdefault(name, _Value())

    def getMapState(self, name, key_schema, value_schema):  # noqa: N802
        return self.states.setdefault(name, _Map())

    def registerTimer(self, ms) -> None:  # noqa: N802
        pass

    def deleteTimer(self, ms) -> None:  # noqa: N802
        pass


class _Timer:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def getCurrentWatermarkInMs(self) -> int:  # noqa: N802
        return self.ms


class _Metrics:
    def __init__(self) -> None:
        self.seen: list[dict] = []

    def add(self, counts) -> None:
        self.seen.append(counts)


def _processor(snapshot_every: int):
    from connectors.config import Topics
    from streaming.config import build_sharding
    from streaming.processor import MatchProcessor

    topics = Topics(subscriptions="s", profiles="p", matches="m", deadletter="d")
    metrics = _Metrics()
    processor = MatchProcessor(topics, build_sharding({}), 0, snapshot_every, metrics)
    handle = _Handle()
    processor.init(handle)
    return processor, handle, metrics


def _batches(subs: list[dict], profiles: list[dict]) -> list[tuple[str, list[dict]]]:
    batches = [("subscription", subs[:300]), ("profile", profiles[:100])]
    batches += [("profile", profiles[i : i + 25]) for i in range(100, 600, 25)]
    return batches + [("subscription", subs[300:])]


def _halves(kind: str, rows: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A batch's input frames as the decode stage makes them, its rows split over
    two (as Spark may hand them)."""
    from connectors.config import Topics
    from streaming.config import build_sharding
    from streaming.decode_stage import DecodeStage

    topic = "s" if kind == "subscription" else "p"
    stage = DecodeStage(Topics(subscriptions="s", profiles="p"), build_sharding({}))
    kafka = pa.RecordBatch.from_pydict(
        {
            "topic": [topic] * len(rows),
            "partition": [0] * len(rows),
            "offset": list(range(len(rows))),
            "timestamp": pa.array([0] * len(rows), pa.timestamp("us", tz="UTC")),
            "value": [json.dumps(r).encode() for r in rows],
        }
    )
    frame = pd.DataFrame(stage.rows(kafka))
    return frame.iloc[: len(rows) // 2], frame.iloc[len(rows) // 2 :]


def _check_batch(processor, space: str, reference: SpaceMatcher, kind: str, rows: list) -> None:
    """One batch through the processor emits what `reference` does for it."""
    out = list(processor.handleInputRows((space,), iter(_halves(kind, rows)), _Timer(0)))
    topic = "s" if kind == "subscription" else "p"
    expected = reference.apply_batch(_records(kind, rows, topic))
    assert [v for f in out for vs in f["values"] for v in vs] == [encode(e) for e in expected]


def test_processor_state_rebuilds_to_the_same_matches():
    """Batches through the processor on two simulated Python workers (each with its
    own cache) taken at random, one batch failing after its work and run again:
    what it emits is what one SpaceMatcher emits, whether a worker's matcher was
    current, brought up to date from the log, or rebuilt from snapshot and log."""
    import copy
    import random

    subs, profiles = generate("nested", 5, 400, 600)
    space = subs[0]["space"]
    processor, handle, metrics = _processor(150)
    reference = SpaceMatcher(space)
    workers, pick = [MatcherCache(), MatcherCache()], random.Random(1)
    for index, (kind, rows) in enumerate(_batches(subs, profiles)):
        if index == 5:  # an attempt whose state is not committed
            saved = copy.deepcopy(handle.states)
            processor.state.cache = workers[0]
            list(processor.handleInputRows((space,), iter(_halves(kind, rows)), _Timer(0)))
            for name, state in saved.items():
                handle.states[name].__dict__.update(state.__dict__)
        processor.state.cache = workers[pick.randrange(2)]
        _check_batch(processor, space, reference, kind, rows)
    seen = {k for counts in metrics.seen for k in counts}
    assert {"cache_hits", "cache_catch_ups", "cache_misses", "snapshots"} <= seen


def test_a_worker_catches_up_across_a_snapshot_the_other_wrote(monkeypatch):
    """Two workers taking a key's batches by turns, then one of them alone, the log
    compacted every few batches: a worker rebuilds on its first batch and when two
    snapshots were written since its last (the generation it needs is gone), and
    otherwise catches up, across the snapshot the other one wrote meanwhile; all
    emit what one matcher does."""
    # Dear replays: the log is compacted once it holds a quarter of the held records.
    monkeypatch.setattr(change_log, "REPLAY_COST", {"profile": 4.0, "subscription": 4.0})
    subs, profiles = generate("nested", 6, 400, 600)
    space = subs[0]["space"]
    processor, _, metrics = _processor(40)
    reference = SpaceMatcher(space)
    workers = [MatcherCache(), MatcherCache()]
    batches = _batches(subs, profiles)
    turns = [i % 2 for i in range(8)] + [0] * (len(batches) - 9) + [1]
    for (kind, rows), worker in zip(batches, turns, strict=True):
        processor.state.cache = workers[worker]
        _check_batch(processor, space, reference, kind, rows)
    seen = metrics.seen
    snapshots = [i for i, counts in enumerate(seen) if counts.get("snapshots")]
    expected, across = [], 0
    for i, worker in enumerate(turns):
        before = [j for j in range(i) if turns[j] == worker]
        since = [s for s in snapshots if before and before[-1] < s < i]
        if not before or len(since) > 1:
            expected.append(i)
        across += len(since) == 1
    assert [i for i, counts in enumerate(seen) if counts.get("cache_misses")] == expected
    assert across and len(expected) > 2, "the workload no longer compacts where this needs"


def test_the_log_is_compacted_once_replaying_it_costs_more_than_a_snapshot():
    """A snapshot is written when replaying the log since the last one would cost
    more than writing one (`REPLAY_COST`, in held records): a log of profiles grows
    to about as many changes as there are held records, a log of subscriptions to a
    fraction of that; a rebuild at any point in between emits what one matcher does."""
    from streaming.state.change_log import REPLAY_COST

    subs, profiles = generate("nested", 7, 1200, 2000)
    space = subs[0]["space"]
    processor, handle, metrics = _processor(40)
    reference = SpaceMatcher(space)
    batches = [("subscription", subs[:400])]
    batches += [("profile", profiles[i : i + 100]) for i in range(0, 2000, 100)]
    batches += [("subscription", subs[i : i + 50]) for i in range(400, 1200, 50)]
    held, cost, logged, kinds, expected, compacted = 0, 0.0, 0, set(), [], []
    for index, (kind, rows) in enumerate(batches):
        processor.state.cache = MatcherCache()  # every batch a rebuild
        _check_batch(processor, space, reference, kind, rows)
        held, logged = held + len(rows), logged + len(rows)
        cost += REPLAY_COST[kind] * len(rows)
        kinds.add(kind)
        if cost > held:
            expected.append(index)
            compacted.append((kinds, logged / held))  # the log's share of the held
            cost, logged, kinds = 0.0, 0, set()
        assert handle.states["meta"].value[1] == logged  # the log's length
    assert [i for i, counts in enumerate(metrics.seen) if counts.get("snapshots")] == expected
    profile_logs = [share for kinds, share in compacted if kinds == {"profile"}]
    subscription_logs = [share for kinds, share in compacted[1:] if kinds == {"subscription"}]
    assert profile_logs and min(profile_logs) > 0.5  # (a quarter, before)
    assert subscription_logs and max(subscription_logs) < 0.2


def test_evictions_are_matched_in_one_forest_query_and_written_as_one_at_a_time():
    """What a batch evicts (expiries before its records, and by the watermark) is asked
    of the forest at once, per kind: a steady stream of profiles valid for a while
    evicts one for each new one, and a query each made such a batch 7x slower. The
    records are those of applying one record at a time, byte for byte."""
    subs, profiles = generate("nested", 4, 600, 900)
    for p in profiles:
        p["valid_to"] = p["valid_from"] + 400  # (each outlives about 200 of its successors)
    space = subs[0]["space"]
    sub_records = _records("subscription", subs, "s")
    batches = [_records("profile", profiles[i : i + 150], "p") for i in range(0, 900, 150)]

    one = SpaceMatcher(space)
    expected = _written(one, lambda m: [e for r in sub_records for e in m.apply(r)])
    for batch in batches:
        expected += _written(one, lambda m, b=batch: [e for r in b for e in m.apply(r)])
    expected += _written(one, lambda m: m.expire(float("inf")))

    batched, queries = SpaceMatcher(space), []
    for name in ("match_profiles", "match_subscriptions"):
        ask = getattr(batched.forest, name)
        setattr(batched.forest, name, lambda *a, ask=ask: queries.append(len(a[0])) or ask(*a))
    got = _written(batched, lambda m: m.apply_batch(sub_records))
    for batch in batches:
        got += _written(batched, lambda m, b=batch: [e for es in m.iter_batch(b) for e in es])
    got += _written(batched, lambda m: m.expire(float("inf")))

    unmatches = sum(b'"event":"unmatch"' in v for _, v in got)
    assert got == expected and unmatches > 1000
    # a query per batch (its profiles and what it evicts) and one for the final
    # eviction, not one per evicted profile (one at a time: 907 queries)
    assert len(queries) < 20, queries
    assert max(queries) >= 150


def _entry(token: int, records: int, log: tuple[int, float] = (0, 0.0)) -> Entry:
    return Entry(token, *log, matcher=[0] * records)


def test_the_worker_cache_is_bounded_by_records_held_not_by_matchers():
    cache = MatcherCache(max_held=100)
    for i in range(100):  # as many small spaces as their records allow all stay
        cache.put(f"room-{i}", _entry(i, 1))
    assert len(cache) == 100 and cache.held == 100
    cache.put("room-100", _entry(100, 1))
    assert len(cache) == 100 and "room-0" not in cache.keys()
    cache = MatcherCache(max_held=100)
    cache.put("a", _entry(1, 40))
    cache.put("b", _entry(2, 50, (3, 1.5)))
    cache.put("a", _entry(3, 45))  # a again: replaced, now the newest
    assert cache.held == 95
    cache.put("c", _entry(4, 30))  # b, the least recently used, goes
    assert cache.keys() == ["a", "c"] and cache.held == 75
    assert cache.take("b") is None
    entry = cache.take("a")
    assert (entry.token, entry.log_len, entry.log_cost, len(entry.matcher)) == (3, 0, 0.0, 45)
    assert cache.held == 30
    cache.put("huge", _entry(5, 500))  # over the bound alone: kept, alone
    assert cache.keys() == ["huge"] and cache.held == 500
    cache.drop("huge")
    assert not len(cache) and cache.held == 0
    few = MatcherCache(max_entries=2)
    for key in "xyz":
        few.put(key, _entry(0, 1))
    assert few.keys() == ["y", "z"]
