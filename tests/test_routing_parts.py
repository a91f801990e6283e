"""The routing core's parts: link records, the covering set, the strategies, adverts."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher.constraints import Atom, Conjunction, predicate_of
from matcher.engine import Input
from matcher.errors import RecordError
from matcher.profiles import Profile
from matcher.records import Publish, Retract, Source, decode, to_state, version_of
from matcher.routing import wire
from matcher.routing.adverts import decode_advert
from matcher.routing.cover_set import CoverSet
from matcher.routing.interest import Covering, Identity, Merging, Simple
from matcher.routing.network import parse_network
from matcher.routing.order import Key
from matcher.routing.replay import replay_network
from tests import oracle

PROPS = settings(
    max_examples=int(os.environ.get("TSM_EXAMPLES", 60)), deadline=None, print_blob=True
)


def conjunctions_strategy():
    return (
        oracle.conjunctions()
        .map(lambda atoms: predicate_of([atoms]))
        .filter(bool)
        .map(lambda p: p[0])
    )


# -- link records ---------------------------------------------------------------


@PROPS
@given(conjunctions_strategy())
def test_a_filter_crosses_a_link_as_itself(conj):
    back = wire.filter_of(json.loads(json.dumps(wire.filter_json(conj))))
    assert back.covers_filter(conj) and conj.covers_filter(back)
    message = wire.FilterChange("interest", "add", "A", conj, Key(5, 1, (3,), 0))
    assert json.loads(wire.encode(message)) == message.to_json()
    again = wire.decode(wire.encode(message))
    assert again.key == message.key and again.space == "A" and again.op == "add"
    assert again.filter.covers_filter(conj) and conj.covers_filter(again.filter)


@PROPS
@given(oracle.profile_attrs(), st.integers(0, 10**6), st.one_of(st.none(), st.integers(0, 99)))
def test_a_forwarded_profile_keeps_its_version(attrs, ts, life):
    raw = {"op": "publish", "id": "p", "space": "A", "attrs": attrs, "ts": ts, "payload": [1.5]}
    if life is not None:
        raw["valid_to"] = ts + life
    pub = decode("profile", json.dumps(raw))
    forward = wire.ProfileForward(pub, Key(ts, 2, (1,), -1))
    assert json.loads(wire.encode(forward)) == forward.to_json()
    back = wire.decode(wire.encode(forward))
    assert isinstance(back.record, Publish) and back.key == Key(ts, 2, (1,), -1)
    assert version_of(to_state(back.record)) == version_of(to_state(pub))
    retract = wire.decode(wire.encode(wire.ProfileForward(Retract("A", "p", ts), Key(ts, 2, (2,)))))
    assert isinstance(retract.record, Retract) and retract.record.id == "p"


# -- the covering set ---------------------------------------------------------------


@PROPS
@given(
    st.lists(st.tuples(st.booleans(), conjunctions_strategy()), max_size=25),
    conjunctions_strategy(),
)
def test_the_covering_set_answers_as_the_relation_does(ops, probe):
    members: Counter = Counter()
    cover = CoverSet()
    for add, conj in ops:
        if add or not members[conj]:
            assert cover.add(conj) == (members[conj] == 0)
            members[conj] += 1
        else:
            assert cover.discard(conj) == (members[conj] == 1)
            members[conj] -= 1
        members += Counter()
    assert set(cover) == set(members)
    for query in [probe, *members]:
        others = [m for m in members if m != query]
        assert set(cover.covering(query)) == {m for m in others if m.covers_filter(query)}
        assert set(cover.covered_by(query)) == {m for m in others if query.covers_filter(m)}


@PROPS
@given(
    st.lists(oracle.conjunctions(), max_size=12),
    st.lists(oracle.profile_attrs(), min_size=1, max_size=6),
    st.integers(0, 12),
)
def test_the_covering_set_tells_which_profiles_its_members_overlap(filters, profiles, gone):
    cover = CoverSet()
    kept = []
    for atoms in filters:
        conj = predicate_of([atoms])
        if conj and conj[0] not in cover:
            cover.add(conj[0])
            kept.append((atoms, conj[0]))
    for _, conj in kept[:gone]:  # (freed rows answer nothing)
        cover.discard(conj)
    kept = kept[gone:]
    records = [{"op": "publish", "id": "p", "space": "A", "attrs": a, "ts": 0} for a in profiles]
    got = cover.overlapping([decode("profile", json.dumps(r)).profile for r in records])
    values = [{k: oracle.profile_value(v) for k, v in a.items()} for a in profiles]
    assert got.tolist() == [any(oracle.overlaps(atoms, v) for atoms, _ in kept) for v in values]


# -- the strategies -------------------------------------------------------------------

POOL = [
    Conjunction({}),
    *[
        predicate_of([atoms])[0]
        for atoms in (
            [Atom("x", "between", (0, 10))],
            [Atom("x", "between", (2, 4))],
            [Atom("x", "between", (4, 7))],
            [Atom("x", "between", (8, 9))],
            [Atom("x", "between", (2, 4)), Atom("y", "=", 1)],
            [Atom("x", "between", (5, 6)), Atom("y", "=", 1)],
            [Atom("x", "between", (0, 3)), Atom("y", "between", (0, 3))],
            [Atom("x", "between", (3, 6)), Atom("y", "between", (0, 3))],
            [Atom("x", "between", (0, 3)), Atom("y", "between", (3, 6))],
            [Atom("s", "=", "bus")],
            [Atom("s", "in", ("bus", "tram"))],
        )
    ],
]
POINTS = [
    Profile({"x": x, "y": y, "s": s})
    for x in (-1, 0, 2, 3, 3.5, 4, 4.5, 5, 6, 7.5, 8, 9, 10, 11)
    for y in (-1, 0, 1, 2, 3, 4, 6, 7)
    for s in ("bus", "car")
]


def run(strategy, ops):
    """Feed add/remove of pool filters; check the invariants after each; the
    neighbour's table and the messages sent."""
    behind: Counter = Counter()
    table: Counter = Counter()
    messages = 0
    for add, i in ops:
        conj = POOL[i]
        if not add and not behind[conj]:
            continue
        if add:
            behind[conj] += 1
            changes = strategy.add(conj)
        else:
            behind[conj] -= 1
            changes = strategy.remove(conj)
        for op, f in changes:
            messages += 1
            table[f] += 1 if op == "add" else -1
            assert table[f] >= 0, "removed what was not sent"
        table += Counter()
        behind += Counter()
        assert strategy.entries == sum(table.values())
        for f in behind:  # complete: every filter behind the link is covered by one sent
            assert any(t == f or t.covers_filter(f) for t in table), f
    return behind, table, messages


