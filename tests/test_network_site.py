"""A network of streaming site jobs (`streaming.network_site`) equals one matcher.

Kafka is simulated in memory, Spark is not needed: each site's job is its
`SiteJob` state stepped over the records a batch would read. Its clients'
topics are read in chunks cut at a common event time, with the watermark the
event-time source gives (the next chunk's first ts, the largest ts seen at the
end); link topics are read as far as a random number of records, so links
lag at random; the sites step in a random order. Some steps crash after
writing a random part of their output and run again from the state before
(as Spark re-runs a batch whose commit did not happen): the receivers must
apply each link record once, and the match records differ only by
duplicates. The union of the sites' match records, without duplicates, must
equal one matcher's (`matcher.engine.Engine`) given every site's input, with
quenching producers at random sites stepping as their leaf sites' jobs.

With moves (ROUTING §5), the same run over `tests.test_routing_moves`'s
clients who move while they change: each subscriber, read from the sites'
matches topics as `--follow-moves` reads them, must see what one matcher
that never saw a move shows her (that module's reference and comparison).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from typing import NamedTuple

from hypothesis import Phase, event, given, settings
from hypothesis import strategies as st

from benchmarks.placement import network_toml
from connectors.quench import Interest
from matcher.engine import Engine, Input
from matcher.errors import RecordError
from matcher.events import encode
from matcher.records import Source, decode
from matcher.routing.network import parse_network
from streaming.network_site import KafkaRow, SiteJob, control_start, control_tick
from streaming.network_topics import site_topics
from streaming.state.codec import dump_snapshot, load_snapshot
from tests import oracle
from tests.test_routing_equivalence import (
    ROUTINGS,
    admitted,
    adverts,
    churn,
    generated,
    qualified,
    quenching,
    trees,
)
from tests.test_routing_moves import advertise_everything, assert_each_follows, largest_ts, mobile
from tests.test_routing_moves import one_matcher as one_matcher_without_moves

# half the routing property's examples: each runs every site's step many times
PROPS = settings(
    max_examples=max(1, int(os.environ.get("TSM_EXAMPLES", 50)) // 2),
    deadline=None,
    print_blob=True,
    phases=[p for p in Phase if p != Phase.shrink or not os.environ.get("TSM_NO_SHRINK")],
)
# a quarter of the mobility property's: each runs every site's step many times
MOVES_PROPS = settings(PROPS, max_examples=max(1, int(os.environ.get("TSM_EXAMPLES", 60)) // 4))


class Topic:
    """One partition of a simulated Kafka topic: (key, value) records in order."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes | None, bytes]] = []


class Written(NamedTuple):
    """What the sites' jobs wrote to their own clusters, per site."""

    matches: dict[str, list[bytes]]
    interest: dict[str, list]
    dead_letters: dict[str, list[bytes]]

    def all_matches(self) -> list[bytes]:
        return [value for values in self.matches.values() for value in values]


