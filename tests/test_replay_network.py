"""`tsm replay --network` end to end, as a user runs it (a subprocess)."""

from __future__ import annotations

import json

from tests.test_replay import EXAMPLES, example_args, replay

NET = """routing = "covering"
links = [["harbour", "centre"], ["centre", "airport"]]
[sites.harbour]
bootstrap = "localhost:9092"
[sites.centre]
bootstrap = "localhost:9093"
[sites.airport]
bootstrap = "localhost:9094"
"""


def test_every_site_in_one_process_gives_one_matchers_records(tmp_path):
    net = tmp_path / "net.toml"
    net.write_text(NET)
    subs = tmp_path / "s.jsonl"
    lines = (EXAMPLES / "subscriptions.jsonl").read_text().splitlines()
    sites = ["airport", "centre", "harbour"]
    placed = []
    for i, line in enumerate(lines):
        record = json.loads(line) if line.strip() else None
        if isinstance(record, dict) and "where" in record and ">>" not in record["where"]:
            line = json.dumps({**record, "site": sites[i % 3]})
        placed.append(line)
    subs.write_text("\n".join(placed) + "\n")
    stats = tmp_path / "stats.json"
    args = example_args(subs=subs)
    done = replay(*args, "--network", net, "--stats", stats, "--seed", "7")
    assert done.returncode == 0, done.stderr.decode()
    single = replay(*args)
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert records and {r["site"] for r in records} <= set(sites)
    plain = [{k: v for k, v in r.items() if k != "site"} for r in records]
    assert plain == [json.loads(line) for line in single.stdout.splitlines()]
    counts = json.loads(stats.read_text())
    assert set(counts["links"]) == {
        "harbour->centre",
        "centre->harbour",
        "centre->airport",
        "airport->centre",
    }
    assert counts["total"]["interest_messages"] > 0 and "latency_ms" in counts
    assert b"2 dead letters" in done.stderr  # (the broken where and the NaN, as ever)
    again = replay(*args, "--network", net, "--seed", "8")
    assert again.stdout == done.stdout  # whatever the delays
    assert b"interest" in again.stderr and b"total" in again.stderr  # the table


def test_a_bad_network_file_is_one_line_naming_the_fault(tmp_path):
    net = tmp_path / "net.toml"
    net.write_text(NET.replace('["centre", "airport"]', '["centre", "moon"]'))
    done = replay(*example_args(), "--network", net)
    assert done.returncode == 2 and b"Traceback" not in done.stderr
    (line,) = done.stderr.decode().strip().splitlines()
    assert "'moon'" in line and "net.toml" in line
    missing = replay(*example_args(), "--network", tmp_path / "nope.toml")
    assert missing.returncode == 2 and b"cannot read" in missing.stderr


def test_flags_that_do_not_go_together_are_refused(tmp_path):
    net = tmp_path / "net.toml"
    net.write_text(NET)
    assert b"--stats needs --network" in replay(*example_args(), "--stats", tmp_path / "x").stderr
    done = replay(*example_args(), "--network", net, "--batch-lines", "3")
    assert done.returncode == 2 and b"one matcher" in done.stderr


def test_the_network_example_catches_a_ferry_up_over_two_hops():
    """examples/network: a subscriber at the airport comes after the harbour published
    its ferry, and still gets it (ROUTING §4), from the airport's own site."""
    folder = EXAMPLES / "network"
    done = replay(
        "--network",
        folder / "net.toml",
        *example_args(folder / "subscriptions.jsonl", folder / "profiles.jsonl"),
    )
    assert done.returncode == 0, done.stderr.decode()
    records = [json.loads(line) for line in done.stdout.splitlines()]
    ferry = [
        (r["event"], r["reason"], r["site"])
        for r in records
        if r["subscription_id"] == "ferry-watch"
    ]
    assert ferry == [("match", "new-subscription", "airport"), ("unmatch", "retract", "airport")]
    single = replay(*example_args(folder / "subscriptions.jsonl", folder / "profiles.jsonl"))
    assert [{k: v for k, v in r.items() if k != "site"} for r in records] == [
        json.loads(line) for line in single.stdout.splitlines()
    ]
