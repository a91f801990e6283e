"""Delivery policies in a network of sites (docs/DELIVERY.md §9) equal one matcher's.

Random trees of 1-5 sites, every strategy; workloads of
`tests.test_delivery_properties` (groups of every mode, dwell, exit dwell,
margins, plain subscriptions, upserts that move a subscription in and out of
a group, unsubscribes, retracts, expiries) with each record at a random
site, so that a group's members sit at several sites. The union of the
sites' records must equal, record for record and in order, `tsm replay`'s
one matcher given every site's input (`test_routing_equivalence.
assert_equivalent`), each record written at its subscriber's site. A member
that disagrees with its group is refused at the space's selecting site and
written as a dead letter of its own site, as one matcher refuses it.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from hypothesis import Phase, event, given, settings
from hypothesis import strategies as st

from benchmarks.placement import network_toml
from matcher.delivery.options import options_of
from matcher.engine import Engine, Input
from matcher.events import encode
from matcher.records import Source
from matcher.routing import wire
from matcher.routing.members import Delivered, Member
from matcher.routing.network import parse_network
from matcher.routing.offline import Delays
from matcher.routing.order import Key
from matcher.routing.replay import replay_network, site_streams
from streaming.network_site import KafkaRow, SiteJob, control_start
from streaming.network_topics import site_topics
from streaming.state.codec import dump_snapshot, load_snapshot
from tests.test_delivery_properties import policies, profile, subscription
from tests.test_network_site import (
    SOLO,
    one_matcher,
    past_every_end,
    run_network,
    with_bootstraps,
)
from tests.test_routing_equivalence import (
    ROUTINGS,
    adverts,
    assert_equivalent,
    qualified,
    two_sites,
)
from tests.test_routing_moves import assert_each_follows, items_of, mobile
from tests.test_routing_moves import one_matcher as one_matcher_without_moves

EXAMPLES = int(os.environ.get("TSM_EXAMPLES", 50))
# (CI runs near its time limit: a fraction of the other properties' examples each)
PROPS = settings(
    max_examples=max(1, EXAMPLES * 2 // 5),
    deadline=None,
    print_blob=True,
    phases=[p for p in Phase if p != Phase.shrink or not os.environ.get("TSM_NO_SHRINK")],
)
# each runs every site's step many times
SITE_PROPS = settings(PROPS, max_examples=max(1, EXAMPLES // 8))
# a move waits for its handover
MOVES_PROPS = settings(PROPS, max_examples=max(1, EXAMPLES // 5))
BASE = 1_700_000_000_000
FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"


@st.composite
def small_trees(draw) -> tuple[list[str], list[tuple[str, str]]]:
    n = draw(st.integers(1, 5))
    names = [f"s{i}" for i in range(n)]
    links = [(names[draw(st.integers(0, i - 1))], names[i]) for i in range(1, n)]
    return draw(st.permutations(names)), links


@st.composite
def placed(draw, sites: list[str]) -> tuple[list[dict], list[dict]]:
    """Subscriptions in groups (and plain ones) and profiles, each at a random site.
    A member that disagrees with its group has an id of its own, never plain: a
    plain subscription that such a record would turn into a member is the one case
    the network does not decide as one matcher (docs/DELIVERY.md §9)."""
    crowded = draw(st.booleans())
    groups = {g: draw(policies()) for g in (("g1",) if crowded else ("g1", "g2"))}
    ts = BASE
    subs, profiles = [], []
    for _ in range(draw(st.integers(1, 30))):
        ts += draw(st.sampled_from((0, 1, 2, 5, 9)))
        site = draw(st.sampled_from(sites))
        what = draw(st.integers(0, 9))
        if what < 4:
            rec = draw(subscription(ts, groups, crowded))
            delivery = rec.get("delivery")
            if delivery is not None and _policy(delivery) != _policy(groups[delivery["group"]]):
                rec["id"] = "d" + rec["id"][1:]
            subs.append({**rec, "site": site})
        elif what < 8:
            profiles.append({**draw(profile(ts)), "site": site})
        elif what == 8:
            ident = draw(st.sampled_from(("s0", "s1", "s2", "s3", "d0")))
            subs.append({"op": "unsubscribe", "id": ident, "space": "A", "ts": ts, "site": site})
        else:
            ident = draw(st.sampled_from(("p0", "p1", "p2")))
            profiles.append({"op": "retract", "id": ident, "space": "A", "ts": ts, "site": site})
    return own_ids_for_refused(subs), profiles


def own_ids_for_refused(subs: list[dict]) -> list[dict]:
    """`subs` with an id of its own (r1, r2, ...) for each subscribe that one matcher
    refuses where its id's version before it is plain: its group's held members
    decide (docs/DELIVERY.md §1), and a member with another policy that joined
    first makes a record with the group's drawn policy disagree. A refused record
    changes nothing, so the rest stays as it was."""
    refused = refused_lines(subs)
    last: dict[str, dict] = {}  # qualified id -> its last record not refused
    out = []
    records = qualified([("subscription", r) for r in subs])
    for line, (rec, (_, named)) in enumerate(zip(subs, records, strict=True), start=1):
        if line in refused:
            before = last.get(named["id"])
            if before is not None and before["op"] == "subscribe" and _plain(before):
                rec = {**rec, "id": f"r{line}"}
        else:
            last[named["id"]] = rec
        out.append(rec)
    return out


def _plain(rec: dict) -> bool:
    return options_of(rec, rec.get("relation") or "overlaps") is None


def _policy(delivery: dict) -> tuple:
    return (delivery["mode"], delivery.get("k", 1))


@PROPS
@given(st.data(), small_trees(), ROUTINGS, st.integers(0, 2**16))
def test_groups_across_sites_equal_one_matcher(data, tree, routing, seed):
    order, links = tree
    subs, profiles = data.draw(placed(order))
    if data.draw(st.booleans()):  # (ids used at one site only: none qualified by site)
        home = {}
        for rec in subs + profiles:
            rec["site"] = home.setdefault(
                (rec["op"] in ("publish", "retract"), rec["id"]), rec["site"]
            )
        subs = own_ids_for_refused(subs)  # (an id at one site may now be refused as plain)
    with_adverts = data.draw(st.booleans())
    if with_adverts:  # (some profiles outside every advertisement: refused at their site)
        profiles += data.draw(adverts(order, True))
    net = parse_network(network_toml(list(order), links, *routing, 3, advertisements=with_adverts))
    out, expected = assert_equivalent(net, subs, profiles, Delays(seed=seed))
    one = refused_lines(subs)
    assert {d["source"]["line"] for d in out.dead_letters if "disagrees" in d["reason"]} == one
    sites = {m["site"] for m in out.matches if m["subscription_id"][0] != "p"}
    event(f"records at several sites: {len(sites) > 1}")
    event(f"replaced: {any(m['reason'] == 'replaced' for m in expected)}")
    event(f"refused: {bool(one)}")


def refused_lines(subs: list[dict]) -> set[int]:
    """The lines of the subscribes one matcher refuses (their group disagrees), an id
    used at two sites qualified by site (ROUTING §1)."""
    items = [
        Input("subscription", json.dumps(r), Source(file="subs", line=i))
        for i, (_, r) in enumerate(qualified([("subscription", r) for r in subs]), start=1)
    ]
    out = Engine().process_batch(items)
    return {
        o.value["source"]["line"]
        for o in out
        if o.topic == "deadletter" and "disagrees" in o.value["reason"]
    }


@SITE_PROPS
@given(st.data(), small_trees(), ROUTINGS, st.integers(0, 2**16))
def test_streaming_sites_deliver_as_one_matcher(data, tree, routing, seed):
    """The same through the sites' streaming jobs (`streaming.network_site`) over
    simulated Kafka, batches crashed and run again (`test_network_site.run_network`):
    the sites' records, duplicates dropped, are one matcher's; each refused member
    is one dead letter (or two, written again by a re-run batch) of its own site."""
    order, links = tree
    subs, profiles = data.draw(placed(order))
    records = qualified([("subscription", r) for r in subs] + [("profile", r) for r in profiles])
    # (one matcher's order at one ts is the input's; a streaming site's, its index in the
    # network file: make them one, as a group's choice at one ts depends on it)
    rank = {name: i for i, name in enumerate(order)}
    subs = sorted(
        (r for kind, r in records if kind == "subscription"),
        key=lambda r: (r["ts"], rank[r["site"]]),
    )
    profiles = sorted(
        (r for kind, r in records if kind == "profile"), key=lambda r: (r["ts"], rank[r["site"]])
    )
    subs = own_ids_for_refused(subs)  # (in this order, other records may be refused)
    net = parse_network(with_bootstraps(network_toml(list(order), links, *routing), order))
    live_until = None
    if data.draw(st.booleans()):  # a live run: the sites' clocks pass every record and timer
        timers = max((r.get("dwell_ms", 0) + r.get("exit_dwell_ms", 0) for r in subs), default=0)
        live_until = past_every_end(subs + profiles) + timers + 1
        live_until += data.draw(st.sampled_from((0, 10**6)))
    written = run_network(net, subs, profiles, random.Random(seed), live_until)
    expected = one_matcher(subs, profiles, live_until)
    assert sorted(set(written.all_matches())) == sorted(set(expected))
    refused = {
        (site, json.loads(v)["source"]["offset"])
        for site, letters in written.dead_letters.items()
        for v in letters
        if b"disagrees" in v
    }
    assert len(refused) == len(refused_lines(subs))
    event(f"refused: {bool(refused)}")


@st.composite
def grouped_journeys(draw, sites: list[str]) -> tuple[list[dict], list[dict], dict[str, str]]:
    """`test_routing_moves.mobile`'s subscribers and profiles that move while they
    change, many of the subscriptions in groups (one policy a group) or with dwell
    and margins."""
    subs, profiles, homes = draw(mobile(sites))
    groups = {g: draw(policies()) for g in ("g1", "g2")}
    for rec in subs:
        if rec["op"] != "subscribe" or not draw(st.integers(0, 2)):
            continue
        if draw(st.integers(0, 3)):
            group = draw(st.sampled_from(sorted(groups)))
            rec["delivery"] = {"group": group, **groups[group]}
            if rec["delivery"]["mode"] == "bestcast":
                rec["delivery"]["near"] = {"x": draw(st.sampled_from((0, 3, 6)))}
        if draw(st.booleans()):
            rec["dwell_ms"] = draw(st.sampled_from((0, 2, 9)))
        if draw(st.booleans()):
            rec["exit_dwell_ms"] = draw(st.sampled_from((0, 2, 9)))
        if rec.get("relation") != "covers" and draw(st.booleans()):
            rec["margin"] = draw(st.sampled_from((0.5, {"x": 2.0})))
    return subs, profiles, homes


@MOVES_PROPS
@given(st.data(), small_trees(), ROUTINGS, st.integers(0, 2**16))
def test_grouped_subscribers_who_move_are_followed_as_one_matcher(data, tree, routing, seed):
    """ROUTING §5 with members: a subscriber's subscriptions stay at their space's
    selecting site when she moves; her records go to her old site before the move
    and to her new one from it. All records together are one matcher's (which
    never saw a move), in its order; each subscriber read as `--follow-moves`
    reads her sites' streams sees hers."""
    order, links = tree
    subs, profiles, homes = data.draw(grouped_journeys(order))
    net = parse_network(network_toml(list(order), links, *routing, 3))
    out = replay_network(net, items_of(subs, profiles), Delays(seed=seed))
    assert not out.dead_letters, out.dead_letters
    dwell = max((r.get("dwell_ms", 0) + r.get("exit_dwell_ms", 0) for r in subs), default=0)
    expected = one_matcher_without_moves(subs, profiles)
    got = [
        {k: v for k, v in m.items() if k != "site"} for m in out.matches if m["event"] != "moved"
    ]
    assert [encode(m) for m in got] == [encode(m) for m in expected]
    assert_each_follows(site_streams(out.result), expected, homes)
    event(f"moved records > 0: {any(m['event'] == 'moved' for m in out.matches)}")
    event(f"timers: {dwell > 0}")