def run_network(
    net,
    subs: list[dict],
    profiles: list[dict],
    rng: random.Random,
    live_until: int | None = None,
) -> Written:
    """Every site's job over its records; what they wrote. A run over what the
    topics hold (`control_start` with the end offsets), or with `live_until`, a
    live run: no ends, and once a site has read its records, clock ticks from
    `live_until` on, `idle_ms` apart, move its watermark past it. A site steps only
    when it has new records to read, as Spark runs a batch."""
    net = net.with_producers()  # (a quenching producer steps as a leaf site's job)
    topics = {name: site_topics(net, name) for name in net.names}
    kafka: dict[tuple[str, str], Topic] = {}

    def topic(site: str, name: str) -> Topic:
        return kafka.setdefault((site, name), Topic())

    chunks: dict[str, list[list[KafkaRow]]] = {}
    for name, t in topics.items():
        own = [("subscription", r) for r in subs if r["site"] == name]
        own += [("profile", r) for r in profiles if r["site"] == name]
        own.sort(key=lambda kr: (oracle.to_ms(kr[1]["ts"]), kr[0] != "subscription"))
        offsets: Counter = Counter()
        rows = []
        for kind, rec in own:
            name_of = t.topics.subscriptions if kind == "subscription" else t.topics.profiles
            value = json.dumps({k: v for k, v in rec.items() if k != "site"}).encode()
            rows.append((oracle.to_ms(rec["ts"]), name_of, offsets[name_of], value))
            offsets[name_of] += 1
        cut = sorted(rng.sample(range(1, len(rows)), min(len(rows) - 1, 3))) if rows else []
        parts = [rows[a:b] for a, b in zip([0, *cut], [*cut, len(rows)], strict=True) if b > a]
        chunks[name] = []
        for i, part in enumerate(parts):
            wm = parts[i + 1][0][0] if i + 1 < len(parts) else part[-1][0]
            chunks[name].append([KafkaRow(tp, 0, off, None, None, v, wm) for _, tp, off, v in part])
        ends = {(t.topics.subscriptions, 0): offsets[t.topics.subscriptions]}
        ends[(t.topics.profiles, 0)] = offsets[t.topics.profiles]
        start = control_start(None if live_until is not None else ends)
        topic(name, t.control).records.append((None, start))

    jobs = {name: SiteJob(net, name, topics[name]) for name in net.names}
    read: Counter = Counter()
    written = Written({n: [] for n in net.names}, {}, {n: [] for n in net.names})
    ticks: Counter = Counter()

    def finished(job) -> bool:
        if live_until is None:
            return job.done
        return not job.pending and job.passed(live_until)

    for _ in range(2000):
        if all(finished(job) for job in jobs.values()):
            break
        name = rng.choice(net.names)
        t = topics[name]
        rows = chunks[name].pop(0) if chunks[name] and rng.random() < 0.7 else []
        if live_until is not None and not chunks[name]:
            now = live_until + net.idle_ms * ticks[name]  # (a clock moves on)
            topic(name, t.control).records.append((None, control_tick(now)))
            ticks[name] += 1
        for source in t.link_inputs:
            records = topic(name, source).records
            start = read[name, source]
            stop = rng.randint(start, len(records)) if rng.random() < 0.5 else len(records)
            rows += [
                KafkaRow(source, 0, off, None, records[off][0], records[off][1], None)
                for off in range(start, stop)
            ]
            read[name, source] = stop
        if not rows:
            continue  # (Spark runs no batch while no input has new records)
        rng.shuffle(rows)  # (a batch's rows come in no particular order)
        if rng.random() < 0.2:  # a crash after part of the output was written
            doomed = load_snapshot(dump_snapshot(jobs[name])).step(rows)
            write(doomed, topics, topic, name, written, rng)
        jobs[name] = load_snapshot(dump_snapshot(jobs[name]))  # (as the state store keeps it)
        write(jobs[name].step(rows), topics, topic, name, written, None)
    assert all(finished(job) for job in jobs.values()), {n: j.report() for n, j in jobs.items()}
    assert all(not job.pending for job in jobs.values())
    written.interest.update(
        {n: topic(n, t.interest).records for n, t in topics.items() if not net.is_producer(n)}
    )
    return written


def write(out, topics, topic, name, written: Written, rng) -> None:
    """A step's output; with `rng`, a random prefix of each of its parts (a crash)."""

    def part(records):
        return records[: rng.randint(0, len(records))] if rng else records

    written.matches[name].extend(value for _, value in part(out.matches))
    written.dead_letters[name].extend(value for _, value in part(out.dead_letters))
    topic(name, topics[name].interest).records.extend(part(out.interest))
    for neighbour, records in out.links.items():
        link = topics[name].outbound[neighbour][1]
        topic(neighbour, link).records.extend(part(records))


SOLO = """routing = "covering"
links = []
[sites.solo]
bootstrap = "localhost:9092"
"""
FILTER = "kind = 'bus' AND speed > 40"


def write_solo_state(path: str) -> int:
    """A site job that reads one subscription and writes its state to `path`, as a
    Python worker does; this process's `hash(None)`."""
    net = parse_network(SOLO)
    here = site_topics(net, "solo")
    job = SiteJob(net, "solo", here)
    sub = {"op": "subscribe", "id": "s", "space": "v", "subscriber": "ann", "where": FILTER}
    value = json.dumps({**sub, "ts": 1000}).encode()
    job.step([KafkaRow(here.topics.subscriptions, 0, 0, None, None, value, 2000)])
    with open(path, "wb") as out:
        out.write(dump_snapshot(job))
    return hash(None)


