"""A quenching producer talking to its site over simulated Kafka (ROUTING §4).

`streaming.quenching_producer.ProducerJob` (the producer's pure part) and the
sites' `SiteJob`s step over in-memory topics, as in `tests.test_network_site`:
the producer reads its lines and the link topic its site writes for it, and
writes the site's inbound link topic. The union of the sites' match records
must equal one matcher's (`matcher.engine.Engine`) given the producer's lines
unquenched, `match_id` included; the producer's link carries only what some
subscriber wanted, until it hands the rest over at `close`.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict

import pytest

from matcher.engine import Engine, Input
from matcher.events import encode
from matcher.records import Source
from matcher.routing.network import NetworkError, parse_network
from streaming.network_site import KafkaRow, SiteJob, control_start, control_tick
from streaming.network_topics import site_topics
from streaming.quenching_producer import ProducerJob

NET = """routing = "{routing}"
idle_ms = 10
links = [["a", "b"]]
[sites.a]
bootstrap = "h:1"
[sites.b]
bootstrap = "h:2"
[producers.q]
site = "a"
"""


def sub(ident: str, ts: int, where: str, site: str = "b") -> dict:
    rec = {"op": "subscribe", "id": ident, "space": "A", "subscriber": "u", "where": where}
    return rec | {"ts": ts, "site": site}


def pub(ident: str, ts: int, x: float, **more) -> dict:
    return {"op": "publish", "id": ident, "space": "A", "attrs": {"x": x}, "ts": ts} | more


class Simulated:
    """The sites' jobs and the producer over in-memory topics, keyed by (cluster, topic)."""

    def __init__(self, routing: str, subs: list[dict], *, live: bool, seed: int = 0) -> None:
        self.net = parse_network(NET.format(routing=routing))
        self.rng = random.Random(seed)
        self.kafka: dict[tuple[str, str], list] = defaultdict(list)
        self.read: Counter = Counter()
        self.topics = {n: site_topics(self.net, n) for n in self.net.names}
        self.jobs = {n: SiteJob(self.net, n, self.topics[n]) for n in self.net.names}
        self.producer = ProducerJob(self.net, "q")
        self.matches: list[bytes] = []
        self.now = 0
        self.live = live
        self.inputs: dict[str, list[KafkaRow]] = {}
        for name, t in self.topics.items():
            own = [r for r in subs if r["site"] == name]
            rows = [
                KafkaRow(t.topics.subscriptions, 0, i, None, None, _bytes(r), r["ts"] + 1)
                for i, r in enumerate(own)
            ]
            self.inputs[name] = rows
            ends = {(t.topics.subscriptions, 0): len(own), (t.topics.profiles, 0): 0}
            self.append(t.bootstrap, t.control, (None, control_start(None if live else ends)))

    def append(self, cluster: str, topic: str, record) -> None:
        self.kafka[cluster, topic].append(record)

    def fresh(self, cluster: str, topic: str) -> list[tuple[int, bytes | None, bytes]]:
        records = self.kafka[cluster, topic]
        start = self.read[cluster, topic]
        self.read[cluster, topic] = len(records)
        return [(off, *records[off]) for off in range(start, len(records))]

    def step_site(self, name: str) -> None:
        t = self.topics[name]
        rows = self.inputs[name]
        self.inputs[name] = []
        if self.live:
            self.now += 5
            self.append(t.bootstrap, t.control, (None, control_tick(self.now)))
        for topic in t.link_inputs:
            rows += [
                KafkaRow(topic, 0, off, None, k, v, None)
                for off, k, v in self.fresh(t.bootstrap, topic)
            ]
        out = self.jobs[name].step(rows)
        self.matches += [v for _, v in out.matches]
        for n, records in out.links.items():
            cluster, topic = t.outbound[n]
            for record in records:
                self.append(cluster, topic, record)

    def step_producer(self, lines: list[dict] = (), *, end: bool = False, close: bool = False):
        p = self.producer
        if close:
            out = p.close()
        elif end:
            out = p.end()
        else:
            link = self.fresh(p.bootstrap, p.inbound)
            out = p.step([_bytes(r) for r in lines], link, self.now if self.live else None)
        for record in out.links:
            self.append(p.bootstrap, p.outbound, record)
        return out

    def run(self, rounds: int = 60) -> None:
        for _ in range(rounds):
            for name in self.rng.sample(self.net.names, 2):
                self.step_site(name)
            self.step_producer()

    def sent_by_producer(self) -> list[dict]:
        """The publishes the producer's link carried, as the site reads them."""
        out = []
        for _, value in self.kafka[self.producer.bootstrap, self.producer.outbound]:
            obj = json.loads(value)
            if obj["type"] == "profile":
                out.append(obj["record"] | {"key": obj["key"]})
        return out


def _bytes(rec: dict) -> bytes:
    return json.dumps({k: v for k, v in rec.items() if k != "site"}).encode()