OPS = st.lists(st.tuples(st.booleans(), st.integers(0, len(POOL) - 1)), max_size=40)


@PROPS
@given(OPS)
def test_each_strategy_keeps_the_neighbour_covered_and_sends_no_more_than_it_must(ops):
    behind, simple, n_simple = run(Simple(), ops)
    assert simple == behind
    _, identity, n_identity = run(Identity(), ops)
    assert set(identity) == set(behind) and all(n == 1 for n in identity.values())
    _, covering, n_covering = run(Covering(), ops)
    assert set(covering) <= set(behind)
    assert n_covering <= n_identity <= n_simple
    _, perfect, _ = run(Merging(imperfect=False, budget=0.05), ops)
    for merged in perfect:  # a perfect merger allows exactly what its parts do
        parts = [f for f in behind if merged.covers_filter(f)]
        for p in POINTS:
            assert merged.overlaps(p) == any(f.overlaps(p) for f in parts), (merged, p)
    for budget in (0.05, 1.0):
        _, imperfect, _ = run(Merging(imperfect=True, budget=budget), ops)
        # sound: a merger covers something behind the link (a part that left is not kept)
        assert all(any(m.covers_filter(f) for f in behind) for m in imperfect)
        assert sum(imperfect.values()) <= len(set(behind))