def test_a_site_state_written_by_another_process_goes_on_here(tmp_path):
    """A batch may run in another Python process than the batch before it (a restart,
    a new worker), where `hash(None)`, part of many filters' hashes, differs. The
    state written there goes on here: a second subscription read here with the filter
    of the one read there is the same filter in the interest published for
    producers, which it leaves when both have left."""
    blob = tmp_path / "state"
    writer = (
        "import sys; from tests.test_network_site import write_solo_state; "
        "print(write_solo_state(sys.argv[1]))"
    )
    for _ in range(3):  # (two processes with one hash(None) prove nothing: try again)
        done = subprocess.run(
            [sys.executable, "-c", writer, str(blob)], capture_output=True, text=True, check=True
        )
        if int(done.stdout) != hash(None):
            break
    assert int(done.stdout) != hash(None)
    job = load_snapshot(blob.read_bytes())
    subscriptions = site_topics(parse_network(SOLO), "solo").topics.subscriptions

    def step(offset: int, record: dict) -> list:
        value = json.dumps({"space": "v", "ts": 1000 * (offset + 1), **record}).encode()
        row = KafkaRow(subscriptions, 0, offset, None, None, value, 1000 * (offset + 2))
        return [value for _, value in job.step([row]).interest]

    assert step(1, {"op": "subscribe", "id": "t", "subscriber": "bob", "where": FILTER}) == []
    assert step(2, {"op": "unsubscribe", "id": "s"}) == []
    assert step(3, {"op": "unsubscribe", "id": "t"}) == [None]  # (a remove: a tombstone)


def one_matcher(subs: list[dict], profiles: list[dict], until: int | None = None) -> list[bytes]:
    """One matcher's records of every site's input; with `until`, then those of its
    watermark passing `until`."""
    items = [
        Input("subscription", json.dumps(r), Source(file="subs", line=i))
        for i, r in enumerate(subs, start=1)
    ] + [
        Input("profile", json.dumps(r), Source(file="profiles", line=i))
        for i, r in enumerate(profiles, start=1)
    ]
    engine = Engine()
    out = engine.process_batch(items) + (engine.advance(until) if until is not None else [])
    return [encode(o.value) for o in out if o.topic == "matches"]


def with_bootstraps(toml: str, names: list[str]) -> str:
    for i, name in enumerate(names):
        toml = toml.replace(f"[sites.{name}]\n", f'[sites.{name}]\nbootstrap = "h:{i}"\n')
    return toml


@PROPS
@given(st.data(), trees(), ROUTINGS, st.integers(0, 2**16))
def test_streaming_sites_equal_one_matcher(data, tree, routing, seed):
    order, links = tree
    churned = data.draw(st.booleans())
    subs, profiles = data.draw(churn(order) if churned else generated(order))
    # ids unique across sites (a streaming site cannot know another site's ids)
    records = qualified([("subscription", r) for r in subs] + [("profile", r) for r in profiles])
    subs = [r for kind, r in records if kind == "subscription"]
    profiles = [r for kind, r in records if kind == "profile"]
    with_adverts = data.draw(st.booleans())
    toml = network_toml(list(order), links, *routing, advertisements=with_adverts)
    sent = profiles
    if with_adverts:  # the one matcher gets what each site admits
        sent = profiles + data.draw(adverts(order, churned))
    toml += data.draw(quenching(order, sent, subs))  # (a producer's ids are its own: qualified)
    net = parse_network(with_bootstraps(toml, order))
    if with_adverts:
        keep = admitted(list(enumerate(sent)))
        profiles = [r for i, r in enumerate(sent) if i in keep or r["op"] == "retract"]
    live_until = None
    if data.draw(st.booleans()):  # a live run: the sites' clocks pass every record
        live_until = past_every_end(subs + sent) + data.draw(st.sampled_from((1, 10, 10**6)))
    written = run_network(net, subs, sent, random.Random(seed), live_until)
    # (one matcher's watermark counts every record of its input, those the network
    # refuses and the advertisements too: at the end it passes the largest ts of them all)
    end = live_until if live_until is not None else largest_ts(subs + sent)
    expected = one_matcher(subs, profiles, end)
    assert len(set(expected)) == len(expected)
    assert sorted(set(written.all_matches())) == sorted(expected)
    if live_until is None and not with_adverts:
        # (flooding: every profile is wanted; imperfect merging: a little more)
        exact = routing[0] not in ("flooding", "merging") or routing[1] == "perfect"
        check_producers_interest(written.interest, subs, profiles, exact=exact)