@SITE_PROPS
@given(st.data(), small_trees(), ROUTINGS, st.integers(0, 2**16))
def test_grouped_subscribers_who_move_across_streaming_sites(data, tree, routing, seed):
    """The same through the sites' streaming jobs, batches crashed and run again: all
    sites' records, duplicates dropped, are one matcher's. (Each subscriber's
    order at her sites is not checked: a home writes what a selecting site made
    for her as it arrives, docs/DELIVERY.md §9.)"""
    order, links = tree
    subs, profiles, _ = data.draw(grouped_journeys(order))
    rank = {name: i for i, name in enumerate(order)}
    subs.sort(key=lambda r: (r["ts"], rank[r["site"]]))
    profiles.sort(key=lambda r: (r["ts"], rank[r["site"]]))
    net = parse_network(with_bootstraps(network_toml(list(order), links, *routing), order))
    written = run_network(net, subs, profiles, random.Random(seed))
    assert not any(written.dead_letters.values()), written.dead_letters
    expected = one_matcher_without_moves(subs, profiles)
    made = {m for m in written.all_matches() if json.loads(m)["event"] != "moved"}
    assert sorted(made) == sorted({encode(e) for e in expected})


# -- named cases ---------------------------------------------------------------


def member(ident, site, ts=1, where="x < 5", **delivery) -> dict:
    return {
        "op": "subscribe",
        "id": ident,
        "space": "A",
        "subscriber": f"u-{ident}",
        "where": where,
        "ts": ts,
        "site": site,
        **({"delivery": delivery} if delivery else {}),
    }


