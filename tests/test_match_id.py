"""`match_id` is a deterministic digest of (space, subscription id and version,
profile id and version, event), SEMANTICS §6: a consumer drops a duplicate by it.

A version is one held record: here every subscribe carries a subscriber of its
own and every publish a payload of its own, so a match record's `subscriber`
names its subscription's version and its `payload` its profile's. The
digest is then checked as a function of that tuple: one id per tuple, a
different id for a different tuple, the same id in every run, whatever the
batches and the sharding (the job's shards and micro-batches; the job's own
records are these byte for byte: `test_streaming_state`, and
`test_job.test_end_to_end_equals_replay` compares its ids with `tsm replay`'s).
"""

from __future__ import annotations

import json
import random

import pytest

from matcher.engine import Engine, Input
from matcher.records import Source
from matcher.sharding import Sharding, ShardSpec
from tests import oracle

SHARDS = Sharding({"A": ShardSpec("x", (2.0, 5.0)), "B": ShardSpec.grid("x", 3.0, 3)})
WHERE = ("x > 2", "x BETWEEN 1 AND 6", "x < 4 OR k = 'a'", "k IN ('a', 'b')", "TRUE")


def workload(seed: int, n: int = 400) -> list[tuple[str, dict]]:
    """Records in time order over two spaces and a few ids, so that ids are
    replaced, unsubscribed, retracted and expire often."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ts = 1_000 + 10 * i
        space, ident = rng.choice("AB"), str(rng.randrange(4))
        roll = rng.random()
        if roll < 0.35:
            rec = {"op": "subscribe", "subscriber": f"u{i}", "where": rng.choice(WHERE)}
            rec |= {"relation": rng.choice(("overlaps", "covers"))}
            if rng.random() < 0.5:
                rec["valid_to"] = ts + rng.randrange(30, 400)
            kind = "subscription"
        elif roll < 0.42:
            rec, kind = {"op": "unsubscribe"}, "subscription"
        elif roll < 0.92:
            lo = rng.randrange(8)
            attrs = {"x": [lo, lo + rng.randrange(3)], "k": rng.choice("abc")}
            rec = {"op": "publish", "attrs": attrs, "payload": {"n": i}}
            rec["valid_to"] = ts + rng.randrange(20, 200)
            kind = "profile"
        else:
            rec, kind = {"op": "retract"}, "profile"
        out.append((kind, {"id": f"{kind[0]}{ident}", "space": space, "ts": ts} | rec))
    return out


def run(records: list[tuple[str, dict]], batch: int, sharding: Sharding | None = None) -> list:
    """The match records of `records` through an engine, `batch` records a batch."""
    engine = Engine(sharding=sharding or Sharding())
    items = [
        Input(kind, json.dumps(rec), Source(file="w", line=n))
        for n, (kind, rec) in enumerate(records, 1)
    ]
    out = []
    for start in range(0, len(items), batch):
        out += [o.value for o in engine.process_batch(items[start : start + batch])]
    assert all("match_id" in r for r in out), "no dead letters in this workload"
    return out


def tuple_of(record: dict) -> tuple:
    """(space, subscription id and version, profile id and version, event)."""
    return (
        record["space"],
        record["subscription_id"],
        record["subscriber"],
        record["profile_id"],
        json.dumps(record["payload"]),
        record["event"],
    )


def ids_by_tuple(records: list[dict]) -> dict[tuple, str]:
    """Each tuple's one id; fails if a tuple has two."""
    ids: dict[tuple, set[str]] = {}
    for r in records:
        ids.setdefault(tuple_of(r), set()).add(r["match_id"])
    assert all(len(found) == 1 for found in ids.values()), "one tuple, several ids"
    return {key: found.pop() for key, found in ids.items()}


@pytest.mark.parametrize("seed", range(4))
def test_distinct_tuples_have_distinct_ids(seed: int) -> None:
    records = run(workload(seed), batch=10**6)
    by_tuple = ids_by_tuple(records)
    assert len(set(by_tuple.values())) == len(by_tuple), "two tuples share an id"
    # the workload reaches what the digest must tell apart
    events = {r["event"] for r in records}
    assert events == {"match", "update", "unmatch"}, events
    pairs: dict[tuple, set[tuple]] = {}
    for key in by_tuple:
        pairs.setdefault((key[0], key[1], key[3], key[5]), set()).add(key)
    assert sum(len(v) > 1 for v in pairs.values()) > 10, "few pairs seen in two versions"
    assert {(k[1], k[3]) for k in by_tuple if k[0] == "A"} & {
        (k[1], k[3]) for k in by_tuple if k[0] == "B"
    }, "no pair of ids in both spaces"


@pytest.mark.parametrize("seed", range(4))
def test_the_same_tuple_has_the_same_id_in_every_run(seed: int) -> None:
    records = workload(seed)
    once = run(records, batch=10**6)
    assert run(records, batch=10**6) == once  # a second run: byte for byte
    reference = ids_by_tuple(once)
    for batch, sharding in ((1, None), (7, SHARDS), (50, SHARDS)):
        assert ids_by_tuple(run(records, batch, sharding)) == reference, (batch, sharding)


def test_the_id_changes_with_the_space_the_event_and_each_version() -> None:
    def sub(space: str, where: str, ts: int) -> tuple[str, dict]:
        return "subscription", {
            "op": "subscribe",
            "id": "s1",
            "space": space,
            "subscriber": "alice",
            "where": where,
            "ts": ts,
        }

    def pub(space: str, x: int, ts: int) -> tuple[str, dict]:
        record = {"op": "publish", "id": "p1", "space": space, "attrs": {"x": x}, "ts": ts}
        return "profile", record | {"valid_to": 10_000, "payload": {"x": x}}

    records = [
        sub("A", "x > 0", 1),
        sub("B", "x > 0", 1),
        pub("A", 1, 2),  # match (A, s1 v1, p1 v1)
        pub("B", 1, 2),  # the same in space B
        pub("A", -1, 3),  # unmatch: p1 v2 does not hold
        pub("A", 1, 4),  # match (A, s1 v1, p1 v3): p1 as in v1, a later version
        sub("A", "x > 5", 5),  # unmatch: s1 v2 does not hold
        sub("A", "x > 0", 6),  # match (A, s1 v3, p1 v3): s1 as in v1, a later version
        pub("A", 2, 7),  # update (A, s1 v3, p1 v4)
        ("profile", {"op": "retract", "id": "p1", "space": "A", "ts": 8}),  # unmatch, p1 v4
    ]
    out = run(records, batch=len(records))
    events = {(r["space"], r["ts"]): r["event"] for r in out}
    assert len(events) == len(out) and events == {
        ("A", 2): "match",
        ("B", 2): "match",
        ("A", 3): "unmatch",
        ("A", 4): "match",
        ("A", 5): "unmatch",
        ("A", 6): "match",
        ("A", 7): "update",
        ("A", 8): "unmatch",
    }
    ids = {(r["space"], r["ts"]): r["match_id"] for r in out}
    assert len(set(ids.values())) == len(ids), ids
    assert ids["A", 2] != ids["B", 2]  # the space
    assert ids["A", 2] != ids["A", 4]  # the profile's version
    assert ids["A", 4] != ids["A", 6]  # the subscription's version
    assert ids["A", 7] != ids["A", 8]  # the event, and only it: p1 v4 held by s1 v3 in both
    # and the same again, batch by batch (the order between spaces is free)
    assert oracle.canonical(run(records, batch=1)) == oracle.canonical(out)
