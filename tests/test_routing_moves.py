"""Mobility (ROUTING §5): a subscriber reading as `--follow-moves` reads sees what she
would see in one matcher that never saw a move.

Random trees of 1-7 sites, every strategy, random delays and idle times;
subscribers and profiles that move at random times, several times each, back
and forth, between random sites, while their subscriptions and profiles
change, end and expire (churn). Each client's records go to the site it is
at when they happen (a record at the ts of a move goes to the new site). The
reference is one matcher given every record but the moves; each subscriber's
records read from the sites' own streams, switching at her `moved` records
(`connectors.follow_moves`), must equal hers in the reference, record for
record (`match_id` included) and in order within each space. The network's
records of all sites together must equal the reference's, in order, as
without moves, so that no pair is matched again (nor lost) because its
subscriber or profile moved. Per pair, the events also agree with the
spec's oracle (`tests.oracle`).

Named cases: each kind of bad move is a dead letter with its reason; a moved
profile keeps its pairs over a path of three sites and its next version
reaches a site that held it; a subscriber's pair with a profile that
expires just before the move ends at the old site.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest
from hypothesis import Phase, event, given, settings
from hypothesis import strategies as st

from benchmarks.placement import network_toml
from connectors.follow_moves import ListReader, follow_moves
from matcher.engine import Engine, Input
from matcher.events import encode
from matcher.records import Source
from matcher.routing.network import parse_network
from matcher.routing.offline import Delays
from matcher.routing.replay import replay_network, site_streams
from tests import oracle
from tests.test_routing_equivalence import ROUTINGS, WIDE, trees

PROPS = settings(
    max_examples=int(os.environ.get("TSM_EXAMPLES", 60)),
    deadline=None,
    print_blob=True,
    phases=[p for p in Phase if p != Phase.shrink or not os.environ.get("TSM_NO_SHRINK")],
)
BASE = 1_700_000_000_000
SPACES = ("A", "B")
IGNORED = ("move", "advertise", "unadvertise")  # by the one matcher


@st.composite
def journeys(draw, sites: list[str]) -> tuple[str, list[tuple[int, str]]]:
    """A client's home site and its planned moves (ts offset, site), each to another."""
    home = draw(st.sampled_from(sites))
    moves: list[tuple[int, str]] = []
    if len(sites) > 1:
        for ts in sorted(draw(st.sets(st.integers(1, 70), max_size=4))):
            here = moves[-1][1] if moves else home
            moves.append((ts, draw(st.sampled_from([s for s in sites if s != here]))))
    return home, moves


def site_at(home: str, moves: list[tuple[int, str]], ts: int) -> str:
    """Where a client is at ts (a move at ts is done before anything else at ts)."""
    for at, to in moves:
        if at <= ts:
            home = to
    return home


def fields(draw, rec: dict, *, profile: bool, n: int) -> dict:
    ts = rec["ts"]
    if draw(st.booleans()):
        rec["valid_from"] = ts + draw(st.integers(-5, 10))
    choice = draw(st.integers(0, 3))
    if choice:
        start = rec.get("valid_from", ts)
        rec["valid_to"] = None if choice == 1 else max(start, ts - 3) + draw(st.integers(0, 40))
    if profile:
        return rec | {"attrs": draw(oracle.profile_attrs()), "payload": {"n": n}}
    dnf = draw(st.one_of(oracle.predicates(), st.sampled_from(WIDE)))
    out = rec | draw(oracle.subscription_fields(dnf))
    out["subscriber"] = rec["subscriber"]
    return out