def publish(ident, ts, x, site="a", **more) -> dict:
    return {
        "op": "publish",
        "id": ident,
        "space": "A",
        "attrs": {"x": x},
        "ts": ts,
        "site": site,
        **more,
    }


def test_a_manycast_group_with_members_at_two_sites_chooses_k_in_all():
    """k = 1, one member at each of two sites, one profile that both hold with: one
    matcher sends one `match`; so does the network (each site choosing k of its
    own members sent two)."""
    subs = [
        member("s1", "a", group="g", mode="manycast", k=1),
        member("s2", "b", group="g", mode="manycast", k=1),
    ]
    for routing in ("flooding", "covering"):
        out, expected = assert_equivalent(two_sites(routing), subs, [publish("p", 10, 1)])
        assert [(m["subscription_id"], m["site"]) for m in out.matches] == [("s1", "a")]


def test_a_chosen_member_that_leaves_is_replaced_by_one_at_another_site():
    subs = [
        member("s1", "a", group="g", mode="anycast"),
        member("s2", "b", group="g", mode="anycast"),
        {"op": "unsubscribe", "id": "s1", "space": "A", "ts": 20, "site": "a"},
    ]
    out, expected = assert_equivalent(
        two_sites("covering"), subs, [publish("p", 10, 1, valid_to=99)]
    )
    assert [(m["subscription_id"], m["reason"], m["site"]) for m in out.matches] == [
        ("s1", "new-profile", "a"),
        ("s1", "unsubscribe", "a"),
        ("s2", "replaced", "b"),
    ]


