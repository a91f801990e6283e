"""A Spark checkpoint written before `streaming.state` existed resumes and matches.

`tests/fixtures/state_v1/checkpoint.tar.gz` was written by `tsm run` at commit
1603d57 over `inputs/*-1..5.jsonl` (`make_fixtures.py` there): format-1
snapshots, their facts and the change log since, timers. A fresh broker gets the
same records again, in the same order, so that their offsets are those the
checkpoint holds; today's `tsm run` resumes from the checkpoint and reads the
rest (`inputs/*-6.jsonl`). What it writes must be what `tsm replay` makes of
the whole input less what the runs of 1603d57 wrote (`phase1-*.jsonl.gz`).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from connectors.admin import create_topics
from connectors.broker import EmbeddedBroker
from connectors.consume import consume_values
from connectors.produce import produce_lines
from streaming.config import load_config
from streaming.state.codec import FORMAT_VERSION, snapshot_version
from streaming.state.reader import committed_state

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "state_v1"
TSM = Path(sys.executable).parent / "tsm"
FIRST_SLICES = range(1, 6)  # what the checkpoint has read
LAST_SLICE = 6


def _lines(name: str) -> list[bytes]:
    return (FIXTURES / "inputs" / name).read_bytes().splitlines()


def _written_before(role: str) -> list[bytes]:
    """What the runs of 1603d57 wrote to the matches or dead-letter topic."""
    return gzip.decompress((FIXTURES / f"phase1-{role}.jsonl.gz").read_bytes()).splitlines()


def _tsm(*args: str, cwd: Path) -> str:
    """Run `tsm`; its stderr (the progress log). Fails the test on a non-zero exit."""
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [str(TSM), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr


def _relocate(checkpoint: Path) -> None:
    """Make the unpacked checkpoint usable where it is: Spark's operator metadata
    names the state schema files by their absolute path (the fixture's was a
    temporary directory), so that path is rewritten, and the metadata files'
    checksums (which Hadoop checks only where they exist) are dropped."""
    for path in checkpoint.glob("state/*/_metadata/v2/*"):
        if path.name.startswith("."):
            path.unlink()  # (.N.crc)
            continue
        text = path.read_text(encoding="utf-8")
        moved = re.sub(r'"file:[^"]*?/state/', lambda _: f'"file:{checkpoint}/state/', text)
        path.write_text(moved, encoding="utf-8")


def _snapshot_versions(spark, checkpoint: Path) -> Counter:
    state = committed_state(spark, str(checkpoint), "snapshot")
    return Counter(snapshot_version(bytes(row[0])) for row in state.select("value.blob").collect())


def _dead_letters(values) -> Counter:
    """Dead letters without their `source` (a file line in replay, an offset here)."""
    return Counter((d["reason"], d["raw"]) for d in map(json.loads, values))


def test_a_checkpoint_of_1603d57_resumes_and_matches(spark, tmp_path):
    config = load_config(FIXTURES / "tsm.toml")
    topics = config.topics
    with tarfile.open(FIXTURES / "checkpoint.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    checkpoint = tmp_path / "checkpoint"
    _relocate(checkpoint)
    # What the fixture claims to be: snapshots of format 1, the snapshots' facts, and
    # batch entries logged since (run 5's, one per cell) for the resumed run to replay.
    assert set(_snapshot_versions(spark, checkpoint)) == {1}
    log = committed_state(spark, str(checkpoint), "log").select("user_map_key.kind").collect()
    kinds = Counter(row[0] for row in log)
    assert kinds["snapshot"] and kinds["changes"] + kinds["changes.1"] >= 3

    with EmbeddedBroker(data_dir=tmp_path / "broker") as broker:
        bootstrap = broker.bootstrap
        create_topics(bootstrap, {topics.subscriptions: 2, topics.profiles: 2})
        for number in FIRST_SLICES:
            produce_lines(bootstrap, topics.subscriptions, _lines(f"subscriptions-{number}.jsonl"))
            produce_lines(bootstrap, topics.profiles, _lines(f"profiles-{number}.jsonl"))
        from confluent_kafka import Consumer, TopicPartition

        from connectors.config import confluent_config

        consumer = Consumer(confluent_config(bootstrap, required={"group.id": "offsets"}))
        try:
            ends = {
                topic: [
                    consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in (0, 1)
                ]
                for topic in (topics.subscriptions, topics.profiles)
            }
        finally:
            consumer.close()
        assert ends == json.loads((FIXTURES / "offsets.json").read_text())
        produce_lines(bootstrap, topics.subscriptions, _lines(f"subscriptions-{LAST_SLICE}.jsonl"))
        produce_lines(bootstrap, topics.profiles, _lines(f"profiles-{LAST_SLICE}.jsonl"))

        said = _tsm(
            "run",
            "--bootstrap",
            bootstrap,
            "--config",
            str(FIXTURES / "tsm.toml"),
            "--checkpoint",
            str(checkpoint),
            "--available-now",
            cwd=tmp_path,
        )
        batches = [json.loads(line) for line in said.splitlines() if line.startswith('{"batch"')]
        resumed = [b for b in batches if b["input_rows"]]
        assert resumed and resumed[0]["cache_misses"] >= 4  # every key rebuilt from old state
        matches = list(consume_values(bootstrap, topics.matches, from_beginning=True, timeout=5))
        dead = list(consume_values(bootstrap, topics.deadletter, from_beginning=True, timeout=5))
    assert _snapshot_versions(spark, checkpoint)[FORMAT_VERSION]  # (compacted in today's format)

    # tsm replay over the whole input, one file per topic.
    for topic in ("subscriptions", "profiles"):
        lines = [line for n in (*FIRST_SLICES, LAST_SLICE) for line in _lines(f"{topic}-{n}.jsonl")]
        (tmp_path / f"{topic}.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    _tsm(
        "replay",
        "--subscriptions",
        "subscriptions.jsonl",
        "--profiles",
        "profiles.jsonl",
        "--out",
        "replay-matches.jsonl",
        "--dead-letter",
        "replay-deadletters.jsonl",
        cwd=tmp_path,
    )
    replayed = Counter((tmp_path / "replay-matches.jsonl").read_bytes().splitlines())
    before = Counter(_written_before("matches"))
    assert not before - replayed  # what 1603d57 wrote is the replay's too
    assert Counter(matches) == replayed - before
    assert len(matches) > 1000 and b'"reason":"expired"' in b"".join(matches)
    replay_dead = (tmp_path / "replay-deadletters.jsonl").read_bytes().splitlines()
    assert not _written_before("deadletters") and len(dead) == 2
    assert _dead_letters(dead) == _dead_letters(replay_dead)
