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

import contextlib
import json
import os
import random
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher.engine import Engine, Input
from matcher.events import encode
from matcher.records import Source
from matcher.routing.network import NetworkError, parse_network
from streaming.network_site import KafkaRow, SiteJob, control_start, control_tick
from streaming.network_topics import site_topics
from streaming.quenching_producer import ProducerJob, save_state

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


# -- a producer killed and restarted from its state file ---------------------------


class Crash(Exception):
    """The producer's process dies here."""


class Message:
    def __init__(self, offset: int, key: bytes | None, value: bytes) -> None:
        self._record = (offset, key, value)

    def offset(self) -> int:
        return self._record[0]

    def key(self) -> bytes | None:
        return self._record[1]

    def value(self) -> bytes:
        return self._record[2]

    def error(self) -> None:
        return None


class Clients:
    """A producer's Kafka clients over the simulation's topics, for one run of its
    process: `dies_at` numbers the run's events (consumes, produces, flushes, saves;
    a flush delivers a random part of what it holds first) at which it dies. A
    consume steps the sites first (time passes while it waits)."""

    def __init__(self, sim: Simulated, dies_at: int | None, rng: random.Random) -> None:
        self.sim, self.dies_at, self.rng = sim, dies_at, rng
        self.events = 0
        self.queued: list[tuple[str, bytes | None, bytes]] = []
        self.position = 0

    def event(self) -> None:
        self.events += 1
        if self.events == self.dies_at:
            raise Crash

    # (the consumer)
    def list_topics(self, timeout: float):
        p = self.sim.producer
        return type("Meta", (), {"topics": {p.inbound: None, p.outbound: None}})

    def get_watermark_offsets(self, tp, timeout: float) -> tuple[int, int]:
        return 0, len(self.sim.kafka[self.sim.producer.bootstrap, tp.topic])

    def assign(self, partitions) -> None:
        (tp,) = partitions
        self.position = tp.offset

    def consume(self, n: int, timeout: float) -> list[Message]:
        self.event()
        for name in self.sim.rng.sample(self.sim.net.names, 2):
            self.sim.step_site(name)
        p = self.sim.producer
        records = self.sim.kafka[p.bootstrap, p.inbound]
        start, self.position = self.position, len(records)
        return [Message(off, *records[off]) for off in range(start, len(records))]

    def close(self) -> None:
        pass

    # (the producer)
    def produce_many(self, records) -> None:
        self.event()
        self.queued += records

    def flush(self) -> None:
        queued, self.queued = self.queued, []
        if self.events + 1 == self.dies_at:
            queued = queued[: self.rng.randrange(len(queued) + 1)]
        for topic, key, value in queued:
            self.sim.append(self.sim.producer.bootstrap, topic, (key, value))
        self.event()


def run_with_crashes(sim: Simulated, lines: list[bytes], state, deaths: list[int]) -> int:
    """The producer's process over `lines`, killed at each of `deaths` (an event of
    its run, see `Clients`) and started again from its state file; how many times
    it died."""
    import streaming.quenching_producer as qp

    clients: Clients | None = None

    def dying_save(path, job):
        clients.event()
        save_state(path, job)
        if clients.rng.random() < 0.3:
            clients.event()  # (dies just after the save)

    died = 0
    rng = random.Random(len(deaths))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(qp, "save_state", dying_save)
        for dies_at in [*deaths, None]:
            clients = Clients(sim, dies_at, rng)
            try:
                producer = qp.LinkedQuenchingProducer(
                    sim.net, "q", state=state, clients=(clients, clients), clock=lambda: None
                )
                sim.producer = producer.job
                with producer:
                    producer.send_lines(lines, every=3, saving_at_most=1)
                    producer.close()
                return died
            except Crash:
                died += 1
                # (a dead producer: its site goes on without it, and waits for it)
                for _ in range(3):
                    for name in sim.net.names:
                        sim.step_site(name)
    return died


def random_workload(rng: random.Random) -> tuple[list[dict], list[dict]]:
    """Subscriptions at both sites and the producer's profiles (ids reused: new
    versions), each input in ts order, every ts its own (on time everywhere)."""
    n_subs, n_profiles = rng.randrange(1, 6), rng.randrange(1, 15)
    times = rng.sample(range(200), n_subs + n_profiles)
    subs = [
        sub(f"s{i}", ts, f"x {rng.choice('<>')} {rng.randrange(10, 90)}", site=rng.choice("ab"))
        for i, ts in enumerate(sorted(times[:n_subs]))
    ]
    profiles = [
        pub(f"p{rng.randrange(6)}", ts, rng.randrange(100), valid_to=ts + rng.randrange(300))
        for ts in sorted(times[n_subs:])
    ]
    return subs, profiles


