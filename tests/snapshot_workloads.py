"""Matchers built the same way every time, whose snapshots are kept in
`tests/fixtures/snapshots/` as the state of a checkpoint written by an
earlier version of the code.

Each matcher holds a `tsm gen` workload part-way through: subscriptions,
profiles, then more subscriptions (so that a filter query has read the
profile forest: siena's flat list of point profiles then holds its sorted
columns), then some retracts and unsubscribes (so that a removal has left
block boxes to widen and subtree bounds to recompute, not yet done when the
snapshot is taken); the nested one ends with profiles that wait outside the
profile forest. Every matcher is built with long child lists kept in sorted
blocks from 1,024 children on (`layouts.blocked_from`), not the shipped
4,096, so that the uniform workload's root list of about 1,400 is kept in
blocks while its snapshot stays a few hundred KB. `rest` is what a test applies
to the loaded matcher and to a freshly built one, to compare their events.

Run as a script to write the fixtures again (only when the state the code
writes is meant to change: the fixtures stand for snapshots already in
checkpoints):

    .venv/bin/python -m tests.snapshot_workloads tests/fixtures/snapshots
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import zstandard

from benchmarks.workloads import generate
from matcher.engine import SpaceMatcher
from matcher.records import Source, decode
from tests import layouts

# (kind, seed, subscriptions, profiles)
WORKLOADS = {
    "uniform": ("uniform", 1, 1500, 300),
    "nested": ("nested", 2, 400, 400),
    "siena": ("siena", 3, 300, 300),
}
FIXTURE_LEVEL = 19  # zstd level of the kept fixtures (any level loads)


def _records(kind: str, rows: list[dict], topic: str) -> list:
    return [decode(kind, json.dumps(r), Source(topic, 0, i)) for i, r in enumerate(rows)]


def steps(name: str) -> tuple[list[list], list[list]]:
    """The record batches applied before the snapshot, and those after it."""
    kind, seed, n_subs, n_profiles = WORKLOADS[name]
    subs, profiles = generate(kind, seed, n_subs, n_profiles)
    space, ts = subs[0]["space"], profiles[len(profiles) // 2]["ts"]
    early, late = subs[: -n_subs // 10], subs[-n_subs // 10 :]
    half = len(profiles) // 2
    gone = [{"op": "unsubscribe", "id": s["id"], "space": space, "ts": ts} for s in subs[::13]]
    retracted = [
        {"op": "retract", "id": p["id"], "space": space, "ts": ts} for p in profiles[:half:17]
    ]
    before = [
        _records("subscription", early, "s"),
        _records("profile", profiles[:half], "p"),
        _records("subscription", late, "s"),
        _records("profile", retracted, "p"),
        _records("subscription", gone, "s"),
    ]
    if name == "nested":  # ends with profiles not yet in the profile forest
        before.append(_records("profile", profiles[half : half + 20], "p"))
        profiles = profiles[:half] + profiles[half + 20 :]
    end = profiles[-1]["ts"]
    again = [dict(s, id=f"again-{s['id']}", ts=end) for s in subs[1::7]]
    gone = [{"op": "unsubscribe", "id": s["id"], "space": space, "ts": end} for s in subs[5::11]]
    retracted = [{"op": "retract", "id": p["id"], "space": space, "ts": end} for p in profiles[::9]]
    after = [
        _records("profile", profiles[half:], "p"),
        _records("subscription", again, "s"),
        _records("subscription", gone, "s"),
        _records("profile", retracted, "p"),
    ]
    return before, after


BLOCKED_FROM = 1024


def build(name: str) -> SpaceMatcher:
    """The matcher of a workload as its snapshot holds it (within
    `layouts.blocked_from(BLOCKED_FROM)`, as every use of it must be)."""
    before, _ = steps(name)
    matcher = SpaceMatcher(before[0][0].space)
    for batch in before:
        matcher.apply_batch(batch)
    matcher.drain_changes()
    return matcher


def main(out_dir: str) -> None:
    from streaming.state_cache import dump_snapshot

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in WORKLOADS:
        with layouts.blocked_from(BLOCKED_FROM):
            matcher = build(name)
        blob = zstandard.ZstdDecompressor().decompress(dump_snapshot(matcher))
        packed = zstandard.ZstdCompressor(level=FIXTURE_LEVEL).compress(blob)
        (out / f"{name}.pickle.zst").write_bytes(packed)
        print(f"{name}: {len(blob):,} bytes, {len(packed):,} compressed")


if __name__ == "__main__":
    main(sys.argv[1])
