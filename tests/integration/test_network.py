"""The streaming network equals one matcher (ROUTING §4), on real brokers and Spark.

Three sites in a line (harbour – centre – airport), an embedded broker each,
real Kafka links. A random workload (seeded: subscribers and vehicles at
every site, subscriptions that come after the profiles they want, changes,
retracts, unsubscribes, validities that end within the run) goes to each
site's topics; then `tsm run --network --available-now` runs harbour and
airport in one process and centre in another, which is SIGKILLed (with its
Spark) after its first committed batch and started again from its
checkpoint. The union of the three matches topics, less duplicate records
(at least once: a re-run batch writes its records again), must equal `tsm
replay` of one matcher given every site's input, each record at the
subscriber's site; nothing goes to the dead letters.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from connectors.admin import create_topics
from connectors.broker import EmbeddedBroker
from connectors.consume import consume_records, consume_values
from connectors.produce import produce_lines

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TSM = Path(sys.executable).parent / "tsm"
SITES = ("harbour", "centre", "airport")
BASE = 1_795_334_400_000  # 2026-11-22T08:00Z
TOPICS = ("tsm.subscriptions", "tsm.profiles", "tsm.matches", "tsm.deadletter")


def workload(seed: int) -> tuple[list[dict], list[dict]]:
    """Subscriptions and profiles with their home `site`, each site's ids its own."""
    rng = random.Random(seed)
    subs, profiles = [], []
    for n in range(36):
        site = SITES[n % 3]
        lo = rng.uniform(0, 80)
        ts = BASE + rng.choice((0, rng.randint(0, 6000)))  # some after the profiles
        sub = {
            "op": "subscribe",
            "id": f"s{n}-{site}",
            "space": "vehicles",
            "subscriber": f"user{n % 7}-{site}",
            "where": f"x BETWEEN {lo:.1f} AND {lo + rng.uniform(2, 30):.1f} "
            f"AND y < {rng.uniform(20, 100):.1f}",
            "ts": ts,
            "site": site,
        }
        subs.append(sub)
        if rng.random() < 0.15:
            subs.append(
                {"op": "unsubscribe", "id": sub["id"], "space": "vehicles", "ts": ts + 2500}
                | {"site": site}
            )
    for n in range(150):
        site = rng.choice(SITES)
        ident = f"v{n % 50}-{site}"  # vehicles move: the same id published again
        ts = BASE + 40 * n
        x = rng.uniform(0, 100)
        profile = {
            "op": "publish",
            "id": ident,
            "space": "vehicles",
            "attrs": {"x": [round(x, 2), round(x + rng.uniform(0, 3), 2)], "y": rng.randint(0, 99)},
            "valid_to": ts + rng.choice((500, 3000, 10**9)),
            "ts": ts,
            "payload": {"n": n},
            "site": site,
        }
        profiles.append(profile)
        if rng.random() < 0.1:
            profiles.append(
                {"op": "retract", "id": ident, "space": "vehicles", "ts": ts + 20, "site": site}
            )
    return subs, profiles


def lines(records: list[dict], site: str | None = None) -> list[bytes]:
    """The records (of one site), by ts, as topic values (without `site`)."""
    chosen = [r for r in records if site is None or r["site"] == site]
    chosen.sort(key=lambda r: r["ts"])
    return [json.dumps({k: v for k, v in r.items() if k != "site"}).encode() for r in chosen]


def tsm(*args: str, **popen) -> subprocess.Popen:
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen([str(TSM), *args], env=env, stderr=subprocess.PIPE, text=True, **popen)


def finish(process: subprocess.Popen, timeout: float = 900) -> str:
    _, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-4000:]
    return err


def write_network(
    tmp_path: Path, brokers: list, subs: list[dict], profiles: list[dict], more: str = ""
) -> Path:
    """The three sites in a line on `brokers`, each site's records on its topics; the
    network file (with `more` at its end)."""
    toml = 'routing = "covering"\nidle_ms = 2000\n'
    toml += 'links = [["harbour", "centre"], ["centre", "airport"]]\n'
    for site, broker in zip(SITES, brokers, strict=True):
        toml += f'[sites.{site}]\nbootstrap = "{broker.bootstrap}"\n'
        create_topics(broker.bootstrap, dict.fromkeys(TOPICS, 1))
        produce_lines(broker.bootstrap, "tsm.subscriptions", lines(subs, site))
        produce_lines(broker.bootstrap, "tsm.profiles", lines(profiles, site))
    net = tmp_path / "net.toml"
    net.write_text(toml + more)
    return net