@contextlib.contextmanager
def memory_directory() -> Iterator[Path]:
    """A temporary directory in memory where there is one (an fsync on disk costs
    about 20 ms here, and the properties save a few thousand times)."""
    memory = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=memory, prefix="tsm-test-") as directory:
        yield Path(directory)


def restarted_run_equals_one_matcher(
    seed: int, routing: str, directory: Path, deaths: list[int] | None = None
) -> int:
    """A random workload (of `seed`), the producer killed at `deaths` (random where
    None): one matcher's match records, and the link numbered without a gap."""
    rng = random.Random(seed)
    subs, profiles = random_workload(rng)
    lines = [_bytes(r) for r in profiles]
    for _ in range(rng.randrange(3)):  # (blank lines are counted, not sent)
        lines.insert(rng.randrange(len(lines) + 1), b"")
    sim = Simulated(routing, subs, live=False, seed=seed)
    state = directory / f"{seed}.state"
    state.unlink(missing_ok=True)
    if deaths is None:
        deaths = sorted(rng.sample(range(1, 40), rng.randrange(4)))
    died = run_with_crashes(sim, lines, state, deaths)
    sim.run(80)
    assert sim.producer.done and all(job.done for job in sim.jobs.values())
    assert sorted(set(sim.matches)) == sorted(one_matcher(subs, profiles))
    # the link protocol: every number sent, one record a number (sent again, the same)
    link = dict.fromkeys(sim.kafka[sim.producer.bootstrap, sim.producer.outbound])
    numbers = sorted(int(key) for key, _ in link)
    assert numbers == list(range(len(numbers)))
    return died


@pytest.mark.parametrize("routing", ["simple", "covering", "merging"])
def test_a_killed_producer_goes_on_from_its_state_file_as_one_matcher(routing):
    """Killed anywhere (before or after a save, while producing, mid-flush) and
    started again under the same name, the producer goes on from its state file:
    the union of match records is one matcher's given the whole input unquenched."""
    with memory_directory() as directory:
        died = sum(restarted_run_equals_one_matcher(seed, routing, directory) for seed in range(12))
    assert died >= 8  # (the deaths happened)


@settings(max_examples=15, deadline=None)
@given(
    routing=st.sampled_from(["simple", "covering", "merging"]),
    seed=st.integers(0, 10**6),
    deaths=st.lists(st.integers(1, 40), max_size=4),
)
def test_a_killed_producer_goes_on_as_one_matcher_property(routing, seed, deaths):
    with memory_directory() as directory:
        restarted_run_equals_one_matcher(seed, routing, directory, deaths)


def started(sim: Simulated, state, dies_at: int | None = None):
    """The producer's process, started (again) from its state file."""
    import streaming.quenching_producer as qp

    clients = Clients(sim, dies_at, random.Random(0))
    producer = qp.LinkedQuenchingProducer(
        sim.net, "q", state=state, clients=(clients, clients), clock=lambda: None
    )
    sim.producer = producer.job
    return producer


def killed_after_its_first_line(sim: Simulated, lines: list[bytes], state) -> None:
    """The producer steps over its first line (saved, produced, flushed), then dies
    as it reads the link for the second (its process's fourth event)."""
    with pytest.raises(Crash), started(sim, state, dies_at=4) as producer:
        producer.send_lines(lines, every=1, saving_at_most=1)


def test_a_dead_producer_stalls_its_site_until_it_comes_back(tmp_path):
    """Killed before its end, the producer holds its site's watermark; started
    again, it goes on and the site decides what waited for it."""
    subs = [sub("s", 50, "x < 5", site="a")]
    lines = [_bytes(pub("p", 10, 1, valid_to=100)), _bytes(pub("r", 20, 2, valid_to=100))]
    sim = Simulated("covering", subs, live=False)
    state = tmp_path / "q.state"
    killed_after_its_first_line(sim, lines, state)
    sim.run(20)
    assert not sim.jobs["a"].done and sim.matches == []  # (waits for q)
    with started(sim, state) as producer:
        assert producer.restarted and producer.job.input_lines == 1
        producer.send_lines(lines)
        producer.close()
    sim.run(40)
    assert all(job.done for job in sim.jobs.values())
    assert sorted(set(sim.matches)) == sorted(one_matcher(subs, [json.loads(x) for x in lines]))