def test_a_member_that_disagrees_is_a_dead_letter_of_its_own_site():
    subs = [
        member("s1", "a", group="g", mode="manycast", k=2),
        member("s2", "b", group="g", mode="manycast", k=3),
    ]
    out, _ = assert_equivalent(two_sites("covering"), subs, [publish("p", 10, 1)])
    (letter,) = out.dead_letters
    assert letter["site"] == "b" and "disagrees" in letter["reason"]


def test_a_dwell_fires_at_the_subscribers_site_and_a_margin_routes_what_it_holds():
    """The pair holds within the margin at x = 5.5 (not by the filter): the profile's
    versions must reach the site that holds the subscription, or its `update` and
    final `unmatch` are lost."""
    subs = [{**member("s1", "b", where="x BETWEEN 0 AND 5"), "dwell_ms": 3, "margin": 1}]
    profiles = [
        publish("p", 10, 4, valid_to=99),
        publish("p", 20, 5.5, valid_to=99),
        publish("p", 30, 5.7, valid_to=99),
        publish("p", 40, 9, valid_to=99),
    ]
    for routing in ("simple", "covering", "merging"):
        _, expected = assert_equivalent(two_sites(routing), subs, profiles)
        assert [(m["event"], m["ts"]) for m in expected] == [
            ("match", 13),
            ("update", 20),
            ("update", 30),
            ("unmatch", 40),
        ]


