"""The mobility benchmark's parts: its workload, the naive protocol and its counts
(the benchmark itself is no test)."""

from __future__ import annotations

from benchmarks import bench_mobility
from benchmarks.bench_mobility import compare_naive, naive, readme, run_size, workload
from benchmarks.placement import topology


def test_each_client_moves_once_to_another_site_while_its_pairs_hold():
    names, _ = topology("star-8")
    subs, profiles, moves = workload(20, names)
    homes = {s["subscriber"]: s["site"] for s in subs}
    assert len(subs) == 40 and len(moves) == 20
    assert all(m["from"] == homes[m["subscriber"]] != m["site"] for m in moves)
    assert all(p["valid_to"] - p["ts"] == bench_mobility.LIFE_MS for p in profiles)
    by_hand = naive(subs, moves, 1000)
    assert sum(r["op"] == "unsubscribe" for r in by_hand) == 40 == len(by_hand) - 80


def test_the_naive_count_tells_lost_repeated_and_spurious_records():
    record = {"subscriber": "c", "subscription_id": "s", "profile_id": "p", "payload": 1}
    ref = [record | {"event": "match", "ts": 1}, record | {"event": "update", "ts": 5}]
    got = [
        record | {"event": "match", "ts": 1},
        record | {"event": "unmatch", "ts": 3, "subscription_id": "s@a"},
        record | {"event": "match", "ts": 3, "subscription_id": "s@b"},
    ]
    assert compare_naive(ref, got) == {"lost": 1, "repeated": 1, "spurious": 1}


def test_a_small_run_meets_the_target(monkeypatch):
    monkeypatch.setattr(bench_mobility, "PROFILES", 300)
    row = run_size("line-7", 5)
    assert row["move_lost"] == row["move_repeated"] == 0
    assert row["naive"]["repeated"] > 0 and row["naive"]["lost"] == 0
    assert row["move_vs_naive"] is not None and row["move_vs_naive"] <= 2
    meta = {"runs": [{"command": "x", "seconds": 1, "rows": ["line-7:5"]}]}
    meta |= {"python": "3", "machine": "m", "profiles": 300, "objects": 400}
    text = readme([row], meta)
    assert "| line-7 | 5 |" in text and ": met." in text and "queue" not in text
    slow = row | {"move_wait_ms": {"p50": 60_000.0, "p99": 90_000.0, "max": 90_000.0}}
    assert "the handovers queue: on line-7 at 5 clients" in readme([slow], meta)


def test_a_row_run_alone_replaces_its_earlier_self_and_keeps_the_others():
    def row(topo, n, records):
        return {"topology": topo, "clients": n, "match_records": records}

    earlier = [row("line-7", 10, 1), row("star-8", 10, 2), row("star-8", 1000, 3)]
    runs = {"runs": [{"command": "all", "seconds": 9, "rows": ["line-7:10", "star-8:10"]}]}
    runs["runs"].append({"command": "one", "seconds": 5, "rows": ["star-8:1000"]})
    new = [row("star-8", 10_000, 4), row("star-8", 1000, 5)]
    rows, meta = bench_mobility._merged(earlier, runs | {"bounds": {"star-8:10000": "b"}}, new, {})
    assert [r["match_records"] for r in rows] == [1, 2, 5, 4]
    assert [run.get("command") for run in meta["runs"]] == ["all", None]
    assert "bounds" not in meta