def test_merging_joins_ranges_that_meet_and_rederives_when_a_part_leaves():
    merging = Merging(imperfect=False, budget=0.0)
    a, b, c = POOL[7], POOL[8], POOL[9]  # x 0-3 / 3-6 for y 0-3; x 0-3 for y 3-6
    assert merging.add(a) == [("add", a)]
    changes = merging.add(b)
    assert [op for op, _ in changes] == ["add", "remove"] and changes[1][1] == a
    (merged,) = merging.merger.sent
    assert merged.overlaps(Profile({"x": 5, "y": 1})) and not merged.overlaps(
        Profile({"x": 7, "y": 1})
    )
    merging.add(c)  # differs from the merger on both ranges: a group of its own
    assert len(merging.merger.sent) == 2
    # b leaves: its group is re-derived, and a, alone again, meets c on y
    changes = merging.remove(b)
    (rederived,) = merging.merger.sent
    assert (
        rederived == predicate_of([[Atom("x", "between", (0, 3)), Atom("y", "between", (0, 6))]])[0]
    )
    assert sorted(changes, key=str) == sorted(
        [("add", rederived), ("remove", merged), ("remove", c)], key=str
    )


# -- advertisements ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "words"),
    [
        ({"op": "advertise", "id": "a", "space": "A", "where": "x >> 1", "ts": 1}, "bad where"),
        ({"op": "advertise", "space": "A", "where": "x > 1", "ts": 1}, "missing 'id'"),
        (
            {"op": "advertise", "id": "a", "space": "A", "ts": 1},
            "exactly one of 'where' and 'filter'",
        ),
        (
            {"op": "advertise", "id": "a", "space": "A", "where": "x > 1 AND x < 0", "ts": 1},
            "never hold",
        ),
        ({"op": "unadvertise", "id": "a", "ts": 1}, "missing 'space'"),
    ],
)
def test_a_bad_advertisement_is_refused_with_a_reason(record, words):
    with pytest.raises(RecordError, match=words):
        decode_advert(record, Source())


def test_bad_advertisements_and_profiles_outside_them_go_to_their_sites_dead_letters():
    net = parse_network('advertisements = true\nlinks = [["a", "b"]]\n[sites.a]\n[sites.b]\n')
    profiles = [
        {
            "op": "advertise",
            "id": "ad",
            "space": "A",
            "where": "x BETWEEN 0 AND 5",
            "ts": 1,
            "site": "b",
        },
        {"op": "advertise", "id": "bad", "space": "A", "where": "x >> 5", "ts": 1, "site": "b"},
        {"op": "publish", "id": "in", "space": "A", "attrs": {"x": [1, 2]}, "ts": 2, "site": "b"},
        {"op": "publish", "id": "out", "space": "A", "attrs": {"x": [4, 6]}, "ts": 2, "site": "b"},
        {"op": "publish", "id": "elsewhere", "space": "A", "attrs": {"x": 1}, "ts": 2, "site": "a"},
        {"op": "broadcast", "id": "x", "space": "A", "ts": 2, "site": "b"},
    ]
    subs = [
        {
            "op": "subscribe",
            "id": "s",
            "space": "A",
            "subscriber": "u",
            "where": "TRUE",
            "ts": 0,
            "site": "a",
        }
    ]
    items = [
        Input("subscription", json.dumps(r), Source(file="s", line=i))
        for i, r in enumerate(subs, 1)
    ]
    items += [
        Input("profile", json.dumps(r), Source(file="p", line=i)) for i, r in enumerate(profiles, 1)
    ]
    out = replay_network(net, items)
    assert [(m["profile_id"], m["site"]) for m in out.matches] == [("in", "a")]
    letters = {d["source"]["line"]: d for d in out.dead_letters}
    assert sorted(letters) == [2, 4, 5, 6]
    assert "bad where" in letters[2]["reason"] and letters[2]["site"] == "b"
    assert "outside every advertisement of site 'b'" in letters[4]["reason"]
    assert "of site 'a'" in letters[5]["reason"] and letters[5]["site"] == "a"
    assert "'advertise' or 'unadvertise'" in letters[6]["reason"]
    assert out.stats()["links"]["b->a"]["advert_messages"] == 1