def test_a_subscription_that_joins_a_group_and_leaves_it_again():
    """Plain at its home, then a member (held at the space's selecting site), then
    plain again: each step's records are one matcher's, `changed`, in its order."""
    net = parse_network('links = [["a", "b"], ["b", "c"]]\n[sites.a]\n[sites.b]\n[sites.c]\n')
    selecting = net.selecting_site("A")
    home = next(n for n in ("a", "b", "c") if n != selecting)
    subs = [
        member("s1", home, ts=1),
        member("s1", home, ts=20, group="g", mode="anycast"),
        member("s2", selecting, ts=25, group="g", mode="anycast"),
        member("s1", home, ts=30),
    ]
    profiles = [publish("p", 10, 1, valid_to=99), publish("q", 10, 2, valid_to=99)]
    out, expected = assert_equivalent(net, subs, profiles)
    assert [(m["subscription_id"], m["event"], m["reason"]) for m in expected] == [
        ("s1", "match", "new-profile"),
        ("s1", "match", "new-profile"),
        ("s1", "unmatch", "changed"),
        ("s1", "unmatch", "changed"),
        ("s1", "match", "changed"),
        ("s1", "match", "changed"),
        ("s1", "unmatch", "changed"),
        ("s1", "unmatch", "changed"),
        ("s2", "match", "replaced"),
        ("s2", "match", "replaced"),
        ("s1", "match", "changed"),
        ("s1", "match", "changed"),
    ]
    assert {m["site"] for m in out.matches if m["subscription_id"] == "s1"} == {home}


def test_a_member_that_ended_comes_back_plain_at_the_selecting_site():
    """u's s1 a member at her home, expired there; she moves to the space's selecting
    site and subscribes s1 again, plain: that site is her home now, and the
    record's own `match` is written there, not sent to the member's old home (s0
    plain: what she moves with)."""
    net = two_sites("covering")
    selecting = net.selecting_site("A")
    home = "a" if selecting == "b" else "b"
    subs = [
        member("s0", home) | {"subscriber": "u"},
        member("s1", home, group="g", mode="anycast") | {"subscriber": "u", "valid_to": 2},
        {"op": "move", "subscriber": "u", "from": home, "ts": 5, "site": selecting},
        member("s1", selecting, ts=6) | {"subscriber": "u"},
    ]
    profiles = [publish("p", 1, 1, valid_to=99)]
    out = replay_network(net, items_of(subs, profiles))
    assert not out.dead_letters, out.dead_letters
    expected = one_matcher_without_moves(subs, profiles)
    assert [(m["subscription_id"], m["event"], m["ts"]) for m in expected] == [
        ("s0", "match", 1),
        ("s1", "match", 1),
        ("s1", "unmatch", 2),
        ("s1", "match", 6),
    ]
    got = [(m["event"], m["ts"], m["site"]) for m in out.matches if m["event"] != "moved"]
    assert got == [
        ("match", 1, home),
        ("match", 1, home),
        ("unmatch", 2, home),
        ("match", 6, selecting),
    ]
    assert_each_follows(site_streams(out.result), expected, {"u": home})


