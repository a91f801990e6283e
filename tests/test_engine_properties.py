"""The engine against the brute-force oracle, on random record sequences.

Random subscribe/unsubscribe/publish/retract sequences (upserts, lifetimes,
ISO and epoch times, two spaces, several batches, lateness) go through the
`Engine`, a sharded `Engine` and the oracle; single-space sequences also go
through a bare `SpaceMatcher`, checking the forest invariants, the two forest
queries against brute force, and a dump/load in the middle.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from matcher.admission import Input, order_key
from matcher.constraints import predicate_of
from matcher.encoding import encode
from matcher.engine import Engine, SpaceMatcher
from matcher.profiles import Profile
from matcher.records import Source, decode, to_state
from matcher.sharding import Sharding, ShardSpec
from tests import layouts, oracle, selector_oracle

# Epoch bases for the record times: a round one, and two whose milliseconds
# stress ISO-8601 conversion (float error in seconds * 1000).
BASES = (1_700_000_000_000, 2_166_621_962_800, 1_093_761_319_850)
# TSM_EXAMPLES=1000 for a longer hunt; the default keeps the suite quick.
PROPS = settings(
    max_examples=int(os.environ.get("TSM_EXAMPLES", 60)), deadline=None, print_blob=True
)


def iso(ms: int) -> str:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@st.composite
def times(draw, ts: int) -> dict:
    """ts, valid_from, valid_to as a record writes them (absent, null, ISO or epoch)."""

    def write(ms: int):
        return iso(ms) if draw(st.integers(0, 3)) == 0 else ms

    out = {"ts": write(ts)}
    vf = ts
    if draw(st.booleans()):
        vf = ts + draw(st.integers(-5, 10))
        out["valid_from"] = write(vf)
    choice = draw(st.integers(0, 2))
    if choice == 1:
        out["valid_to"] = None
    elif choice == 2:
        out["valid_to"] = write(vf + draw(st.integers(0, 25)))
    return out


@st.composite
def record(draw, base: int, spaces: tuple[str, ...], n: int) -> tuple[str, dict]:
    ts = base + draw(st.integers(0, 60))
    space = draw(st.sampled_from(spaces))
    op = draw(
        st.sampled_from(("subscribe", "subscribe", "unsubscribe", "publish", "publish", "retract"))
    )
    kind = "subscription" if op in ("subscribe", "unsubscribe") else "profile"
    rec = {"op": op, "id": draw(st.sampled_from(("0", "1", "2"))), "space": space}
    if op in ("unsubscribe", "retract"):
        return kind, rec | {"ts": ts}
    rec |= draw(times(ts))
    if op == "publish":
        attrs = draw(oracle.profile_attrs())
        strings = draw(selector_oracle.profiles(intervals=False, patterns=True))
        attrs |= {a: v for a, v in strings.items() if a in ("t", "g", "d")}  # (pattern tests)
        return kind, rec | {"attrs": attrs, "payload": {"n": n}}
    fields = draw(oracle.subscription_fields(draw(oracle.predicates())))
    if draw(st.booleans()):  # a JMS selector of any form, from a tree the oracle evaluates
        fields.pop("filter", None)
        fields["where"] = selector_oracle.render(
            draw(selector_oracle.selectors(3, patterns=True)), draw(st.randoms())
        )
    return kind, rec | fields


@st.composite
def sent_again(draw, rec: dict) -> dict:
    """A subscription sent again (§4): as it was (a client reconnecting), later, with
    another end of its lifetime, or to another subscriber."""
    again = dict(rec)
    change = draw(st.sampled_from(("same", "later", "end", "subscriber")))
    if change == "later":
        again["ts"] = oracle.to_ms(rec["ts"]) + draw(st.integers(0, 20))
        if rec.get("valid_to") is not None:  # (its lifetime must still start before it ends)
            again.setdefault("valid_from", rec["ts"])
    elif change == "end":
        start = oracle.to_ms(rec.get("valid_from") or rec["ts"])
        again["valid_to"] = draw(st.sampled_from((None, start, start + 7, start + 30)))
    elif change == "subscriber":
        again["subscriber"] = {"alice": "bob", "bob": "alice"}[rec["subscriber"]]
    return again


@st.composite
def workloads(draw, spaces=("A", "B")):
    """(base time, batches of (kind, record, line)); lines run across the batches."""
    base = draw(st.sampled_from(BASES))
    n = draw(st.integers(1, 18))
    records = [draw(record(base, spaces, i)) for i in range(n)]
    for _ in range(draw(st.integers(0, 3))):
        at = [i for i, (_, r) in enumerate(records) if r["op"] == "subscribe"]
        if not at:
            break
        i = draw(st.sampled_from(at))
        place = draw(st.integers(i + 1, len(records)))
        records.insert(place, ("subscription", draw(sent_again(records[i][1]))))
    n = len(records)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=2)))
    bounds = [0, *cuts, n]
    return base, [
        [(k, r, i + 1) for i, (k, r) in enumerate(records[a:b], start=a)]
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]


def run_engine(engine: Engine, batches) -> list[bytes]:
    out = []
    for batch in batches:
        items = [Input(k, json.dumps(r), Source(file="gen", line=line)) for k, r, line in batch]
        out += [
            encode({"topic": o.topic, "key": o.key} | o.value) for o in engine.process_batch(items)
        ]
        for m in engine.matchers.values():
            m.forest.check_invariants()
    return out


def split(lines: list[bytes]) -> tuple[list[dict], list[int]]:
    values = [json.loads(b) for b in lines]
    matches = [
        {k: v for k, v in r.items() if k not in ("topic", "key")}
        for r in values
        if r["topic"] == "matches"
    ]
    late = [r["source"]["line"] for r in values if r["topic"] == "deadletter"]
    return matches, late


SHARDS = Sharding({"A": ShardSpec("x", (1.0, 3.0)), "B": ShardSpec.grid("y", 2.0, 3)})


@PROPS
# (`A#1` is also the key of sharded `A`'s cell 1: a space of its own all the same)
@given(workloads(spaces=("A", "B", "A#1")), st.sampled_from((0, 5, 1000)))
def test_engine_equals_oracle(workload, lateness):
    _, batches = workload
    out = run_engine(Engine(lateness_ms=lateness), batches)
    matches, late = split(out)

    ref = oracle.OracleEngine(lateness)
    expected, expected_late = [], []
    for batch in batches:
        events, refused = ref.process_batch([(k, r, (0, line)) for k, r, line in batch])
        expected += events
        expected_late += [line for _, line in refused]

    assert late == expected_late
    assert oracle.by_pair(matches) == oracle.by_pair(expected)
    assert all(re.fullmatch("[A-Za-z0-9_-]{32}", m["match_id"]) for m in matches)
    # a match_id tells apart the records of different pairs and events
    ids: dict[str, tuple] = {}
    for m in matches:
        pair = (m["space"], m["subscription_id"], m["profile_id"], m["event"])
        assert ids.setdefault(m["match_id"], pair) == pair

    # determinism: the same input again, byte for byte
    assert run_engine(Engine(lateness_ms=lateness), batches) == out
    # sharding: the same records (match ids included), each pair once
    sharded = run_engine(Engine(lateness_ms=lateness, sharding=SHARDS), batches)
    assert sorted(sharded) == sorted(out)


@PROPS
@given(
    workloads(spaces=("A",)),
    st.lists(oracle.profile_attrs(), min_size=1, max_size=3),
    st.lists(st.tuples(oracle.predicates(), st.booleans()), min_size=1, max_size=3),
    st.lists(st.integers(-10, 100), min_size=2, max_size=2).map(sorted),
    st.integers(0, 18),
    st.booleans(),
)
def test_space_matcher_queries_invariants_and_snapshots(
    workload, probe_profiles, probe_subs, window, cut, tiny
):
    with layouts.lists(tiny):
        _space_matcher_against_oracle(workload, probe_profiles, probe_subs, window, cut)


def _space_matcher_against_oracle(workload, probe_profiles, probe_subs, window, cut):
    base, batches = workload
    window = (base + window[0], base + window[1])
    records = sorted(
        (
            decode(k, json.dumps(r), Source(file="gen", line=line))
            for b in batches
            for k, r, line in b
        ),
        key=order_key,
    )
    by_line = {line: (k, r) for b in batches for k, r, line in b}
    m, ref = SpaceMatcher("A"), oracle.Space()
    reloaded = None
    changes: dict[tuple[str, str], str | None] = {}
    for i, rec in enumerate(records):
        if i == cut:
            reloaded = SpaceMatcher.load(m.dump())
        got = m.apply(rec)
        if reloaded is not None:
            assert reloaded.apply(rec) == got
        kind, raw_record = by_line[rec.source.line]
        assert oracle.by_pair(got) == oracle.by_pair(ref.apply(kind, raw_record))
        m.forest.check_invariants()
        for kind_, ident, state in m.drain_changes():
            changes[kind_, ident] = state

        # the two forest queries against brute force over what the oracle holds
        subs, profs = ref.held["subscription"], ref.held["profile"]
        intervals = [window] * len(probe_profiles)
        qi, slots = m.forest.match_profiles([Profile(a) for a in probe_profiles], intervals)
        got_pairs = {(int(q), m.forest.subs.handles[s]) for q, s in zip(qi, slots, strict=True)}
        grouped = m.forest.match_profiles_grouped([Profile(a) for a in probe_profiles], intervals)
        assert [sorted(g.tolist()) for g in grouped] == [
            sorted(slots[qi == q].tolist()) for q in range(len(probe_profiles))
        ]
        want = set()
        for q, attrs in enumerate(probe_profiles):
            probe = oracle.hold(
                "profile", {"id": "?", "ts": window[0], "valid_to": window[1], "attrs": attrs}
            )
            want |= {(q, sid) for sid, s in subs.items() if oracle.pair_holds(s, probe)}
        assert got_pairs == want

        queries = [(predicate_of(dnf), covers, *window) for dnf, covers in probe_subs]
        qi, slots = m.forest.match_subscriptions(queries)
        got_pairs = {(int(q), m.forest.profiles.handles[s]) for q, s in zip(qi, slots, strict=True)}
        want = set()
        for q, (dnf, covers) in enumerate(probe_subs):
            probe = oracle.Held(
                {"relation": "covers" if covers else "overlaps"}, "subscription", *window, dnf=dnf
            )
            want |= {(q, pid) for pid, p in profs.items() if oracle.pair_holds(probe, p)}
        assert got_pairs == want

    # the drained changes rebuild exactly the held set
    held = {("subscription", i): to_state(h.record) for i, h in m.subs.items()}
    held |= {("profile", i): to_state(h.record) for i, h in m.profiles.items()}
    assert {k: v for k, v in changes.items() if v is not None} == held


def test_sharded_engine_keeps_each_pairs_order():
    batch = [
        (
            "subscription",
            {
                "op": "subscribe",
                "id": "s",
                "space": "A",
                "subscriber": "u",
                "where": "x >= 0",
                "ts": 1,
            },
            1,
        ),
        (
            "profile",
            {"op": "publish", "id": "p", "space": "A", "attrs": {"x": 5}, "ts": 2, "valid_to": 9},
            2,
        ),
        (
            "profile",
            {"op": "publish", "id": "p", "space": "A", "attrs": {"x": 0}, "ts": 3, "valid_to": 9},
            3,
        ),
    ]
    plain = split(run_engine(Engine(), [batch]))[0]
    assert [m["event"] for m in plain] == ["match", "update"]
    sharded = split(run_engine(Engine(sharding=SHARDS), [batch]))[0]
    assert oracle.by_pair(sharded) == oracle.by_pair(plain)


def test_spaces_named_like_keys_stay_apart():
    def sub(space: str, where: str, ts: int) -> tuple[str, dict, int]:
        rec = {"op": "subscribe", "id": "s", "space": space, "subscriber": "u", "where": where}
        return "subscription", rec | {"ts": ts}, ts

    def pub(space: str, ts: int) -> tuple[str, dict, int]:
        rec = {"op": "publish", "id": "p", "space": space, "attrs": {"x": 2}, "valid_to": None}
        return "profile", rec | {"ts": ts}, ts

    # `A#1` and `\x00deadletter` read as the keys of `A`'s cell 1 and of the job's
    # dead letters; the same ids there must not replace `A`'s (an unmatch here).
    batch = [sub("A", "x >= 0", 1), pub("A", 2), sub("A#1", "x < 0", 3)]
    batch += [pub("\x00deadletter", 4), sub("\x00deadletter", "x > 1", 5)]
    plain = run_engine(Engine(), [batch])
    assert sorted((m["space"], m["event"]) for m in split(plain)[0]) == [
        ("\x00deadletter", "match"),
        ("A", "match"),
    ]
    assert sorted(run_engine(Engine(sharding=SHARDS), [batch])) == sorted(plain)


# -- SEMANTICS §4 on a subscription's change, example by example -------------------------

T = 1_700_000_000_000
S1 = {"op": "subscribe", "id": "s1", "space": "A", "subscriber": "alice", "where": "x >= 0"}
HELD = [
    ("subscription", S1 | {"ts": T}, 1),
    ("profile", {"op": "publish", "id": "p1", "space": "A", "attrs": {"x": 1}, "ts": T}, 2),
    ("profile", {"op": "publish", "id": "p2", "space": "A", "attrs": {"x": 5}, "ts": T}, 3),
]
HELD[1][1]["valid_to"], HELD[2][1]["valid_to"] = None, T + 10


def changes(again: dict) -> list[tuple]:
    """(event, reason, subscriber, profile, valid_to) of `again` after `HELD`, checked
    against the oracle, and the same from a sharded engine, in the same order."""
    batches = [HELD, [("subscription", again, 4)]]
    got = split(run_engine(Engine(), batches))[0][2:]
    sharded = split(run_engine(Engine(sharding=SHARDS), batches))[0][2:]
    assert sharded == got
    ref = oracle.OracleEngine()
    ref.process_batch([(k, r, (0, line)) for k, r, line in HELD])
    want, _ = ref.process_batch([("subscription", again, (0, 4))])
    assert oracle.by_pair(got) == oracle.by_pair(want)
    return [(e["event"], e["reason"], e["subscriber"], e["profile_id"], e["valid_to"]) for e in got]


def test_a_subscription_sent_again_unchanged_makes_nothing():
    assert changes(S1 | {"ts": T}) == []
    assert changes(S1 | {"ts": T + 5}) == []  # (a client reconnecting later)


def test_a_new_subscriber_is_handed_every_pair():
    assert changes(S1 | {"ts": T + 5, "subscriber": "bob"}) == [
        ("unmatch", "changed", "alice", "p1", None),
        ("match", "changed", "bob", "p1", None),
        ("unmatch", "changed", "alice", "p2", T + 10),
        ("match", "changed", "bob", "p2", T + 10),
    ]


def test_an_update_where_the_end_of_a_holding_pair_moves():
    # p2 ends at T + 10 before and after: its pair does not change
    assert changes(S1 | {"ts": T + 5, "valid_from": T, "valid_to": T + 50}) == [
        ("update", "changed", "alice", "p1", T + 50),
    ]
    # an end before p2's moves both; a filter that loses p1 unmatches it instead
    assert changes(S1 | {"ts": T + 5, "where": "x > 2", "valid_from": T, "valid_to": T + 8}) == [
        ("unmatch", "changed", "alice", "p1", None),
        ("update", "changed", "alice", "p2", T + 8),
    ]


def test_a_new_subscription_tests_what_its_box_cannot_say():
    """`x != 2`'s box holds every number: a held profile inside another held one
    ({x: 2} inside {x: [1, 3]}) is still tested against it, not taken with it."""
    batch = [
        ("profile", {"op": "publish", "id": "wide", "space": "A", "attrs": {"x": [1, 3]}}, 1),
        ("profile", {"op": "publish", "id": "two", "space": "A", "attrs": {"x": 2}}, 2),
        ("subscription", {"op": "subscribe", "id": "s", "space": "A", "where": "x != 2"}, 3),
    ]
    batch = [(k, r | {"subscriber": "u", "ts": n, "valid_to": None}, n) for k, r, n in batch]
    matches = split(run_engine(Engine(), [batch]))[0]
    assert [(m["event"], m["profile_id"]) for m in matches] == [("match", "wide")]
