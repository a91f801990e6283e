"""What the fault tests share: `tsm run` as a killable child, a backlog whose
output does not depend on where micro-batches are cut, reading a topic whole,
dropping duplicates, and the reference output of `tsm replay`.

`tsm run` runs as a subprocess in a session of its own, so that a test can
stop it as an operator would (a signal to the process, or to its group as a
terminal's Ctrl-C) or crash it as a power cut would (`JobProcess.kill`:
SIGKILL to every process it started: the driver, the JVM and the Python
workers, which Spark's daemon puts in process groups of their own).

The backlog (`stepped_workload`) gives every record a time of its own
(subscriptions at `T0 + STEP * i`, profiles half a step later) and each
partition its records in time order, so that the job's output equals a
one-batch `tsm replay` whatever batches the job reads it in and however
often it restarts: a batch takes each partition's records up to a common
time (SEMANTICS §3), so every record of a batch is earlier than every record
of the next, none is late, and records meet in the order of one batch (§5).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from connectors.config import confluent_config

T0 = 1_700_000_000_000
STEP = 10  # ms between two records of one topic
REPO = Path(__file__).resolve().parents[2]


# -- the input ---------------------------------------------------------------------


def stepped_workload(
    seed: int, steps: int, spaces: Sequence[str] = ("a", "b", "c")
) -> tuple[list[bytes], list[bytes]]:
    """`steps` subscription records and as many profile records (JSON lines), the
    i-th of each at step i (see the module docstring), with churn: lifetimes and
    validities that expire, subscriptions changed and unsubscribed, profiles moved
    (published again under their id) and retracted."""
    rng = random.Random(seed)
    kinds = ("bus", "tram", "car")
    subs: list[bytes] = []
    profiles: list[bytes] = []
    held_subs: list[tuple[str, str]] = []  # (id, space)
    held_profiles: list[tuple[str, str]] = []
    for i in range(steps):
        ts = T0 + STEP * i
        roll = rng.random()
        if held_subs and roll < 0.12:
            ident, space = held_subs.pop(rng.randrange(len(held_subs)))
            record = {"op": "unsubscribe", "id": ident, "space": space, "ts": ts}
        else:
            if held_subs and roll < 0.25:  # a change of a held subscription
                ident, space = rng.choice(held_subs)
            else:
                ident, space = f"s{i}", rng.choice(spaces)
                held_subs.append((ident, space))
            lo = rng.randrange(0, 95)
            where = f"x BETWEEN {lo} AND {lo + rng.randrange(1, 12)}"
            if rng.random() < 0.5:
                where += f" AND kind = '{rng.choice(kinds)}'"
            record = {"op": "subscribe", "id": ident, "space": space, "ts": ts}
            record |= {"subscriber": f"u{rng.randrange(9)}", "where": where}
            record["relation"] = rng.choice(("overlaps", "covers"))
            if rng.random() < 0.5:
                record["valid_to"] = ts + STEP * rng.randrange(5, 400)
        subs.append(json.dumps(record).encode())
        ts += STEP // 2
        roll = rng.random()
        if held_profiles and roll < 0.08:
            ident, space = held_profiles.pop(rng.randrange(len(held_profiles)))
            record = {"op": "retract", "id": ident, "space": space, "ts": ts}
        else:
            if held_profiles and roll < 0.4:  # a held profile moves
                ident, space = rng.choice(held_profiles)
            else:
                ident, space = f"p{i}", rng.choice(spaces)
                held_profiles.append((ident, space))
            lo = rng.randrange(0, 100)
            record = {"op": "publish", "id": ident, "space": space, "ts": ts}
            record["attrs"] = {"x": [lo, lo + rng.randrange(0, 6)], "kind": rng.choice(kinds)}
            record["valid_to"] = ts + STEP * rng.randrange(0, 200)
            record["payload"] = {"step": i}
        profiles.append(json.dumps(record).encode())
    return subs, profiles


def replay(
    subscriptions: Sequence[bytes], profiles: Sequence[bytes], work: Path, lateness_ms: int = 0
) -> tuple[Counter, Counter]:
    """What `tsm replay` writes for these lines (its match records, its dead letters),
    as multisets of lines; `work` holds the files."""
    from streaming.replay import replay as run_replay

    work.mkdir(parents=True, exist_ok=True)
    subs_path, profiles_path = work / "subscriptions.jsonl", work / "profiles.jsonl"
    subs_path.write_bytes(b"".join(line + b"\n" for line in subscriptions))
    profiles_path.write_bytes(b"".join(line + b"\n" for line in profiles))
    with open(work / "matches.jsonl", "wb") as out, open(work / "dead.jsonl", "wb") as dead:
        run_replay(str(subs_path), str(profiles_path), out, dead, lateness_ms=lateness_ms)
    return (
        Counter((work / "matches.jsonl").read_bytes().splitlines()),
        Counter((work / "dead.jsonl").read_bytes().splitlines()),
    )


# -- the job -------------------------------------------------------------------------------


class JobProcess:
    """`tsm run` as a child in a session of its own, its output in `log_path`."""

    def __init__(
        self, bootstrap: str, config: Path, checkpoint: Path, *flags: str, log_path: Path
    ) -> None:
        command = [sys.executable, "-m", "tsm_cli", "run", "--bootstrap", bootstrap]
        command += ["--config", str(config), "--checkpoint", str(checkpoint), *flags]
        self.log_path = log_path
        self.started = time.monotonic()
        with open(log_path, "ab") as log:
            log.write(f"$ tsm {' '.join(command[3:])}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                command,
                cwd=REPO,
                env=os.environ | {"PYSPARK_PYTHON": sys.executable},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def batches(self) -> list[dict]:
        """The batch log's records of the batches this run finished."""
        return [record for record in batch_log(self.log()) if "batch" in record]

    def send(self, signum: int, *, group: bool = False) -> None:
        """`signum` to the `tsm run` process, or to its process group (as a terminal's
        Ctrl-C reaches the whole foreground group)."""
        if group:
            os.killpg(self.pid, signum)
        else:
            self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        """The exit status; kills the job and fails if it takes longer than `timeout`."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"tsm run did not end within {timeout:g}s; log:\n{self.log()}"
            ) from None

    def kill(self) -> None:
        """SIGKILL every process of the job at once, as a crash of its machine would."""
        tree = descendants(self.pid)
        for pid in tree:  # frozen first, so that none forks or reacts to another's death
            _signal(pid, signal.SIGSTOP)
        for pid in tree:
            _signal(pid, signal.SIGKILL)
        self.process.wait()
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in tree) and time.monotonic() < deadline:
            time.sleep(0.05)

    def freeze(self) -> list[int]:
        """SIGSTOP every process of the job; returns them, for `thaw`."""
        tree = descendants(self.pid)
        for pid in tree:
            _signal(pid, signal.SIGSTOP)
        return tree

    @staticmethod
    def thaw(tree: Iterable[int]) -> None:
        for pid in tree:
            _signal(pid, signal.SIGCONT)


def descendants(root: int) -> list[int]:
    """`root` and every live process below it (from /proc, by parent pid)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def batch_log(text: str) -> list[dict]:
    """The JSON lines `tsm run` logs (per batch, at query start and failure)."""
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                pass
    return records