def test_a_plain_subscription_refused_as_a_member_is_the_case_left_open():
    """s1 plain, then a member of g, whose member s0 has another policy: one matcher
    refuses the record and keeps s1 plain, so s1 holds with p. The network refuses
    it too (one dead letter, at s1's site), but s1's home has ended the plain
    version at that ts (docs/DELIVERY.md §9, "A group that disagrees"): the one
    record it lacks is s1's. With s0's policy, the two are one."""
    profiles = [publish("p", 2, 1)]
    for mode in ("faircast", "anycast"):
        subs = [
            member("s0", "a", group="g", mode=mode, k=1),
            member("s1", "a", ts=2),
            member("s1", "a", ts=2, group="g", mode="anycast"),
        ]
        out = replay_network(two_sites("covering"), items_of(subs, profiles))
        expected = one_matcher_without_moves(subs, profiles)
        got = [{k: v for k, v in m.items() if k != "site"} for m in out.matches]
        if mode == "faircast":
            assert [m["subscription_id"] for m in expected] == ["s1", "s0"]
            assert refused_lines(subs) == {3}
            assert [d["source"]["line"] for d in out.dead_letters] == [3]
            assert got == expected[1:]
            # (the property tests give such a record an id of its own: then they are one)
            subs = own_ids_for_refused(subs)
            assert [r["id"] for r in subs] == ["s0", "s1", "r3"]
            assert_equivalent(two_sites("covering"), subs, profiles)
        else:  # (anycast: s0 or s1 holds with p, one matcher's choice)
            assert got == expected and not out.dead_letters


# -- the link records ------------------------------------------------------------


def test_member_and_delivered_records_cross_a_link_as_they_were():
    key = Key(5, 2, (0, 3), 0)
    sub = json.dumps(member("s1", "a", group="g", mode="anycast") | {"site": None})
    messages = [
        Member("subscribe", "A", ("s1",), "a", "b", key, None, True, ["raw", "t", 0, 3]),
        Member("rehome", "A", ("s1", "s2"), "c", "b", key),
        Delivered("a", {"event": "match", "subscription_id": "s1"}),
        Delivered("a", None, 7, "delivery disagrees"),
    ]
    assert sub
    for m in messages:
        assert wire.decode(wire.encode(m)) == m


def test_seeds_change_nothing():
    """The records are the same whatever the delays (only the latency changes)."""
    rng = random.Random(3)
    subs = [
        member(f"s{i}", rng.choice("ab"), ts=i, group="g", mode="faircast", k=2) for i in range(6)
    ]
    profiles = [publish(f"p{i}", 10 + i, rng.random() * 6, site=rng.choice("ab")) for i in range(8)]
    runs = [
        assert_equivalent(two_sites("covering"), subs, profiles, Delays(seed=s))[0] for s in (1, 2)
    ]
    assert runs[0].matches == runs[1].matches


# -- state written by an earlier tsm ---------------------------------------------------


def test_a_site_state_of_format_5_goes_on_with_groups():
    """A site job's state written before delivery groups crossed sites (format 5:
    a site of one subscription `s` and one profile `p`, `tests/fixtures/snapshots/
    site-format5.zst`) loads upgraded and holds members at its selecting site: its
    records from then on are one matcher's."""
    job = load_snapshot((FIXTURES / "site-format5.zst").read_bytes())
    topics = site_topics(parse_network(SOLO), "solo")
    first = [
        {
            "op": "subscribe",
            "id": "s",
            "space": "v",
            "subscriber": "ann",
            "where": "x < 5",
            "ts": 1000,
        },
        {"op": "publish", "id": "p", "space": "v", "attrs": {"x": 1}, "ts": 1500, "valid_to": None},
    ]
    group = {"group": "g", "mode": "manycast", "k": 1}
    later = [
        {
            "op": "subscribe",
            "id": "t",
            "space": "v",
            "subscriber": "bo",
            "where": "x < 3",
            "ts": 3000,
            "delivery": group,
        },
        {
            "op": "subscribe",
            "id": "u",
            "space": "v",
            "subscriber": "cy",
            "where": "x < 4",
            "ts": 3001,
            "delivery": group,
        },
        {"op": "publish", "id": "q", "space": "v", "attrs": {"x": 2}, "ts": 3500, "valid_to": None},
    ]
    rows = [
        KafkaRow(
            topics.topics.subscriptions, 0, 1, None, None, json.dumps(later[0]).encode(), 4000
        ),
        KafkaRow(
            topics.topics.subscriptions, 0, 2, None, None, json.dumps(later[1]).encode(), 4000
        ),
        KafkaRow(topics.topics.profiles, 0, 1, None, None, json.dumps(later[2]).encode(), 4000),
    ]
    made = (
        job.step(rows).matches
        + job.step([KafkaRow(None, None, None, None, None, None, 9000)]).matches
    )
    subs = [r for r in first + later if r["op"] == "subscribe"]
    profiles = [r for r in first + later if r["op"] == "publish"]
    expected = one_matcher(subs, profiles)
    assert [value for _, value in made] == expected[1:]
    assert len(expected) == 4  # (s-p, t-p, s-q, t-q: u is never chosen)