@st.composite
def mobile(draw, sites: list[str]) -> tuple[list[dict], list[dict], dict[str, str]]:
    """Subscribers and profiles that move while they change (see the module docstring);
    the subscriptions, the profiles (moves among both) and each subscriber's home."""
    subs: list[dict] = []
    profiles: list[dict] = []
    homes = {}
    n = 0
    for u in range(draw(st.integers(1, 3))):
        who = f"u{u}"
        home, moves = draw(journeys(sites))
        homes[who] = home
        # one subscription lives throughout, so that each move has something to move
        anchor = {"op": "subscribe", "id": f"{who}-a", "space": draw(st.sampled_from(SPACES))}
        anchor |= {"subscriber": who, "ts": BASE, "site": home}
        subs.append(fields(draw, anchor, profile=False, n=0) | {"valid_to": None})
        for _ in range(draw(st.integers(0, 8))):
            ts = draw(st.integers(0, 80))
            rec = {"id": f"{who}-{draw(st.integers(0, 2))}", "space": draw(st.sampled_from(SPACES))}
            rec |= {"ts": BASE + ts, "site": site_at(home, moves, ts), "subscriber": who}
            if draw(st.integers(0, 3)) == 0:
                subs.append({"op": "unsubscribe", **rec})
            else:
                subs.append(fields(draw, {"op": "subscribe", **rec}, profile=False, n=0))
        for ts, to in moves:
            subs.append(
                {
                    "op": "move",
                    "subscriber": who,
                    "from": site_at(home, moves, ts - 1),
                    "ts": BASE + ts,
                    "site": to,
                }
            )
    for p in range(draw(st.integers(1, 4))):
        ident, space = f"p{p}", draw(st.sampled_from(SPACES))
        home, planned = draw(journeys(sites))
        times = sorted(draw(st.lists(st.integers(0, 80), min_size=1, max_size=6)))
        here, live_to, kept = home, None, []  # live_to: the live version's valid_to
        events = [(ts, 1, "record") for ts in times] + [(ts, 0, to) for ts, to in planned]
        for ts, order, what in sorted(events):
            if order == 0:  # a move: only while the profile is live (else it is refused)
                if live_to is not None and live_to >= BASE + ts and what != here:
                    kept.append((ts, what))
                    profiles.append(
                        {"op": "move", "id": ident, "space": space, "from": here}
                        | {"ts": BASE + ts, "site": what}
                    )
                    here = what
                continue
            n += 1
            rec = {"id": ident, "space": space, "ts": BASE + ts, "site": here}
            if draw(st.integers(0, 4)) == 0:
                profiles.append({"op": "retract", **rec})
                live_to = None
                continue
            rec = fields(draw, {"op": "publish", **rec}, profile=True, n=n)
            profiles.append(rec)
            end = rec.get("valid_to", rec.get("valid_from", rec["ts"]))
            live_to = float("inf") if end is None else end
    return subs, profiles, homes


def items_of(subs: list[dict], profiles: list[dict]) -> list[Input]:
    return [
        Input("subscription", json.dumps(r), Source(file="subs", line=i))
        for i, r in enumerate(subs, start=1)
    ] + [
        Input("profile", json.dumps(r), Source(file="profiles", line=i))
        for i, r in enumerate(profiles, start=1)
    ]


def one_matcher(subs: list[dict], profiles: list[dict], until: int | None = None) -> list[dict]:
    """One matcher's records for every record but the moves (same lines as the
    network's input: a position is a line), to the input's largest ts (or to
    `until`, a later watermark)."""
    items = [i for i in items_of(subs, profiles) if json.loads(i.raw)["op"] not in IGNORED]
    engine = Engine()
    out = engine.process_batch(items)
    # (time passes with the moves too: the end's watermark is the input's largest ts)
    out += engine.advance(until if until is not None else largest_ts(subs + profiles))
    return [o.value for o in out if o.topic == "matches"]


def largest_ts(records: list[dict]) -> int:
    """The input's largest ts: every record's, moves' and advertisements' too, as one
    matcher's watermark counts each record it reads."""
    return max([oracle.to_ms(r["ts"]) for r in records] or [0])