def test_a_producer_whose_input_pauses_does_not_stall_its_site():
    """Live: the producer's input gives one line, then waits; meanwhile b publishes p
    for a's subscriber at ts 500, past that line's. The producer steps while its
    input waits (the site's interest read, clock ticks: the idle rule moves its
    watermark on), so a matches p before the input goes on."""
    import streaming.quenching_producer as qp

    subs = [sub("s", 5, "x < 5", site="a")]
    sim = Simulated("covering", subs, live=True)
    elsewhere = pub("p", 500, 1, valid_to=10**6)
    profiles = sim.topics["b"].topics.profiles
    sim.inputs["b"].append(KafkaRow(profiles, 0, 0, None, None, _bytes(elsewhere), 500))
    lines: list[dict] = []
    while_paused: list[list[bytes]] = []

    def pausing_input() -> Iterator[bytes]:
        lines.append(pub("q1", sim.now + 1, 50, valid_to=10**6))
        yield _bytes(lines[-1])
        deadline = time.monotonic() + 3
        while not sim.matches and time.monotonic() < deadline:
            time.sleep(0.01)
        while_paused.append(list(sim.matches))
        lines.append(pub("q2", sim.now + 100, 2, valid_to=10**6))
        yield _bytes(lines[-1])

    clients = Clients(sim, None, random.Random(0))
    with (
        memory_directory() as directory,
        qp.LinkedQuenchingProducer(
            sim.net,
            "q",
            state=directory / "q.state",
            clients=(clients, clients),
            clock=lambda: sim.now,
        ) as producer,
    ):
        sim.producer = producer.job
        producer.send_lines(pausing_input(), every=1, saving_at_most=1)
        producer.close()
    (matched,) = while_paused
    assert [json.loads(m)["profile_id"] for m in matched] == ["p"]
    sim.run(80)
    expected = one_matcher(subs, sorted([*lines, elsewhere], key=lambda r: r["ts"]))
    assert [json.loads(m)["profile_id"] for m in expected] == ["p", "q2"]
    assert sorted(set(sim.matches)) == sorted(expected)


def test_a_restart_refuses_another_input_a_lost_or_stale_state_another_network(tmp_path):
    import streaming.quenching_producer as qp

    sim = Simulated("covering", [sub("s", 50, "x < 5")], live=False)
    state = tmp_path / "q.state"
    lines = [_bytes(pub("p", 10, 1, valid_to=100)), _bytes(pub("r", 20, 2, valid_to=100))]
    killed_after_its_first_line(sim, lines, state)
    other = [_bytes(pub("z", 10, 1, valid_to=100)), *lines[1:]]
    with pytest.raises(ValueError, match="has read 1 lines of another input"):
        with started(sim, state) as producer:
            producer.send_lines(other)
    with started(sim, state), pytest.raises(ValueError, match="'q' is running already"):
        started(sim, state)
    with pytest.raises(ValueError, match="has written to its link already and has no state"):
        started(sim, tmp_path / "lost")
    with started(sim, state) as producer:  # (to its close: every record acknowledged)
        producer.send_lines(lines)
        producer.close()
    fresh = Simulated("covering", [], live=False)  # (topics made again: another run)
    with pytest.raises(ValueError, match="it is the state of another run"):
        started(fresh, state)
    (tmp_path / "junk").write_bytes(b"not a state")
    with pytest.raises(ValueError, match="junk: not a tsm snapshot"):
        qp.load_state(tmp_path / "junk", sim.net, "q")
    elsewhere = parse_network(NET.format(routing="simple"))
    with pytest.raises(ValueError, match="written with another network file"):
        qp.load_state(state, elsewhere, "q")


def test_close_retires_a_producer_for_good(tmp_path):
    """A producer run to its close, started again with its input: it sends nothing
    more (its link is ended) and refuses more lines; `close` of one killed before
    its end (the CLI's --close) hands over what it holds without reading on."""
    subs = [sub("s", 50, "x < 5")]
    lines = [_bytes(pub("p", 10, 1, valid_to=100)), _bytes(pub("r", 20, 2, valid_to=100))]
    sim = Simulated("covering", subs, live=False)
    state = tmp_path / "q.state"
    killed_after_its_first_line(sim, lines, state)
    with started(sim, state) as producer:
        producer.close()  # (--close: the second line is never read)
    written = len(sim.kafka[sim.producer.bootstrap, sim.producer.outbound])
    with started(sim, state) as producer:
        assert producer.job.closed
        producer.send_lines(lines[:1])
        producer.close()
        with pytest.raises(ValueError, match="ended its input at line 1"):
            producer.send_lines(lines)
    assert len(sim.kafka[sim.producer.bootstrap, sim.producer.outbound]) == written
    sim.run(40)
    assert all(job.done for job in sim.jobs.values())
    assert sorted(set(sim.matches)) == sorted(one_matcher(subs, [json.loads(lines[0])]))