def test_a_batch_run_again_sends_its_members_and_records_once():
    """A member at site b, whose space (D) selects site a, goes to a on the link; a's
    records for it come back on the link. Each batch on each side runs twice from
    the state before (a crash in its commit), writing its link records twice with
    the same numbers: each receiver applies them once, so the group holds one
    member and its subscriber's record is written once."""
    net = parse_network(with_bootstraps(TWO, ["a", "b"]))
    assert net.selecting_site("D") == "a"
    topics = {n: site_topics(net, n) for n in ("a", "b")}
    jobs = {n: SiteJob(net, n, topics[n]) for n in ("a", "b")}
    for name in ("a", "b"):
        here = topics[name].topics
        ends = {(here.subscriptions, 0): int(name == "b"), (here.profiles, 0): int(name == "a")}
        start = control_start(ends)
        jobs[name].step([KafkaRow(topics[name].control, 0, 0, None, None, start, None)])
    member = {
        "op": "subscribe",
        "id": "m",
        "space": "D",
        "subscriber": "bo",
        "where": "x < 5",
        "ts": 10,
        "delivery": {"group": "g", "mode": "anycast"},
    }
    profile = {"op": "publish", "id": "p", "space": "D", "attrs": {"x": 1}, "ts": 20}
    inbox = {"a": [], "b": []}  # link records waiting to be read, per receiver
    written = {"a": [], "b": []}
    relayed = []  # the member records written on the link

    def twice(name: str, rows: list) -> None:
        """A batch that crashes after writing all it made, then runs again."""
        for job in (load_snapshot(dump_snapshot(jobs[name])), jobs[name]):
            out = job.step(rows)
            written[name] += [value for _, value in out.matches]
            for neighbour, records in out.links.items():
                inbox[neighbour] += records
                relayed.extend(wire.decode(v) for _, v in records if b'"type":"member"' in v)
        jobs[name] = load_snapshot(dump_snapshot(jobs[name]))

    def link_rows(name: str) -> list:
        source = topics[name].inbound["b" if name == "a" else "a"]
        rows = [KafkaRow(source, 0, n, None, k, v, None) for n, (k, v) in enumerate(inbox[name])]
        inbox[name] = []
        return rows

    subs_b = topics["b"].topics.subscriptions
    twice("b", [KafkaRow(subs_b, 0, 0, None, None, json.dumps(member).encode(), 30)])
    profiles_a = topics["a"].topics.profiles
    row = KafkaRow(profiles_a, 0, 0, None, None, json.dumps(profile).encode(), 30)
    for _ in range(6):
        twice("a", link_rows("a") + ([row] if row else []))
        row = None
        twice("b", link_rows("b"))
    assert [m.op for m in relayed] == ["subscribe", "subscribe"]  # (written twice)
    assert relayed[0] == relayed[1] and jobs["a"].site.hosted.source.held_sub("D", "m")
    matches = [json.loads(v) for v in written["b"]]
    assert {(m["subscription_id"], m["profile_id"], m["event"]) for m in matches} == {
        ("m", "p", "match")
    }
    assert len(matches) == 2  # (b's own batch wrote it twice: one copy per run, one match_id)
    assert written["a"] == []


TWO = 'routing = "covering"\nlinks = [["a", "b"]]\n[sites.a]\n[sites.b]\n'
