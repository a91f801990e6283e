"""The workload generators: deterministic, valid records, and the intended shapes."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from benchmarks.workloads import KINDS, build, generate
from matcher import records
from matcher.constraints import Atom, predicate_of
from matcher.profiles import Profile
from matcher.where import parse_where
from tsm_cli.main import main as tsm


@pytest.mark.parametrize("kind", KINDS)
def test_deterministic_per_seed(kind: str) -> None:
    assert generate(kind, 7, 200, 200) == generate(kind, 7, 200, 200)
    assert generate(kind, 7, 200, 200) != generate(kind, 8, 200, 200)


@pytest.mark.parametrize("kind", KINDS)
def test_records_decode(kind: str) -> None:
    subs, profiles = generate(kind, 1, 300, 300)
    for kind_name, batch in (("subscription", subs), ("profile", profiles)):
        for line, r in enumerate(batch):
            source = records.Source(file="gen", line=line)
            decoded = records.decode(kind_name, json.dumps(r), source)
            assert decoded.id == r["id"] and decoded.ts == r["ts"]


@pytest.mark.parametrize("kind", KINDS)
def test_event_time_order(kind: str) -> None:
    subs, profiles = generate(kind, 2, 300, 300)
    for batch in (subs, profiles):
        ts = [r["ts"] for r in batch]
        assert ts == sorted(ts)
    first_subs = [r["ts"] for r in subs if r["op"] == "subscribe"]
    assert max(first_subs) <= profiles[0]["ts"], "subscriptions come first in time"


def test_where_text_matches_the_specs() -> None:
    """The rendered `where` parses back to the filters the benchmark uses."""
    w = build("siena", 3, 100, 0)
    subs, _ = generate("siena", 3, 100, 0)
    for spec, record in zip(w.subscriptions, subs, strict=True):
        from_text = predicate_of(parse_where(record["where"]))
        from_spec = predicate_of([[Atom(*a) for a in c] for c in spec.dnf])
        assert set(from_text) == set(from_spec)


def test_uniform_shape() -> None:
    subs, profiles = generate("uniform", 0, 300, 100)
    assert all(set(p["attrs"]) == {"x", "y", "z", "w", "kind"} for p in profiles)
    assert len({p["attrs"]["kind"] for p in profiles}) >= 8


def test_nested_has_repeated_filters_and_covering_chains() -> None:
    w = build("nested", 0, 2000, 0)
    preds = [predicate_of([[Atom(*a) for a in c] for c in s.dnf])[0] for s in w.subscriptions]
    counts = Counter(preds)
    assert counts.most_common(1)[0][1] >= 20, "popular regions repeat (Zipf)"
    distinct = list(counts)[:300]
    covered = [any(a != b and a.covers_filter(b) for a in distinct) for b in distinct]
    assert sum(covered) > len(distinct) // 3, "covering is common"
    chain = [
        c
        for b in distinct
        for a in distinct
        if a != b and a.covers_filter(b)
        for c in distinct
        if c not in (a, b) and b.covers_filter(c)
    ]
    assert chain, "some covering chain has depth 3"


def test_siena_shape() -> None:
    w = build("siena", 0, 500, 0)
    filters = [c for s in w.subscriptions for c in s.dnf]
    assert {len(s.dnf) for s in w.subscriptions} == {1, 2, 3, 4, 5}
    assert {len({a for a, _, _ in c}) for c in filters} == {1, 2, 3, 4, 5}
    assert max(len(c) for c in filters) <= 5
    assert {op for c in filters for _, op, _ in c} == {"<", ">", "="}
    attrs = {a for c in filters for a, _, _ in c}
    assert len(attrs) == 10 and any(isinstance(v, str) for c in filters for _, _, v in c)


def test_tracking_has_upserts_expiry_and_retractions() -> None:
    subs, profiles = generate("tracking", 0, 500, 3000)
    publishes = [p for p in profiles if p["op"] == "publish"]
    ids = Counter(p["id"] for p in publishes)
    assert max(ids.values()) >= 10, "objects are republished under their id"
    assert any(p["op"] == "retract" for p in profiles)
    assert any(s["op"] == "unsubscribe" for s in subs)
    end = profiles[-1]["ts"]
    lives = [s["valid_to"] for s in subs if s["op"] == "subscribe"]
    assert any(v is not None and v < end for v in lives), "some expire during the run"
    assert any(v is None or v > end for v in lives), "some outlive it"
    assert {s["relation"] for s in subs if s["op"] == "subscribe"} == {"overlaps", "covers"}
    # Reports of one object move: its boxes differ from one report to the next.
    first = [p for p in publishes if p["id"] == "o0"]
    assert len({json.dumps(p["attrs"]) for p in first}) > 1
    assert all(Profile(p["attrs"]) for p in publishes[:50])


def test_gen_command_writes_files(tmp_path) -> None:
    assert tsm(["gen", "nested", "--seed", "4", "--subscriptions", "30", "--profiles", "20",
                "--out-dir", str(tmp_path)]) == 0  # fmt: skip
    subs = (tmp_path / "subscriptions.jsonl").read_text().splitlines()
    profiles = (tmp_path / "profiles.jsonl").read_text().splitlines()
    assert len(subs) == 30 and len(profiles) == 20
    assert [json.loads(line) for line in subs] == generate("nested", 4, 30, 20)[0]


def test_gen_command_rejects_bad_sizes(tmp_path, capsys) -> None:
    assert tsm(["gen", "uniform", "--subscriptions", "-1", "--out-dir", str(tmp_path)]) == 2
    assert "must not be negative" in capsys.readouterr().err


@pytest.mark.parametrize("kind", KINDS)
def test_bench_has_every_query(kind: str) -> None:
    """Every workload gives the bench its query profiles and filters, even
    when retracts (tracking) thin the profile records out."""
    from benchmarks.bench_matcher import Plan, prepare

    plan = Plan((kind,), (100, 3000), queries=2, deletes=10, budget_s=1.0, memory_upto=0)
    data = prepare(kind, plan)
    assert len(data.query_profiles) == plan.queries
    assert len(data.query_filters) == plan.queries
    assert len(data.warm_profiles) == len(data.warm_filters) == plan.queries
    assert len(data.profiles) == max(plan.sizes)


def test_later_profiles_keep_their_spacing_and_validity():
    """The pipeline benchmark's steady phase: copies after the backlog, as far apart as
    the originals and valid as long; the latency phase's trickle: 1 ms apart."""
    from benchmarks.bench_pipeline import later, trickle, workload

    _, profiles = workload(200, 50)
    originals = [json.loads(p) for p in profiles]
    start = originals[0]["valid_to"]
    copies = [json.loads(p) for p in later(profiles, 50, "x-", start)]
    assert [c["id"] for c in copies] == [f"x-{i}" for i in range(50)]
    assert [c["ts"] - start for c in copies] == [o["ts"] - originals[0]["ts"] for o in originals]
    for c, o in zip(copies, originals, strict=True):
        assert c["valid_from"] == c["ts"] and c["valid_to"] - c["ts"] == o["valid_to"] - o["ts"]
        assert c["attrs"] == o["attrs"]
    drip = [json.loads(p)["ts"] for p in trickle(profiles, 5, "t-")]
    assert drip == [originals[-1]["ts"] + 1000 + i for i in range(5)]
