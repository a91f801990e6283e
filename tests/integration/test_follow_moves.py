"""`tsm consume matches --follow-moves` on real sites' matches topics (ROUTING §5).

The sites of `examples/network/moves` share the session's broker, each with
its own topic prefix; each site's matches topic (two partitions, keyed by
subscriber) holds the records the offline network made there, in the order
the site made them. Following the commuter from the centre, the command
prints what one matcher that never saw her move gives her.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from connectors.admin import create_topics
from connectors.config import confluent_config
from matcher.events import encode
from matcher.routing.network import parse_network
from matcher.routing.replay import replay_network, site_streams
from tests.test_replay import EXAMPLES
from tests.test_routing_moves import items_of, one_matcher

FOLDER = EXAMPLES / "network" / "moves"
pytestmark = pytest.mark.integration


def test_following_the_commuter_across_three_sites_gives_one_matchers_records(bootstrap, tmp_path):
    from confluent_kafka import Producer

    subs = [json.loads(line) for line in (FOLDER / "subscriptions.jsonl").read_text().splitlines()]
    profiles = [json.loads(line) for line in (FOLDER / "profiles.jsonl").read_text().splitlines()]
    text = (FOLDER / "net.toml").read_text()
    prefix = f"follow{os.getpid()}"
    for site in ("harbour", "centre", "airport", "island"):
        text = text.replace(
            f"[sites.{site}]\nbootstrap = ",
            f'[sites.{site}]\nprefix = "{prefix}.{site}."\nbootstrap = ',
        )
    text = text.replace("localhost:9092", bootstrap).replace("localhost:9093", bootstrap)
    text = text.replace("localhost:9094", bootstrap).replace("localhost:9095", bootstrap)
    net_file = tmp_path / "net.toml"
    net_file.write_text(text)
    net = parse_network(text)
    out = replay_network(net, items_of(subs, profiles))
    streams = site_streams(out.result)
    create_topics(bootstrap, {f"{prefix}.{s}.tsm.matches": 2 for s in streams})
    producer = Producer(confluent_config(bootstrap, None, required={}))
    for site, records in streams.items():
        for record in records:
            key = record["subscriber"].encode()
            producer.produce(f"{prefix}.{site}.tsm.matches", encode(record), key)
    assert producer.flush(30) == 0

    done = subprocess.run(
        [sys.executable, "-m", "tsm_cli", "consume", "matches", "--network", str(net_file)]
        + ["--subscriber", "maria", "--follow-moves", "--site", "centre", "--timeout", "3"],
        capture_output=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr.decode()
    got = [json.loads(line) for line in done.stdout.splitlines()]
    expected = [r for r in one_matcher(subs, profiles) if r["subscriber"] == "maria"]
    assert got == expected and len(got) == 6
    assert not any(r["event"] == "moved" for r in got)
