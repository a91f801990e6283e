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
from connectors.consume import consume_values
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


def test_three_sites_equal_one_matcher_across_a_sigkill(tmp_path):
    subs, profiles = workload(seed=32)
    brokers = [EmbeddedBroker(data_dir=tmp_path / f"broker-{s}").start() for s in SITES]
    try:
        toml = 'routing = "covering"\nidle_ms = 2000\n'
        toml += 'links = [["harbour", "centre"], ["centre", "airport"]]\n'
        for site, broker in zip(SITES, brokers, strict=True):
            toml += f'[sites.{site}]\nbootstrap = "{broker.bootstrap}"\n'
            create_topics(broker.bootstrap, dict.fromkeys(TOPICS, 1))
            produce_lines(broker.bootstrap, "tsm.subscriptions", lines(subs, site))
            produce_lines(broker.bootstrap, "tsm.profiles", lines(profiles, site))
        net = tmp_path / "net.toml"
        net.write_text(toml)
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

        got, dead = [], []
        for site, broker in zip(SITES, brokers, strict=True):
            values = consume_values(broker.bootstrap, "tsm.matches", from_beginning=True, timeout=3)
            got += [(site, json.loads(v)) for v in values]
            dead += list(
                consume_values(broker.bootstrap, "tsm.deadletter", from_beginning=True, timeout=1)
            )
    finally:
        for broker in brokers:
            broker.stop()
    assert dead == []

    # one matcher: every site's input, in one pair of files
    (tmp_path / "subs.jsonl").write_bytes(b"\n".join(lines(subs)) + b"\n")
    (tmp_path / "profiles.jsonl").write_bytes(b"\n".join(lines(profiles)) + b"\n")
    replay = subprocess.run(
        [str(TSM), "replay", "--subscriptions", str(tmp_path / "subs.jsonl")]
        + ["--profiles", str(tmp_path / "profiles.jsonl")],
        capture_output=True,
        check=True,
    )
    expected = [json.loads(line) for line in replay.stdout.splitlines()]
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