def read_sites(brokers: list) -> tuple[list[tuple[str, dict]], list[bytes]]:
    """Every site's match records, with their site, and its dead letters."""
    got, dead = [], []
    for site, broker in zip(SITES, brokers, strict=True):
        values = consume_values(broker.bootstrap, "tsm.matches", from_beginning=True, timeout=3)
        got += [(site, json.loads(v)) for v in values]
        dead += list(
            consume_values(broker.bootstrap, "tsm.deadletter", from_beginning=True, timeout=1)
        )
    return got, dead


def one_matcher(tmp_path: Path, subs: list[dict], profile_lines: list[bytes]) -> list[dict]:
    """`tsm replay` of one matcher given every site's input, in one pair of files."""
    (tmp_path / "subs.jsonl").write_bytes(b"\n".join(lines(subs)) + b"\n")
    (tmp_path / "profiles.jsonl").write_bytes(b"\n".join(profile_lines) + b"\n")
    replay = subprocess.run(
        [str(TSM), "replay", "--subscriptions", str(tmp_path / "subs.jsonl")]
        + ["--profiles", str(tmp_path / "profiles.jsonl")],
        capture_output=True,
        check=True,
    )
    return [json.loads(line) for line in replay.stdout.splitlines()]


def test_three_sites_equal_one_matcher_across_a_sigkill(tmp_path):
    subs, profiles = workload(seed=32)
    brokers = [EmbeddedBroker(data_dir=tmp_path / f"broker-{s}").start() for s in SITES]
    try:
        net = write_network(tmp_path, brokers, subs, profiles)
        common = ["--network", str(net), "--available-now", "--checkpoint", str(tmp_path / "ck")]
        common += ["--spark-log", str(tmp_path / "spark.log")]
        started = time.monotonic()
        ends = tsm("run", *common, "--site", "harbour", "--site", "airport")
        centre = [*common, "--site", "centre", "--max-records-per-trigger", "40"]
        doomed = tsm("run", *centre, start_new_session=True)
        first = tmp_path / "ck" / "centre" / "commits" / "0"
        while not first.exists() and doomed.poll() is None:
            time.sleep(0.2)
        assert doomed.poll() is None, doomed.communicate()[1][-4000:]
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.communicate()
        finish(tsm("run", *centre))
        finish(ends)
        elapsed = time.monotonic() - started

        got, dead = read_sites(brokers)
    finally:
        for broker in brokers:
            broker.stop()
    assert dead == []

    expected = one_matcher(tmp_path, subs, lines(profiles))
    assert len(expected) > 100
    unique = {json.dumps(m, sort_keys=True): (site, m) for site, m in got}
    assert sorted(unique) == sorted(json.dumps(m, sort_keys=True) for m in expected)
    home = {r["id"]: r["site"] for r in subs}
    assert all(site == home[m["subscription_id"]] for site, m in unique.values())
    duplicates = Counter(m["match_id"] for _, m in got) - Counter(m["match_id"] for m in expected)
    print(
        f"network of 3 sites: {elapsed:.0f} s, {len(got)} records written, "
        f"{sum(duplicates.values())} duplicates after the SIGKILL"
    )