def wait_until(condition, job: JobProcess, timeout: float = 300) -> None:
    """Until `condition()` holds; fails if `job` ends first or it takes `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert job.running(), f"the job ended:\n{job.log()}"
        assert time.monotonic() < deadline, f"waited {timeout:g}s:\n{job.log()}"
        time.sleep(0.2)


def assert_no_failure(log: str) -> None:
    """No query failure and no traceback in a `tsm run` log."""
    for sign in ("Traceback", "the query failed", '"failed": '):
        assert sign not in log, log


# -- the output ----------------------------------------------------------------------------


def read_topic(bootstrap: str, topic: str, *, read_committed: bool = False) -> list[bytes]:
    """Every record value of `topic` up to its end offsets now, partition by partition
    (a null value as None).

    The end is the high watermark; read_committed, records of aborted
    transactions are skipped, and a partition ends where the consumer's position
    reaches the end or nothing more comes for 5 s (an open transaction)."""
    from confluent_kafka import Consumer, TopicPartition

    isolation = "read_committed" if read_committed else "read_uncommitted"
    group = f"tests-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        confluent_config(
            bootstrap,
            required={"group.id": group, "isolation.level": isolation, "enable.auto.commit": False},
        )
    )
    values = []
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        for partition in sorted(partitions):
            tp = TopicPartition(topic, partition, 0)
            low, end = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            if end <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            quiet_until = time.monotonic() + 5
            while time.monotonic() < quiet_until:
                messages = consumer.consume(10_000, timeout=0.2)
                for message in messages:
                    assert message.error() is None, message.error()
                    values.append(message.value())
                if messages:
                    quiet_until = time.monotonic() + 5
                if consumer.position([tp])[0].offset >= end:
                    break
            consumer.unassign()
    finally:
        consumer.close()
    return values


def match_ids(values: Iterable[bytes]) -> list[str]:
    return [json.loads(value)["match_id"] for value in values]


def drop_duplicates(values: Iterable[bytes]) -> list[bytes]:
    """Match records without the repeats of a `match_id`, the first of each kept;
    a repeat must be the same record (a batch written again after a crash)."""
    first: dict[str, bytes] = {}
    for value in values:
        ident = json.loads(value)["match_id"]
        kept = first.setdefault(ident, value)
        assert kept == value, f"two different records with match_id {ident}"
    return list(first.values())


def assert_equals_replay(values: Iterable[bytes], expected: Counter) -> None:
    """`values` are `expected` (a multiset of match records), no more, no less."""
    got = Counter(values)
    missing, extra = expected - got, got - expected
    assert not missing and not extra, (
        f"{sum(missing.values())} match records missing, {sum(extra.values())} extra, of "
        f"{sum(expected.values())}; e.g. {list(missing)[:2]} {list(extra)[:2]}"
    )
