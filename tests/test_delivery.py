"""Delivery policies (docs/DELIVERY.md): the fields' rules, refusals as dead letters,
named cases of each policy, and a snapshot of format 3 that loads and matches on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from matcher.admission import Input, decode_input
from matcher.engine import Engine, SpaceMatcher
from matcher.errors import RecordError
from matcher.records import Source, decode, from_state, to_state
from streaming.state.codec import dump_snapshot, load_snapshot, snapshot_version

BASE = 1_700_000_000_000
FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"


def sub(ident: str, lo: float, hi: float, ts: int = 0, **fields) -> tuple[str, dict]:
    rec = {"op": "subscribe", "id": ident, "space": "city", "subscriber": f"u-{ident}"}
    rec |= {"where": f"x BETWEEN {lo} AND {hi}", "ts": BASE + ts, **fields}
    return "subscription", rec


def pub(ident: str, x, ts: int, **fields) -> tuple[str, dict]:
    rec = {"op": "publish", "id": ident, "space": "city", "attrs": {"x": x}, "ts": BASE + ts}
    return "profile", rec | {"valid_to": None, "payload": {"x": x}} | fields


def run(records, *, batches: int = 1) -> tuple[list[dict], list[dict]]:
    engine, out = Engine(), []
    items = [
        Input(k, json.dumps(r), Source(file="t", line=n + 1)) for n, (k, r) in enumerate(records)
    ]
    size = max(1, -(-len(items) // batches))
    for at in range(0, len(items), size):
        out += engine.process_batch(items[at : at + size])
    matches = [o.value for o in out if o.topic == "matches"]
    return matches, [o.value for o in out if o.topic == "deadletter"]


def brief(matches: list[dict]) -> list[tuple]:
    return [
        (m["event"], m["reason"], m["subscription_id"], m["profile_id"], m["ts"] - BASE)
        for m in matches
    ]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"delivery": {"group": "g", "mode": "sometimes", "k": 2}}, "must be one of"),
        ({"delivery": {"group": "g", "mode": "manycast", "k": 0}}, "at least 1"),
        ({"delivery": {"group": "g", "mode": "manycast"}}, "is required for manycast"),
        ({"delivery": {"group": "g", "mode": "anycast", "k": 2}}, "must be 1"),
        ({"delivery": {"group": "", "mode": "anycast"}}, "non-empty string"),
        ({"delivery": {"group": "g", "mode": "bestcast", "k": 2}}, "needs 'delivery.near'"),
        (
            {"delivery": {"group": "g", "mode": "manycast", "k": 2, "near": {"x": 1}}},
            "bestcast only",
        ),
        ({"delivery": {"group": "g", "mode": "anycast", "size": 3}}, "unknown fields"),
        ({"dwell_ms": -1}, "from 0 to"),
        ({"exit_dwell_ms": 1.5}, "whole milliseconds"),
        ({"margin": -0.1}, "at least 0"),
        ({"margin": "wide"}, "finite number"),
        ({"margin": 1, "relation": "covers"}, "needs relation 'overlaps'"),
    ],
)
def test_bad_settings_are_dead_letters_with_their_reason(fields, words):
    _, letters = run([sub("s1", 0, 1, **fields)])
    assert len(letters) == 1 and words in letters[0]["reason"], letters
    with pytest.raises(RecordError, match="delivery|dwell|margin"):
        decode("subscription", json.dumps(sub("s1", 0, 1, **fields)[1]))


def test_members_that_disagree_are_refused_and_change_nothing():
    g = {"group": "drivers", "mode": "manycast", "k": 2}
    matches, letters = run(
        [
            sub("a", 0, 10, delivery=g),
            sub("b", 0, 10, ts=1, delivery=g | {"k": 3}),  # disagrees: refused
            sub("a", 0, 10, ts=2, delivery=g | {"mode": "faircast"}),  # the only member: fine
            pub("p", 5, ts=3),
        ]
    )
    assert [letter["source"]["line"] for letter in letters] == [2]
    assert "disagrees with group 'drivers'" in letters[0]["reason"]
    assert brief(matches) == [("match", "new-profile", "a", "p", 3)]


def test_fields_survive_the_state_form_and_leave_plain_versions_alone():
    kind, rec = sub(
        "s",
        0,
        1,
        delivery={"group": "g", "mode": "bestcast", "k": 2, "near": {"x": 1}},
        margin={"x": 0.5},
        dwell_ms=10,
    )
    record = decode(kind, json.dumps(rec))
    again = from_state(to_state(record))
    assert again.options == record.options and to_state(again) == to_state(record)
    plain = decode(kind, json.dumps(sub("s", 0, 1, dwell_ms=0)[1]))
    assert plain.options is None and "dwell" not in to_state(plain)


def test_manycast_replaces_a_chosen_member_that_leaves_and_late_joiners_wait():
    g = {"group": "g", "mode": "manycast", "k": 2}
    matches, _ = run(
        [
            sub("a", 0, 10, delivery=g),
            sub("b", 0, 10, delivery=g),
            sub("c", 0, 10, delivery=g),
            pub("p", 5, ts=1),
            sub("d", 0, 10, ts=2, delivery=g),  # joins later: takes nothing
            ("subscription", {"op": "unsubscribe", "id": "a", "space": "city", "ts": BASE + 3}),
        ]
    )
    assert brief(matches) == [
        ("match", "new-profile", "a", "p", 1),
        ("match", "new-profile", "b", "p", 1),
        ("unmatch", "unsubscribe", "a", "p", 3),
        ("match", "replaced", "c", "p", 3),
    ]


def test_faircast_spreads_and_bestcast_takes_the_nearest():
    fair = {"group": "f", "mode": "faircast", "k": 1}
    matches, _ = run(
        [sub(s, 0, 10, delivery=fair) for s in ("a", "b", "c")]
        + [pub(f"p{i}", 5, ts=1 + i) for i in range(4)]
    )
    assert [m["subscription_id"] for m in matches] == ["a", "b", "c", "a"]
    best = {"group": "b", "mode": "bestcast", "k": 2}
    matches, _ = run(
        [
            sub(s, 0, 10, delivery=best | {"near": {"x": x}})
            for s, x in (("a", 0), ("b", 9), ("c", 6), ("d", 4))
        ]
        + [pub("p", [5, 5.5], ts=1)]
    )
    assert sorted(m["subscription_id"] for m in matches) == ["c", "d"]


def test_a_faircast_member_that_leaves_without_pairs_counts_afresh_when_back():
    """§5: served counts run since a member joined its group; one that expires or
    unsubscribes while it holds no pair leaves the group all the same."""
    fair = {"group": "f", "mode": "faircast", "k": 1}
    for leaves in (
        sub("a", 0, 10, ts=3, valid_to=BASE + 4, delivery=fair),  # (no pair: expires)
        ("subscription", {"op": "unsubscribe", "id": "a", "space": "city", "ts": BASE + 4}),
    ):
        matches, _ = run(
            [sub(s, 0, 10, delivery=fair) for s in ("a", "b")]
            + [pub(p, 5, ts=1) for p in ("p1", "p2", "p3")]  # (a served twice, b once)
            + [pub(p, 50, ts=2) for p in ("p1", "p2", "p3")]  # (no pairs left)
            + [leaves, sub("a", 0, 10, ts=5, delivery=fair), pub("p4", 5, ts=6)]
        )
        assert [m["subscription_id"] for m in matches[:3]] == ["a", "b", "a"]
        assert (matches[-1]["event"], matches[-1]["subscription_id"]) == ("match", "a")


def test_a_pair_delivered_again_after_its_group_passed_it_over_says_the_steps_reason():
    """§6: a `match` at a record's step has that step's reason. b's pair is on from
    p's first version and chosen in g1 (settled: no state of its own); b moves to
    g2, which has chosen a, so its pair is withdrawn though still on; b leaves the
    groups keeping an exit dwell, and its pair is delivered again: `changed`."""
    matches, _ = run(
        [
            sub("a", 0, 10, delivery={"group": "g2", "mode": "anycast"}),
            sub("b", 0, 10, delivery={"group": "g1", "mode": "anycast"}),
            pub("p", 5, ts=1),
            sub("b", 0, 10, ts=2, delivery={"group": "g2", "mode": "anycast"}),
            sub("b", 0, 10, ts=3, exit_dwell_ms=1),
        ]
    )
    assert brief(matches) == [
        ("match", "new-profile", "a", "p", 1),
        ("match", "new-profile", "b", "p", 1),
        ("unmatch", "changed", "b", "p", 2),
        ("match", "changed", "b", "p", 3),
    ]


def test_dwell_waits_exit_dwell_holds_on_and_margin_keeps_a_wobbling_pair():
    records = [
        sub("s", 0, 10, dwell_ms=5, exit_dwell_ms=4),
        pub("p", 5, ts=1),
        pub("p", 11, ts=3),  # gone before its dwell: nothing
        pub("p", 5, ts=4),  # pending again, due at 9
        pub("p", 6, ts=12),  # (on since 9): update
        pub("p", 11, ts=13),  # leaving, due at 17
        pub("p", 9, ts=15),  # back in time: update, no unmatch
        pub("p", 20, ts=16),
        pub("p", 20, ts=30),  # (the unmatch fell due at 20)
    ]
    matches, _ = run(records, batches=3)
    assert brief(matches) == [
        ("match", "changed", "s", "p", 9),  # (the publish at 4 replaced a held version)
        ("update", "changed", "s", "p", 12),
        ("update", "changed", "s", "p", 15),
        ("unmatch", "changed", "s", "p", 20),
    ]
    wobble = [sub("m", 0, 10, margin=1.0)] + [
        pub("p", x, ts=i + 1) for i, x in enumerate((9.5, 10.6, 9.9, 10.9, 11.2, 10.5))
    ]
    assert [m["event"] for m in run(wobble)[0]] == [
        "match",
        "update",
        "update",
        "update",
        "unmatch",
    ]


def test_a_snapshot_of_format_3_loads_and_matches_on():
    matcher = load_snapshot((FIXTURES / "format3.zst").read_bytes())
    assert all(h.record.options is None for h in matcher.subs.values())
    fresh = SpaceMatcher("A")
    for n, line in enumerate((FIXTURES / "format3-records.jsonl").read_text().splitlines()):
        kind, rec = json.loads(line)
        fresh.apply(decode_input(Input(kind, json.dumps(rec), Source(file="v3", line=n + 1))))
    probe = {
        "op": "publish",
        "id": "q",
        "space": "A",
        "attrs": {"x": 4},
        "ts": 2000,
        "payload": None,
    }
    record = decode_input(Input("profile", json.dumps(probe), Source(file="p", line=1)))
    assert matcher.apply(record) == fresh.apply(record)


def test_histograms_follow_the_live_subscriptions():
    records = [sub(f"s{i}", i, i + 10 * (i % 3)) for i in range(40)]
    records.append(("subscription", {**sub("t", 0, 1)[1], "where": "x > 5 OR y < 2"}))  # no x
    records += [
        ("subscription", {"op": "unsubscribe", "id": f"s{i}", "space": "city", "ts": BASE + 1})
        for i in range(0, 40, 4)
    ]
    engine = Engine()
    engine.process_batch(
        [Input(k, json.dumps(r), Source(file="t", line=n + 1)) for n, (k, r) in enumerate(records)]
    )
    histograms = engine.matchers["city"].histograms()
    live = [i for i in range(40) if i % 4]
    summary = histograms.summary(4)
    assert list(summary) == ["x"] and summary["x"]["live"] == len(live)
    ends = sorted([float(i) for i in live] + [float(i + 10 * (i % 3)) for i in live])
    edges = summary["x"]["edges"]
    assert edges[0] == ends[0] and edges[-1] == ends[-1] and edges == sorted(edges)
    for lo, hi in zip(edges, edges[1:], strict=False):  # (about a quarter of the ends each)
        assert sum(lo < e <= hi for e in ends) <= len(ends) // 4 + 2
    for x in (0, 5, 17.5, 40):
        assert histograms.supply("x", x) == sum(i <= x <= i + 10 * (i % 3) for i in live)
    engine.matchers["city"].apply(
        decode_input(Input("subscription", json.dumps(sub("u", 100, 200, ts=2)[1]), Source()))
    )
    assert histograms.summary(4)["x"]["live"] == len(live) + 1  # (kept as they change)


def test_tsm_stats_prints_each_spaces_histograms(tmp_path, capsys):
    from tsm_cli.main import main

    path = tmp_path / "subs.jsonl"
    path.write_text("".join(json.dumps(sub(f"s{i}", i, i + 1)[1]) + "\n" for i in range(10)))
    assert main(["stats", "--subscriptions", str(path), "--buckets", "2"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["space"] == "city" and record["subscriptions"] == 10
    assert record["histograms"]["x"] == {"live": 10, "edges": [0.0, 5.0, 10.0]}


@pytest.mark.parametrize("version", [5, 7, 8, 9])
def test_an_earlier_format_with_delivery_state_loads_and_goes_on(version):
    """Format 5 kept a timer a pair (`make_delivery_format5.py`), formats 5 to 7 a
    `Pair` for every pair, settled ones too, format 8 for every pending pair, formats
    5 to 10 the chosen sets keyed by (group, profile) (`make_delivery_snapshot.py`):
    loaded, the matcher holds what one built afresh from the same records does, timers
    included, and both make the same records and changes for the rest and for evicting
    everything."""
    data = json.loads((FIXTURES / "delivery-format5-records.json").read_text())
    blob = (FIXTURES / f"delivery-format{version}.zst").read_bytes()
    assert snapshot_version(blob) == version
    records = [
        decode_input(Input(kind, json.dumps(rec), Source(file="d", line=n + 1)))
        for n, (kind, rec) in enumerate(data["records"])
    ]
    cut = data["cut"]
    loaded, fresh = load_snapshot(blob), SpaceMatcher("A")
    for record in records[:cut]:
        fresh.apply(record)
    fresh.drain_changes()
    assert loaded.delivery.by_prof == fresh.delivery.by_prof
    chosen = [
        {pid: {g: set(members) for g, members in per.items()} for pid, per in m.chosen.items()}
        for m in (loaded.delivery, fresh.delivery)
    ]
    assert chosen[0] == chosen[1] != {}  # (per profile from format 11 on)
    for pid, sids in fresh.delivery.by_prof.items():
        for sid in sids:
            state = [
                matcher.delivery.pair_state((sid, pid), matcher.subs, matcher.profiles)
                for matcher in (loaded, fresh)
            ]
            assert state[0] == state[1]
    held = sum(map(len, loaded.delivery.by_prof.values()))
    assert 0 < len(loaded.delivery.pairs) < held  # (settled pairs keep no `Pair`)
    assert loaded.next_expiry() == fresh.next_expiry() == loaded.delivery.next_due()
    for matcher in (loaded, load_snapshot(dump_snapshot(loaded))):
        again = load_snapshot(dump_snapshot(fresh))
        got = [matcher.apply(r) for r in records[cut:]] + [matcher.expire(float("inf"))]
        want = [again.apply(r) for r in records[cut:]] + [again.expire(float("inf"))]
        assert got == want and sum(map(len, want)) > 50
        assert matcher.drain_changes() == again.drain_changes()