def test_moves_across_a_sigkill_of_the_old_site_in_a_handover(tmp_path):
    """ROUTING §5 on real brokers and Spark: `examples/network/moves` (four sites;
    maria moves centre → harbour → island, the ferry harbour → island, a bad move).
    The harbour's job, the old site of two moves, runs alone with small batches and
    is SIGKILLed (with its Spark) as soon as one of its handovers is on the island's
    link topic, before it is known done, then started again from its checkpoint:
    the re-run writes its asks and handovers again, with the same numbers. The
    sites' records, duplicates dropped, are `tsm replay --network`'s, each at its
    site, `moved` records included; each subscriber read as `--follow-moves` reads
    sees what one matcher shows her; the bad move is the island's one dead letter."""
    from tests.test_replay import EXAMPLES, replay
    from tests.test_routing_moves import assert_each_follows

    folder = EXAMPLES / "network" / "moves"
    records = {}
    for kind in ("subscriptions", "profiles"):
        text = (folder / f"{kind}.jsonl").read_text().splitlines()
        records[kind] = [json.loads(line) for line in text if line.strip()]
    names = ("harbour", "centre", "airport", "island")
    brokers = {s: EmbeddedBroker(data_dir=tmp_path / f"broker-{s}").start() for s in names}
    try:
        toml = (folder / "net.toml").read_text()
        for i, site in enumerate(names):
            toml = toml.replace(f"localhost:{9092 + i}", brokers[site].bootstrap)
        net = tmp_path / "net.toml"
        net.write_text(toml)
        for site, broker in brokers.items():
            create_topics(broker.bootstrap, dict.fromkeys(TOPICS, 1))
            for kind in ("subscriptions", "profiles"):
                mine = [r for r in records[kind] if r["site"] == site]
                produce_lines(broker.bootstrap, f"tsm.{kind}", lines(mine))
        common = ["--network", str(net), "--available-now", "--checkpoint", str(tmp_path / "ck")]
        common += ["--spark-log", str(tmp_path / "spark.log")]
        started = time.monotonic()
        others = tsm("run", *common, *(f"--site={s}" for s in names if s != "harbour"))
        harbour = [*common, "--site", "harbour", "--max-records-per-trigger", "1"]
        doomed = tsm("run", *harbour, start_new_session=True)
        island = brokers["island"].bootstrap
        create_topics(island, {"harbour.tsm.link": 1})  # (what the harbour's job would make)
        wait_for(island, "harbour.tsm.link", b'"type":"handover"', doomed)
        assert doomed.poll() is None, doomed.communicate()[1][-4000:]
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.communicate()
        killed_after = sum(n.isdigit() for n in os.listdir(tmp_path / "ck" / "harbour" / "commits"))
        finish(tsm("run", *harbour))
        finish(others)
        elapsed = time.monotonic() - started

        streams, dead = {}, {}
        for site, broker in brokers.items():
            values = consume_values(broker.bootstrap, "tsm.matches", from_beginning=True, timeout=3)
            streams[site] = [json.loads(v) for v in values]
            letters = consume_values(
                broker.bootstrap, "tsm.deadletter", from_beginning=True, timeout=1
            )
            dead[site] = [json.loads(v) for v in letters]
    finally:
        for broker in brokers.values():
            broker.stop()

    files = ("--subscriptions", folder / "subscriptions.jsonl", "--profiles")
    done = replay("--network", net, *files, folder / "profiles.jsonl")
    assert done.returncode == 0, done.stderr.decode()
    expected = [json.loads(line) for line in done.stdout.splitlines()]
    got = {
        json.dumps({**m, "site": site}, sort_keys=True) for site, ms in streams.items() for m in ms
    }
    assert sorted(got) == sorted(json.dumps(m, sort_keys=True) for m in expected)
    assert [m["to"] for m in expected if m["subscriber"] == "maria" and m["event"] == "moved"] == [
        "harbour",
        "island",
    ]
    one_matcher = [
        {k: v for k, v in m.items() if k != "site"} for m in expected if m["event"] != "moved"
    ]
    homes = {"maria": "centre", "harbour-ops": "harbour", "island-pier": "island"}
    assert_each_follows(streams, one_matcher, homes)
    assert [len(letters) for letters in dead.values()] == [0, 0, 0, 1]
    assert "nothing to move" in dead["island"][0]["reason"]
    written = sum(len(ms) for ms in streams.values())
    print(
        f"moves across 4 sites: {elapsed:.0f} s, {written} records written, {len(got)} "
        f"distinct; the harbour killed after {killed_after} committed batches"
    )