def one_matcher(subs: list[dict], profiles: list[dict]) -> list[bytes]:
    items = [
        Input("subscription", _bytes(r), Source(file="subs", line=i))
        for i, r in enumerate(subs, start=1)
    ] + [
        Input("profile", _bytes(r), Source(file="profiles", line=i))
        for i, r in enumerate(profiles, start=1)
    ]
    return [encode(o.value) for o in Engine().process_batch(items) if o.topic == "matches"]


@pytest.mark.parametrize("routing", ["simple", "covering", "merging"])
def test_a_held_back_profile_meets_a_later_subscriber_as_one_matcher(routing):
    """p waits at the producer until b's subscriber wants it; it then goes as held
    at a before her subscription's ts, with its own ts: `new-subscription`, one
    matcher's match_id. r, which nobody wants, never leaves the producer."""
    subs = [sub("s", 50, "x < 5")]
    lines = [pub("p", 10, 1, valid_to=100), pub("r", 20, 50, valid_to=100)]
    sim = Simulated(routing, subs, live=False)
    sim.step_producer(lines)
    sim.step_producer(end=True)
    sim.run()
    assert all(job.done for job in sim.jobs.values()) and sim.producer.done
    expected = one_matcher(subs, lines)
    assert [json.loads(m)["reason"] for m in expected] == ["new-subscription"]
    assert sorted(set(sim.matches)) == sorted(expected)
    (sent,) = sim.sent_by_producer()
    assert (sent["id"], sent["ts"]) == ("p", 10)  # its own ts and version
    assert sent["key"][:2] == [50, 2] and sent["key"][3] == -1  # held before the interest
    assert sim.producer.counts.forwarded == 1


def test_what_the_producer_still_holds_at_close_goes_to_its_site():
    """A live run: the producer closes while r is held back; it hands r to a, held
    there from the event time its link had reached, so a subscriber who comes later
    meets it as one matcher does, and the sites go on without the producer."""
    subs = [sub("early", 5, "x < 5"), sub("late", 400, "x > 40")]
    lines = [pub("p", 10, 1, valid_to=1000), pub("r", 20, 50, valid_to=1000)]
    sim = Simulated("covering", subs[:1], live=True)
    sim.step_producer(lines)
    sim.run(20)
    assert [r["id"] for r in sim.sent_by_producer()] == ["p"]
    assert sim.producer.held == 1
    out = sim.step_producer(close=True)
    assert sim.producer.counts.handed_over == 1 and sim.producer.done
    assert [json.loads(v)["ts"] for _, v in out.links if b'"watermark"' in v] != []
    assert [r["id"] for r in sim.sent_by_producer()] == ["p", "r"]
    later = sim.topics["b"].topics.subscriptions
    sim.inputs["b"] = [KafkaRow(later, 0, 1, None, None, _bytes(subs[1]), 401)]
    sim.run(40)
    expected = one_matcher(subs, lines)
    assert [json.loads(m)["subscription_id"] for m in expected] == ["early", "late"]
    assert sorted(set(sim.matches)) == sorted(expected)


def test_an_idle_producer_does_not_stall_its_site():
    """A live producer with nothing to send: its clock ticks move its watermark on
    (the idle rule), so its site decides b's records without waiting for it."""
    subs = [sub("s", 5, "x < 5", site="a")]
    sim = Simulated("covering", subs, live=True)
    sim.run(30)
    assert sim.jobs["a"].site.matcher.done >= 5 + 1
    lines = [pub("p", sim.now + 20, 1, valid_to=10**6)]  # (after the idle time: not late)
    sim.step_producer(lines)
    sim.run(30)
    assert sorted(set(sim.matches)) == sorted(one_matcher(subs, lines))


def test_a_producer_is_named_in_the_network_file():
    with pytest.raises(ValueError, match=r"\[producers.z\] site"):
        ProducerJob(parse_network(NET.format(routing="covering")), "z")
    bad = NET.format(routing="covering").replace('site = "a"', 'site = "nowhere"')
    with pytest.raises(NetworkError, match="producers.q.site 'nowhere' names no site"):
        parse_network(bad)
    clash = NET.format(routing="covering").replace("[producers.q]", "[producers.b]")
    with pytest.raises(NetworkError, match="producer 'b' has the name of a site"):
        parse_network(clash)


def test_a_move_from_or_at_a_producer_is_a_dead_letter_and_a_subscription_too():
    """A producer has no subscribers and its profiles stay its own (ROUTING §4, §5)."""
    from matcher.routing.replay import replay_network

    net = parse_network(NET.format(routing="covering"))
    moves = [
        {"op": "move", "id": "p", "space": "A", "from": "q", "ts": 5, "site": "a"},
        {"op": "move", "id": "p", "space": "A", "from": "a", "ts": 6, "site": "q"},
    ]
    items = [Input("subscription", json.dumps(sub("s", 1, "x < 5", site="q")), Source(line=1))]
    items += [Input("profile", json.dumps(m), Source(line=i)) for i, m in enumerate(moves, 1)]
    out = replay_network(net, items)
    reasons = [d["reason"] for d in out.dead_letters]
    assert len(reasons) == 3 and all("'q' is a quenching producer" in r for r in reasons)