def past_every_end(records: list[dict]) -> int:
    """The largest ts, valid_from or valid_to of the records: a live run's clocks stop
    past it (past every finite end: where they stop then changes nothing)."""
    bounds = [r.get(k) for r in records for k in ("ts", "valid_from", "valid_to")]
    return max(oracle.to_ms(t) for t in bounds if t is not None)


def check_producers_interest(interest, subs, profiles, *, exact: bool) -> None:
    """At the end, every site's interest topic (what quenching producers read) wants
    a profile when a live subscription anywhere overlaps it (exactly when, unless
    imperfect merging widened a filter on the way)."""
    live = {}
    for rec in sorted(subs, key=lambda r: oracle.to_ms(r["ts"])):
        key = (rec["space"], rec["id"])
        live.pop(key, None)
        if rec["op"] == "subscribe" and rec.get("valid_to") is None:
            live[key] = (rec["space"], oracle.dnf_of(rec))
    for name, records in interest.items():
        table = Interest()
        for key, value in records:
            table.apply(key, value)
        for i, rec in enumerate(profiles):
            if rec["op"] != "publish":
                continue
            try:
                pub = decode("profile", json.dumps(rec), Source(file="p", line=i))
            except RecordError:  # (a dead letter)
                continue
            attrs = {n: oracle.profile_value(v) for n, v in rec["attrs"].items()}
            wanted = any(
                space == rec["space"] and any(oracle.overlaps(conj, attrs) for conj in dnf)
                for space, dnf in live.values()
            )
            assert table.wants(pub) == wanted or (not exact and table.wants(pub)), (name, rec)


# -- moves (ROUTING §5) ------------------------------------------------------------


@MOVES_PROPS
@given(st.data(), trees(), ROUTINGS, st.integers(0, 2**16))
def test_a_subscriber_following_moves_across_streaming_sites_sees_one_matcher(
    data, tree, routing, seed
):
    """`tests.test_routing_moves`'s property through the sites' streaming jobs: random
    moves of subscribers and profiles (several each, back and forth, during churn),
    batches that crash and run again. Each subscriber read as `--follow-moves`
    reads her sites' matches topics sees what one matcher that never saw a move
    shows her, record for record; all sites' records together, duplicates dropped,
    are that matcher's: no pair lost or matched again because a client moved."""
    order, links = tree
    subs, profiles, homes = data.draw(mobile(order))
    with_adverts = data.draw(st.booleans())
    if with_adverts:
        advertise_everything(profiles)
    # (one matcher's order at one ts is the input's; a site's, its index: make them one)
    rank = {name: i for i, name in enumerate(order)}
    subs.sort(key=lambda r: (r["ts"], rank[r["site"]]))
    profiles.sort(key=lambda r: (r["ts"], rank[r["site"]]))
    toml = network_toml(list(order), links, *routing, advertisements=with_adverts)
    net = parse_network(with_bootstraps(toml, order))
    live_until = None
    if data.draw(st.booleans()):  # a live run: the sites' clocks pass every record
        live_until = past_every_end(subs + profiles) + data.draw(st.sampled_from((1, 10**6)))
    written = run_network(net, subs, profiles, random.Random(seed), live_until)
    assert not any(written.dead_letters.values()), written.dead_letters
    expected = one_matcher_without_moves(subs, profiles, live_until)
    streams = {n: [json.loads(v) for v in values] for n, values in written.matches.items()}
    assert_each_follows(streams, expected, homes)
    made = {m for m in written.all_matches() if json.loads(m)["event"] != "moved"}
    assert sorted(made) == sorted(encode(e) for e in expected)
    event(f"moved records > 0: {any(b'moved' in m for m in written.all_matches())}")
    event(f"profile moves > 0: {any(r['op'] == 'move' for r in profiles)}")
