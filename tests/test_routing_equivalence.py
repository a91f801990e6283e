"""The network equals one matcher (ROUTING §4), on random trees, workloads and delays.

Random trees of 1-7 sites, every strategy (merging perfect and imperfect, at
several budgets), with and without advertisements (some withdrawn or
replaced), clients placed at random sites, quenching producers at random sites
(ROUTING §4: leaf sites with no subscribers, through which some publishers'
records enter), random link delays and idle times;
workloads are `tsm gen`'s four at small sizes, or random records with churn
(changes, unsubscribes that uncover filters, retracts, expiries). The union of
the sites' match records must equal, record for record and in order, those of
`tsm replay`'s one matcher given every site's input, less the publishes the
network refuses (outside its site's advertisements, decided here from the
spec), with an id used at two sites qualified by site. Each record must come
from the subscriber's own site.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from benchmarks.placement import network_toml
from benchmarks.workloads import KINDS, generate
from matcher.constraints import Atom
from matcher.engine import Engine, Input
from matcher.events import encode
from matcher.records import Source
from matcher.routing.network import parse_network
from matcher.routing.offline import Delays
from matcher.routing.replay import replay_network
from tests import oracle

PROPS = settings(
    max_examples=int(os.environ.get("TSM_EXAMPLES", 50)), deadline=None, print_blob=True
)
BASE = 1_700_000_000_000
ROUTINGS = st.sampled_from(
    [
        ("flooding", "imperfect", 0.05),
        ("simple", "imperfect", 0.05),
        ("identity", "imperfect", 0.05),
        ("covering", "imperfect", 0.05),
        ("merging", "perfect", 0.05),
        ("merging", "imperfect", 0.05),
        ("merging", "imperfect", 0.5),
        ("merging", "imperfect", 1.0),
    ]
)


@st.composite
def trees(draw) -> tuple[list[str], list[tuple[str, str]]]:
    """Site names in file order and the links of a random tree over them."""
    n = draw(st.integers(1, 7))
    names = [f"s{i}" for i in range(n)]
    links = [(names[draw(st.integers(0, i - 1))], names[i]) for i in range(1, n)]
    return draw(st.permutations(names)), links


WIDE = (
    [[]],
    [[Atom("x", ">=", 0)]],
    [[Atom("x", "<", 3)], [Atom("s", "exists")]],
    [[Atom("y", "between", (0, 5))]],
    [[Atom("x", "between", (0, 5)), Atom("y", "<=", 2)]],
)


@st.composite
def churn(draw, sites: list[str]) -> tuple[list[dict], list[dict]]:
    """Random records over a few ids and two spaces: changes, unsubscribes,
    retracts, lifetimes that end within the run."""
    subs, profiles = [], []
    for n in range(draw(st.integers(4, 40))):
        ts = BASE + draw(st.integers(0, 60))
        op = draw(
            st.sampled_from(("subscribe",) * 3 + ("unsubscribe", "publish", "publish", "retract"))
        )
        rec = {
            "op": op,
            "id": draw(st.sampled_from(("0", "1", "2", "3"))),
            "space": draw(st.sampled_from(("A", "B"))),
            "ts": ts,
            "site": draw(st.sampled_from(sites)),
        }
        if op in ("unsubscribe", "retract"):
            (subs if op == "unsubscribe" else profiles).append(rec)
            continue
        if draw(st.booleans()):
            rec["valid_from"] = ts + draw(st.integers(-5, 10))
        choice = draw(st.integers(0, 3))
        if choice == 3 and op == "publish":
            rec["valid_to"] = ts + draw(st.integers(0, 60))
        elif choice:
            start = rec.get("valid_from", ts)
            rec["valid_to"] = None if choice == 1 else start + draw(st.integers(0, 30))
        if op == "publish":
            rec |= {"attrs": draw(oracle.profile_attrs()), "payload": {"n": n}}
            profiles.append(rec)
            continue
        dnf = draw(st.one_of(oracle.predicates(), st.sampled_from(WIDE)))
        subs.append(rec | draw(oracle.subscription_fields(dnf)))
    return subs, profiles


@st.composite
def generated(draw, sites: list[str]) -> tuple[list[dict], list[dict]]:
    """One of `tsm gen`'s workloads, small, its records placed at random sites
    (an id mostly at one site, sometimes at two)."""
    kind = draw(st.sampled_from(KINDS))
    subs, profiles = generate(
        kind, draw(st.integers(0, 3)), draw(st.integers(3, 25)), draw(st.integers(3, 25))
    )
    if profiles and draw(st.booleans()):  # some subscribers come while profiles flow
        first, last = profiles[0]["ts"], profiles[-1]["ts"]
        for rec in subs:
            if draw(st.integers(0, 2)) == 0:
                rec["ts"] = rec["valid_from"] = draw(st.integers(first, last))
    home: dict[str, str] = {}
    for rec in subs + profiles:
        ident = rec["op"][0] + rec["id"]
        if ident not in home or not draw(st.integers(0, 9)):
            home[ident] = draw(st.sampled_from(sites))
        rec["site"] = home[ident]
    return subs, profiles


@st.composite
def adverts(draw, sites: list[str], churned: bool) -> list[dict]:
    """Advertisements of each site: wide and narrow ones, some withdrawn or replaced."""
    out = []
    spaces = ("A", "B") if churned else ("uniform", "nested", "siena", "tracking")
    for site in sites:
        if draw(st.integers(0, 2)):  # mostly one that admits all, early
            for space in spaces:
                out.append(
                    {
                        "op": "advertise",
                        "id": "all",
                        "space": space,
                        "where": "TRUE",
                        "ts": BASE - 1,
                        "site": site,
                    }
                )
        for _ in range(draw(st.integers(0, 3))):
            ident = draw(st.sampled_from(("a", "b")))
            ts = BASE + draw(st.integers(-5, 60))
            space = draw(st.sampled_from(spaces))
            if draw(st.integers(0, 4)) == 0:
                out.append(
                    {"op": "unadvertise", "id": ident, "space": space, "ts": ts, "site": site}
                )
                continue
            if churned and draw(st.booleans()):
                where = oracle.where_text(draw(oracle.predicates())) or "TRUE"
            else:
                where = draw(
                    st.sampled_from(
                        ("TRUE", "x BETWEEN 0 AND 500", "x >= 2", "kind = 'bus'", "s EXISTS")
                    )
                )
            out.append(
                {
                    "op": "advertise",
                    "id": ident,
                    "space": space,
                    "where": where,
                    "ts": ts,
                    "site": site,
                }
            )
    return out


def admitted(profile_records: list[tuple[int, dict]]) -> set[int]:
    """The lines of the publishes a site admits: those that an advertisement of its
    own, advertised and not withdrawn before them (§5 order), covers (ROUTING §3)."""
    keyed = sorted(profile_records, key=lambda lr: (oracle.to_ms(lr[1]["ts"]), lr[0]))
    active: dict[tuple[str, str, str], list[list]] = {}
    out = set()
    for line, rec in keyed:
        key = (rec["site"], rec["space"], rec["id"])
        if rec["op"] == "advertise":
            active[key] = oracle.dnf_of(rec)
        elif rec["op"] == "unadvertise":
            active.pop(key, None)
        elif rec["op"] == "publish":
            attrs = {n: oracle.profile_value(v) for n, v in rec.get("attrs", {}).items()}
            ads = [
                dnf
                for (site, space, _), dnf in active.items()
                if (site, space) == (rec["site"], rec["space"])
            ]
            if any(oracle.covers(conj, attrs) for dnf in ads for conj in dnf):
                out.add(line)
    return out


def qualified(records: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """ROUTING §1: an id used at two sites (one kind, one space) becomes id@site."""
    sites: dict[tuple, set[str]] = {}
    for kind, rec in records:
        sites.setdefault((kind, rec["space"], rec["id"]), set()).add(rec["site"])
    out = []
    for kind, rec in records:
        if len(sites[kind, rec["space"], rec["id"]]) > 1:
            rec = {**rec, "id": f"{rec['id']}@{rec['site']}"}
        out.append((kind, rec))
    return out


@PROPS
@given(
    st.data(),
    trees(),
    ROUTINGS,
    st.booleans(),
    st.sampled_from((0, 3, 5000)),
    st.integers(0, 2**16),
    st.sampled_from(((1.0, 5.0), (1.0, 200.0), (50.0, 50.0))),
)
def test_the_network_equals_one_matcher(data, tree, routing, with_adverts, idle, seed, base):
    order, links = tree
    churned = data.draw(st.booleans())
    subs, profiles = data.draw(churn(order) if churned else generated(order))
    ads = data.draw(adverts(order, churned)) if with_adverts else []
    profiles = profiles + ads
    if data.draw(st.booleans()):
        profiles.sort(key=lambda r: oracle.to_ms(r["ts"]))
    toml = network_toml(list(order), links, *routing, idle, advertisements=with_adverts)
    toml += data.draw(quenching(order, profiles, subs))
    net = parse_network(toml)
    out, expected = assert_equivalent(net, subs, profiles, Delays(seed=seed, base_ms=base))
    total = out.stats()["total"]
    for name in ("catch_ups", "retracts_forwarded", "false_positives", "profiles_forwarded"):
        event(f"{name} > 0: {total[name] > 0}")
    event(f"match records > 0: {bool(expected)}")
    producers = {p for p, _ in net.producers}
    caught = sum(c.catch_ups for (a, _), c in out.links.items() if a in producers)
    sent = sum(c.profiles_forwarded for (a, _), c in out.links.items() if a in producers)
    event(f"producers: {len(producers)}, sent: {sent > 0}, held back and caught up: {caught > 0}")


@st.composite
def quenching(draw, sites: list[str], profiles: list[dict], subs: list[dict]) -> str:
    """Quenching producers (ROUTING §4) at random sites, the network file's tables for
    them; the records of some of each site's ids (advertisements' too) become a
    producer's there, its own input as a leaf site with no subscribers. Sometimes a
    subscriber comes late, at a random site, wide, for what a producer holds back."""
    hosts = [draw(st.sampled_from(sites)) for _ in range(draw(st.sampled_from((0, 1, 2, 3))))]
    at: dict[str, list[str]] = {}
    for i, host in enumerate(hosts):
        at.setdefault(host, []).append(f"q{i}")
    owner: dict[tuple, str] = {}  # (an id stays with one publisher: a producer's are its own)
    for rec in profiles:
        if rec["site"] in at:
            key = (rec["site"], rec["space"], rec["id"], rec["op"] in ("advertise", "unadvertise"))
            if key not in owner:
                owner[key] = draw(st.sampled_from([rec["site"], *at[rec["site"]]]))
            rec["site"] = owner[key]
    owned = [r for r in profiles if r["site"].startswith("q") and r["op"] == "publish"]
    if owned and draw(st.booleans()):
        rec = draw(st.sampled_from(owned))
        late = {"op": "subscribe", "id": "late", "space": rec["space"], "site": rec["site"]}
        late |= {"ts": oracle.to_ms(rec["ts"]) + draw(st.integers(1, 30))}
        late |= {"site": draw(st.sampled_from(sites))}
        subs.append(late | draw(oracle.subscription_fields(draw(st.sampled_from(WIDE)))))
    return "".join(f'[producers.q{i}]\nsite = "{host}"\n' for i, host in enumerate(hosts))


def assert_equivalent(net, subs: list[dict], profiles: list[dict], delays: Delays | None = None):
    """Run the network; compare with one matcher given every site's input; return
    the network's output and the matcher's records."""
    items = [
        Input("subscription", json.dumps(r), Source(file="subs", line=i))
        for i, r in enumerate(subs, start=1)
    ] + [
        Input("profile", json.dumps(r), Source(file="profiles", line=i))
        for i, r in enumerate(profiles, start=1)
    ]
    out = replay_network(net, items, delays)

    # the one matcher: every site's input, less what the network refuses
    lines = list(enumerate(profiles, start=1))
    if net.advertisements:
        keep = admitted(lines)
    else:
        keep = {i for i, r in lines if r["op"] == "publish"}
    keep |= {i for i, r in lines if r["op"] == "retract"}
    # (an id is qualified by every record that names it, refused ones too: they were
    # sent to that site all the same)
    named = [(i, r) for i, r in lines if r["op"] not in ("advertise", "unadvertise")]
    records = qualified([("subscription", r) for r in subs] + [("profile", r) for _, r in named])
    numbered = list(enumerate(subs, start=1)) + named
    reference = [
        Input(
            kind,
            json.dumps(rec),
            Source(file="subs" if kind == "subscription" else "profiles", line=line),
        )
        for (kind, rec), (line, _) in zip(records, numbered, strict=True)
        if kind == "subscription" or line in keep
    ]
    engine = Engine()
    made = engine.process_batch(reference)
    # (its watermark counts every record of its input, those the network refuses and the
    # advertisements too: at the end it passes the largest ts of them all)
    made += engine.advance(max((oracle.to_ms(r["ts"]) for r in subs + profiles), default=0))
    expected = [o.value for o in made if o.topic == "matches"]

    got = [{k: v for k, v in m.items() if k != "site"} for m in out.matches]
    assert [encode(m) for m in got] == [encode(m) for m in expected]
    home = {(r["space"], r["id"]): r["site"] for kind, r in records if kind == "subscription"}
    assert all(m["site"] == home[m["space"], m["subscription_id"]] for m in out.matches)
    refused = {
        d["source"]["line"]
        for d in out.dead_letters
        if "outside every advertisement" in d["reason"]
    }
    publishes = {i for i, r in lines if r["op"] == "publish"}
    # (a publish that is no valid record is a dead letter for that, advertised or not)
    invalid = {d["source"]["line"] for d in out.dead_letters} - refused
    assert refused == publishes - keep - invalid
    return out, expected


def two_sites(routing: str) -> object:
    return parse_network(f'routing = "{routing}"\nlinks = [["a", "b"]]\n[sites.a]\n[sites.b]\n')


def sub(ident, ts, where, site="b", **more) -> dict:
    return {
        "op": "subscribe",
        "id": ident,
        "space": "A",
        "subscriber": "u",
        "where": where,
        "ts": ts,
        "site": site,
        **more,
    }


def pub(ident, ts, x, site="a", **more) -> dict:
    return {
        "op": "publish",
        "id": ident,
        "space": "A",
        "attrs": {"x": x},
        "ts": ts,
        "site": site,
        **more,
    }


@pytest.mark.parametrize("routing", ["simple", "identity", "covering", "merging"])
def test_a_version_left_behind_is_taken_back_before_a_subscriber_meets_it(routing):
    """b holds p's first version, which its interest no longer overlaps when a newer
    one, wanted by nobody there, replaces it at a (stale at b); the newer one expires
    first. A subscriber that later wants the first must not meet it: a retracts it."""
    subs = [
        sub("s1", 0, "x BETWEEN 0 AND 1"),
        {"op": "unsubscribe", "id": "s1", "space": "A", "ts": 2, "site": "b"},
        sub("s2", 20, "x BETWEEN 0 AND 1"),
    ]
    profiles = [pub("p", 1, 0.5, valid_to=100), pub("p", 3, 5, valid_to=10)]
    out, expected = assert_equivalent(two_sites(routing), subs, profiles)
    assert [m["event"] for m in expected] == ["match", "unmatch"]
    assert out.stats()["links"]["a->b"]["catch_ups"] == 1


@pytest.mark.parametrize("routing", ["simple", "covering"])
def test_a_version_left_behind_ends_before_the_next_one_passes_on(routing):
    """b holds p's first version (stale: its interest left, and a replaced it by one
    nobody there wanted, which expired). A later version that c wants passes b: it
    is `new-profile` there, as at one matcher, not `changed` from the stale one."""
    links = 'links = [["a", "b"], ["b", "c"]]\n[sites.a]\n[sites.b]\n[sites.c]\n'
    net = parse_network(f'routing = "{routing}"\n{links}')
    subs = [
        sub("s1", 0, "x > 0"),
        {"op": "unsubscribe", "id": "s1", "space": "A", "ts": 5, "site": "b"},
        sub("s2", 20, "x < 0", site="c"),
    ]
    profiles = [
        pub("p", 1, 1, valid_to=100),
        pub("p", 6, 9, valid_to=10),
        pub("p", 30, -1, valid_to=100),
    ]
    _, expected = assert_equivalent(net, subs, profiles)
    assert [(m["subscription_id"], m["reason"]) for m in expected][-1] == ("s2", "new-profile")


def test_an_unsubscribe_that_uncovers_filters_sends_them():
    subs = [
        sub("wide", 0, "x BETWEEN 0 AND 10"),
        sub("narrow", 1, "x BETWEEN 2 AND 3"),
        {"op": "unsubscribe", "id": "wide", "space": "A", "ts": 2, "site": "b"},
    ]
    out, expected = assert_equivalent(two_sites("covering"), subs, [pub("p", 5, 2.5)])
    assert [m["subscription_id"] for m in expected] == ["narrow"]
    assert out.stats()["links"]["b->a"]["interest_messages"] == 3  # wide, narrow, -wide


def test_a_subscriber_that_comes_later_gets_what_another_site_holds():
    """ROUTING §4: a profile published before anyone wanted it still matches a later
    subscription at another site while it is valid, as held before its ts."""
    net = parse_network('links = [["a", "b"], ["b", "c"]]\n[sites.a]\n[sites.b]\n[sites.c]\n')
    subs = [sub("late", 50, "x < 5", site="c")]
    profiles = [pub("p", 10, 1, valid_to=100), pub("old", 10, 1, valid_to=40)]
    out, expected = assert_equivalent(net, subs, profiles)
    assert [(m["profile_id"], m["reason"]) for m in expected] == [("p", "new-subscription")]
    assert out.stats()["links"]["a->b"]["catch_ups"] == 1
    assert out.stats()["links"]["b->c"]["catch_ups"] == 1


def test_a_lifetime_that_ends_before_its_ts_still_meets_what_is_held_then_leaves():
    """One matcher holds such a subscription for its own record only: it matches the
    profiles held then, and is evicted before the next record. (Its interest leaves
    just after it comes, not at `valid_to + 1`, which is already past.)"""
    subs = [
        sub("s", 50, "x < 5", valid_from=0, valid_to=20),
        sub("t", 60, "x < 5", site="a"),
        sub("u", 50, "x < 7", site="c"),
    ]
    profiles = [pub("p", 10, 1, valid_to=100), pub("q", 55, 2, valid_to=100)]
    for routing in ("simple", "covering", "merging"):
        net = parse_network(
            f'routing = "{routing}"\nlinks = [["a", "b"], ["b", "c"]]\n'
            "[sites.a]\n[sites.b]\n[sites.c]\n"
        )
        _, expected = assert_equivalent(net, subs, profiles)
        assert [(m["subscription_id"], m["profile_id"], m["event"]) for m in expected][:2] == [
            ("s", "p", "match"),
            ("s", "p", "unmatch"),
        ]
