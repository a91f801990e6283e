"""`tsm demo` end to end, as a user runs it: a subprocess that must end by itself.

The scenario is replayed fast (`--speed 60`); its matches must be what the
engine (`tsm replay`) gives on the same files: batch cuts cannot change them,
since the scenario is published in event-time order and nothing is late.
Stdout is the show and nothing else; stderr the demo's own log lines, none
of Spark's or librdkafka's (those go to the data dir's spark.log).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from matcher.engine import Engine, Input
from matcher.records import Source

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "examples" / "demo"


def expected_events() -> Counter:
    """(event, reason) counts of the engine on the scenario files."""
    items = []
    for kind, name in (("subscription", "subscriptions"), ("profile", "profiles")):
        lines = (SCENARIO / f"{name}.jsonl").read_bytes().splitlines()
        items += [Input(kind, line, Source(file=name, line=i)) for i, line in enumerate(lines)]
    outputs = Engine().process_batch(items)
    return Counter((o.value["event"], o.value["reason"]) for o in outputs if o.topic == "matches")


SHOW = re.compile(
    r"── \d\d:\d\d:\d\d published \d+ \w+(, \d+ \w+)?"  # a tick
    r"|\d\d:\d\d:\d\d  (match|unmatch|update) +[\w-]+ +\S+ → \S+ \(\S+\)"  # a match record
    r"| {10}dead letter  \S+: .+"
)


@pytest.mark.slow
def test_demo_runs_to_the_end_and_summarizes(tmp_path):
    command = [sys.executable, "-m", "tsm_cli", "demo", "--speed", "60"]
    command += ["--data-dir", str(tmp_path / "demo")]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, err[-3000:]
    assert "Spark UI at" in err
    assert re.search(r"^\d\d:\d\d:\d\d  match    new-profile +\S+ → \S+ \(\S+\)$", out, re.M)
    assert "summary (scenario done)" in out
    show, summary = out.split("\n── summary", 1)
    assert [line for line in show.splitlines() if not SHOW.fullmatch(line)] == []
    assert [line for line in err.splitlines() if not line.startswith("tsm demo: ")] == []
    assert "Python worker" in (tmp_path / "demo" / "spark.log").read_text()  # not here
    got = Counter(
        {
            (m["event"], m["reason"]): int(m["n"])
            for m in re.finditer(
                r"^  (?P<event>\w+) +(?P<reason>[\w-]+) +(?P<n>\d+)$", summary, re.M
            )
        }
    )
    assert got == expected_events()
    assert "dead letters: 3" in summary
    assert not (tmp_path / "demo" / "broker" / "tsm-broker.json").exists()  # broker stopped


@pytest.mark.parametrize("speed", ["-1", "nan", "inf"])
def test_a_speed_that_cannot_pace_is_refused_before_anything_starts(tmp_path, speed):
    done = subprocess.run(
        [sys.executable, "-m", "tsm_cli", "demo", "--speed", speed, "--data-dir", tmp_path],
        cwd=REPO,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == [
        "tsm demo: error: --speed must be a finite number, 0 or more"
    ]
    assert not any(tmp_path.iterdir())  # no broker was started


@pytest.mark.slow
def test_the_network_demo_with_moves_equals_the_offline_network(tmp_path):
    """`tsm demo --network --moves`: four brokers, the sites' jobs in one Spark; the
    ferry's and Maria's moves show as `moved` markers where she leaves, and the demo
    itself checks every site's records against `tsm replay --network`'s."""
    command = [sys.executable, "-m", "tsm_cli", "demo", "--network", "--moves"]
    command += ["--data-dir", str(tmp_path / "demo")]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 0, (out + done.stderr)[-3000:]
    assert "equal the offline network's (tsm replay --network), site by site" in out
    moves = re.findall(r"^\d\d:\d\d:\d\d  moved    maria → (\w+)$", out, re.M)
    assert sorted(moves) == ["harbour", "island"]  # (from the centre, then the harbour)
    assert "── dead letter at island: nothing to move" in out