def wait_for(bootstrap: str, topic: str, needle: bytes, process: subprocess.Popen) -> None:
    """Read `topic` (one partition) until a record holds `needle` or `process` ends."""
    from confluent_kafka import Consumer, TopicPartition

    from connectors.config import confluent_config

    config = {"group.id": f"tsm-test-{os.getpid()}", "enable.auto.commit": False}
    consumer = Consumer(confluent_config(bootstrap, required=config))
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        while process.poll() is None:
            message = consumer.poll(0.05)
            if message is not None and not message.error() and needle in message.value():
                return
    finally:
        consumer.close()


def test_a_quenching_producer_equals_one_matcher_given_its_whole_file(tmp_path):
    """ROUTING §4 on real brokers and Spark: the three sites of the first test, and a
    quenching producer `buses` at the harbour (`[producers.buses]` in the network
    file) that sends its file with `tsm produce profiles --quench --network
    --producer` (killed once it has sent a profile, then started again with the
    same command), while the sites run with `--available-now`. The union of the
    matches topics, duplicates dropped, must equal `tsm replay`'s one matcher given
    every site's input and the producer's whole file, unquenched; the producer's
    link carries fewer publishes than its file holds (it held back what nobody
    wanted), and nothing goes to the dead letters."""
    subs, profiles = workload(seed=33)
    rng = random.Random(34)
    buses = []
    for n in range(80):
        x = rng.uniform(0, 100)
        ts = BASE + 40 * n + 20  # (between the other publishers' ts)
        buses.append(
            {
                "op": "publish",
                "id": f"bus{n % 20}",
                "space": "vehicles",
                "attrs": {"x": round(x, 2), "y": rng.randint(0, 99)},
                "valid_to": ts + rng.choice((500, 3000, 10**9)),
                "ts": ts,
                "payload": {"bus": n},
            }
        )
    brokers = [EmbeddedBroker(data_dir=tmp_path / f"broker-{s}").start() for s in SITES]
    try:
        net = write_network(
            tmp_path, brokers, subs, profiles, '[producers.buses]\nsite = "harbour"\n'
        )
        harbour = brokers[0].bootstrap
        # (what the harbour's job makes: the producer's link topics, on its cluster)
        create_topics(harbour, {"buses.tsm.link": 1, "buses.harbour.tsm.link": 1})
        (tmp_path / "buses.jsonl").write_bytes(b"\n".join(lines(buses)) + b"\n")
        common = ["--network", str(net), "--available-now", "--checkpoint", str(tmp_path / "ck")]
        common += ["--spark-log", str(tmp_path / "spark.log")]
        started = time.monotonic()
        sites = tsm("run", *common, *(f"--site={s}" for s in SITES))
        produce = ["produce", "profiles", str(tmp_path / "buses.jsonl"), "--quench"]
        produce += ["--network", str(net), "--producer", "buses", "--quench-wait", "900"]
        produce += ["--state", str(tmp_path / "buses.state")]
        producer = tsm(*produce)
        # (killed once it has sent a profile, started again: it goes on from its state)
        wait_for(harbour, "buses.tsm.link", b'"type":"profile"', producer)
        producer.kill()
        producer.wait()
        producer = tsm(*produce)
        finish(producer)
        finish(sites)
        elapsed = time.monotonic() - started

        got, dead = read_sites(brokers)
        link = list(consume_records(harbour, "buses.tsm.link", from_beginning=True, timeout=3))
        # (by link number: the restarted producer sends again what Kafka had not
        # acknowledged to the killed one, with the same numbers)
        sent = {key: json.loads(value) for key, value in link}
    finally:
        for broker in brokers:
            broker.stop()
    assert dead == []
    forwarded = [
        m for m in sent.values() if m["type"] == "profile" and m["record"].get("op") != "retract"
    ]
    assert 0 < len(forwarded) < len(buses)

    expected = one_matcher(tmp_path, subs, lines(profiles) + lines(buses))
    assert any(m["profile_id"].startswith("bus") for m in expected)
    unique = {json.dumps(m, sort_keys=True) for _, m in got}
    assert sorted(unique) == sorted(json.dumps(m, sort_keys=True) for m in expected)
    print(
        f"a quenching producer at the harbour: {elapsed:.0f} s, {len(forwarded)} of "
        f"{len(buses)} buses sent to its site; {len(link)} link records, {len(sent)} distinct"
    )