def by_space(records: list[dict]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = defaultdict(list)
    for r in records:
        out[r["space"]].append(encode({k: v for k, v in r.items() if k != "site"}))
    return dict(out)


def assert_each_follows(streams: dict[str, list[dict]], expected: list[dict], homes) -> None:
    """Each subscriber's records, read from the sites' `streams` as `--follow-moves`
    reads them (records written twice dropped, as a reader drops duplicates), equal
    hers in one matcher's `expected`, in order within each space."""
    reader = ListReader(streams)
    for who, home in homes.items():
        read = {encode(r): r for r in follow_moves(who, home, reader)}  # (the first of each)
        mine = [e for e in expected if e["subscriber"] == who]
        assert by_space(list(read.values())) == by_space(mine), who


def advertise_everything(profiles: list[dict]) -> None:
    """The sites that publish advertise all they publish (from before the first
    record); the others advertise nothing."""
    for site in {r["site"] for r in profiles if r["op"] == "publish"}:
        for space in SPACES:
            ad = {"op": "advertise", "id": "all", "space": space, "where": "TRUE"}
            profiles.append(ad | {"ts": BASE - 1, "site": site})


def assert_follows(net, subs, profiles, homes, delays=None):
    """The properties of the module docstring; the network's output."""
    out = replay_network(net, items_of(subs, profiles), delays)
    assert not out.dead_letters, out.dead_letters
    expected = one_matcher(subs, profiles)
    matches = [m for m in out.matches if m["event"] != "moved"]
    got = [{k: v for k, v in m.items() if k != "site"} for m in matches]
    assert [encode(m) for m in got] == [encode(m) for m in expected]
    assert_each_follows(site_streams(out.result), expected, homes)
    # per pair, as the spec's oracle has it (what its events say, not their ids)
    lines = [
        ("subscription" if i < len(subs) else "profile", rec, i)
        for i, rec in enumerate(subs + profiles)
        if rec["op"] not in IGNORED
    ]
    engine = oracle.OracleEngine()
    reference, _ = engine.process_batch(
        [(k, r, (0 if k == "subscription" else 1, i)) for k, r, i in lines]
    )
    engine.mark = largest_ts(subs + profiles)
    reference += engine.process_batch([])[0]
    assert oracle.by_pair(expected) == oracle.by_pair(reference)
    return out


@PROPS
@given(
    st.data(),
    trees(),
    ROUTINGS,
    st.sampled_from((0, 3, 5000)),
    st.integers(0, 2**16),
    st.sampled_from(((1.0, 5.0), (1.0, 200.0), (50.0, 50.0))),
)
def test_a_subscriber_following_moves_sees_what_one_matcher_shows(
    data, tree, routing, idle, seed, base
):
    order, links = tree
    subs, profiles, homes = data.draw(mobile(order))
    with_adverts = data.draw(st.booleans())
    if with_adverts:
        advertise_everything(profiles)
    if data.draw(st.booleans()):
        profiles.sort(key=lambda r: r["ts"])
    toml = network_toml(list(order), links, *routing, idle, advertisements=with_adverts)
    net = parse_network(toml)
    out = assert_follows(net, subs, profiles, homes, Delays(seed=seed, base_ms=base))
    moved = [m for m in out.matches if m["event"] == "moved"]
    event(f"moved records > 0: {bool(moved)}")
    event(f"profile moves > 0: {any(r['op'] == 'move' for r in profiles)}")
    event(f"handover records > 0: {out.stats()['total']['handover_records'] > 0}")


# -- named cases -------------------------------------------------------------------


def line_of_three(routing: str = "covering") -> object:
    return parse_network(
        f'routing = "{routing}"\nlinks = [["a", "b"], ["b", "c"]]\n'
        "[sites.a]\n[sites.b]\n[sites.c]\n"
    )


def sub(ident, ts, where, site, subscriber="alice", **more) -> dict:
    return {
        "op": "subscribe",
        "id": ident,
        "space": "A",
        "subscriber": subscriber,
        "where": where,
        "ts": BASE + ts,
        "site": site,
        **more,
    }


def pub(ident, ts, x, site, **more) -> dict:
    return {
        "op": "publish",
        "id": ident,
        "space": "A",
        "attrs": {"x": x},
        "ts": BASE + ts,
        "site": site,
        "valid_to": BASE + 500,
        "payload": {"x": x},
        **more,
    }


def move(ts, origin, site, **client) -> dict:
    return {"op": "move", **client, "from": origin, "ts": BASE + ts, "site": site}


def test_bad_moves_are_dead_letters_with_their_reasons():
    subs = [
        sub("s1", 0, "x > 1", "a"),
        move(10, "moon", "c", subscriber="alice"),  # unknown site
        move(11, "c", "c", subscriber="alice"),  # from itself
        move(12, "b", "c", subscriber="alice"),  # nothing of hers at b
        move(20, "a", "c", subscriber="alice"),  # fine
        move(15, "c", "b", subscriber="alice"),  # back before she got there
        move(20, "c", "b", subscriber="alice"),  # a second move at ts 20
        {"op": "move", "from": "a", "ts": BASE + 30, "site": "b"},  # no subscriber
    ]
    profiles = [
        pub("p1", 1, 2, "a", valid_to=BASE + 5),
        move(10, "a", "b", id="p1", space="A"),  # expired before the move
        move(11, "a", "b", id="p9", space="A"),  # never published
        move(12, "a", "b", id="p1", space="A", attrs={"x": 3}),  # content of its own
    ]
    out = replay_network(line_of_three(), items_of(subs, profiles))
    reasons = {(d["source"]["file"], d["source"]["line"]): d["reason"] for d in out.dead_letters}
    assert "unknown site 'moon'" in reasons["subs", 2]
    assert "to itself" in reasons["subs", 3]
    assert "nothing to move" in reasons["subs", 4] and "'b'" in reasons["subs", 4]
    assert ("subs", 5) not in reasons
    assert "a later ts than the move there" in reasons["subs", 6]
    assert "moves twice at ts" in reasons["subs", 7]
    assert "'subscriber'" in reasons["subs", 8]
    assert "nothing to move" in reasons["profiles", 2]
    assert "nothing to move" in reasons["profiles", 3]
    assert "'attrs'" in reasons["profiles", 4]
    assert {d["site"] for d in out.dead_letters} <= {"b", "c"}
    moved = [m for m in out.matches if m["event"] == "moved"]
    assert moved == [
        {"event": "moved", "subscriber": "alice", "to": "c", "ts": BASE + 20, "site": "a"}
    ]


@pytest.mark.parametrize("routing", ["simple", "covering", "merging", "flooding"])
def test_a_moved_profile_keeps_its_pairs_and_its_next_version_reaches_them(routing):
    """The ferry publishes at a, moves over b to c, then changes: the subscribers at a
    and b that held it get `update`/`unmatch` from c's version, and none is matched
    again by the move. One at c that subscribes after the move meets it there."""
    subs = [
        sub("s-a", 0, "x BETWEEN 0 AND 5", "a"),
        sub("s-b", 0, "x > 1", "b", subscriber="bob"),
        sub("s-c", 30, "x < 10", "c", subscriber="carol"),
    ]
    profiles = [
        pub("ferry", 5, 2, "a"),
        move(20, "a", "c", id="ferry", space="A"),
        pub("ferry", 40, 7, "c"),
        pub("ferry", 50, 3, "c"),
        {"op": "retract", "id": "ferry", "space": "A", "ts": BASE + 60, "site": "c"},
    ]
    homes = {"alice": "a", "bob": "b", "carol": "c"}
    out = assert_follows(line_of_three(routing), subs, profiles, homes)
    sites = [(m["subscriber"], m["event"], m["site"]) for m in out.matches]
    assert ("alice", "unmatch", "a") in sites and ("carol", "match", "c") in sites


def test_a_subscription_ends_where_it_was_when_its_pair_expires_before_the_move():
    """The profile's validity ends at 19, the move is at 20: the `expired` record is
    the old site's, before its `moved`; the new site makes none."""
    subs = [sub("s1", 0, "x > 1", "a"), move(20, "a", "c", subscriber="alice")]
    profiles = [pub("p", 5, 2, "b", valid_to=BASE + 19), pub("q", 25, 3, "b")]
    out = assert_follows(line_of_three(), subs, profiles, {"alice": "a"})
    streams = site_streams(out.result)
    assert [e["event"] for e in streams["a"]] == ["match", "unmatch", "moved"]
    assert [(e["event"], e["profile_id"]) for e in streams["c"]] == [("match", "q")]


def test_a_subscriber_who_moves_back_and_forth_is_followed():
    subs = [
        sub("s1", 0, "x > 1", "a"),
        move(10, "a", "c", subscriber="alice"),
        sub("s2", 12, "x < 4", "c"),
        move(20, "c", "a", subscriber="alice"),
        {"op": "unsubscribe", "id": "s1", "space": "A", "ts": BASE + 25, "site": "a"},
        move(30, "a", "b", subscriber="alice"),
        move(40, "b", "c", subscriber="alice"),
    ]
    profiles = [pub("p", 5, 2, "b"), pub("p", 15, 3, "b"), pub("q", 35, 2.5, "a")]
    out = assert_follows(line_of_three(), subs, profiles, {"alice": "a"})
    assert [m["to"] for m in out.matches if m["event"] == "moved"] == ["c", "a", "b", "c"]


def test_a_profile_moved_where_nothing_advertises_it_takes_its_box_along():
    """With advertisements, the ferry moves to c, whose advertisement does not cover
    it: c advertises its box while it holds it, so bob's interest at b reaches c and
    the ferry's next version there ends his pair."""
    net = parse_network(
        'routing = "covering"\nadvertisements = true\nlinks = [["a", "b"], ["b", "c"]]\n'
        "[sites.a]\n[sites.b]\n[sites.c]\n"
    )
    subs = [sub("s-b", 0, "x < 4", "b", subscriber="bob")]
    advert = {"op": "advertise", "id": "ad", "space": "A", "ts": BASE - 1}
    profiles = [
        advert | {"where": "TRUE", "site": "a"},
        advert | {"where": "x > 5", "site": "c"},
        pub("ferry", 5, 2, "a"),
        move(20, "a", "c", id="ferry", space="A"),
        pub("ferry", 40, 7, "c"),
    ]
    out = assert_follows(net, subs, profiles, {"bob": "b"})
    assert [m["event"] for m in out.matches] == ["match", "unmatch"]


def test_the_moves_example_follows_the_ferry_and_the_commuter():
    """examples/network/moves, as `tsm replay --network` runs it (a subprocess)."""
    from tests.test_replay import EXAMPLES, replay

    folder = EXAMPLES / "network" / "moves"
    files = ("--subscriptions", folder / "subscriptions.jsonl", "--profiles")
    done = replay("--network", folder / "net.toml", *files, folder / "profiles.jsonl")
    assert done.returncode == 0, done.stderr.decode()
    records = [json.loads(line) for line in done.stdout.splitlines()]
    maria = [(r["event"], r["site"]) for r in records if r["subscriber"] == "maria"]
    assert maria == [
        ("match", "centre"),
        ("match", "centre"),
        ("update", "harbour"),
        ("unmatch", "harbour"),
        ("update", "island"),
        ("unmatch", "island"),
        ("moved", "centre"),
        ("moved", "harbour"),
    ]
    ferry = [(r["subscriber"], r["event"]) for r in records if r.get("profile_id") == "ferry-1"]
    assert ("harbour-ops", "unmatch") in ferry and ("island-pier", "match") in ferry
    assert b"1 dead letters" in done.stderr and b"moves" in done.stderr
    subs = [json.loads(line) for line in (folder / "subscriptions.jsonl").read_text().splitlines()]
    profiles = [json.loads(line) for line in (folder / "profiles.jsonl").read_text().splitlines()]
    subs = [r for r in subs if r.get("subscriber") != "nobody"]
    homes = {"maria": "centre", "harbour-ops": "harbour", "island-pier": "island"}
    net = parse_network((folder / "net.toml").read_text())
    assert_follows(net, subs, profiles, homes)


def test_asks_and_handovers_read_twice_are_answered_and_taken_once():
    """A site that restarts may send its asks and handovers again: the same messages."""
    from matcher.routing import wire
    from matcher.routing.site import Site

    net = line_of_three()
    records = items_of(
        [sub("s1", 0, "x > 1", "a"), move(20, "a", "b", subscriber="alice")],
        [pub("p", 5, 2, "a")],
    )
    from matcher.records import decode
    from matcher.routing.moves import decode_move, move_key
    from matcher.routing.order import record_key

    sites = {n: Site(n, net) for n in net.names}
    inputs: dict[str, list] = {n: [] for n in net.names}
    for n, item in enumerate(records):
        obj = json.loads(item.raw)
        if obj["op"] == "move":
            rec = decode_move(item.kind, obj, item.source, None)
            key = move_key(rec.ts, item.kind, item.source.position)
        else:
            rec = decode(item.kind, item.raw, item.source)
            key = record_key(rec.ts, item.kind, item.source.position)
        inputs[obj["site"]].append((key, rec, n))
    for n in net.names:
        sites[n].read(sorted(inputs[n], key=lambda r: r[0]), float("inf"))
    for _ in range(6):  # every site runs; each delivery arrives twice
        for name, site in sites.items():
            for (dst, plane), (messages, wm) in site.run().items():
                again = [wire.decode(wire.encode(m)) for m in messages]
                sites[dst].deliver(name, plane, again, wm)
                sites[dst].deliver(name, plane, again, wm)
    assert [e["event"] for _, e in sites["a"].matcher.markers] == []  # (not matched yet)
    for site in sites.values():
        site.matcher.finish(BASE + 20)
    assert [e for _, e in sites["a"].matcher.markers] == [
        {"event": "moved", "subscriber": "alice", "to": "b", "ts": BASE + 20}
    ]
    assert not sites["b"].local.refused and not sites["a"].local.refused
    assert "s1" in sites["b"].matcher.spaces["A"].subs


def test_profile_handovers_that_pass_a_site_out_of_order_are_taken_in_key_order():
    """Two profiles move across s1 (p0 from s3 to s0 at 1, p1 from s5 to s2 at 53);
    with these delays p1's handover passes s1 first. s1 must still take p0's move
    at 1, before p0's retract at 2: taken after it, s1 would hold p0 again, and
    u1, who comes to s1 at 36, would get an `unmatch` from p0's second retract."""
    toml = network_toml(
        ["s0", "s1", "s2", "s3", "s4", "s5", "s6"],
        [("s0", "s1"), ("s0", "s2"), ("s1", "s3"), ("s0", "s4"), ("s1", "s5"), ("s0", "s6")],
        "flooding",
        "imperfect",
        0.05,
        0,
    )
    every = {"space": "A", "filter": [[]]}
    subs = [
        {"op": "subscribe", "id": "u0-a", "subscriber": "u0", "ts": BASE, "site": "s0"} | every,
        {"op": "subscribe", "id": "u1-a", "subscriber": "u1", "ts": BASE, "site": "s5"} | every,
        move(2, "s5", "s0", subscriber="u1"),
        move(36, "s0", "s1", subscriber="u1"),
    ]
    retract = {"op": "retract", "id": "p0", "space": "A"}
    forever = {"space": "A", "attrs": {}, "valid_to": None}
    profiles = [
        {"op": "publish", "id": "p0", "ts": BASE, "site": "s3"} | forever,
        move(1, "s3", "s0", id="p0", space="A"),
        retract | {"ts": BASE + 2, "site": "s0"},
        retract | {"ts": BASE + 53, "site": "s0"},
        {"op": "publish", "id": "p1", "ts": BASE + 52, "site": "s5"} | forever,
        move(53, "s5", "s2", id="p1", space="A"),
    ]
    homes = {"u0": "s0", "u1": "s5"}
    out = assert_follows(parse_network(toml), subs, profiles, homes, Delays(0, (50.0, 50.0)))
    at_s1 = [(m["event"], m["profile_id"]) for m in out.matches if m["site"] == "s1"]
    assert at_s1 == [("match", "p1")]


@pytest.mark.parametrize("routing", ["simple", "covering"])
def test_a_version_a_move_replaces_on_its_way_is_stale_beyond_it(routing):
    """A star around s0. s1 holds p's second version (it ended a pair there); the
    third, wanted by nobody, stays at s4. p moves from s4 to s2 over s0, which
    learns the third version from the handover: s1's is stale from then on, so a
    subscription at s1 that overlaps only the second gets the third (no match)."""
    net = parse_network(
        f'routing = "{routing}"\nlinks = [["s0", "s1"], ["s0", "s2"], ["s0", "s4"]]\n'
        "[sites.s0]\n[sites.s1]\n[sites.s2]\n[sites.s4]\n"
    )
    subs = [
        sub("b", 0, "y <= 2", "s1", subscriber="bob", valid_to=BASE + 48),
        sub("c", 69, "s EXISTS", "s1", subscriber="carol"),
    ]
    profiles = [
        pub("p", 38, 1, "s4", attrs={"x": 1, "y": 1}),
        pub("p", 43, 1, "s4", attrs={"y": 5, "s": "ab"}),
        pub("p", 64, 1, "s4", attrs={"x": 5}),
        move(69, "s4", "s2", id="p", space="A"),
        pub("p", 73, 1, "s2", attrs={"s": "a"}),
    ]
    out = assert_follows(net, subs, profiles, {"bob": "s1", "carol": "s1"})
    carol = [
        (m["event"], m["reason"], m["ts"] - BASE) for m in out.matches if m["subscriber"] == "carol"
    ]
    assert carol == [("match", "changed", 73)]


@pytest.mark.parametrize("routing", ["covering", "merging"])
def test_the_filters_a_moved_one_covered_are_sent_again(routing):
    """At a, alice's wide filter covers bob's narrow one, so only hers went toward c.
    She moves to c: bob's goes out now, and c's profile in it reaches him; c's
    profile only she wants does not go to a any more."""
    subs = [
        sub("wide", 0, "x > 0", "a"),
        sub("narrow", 0, "x BETWEEN 1 AND 2", "a", subscriber="bob"),
        move(20, "a", "c", subscriber="alice"),
    ]
    profiles = [pub("p", 30, 1.5, "c"), pub("q", 31, 7, "c")]
    out = assert_follows(line_of_three(routing), subs, profiles, {"alice": "a", "bob": "a"})
    made = [(m["subscriber"], m["profile_id"], m["site"]) for m in out.matches[:-1]]
    assert made == [("bob", "p", "a"), ("alice", "p", "c"), ("alice", "q", "c")]
    links = out.stats()["links"]
    assert links["a->b"]["interest_messages"] >= 2  # hers, then his when hers left
    assert links["b->a"]["profiles_forwarded"] == 1  # p, not q


def test_a_clients_records_at_the_site_it_left_are_dead_letters():
    """From the move on, the client's records go to its new site; one sent to the old
    site is refused there (it would make records after her `moved`, which a reader
    following her never reads), until the client moves back."""
    subs = [
        sub("s1", 0, "x > 1", "a"),
        move(20, "a", "c", subscriber="alice"),
        sub("s2", 25, "x > 3", "a"),  # at the old site: refused
        move(40, "c", "a", subscriber="alice"),
        sub("s3", 45, "x > 4", "a"),  # back there: fine
    ]
    profiles = [
        pub("ferry", 5, 2, "a"),
        move(20, "a", "c", id="ferry", space="A"),
        pub("ferry", 30, 5, "a"),  # at the old site: refused
        {"op": "retract", "id": "ferry", "space": "A", "ts": BASE + 31, "site": "a"},  # too
    ]
    out = replay_network(line_of_three(), items_of(subs, profiles))
    reasons = {(d["source"]["file"], d["source"]["line"]): d["reason"] for d in out.dead_letters}
    assert set(reasons) == {("subs", 3), ("profiles", 3), ("profiles", 4)}
    assert "moved from site 'a' to site 'c' at ts" in reasons["subs", 3]
    assert "profile 'ferry'" in reasons["profiles", 3]
    kept = [r for i, r in enumerate(subs, 1) if i != 3]
    assert_follows(line_of_three(), kept, profiles[:2], {"alice": "a"})
