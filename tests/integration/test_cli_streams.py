"""`tsm run` as a user runs it, streams apart: nothing on stdout (its output is
Kafka), and with -q, stderr holds the batch log only, one JSON object a line,
while Spark's own output goes to --spark-log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from connectors.consume import consume_values
from connectors.produce import produce_lines

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SUB = b'{"op":"subscribe","id":"s","space":"a","subscriber":"u","where":"x > 1","ts":1000}'
PUB = b'{"op":"publish","id":"p","space":"a","attrs":{"x":5},"ts":2000}'


def test_run_writes_nothing_to_stdout_and_only_its_batch_log_with_quiet(
    bootstrap, new_topic, tmp_path
):
    topics = {role: new_topic(role) for role in ("subs", "profiles", "matches", "dead")}
    config = tmp_path / "tsm.toml"
    config.write_text(
        f'bootstrap = "{bootstrap}"\nquery_name = "streams"\n[topics]\n'
        f'subscriptions = "{topics["subs"]}"\nprofiles = "{topics["profiles"]}"\n'
        f'matches = "{topics["matches"]}"\ndeadletter = "{topics["dead"]}"\n'
    )
    produce_lines(bootstrap, topics["subs"], [SUB])
    produce_lines(bootstrap, topics["profiles"], [PUB])
    spark_log = tmp_path / "spark.log"
    command = [sys.executable, "-m", "tsm_cli", "run", "--available-now", "-q"]
    command += ["--checkpoint", str(tmp_path / "ck"), "--spark-log", str(spark_log)]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )  # (tsm.toml from the working directory: no --config, no --bootstrap)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == ""
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert records[0]["query"] == "streams"
    batches = [r for r in records if "batch" in r]
    assert batches and sum(b["matches"] for b in batches) == 1
    assert "Python worker" in spark_log.read_text()
    (match,) = consume_values(bootstrap, topics["matches"], from_beginning=True, timeout=5)
    assert json.loads(match)["subscription_id"] == "s"
