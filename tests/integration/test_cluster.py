"""The job on a real Spark standalone cluster: a master and two workers of one core,
started from the installed pyspark (`streaming.standalone`), shared by the module.

Each test runs `tsm run --master spark://...` as a user does, in a process of its
own (one Spark application each). Its executors run an interpreter that has the
job's dependencies but not the project (`python_without_project`), so every line
of the job's code they run comes from the package the driver ships; the
checkpoint is a local directory, which every executor of this machine sees.

The expected output is `matcher.engine.Engine` (what `tsm replay` runs) on the
records read back from the topics (`test_job`). Where a fault makes Spark run
part of a batch again, the workload has unique ids and nothing expires or is
late, so the cuts do not matter, and the comparison is of the set of (event,
subscription, profile, match_id) after dropping duplicates; a `read_committed`
reader of the exactly-once mode must see no duplicate at all.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from connectors.consume import consume_values
from connectors.produce import produce_lines
from streaming.placement import partition_of, spread_keys
from streaming.standalone import LocalCluster, python_without_project
from tests.integration.test_job import (
    expected,
    inputs_of,
    make_topics,
    output,
    triples,
    workload,
    write_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    started = time.monotonic()
    with LocalCluster(tmp_path_factory.mktemp("cluster"), workers=2, memory="3g") as running:
        print(f"cluster up in {time.monotonic() - started:.1f}s", file=sys.stderr)
        yield running


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return python_without_project(tmp_path_factory.mktemp("python"))


@pytest.fixture(scope="module")
def on_cluster(bootstrap: str, cluster: LocalCluster, executor_python: Path):
    """`on_cluster(config, directory, *flags)` starts `tsm run` on the cluster."""

    def start(config: Path, directory: Path, *flags: str) -> ClusterRun:
        return ClusterRun(bootstrap, cluster, executor_python, config, directory, *flags)

    return start


# -- running the job on the cluster ----------------------------------------------------


class ClusterRun:
    """`tsm run --master <cluster>` as a child process; its stderr (the batch log and the
    human lines) in `log`, Spark's own output in `spark_log`."""

    def __init__(
        self,
        bootstrap: str,
        cluster: LocalCluster,
        python: Path,
        config: Path,
        directory: Path,
        *flags: str,
    ) -> None:
        self.log, self.spark_log = directory / "run.log", directory / "spark.log"
        command = [sys.executable, "-m", "tsm_cli", "run", "--bootstrap", bootstrap]
        command += ["--master", cluster.master_url, "--executor-python", str(python)]
        command += ["--executor-memory", "1g", "--config", str(config)]
        command += ["--checkpoint", str(directory / "ck"), "--spark-log", str(self.spark_log)]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [*command, *flags],
                cwd=directory,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait(self, timeout: float = 600) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise

    def lines(self) -> list[dict]:
        """The batch log so far (one JSON object a line)."""
        text = self.log.read_text(errors="replace")
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def batches(self) -> list[dict]:
        return [line for line in self.lines() if "batch" in line]

    def placed(self) -> list[dict[str, str]]:
        """Each batch's `placed` (state key → executor), in order, where it has one."""
        return [b["placed"] for b in self.batches() if "placed" in b]

    def ui(self) -> str:
        """The driver's Spark UI, from the line `tsm run` logs at start."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and self.process.poll() is None:
            for line in self.log.read_text(errors="replace").splitlines():
                if "Spark UI at http" in line:
                    return line.rsplit("Spark UI at ", 1)[1].strip()
            time.sleep(1)
        raise AssertionError(f"no Spark UI logged:\n{self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def __enter__(self) -> ClusterRun:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def rest(ui: str, path: str) -> list | dict | None:
    """The driver's REST API answer, or None if it does not answer within 30 s (a busy
    machine: ask again)."""
    try:
        with urllib.request.urlopen(f"{ui}/api/v1/{path}", timeout=30) as answer:
            return json.load(answer)
    except (OSError, ValueError):
        return None


def busy_executor(run: ClusterRun, after_batches: int, timeout: float = 300) -> tuple[str, str]:
    """(application id, executor id) of an executor with a task running, once the batch
    log has `after_batches` batches: the moment to kill it mid-batch."""
    ui = run.ui()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert run.process.poll() is None, f"the job ended first:\n{run.tail()}"
        apps = rest(ui, "applications") if len(run.batches()) >= after_batches else None
        if apps:
            (app,) = apps
            for executor in rest(ui, f"applications/{app['id']}/executors") or ():
                if executor["id"] != "driver" and executor["activeTasks"] > 0:
                    return app["id"], executor["id"]
        time.sleep(0.2)
    raise AssertionError(f"no executor busy after {after_batches} batches:\n{run.tail()}")


def executor_process(app: str, executor: str) -> psutil.Process:
    """The JVM of an executor of `app` on this machine."""
    for process in psutil.process_iter(["cmdline"]):
        args = process.info["cmdline"] or []
        if EXECUTOR_CLASS in args and app in args:
            if args[args.index("--executor-id") + 1] == executor:
                return process
    raise AssertionError(f"no JVM for executor {executor} of {app}")


def kill_tree(process: psutil.Process) -> list[int]:
    """SIGKILL `process` and every process below it, all at once; their pids."""
    victims = [process, *process.children(recursive=True)]
    for victim in victims:
        try:
            victim.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(victims, timeout=10)
    return [victim.pid for victim in victims]


def executors_by_worker(cluster: LocalCluster, app: str) -> dict[str, str]:
    """Executor id → the worker that ran it, from the workers' work dirs."""
    return {
        executor.name: worker.name
        for worker in cluster.workers
        for executor in (Path(worker.work_dir) / app).glob("*")
    }


def application_of(run: ClusterRun, cluster: LocalCluster) -> str:
    """The application id of a finished run, from the workers' work dirs (the newest)."""
    apps = {p.name: p.stat().st_mtime for w in cluster.workers for p in Path(w.work_dir).glob("*")}
    return max(apps, key=apps.__getitem__)


def assert_moved_off(run: ClusterRun, executor: str, before: int) -> None:
    """The state keys that `executor` held when it died (where the first `before`
    batches placed them) ran on other executors after. (Spaces `a` and `b` are on
    different state partitions, so each executor of two holds one.)"""
    batches = run.batches()
    where: dict[str, str] = {}
    for batch in batches[:before]:
        where |= batch.get("placed", {})
    held = {key for key, at in where.items() if at == executor}
    assert held, where
    after: dict[str, str] = {}
    for batch in batches[before:]:
        after |= batch.get("placed", {})
    assert held <= set(after) and executor not in {after[key] for key in held}, batches


def deduplicated_equals_replay(bootstrap: str, topics, want: set) -> Counter:
    """Check the matches a read_uncommitted reader sees, duplicates dropped; return the
    count of each match_id."""
    values = list(consume_values(bootstrap, topics.matches, from_beginning=True, timeout=3.0))
    assert triples(values) == want
    return Counter(json.loads(v)["match_id"] for v in values)


# -- tests --------------------------------------------------------------------------------


def test_the_job_on_the_cluster_equals_replay_and_spreads_a_sharded_space(
    bootstrap, new_topic, cluster, on_cluster, tmp_path
):
    """One data batch: the same multiset of match and dead-letter records as the
    engine; the four cells of the sharded space `a` ran on the executors of both
    workers, each cell where its state partition is."""
    topics = make_topics(new_topic, bootstrap, partitions=2)
    subs, profiles = workload(seed=11, subs=60, profiles=400)
    produce_lines(bootstrap, topics.subscriptions, subs)
    produce_lines(bootstrap, topics.profiles, profiles)
    config = write_config(tmp_path / "tsm.toml", topics, lateness_ms=500, query_name="cl-replay")
    with open(config, "a") as settings:
        settings.write('[sharding.a]\nattribute = "x"\nwidth = 25\ncells = 4\n')
    started = time.monotonic()
    with on_cluster(config, tmp_path, "--available-now") as run:
        assert run.wait() == 0, run.tail()
    print(f"job on the cluster: {time.monotonic() - started:.1f}s", file=sys.stderr)
    want = expected([inputs_of(bootstrap, topics)], lateness_ms=500)
    assert sum(want["matches"].values()) > 100
    assert output(bootstrap, topics) == want
    # where each state key ran: the first batch places every key it runs
    where = {key: executor for placed in run.placed() for key, executor in placed.items()}
    cells = spread_keys("a", 4, 2)
    assert set(cells) <= set(where), where
    by_partition = {partition_of(cell, 2): set() for cell in cells}
    for cell in cells:
        by_partition[partition_of(cell, 2)].add(where[cell])
    assert all(len(executors) == 1 for executors in by_partition.values()), by_partition
    (left,), (right,) = by_partition.values()
    workers = executors_by_worker(cluster, application_of(run, cluster))
    assert {workers[left], workers[right]} == {"worker-1", "worker-2"}, (where, workers)


def test_an_executor_killed_mid_batch_loses_and_duplicates_nothing_exactly_once(
    bootstrap, new_topic, on_cluster, tmp_path
):
    """SIGKILL an executor's JVM and its Python workers while it runs a task: Spark
    runs the lost tasks again (a new executor takes the dead one's place); a
    read_committed reader sees every match once, a read_uncommitted one may see
    some twice."""
    topics = make_topics(new_topic, bootstrap, partitions=2)
    subs, profiles = workload(seed=12, subs=80, profiles=1200, churn=False)
    produce_lines(bootstrap, topics.subscriptions, subs)
    produce_lines(bootstrap, topics.profiles, profiles)
    config = write_config(
        tmp_path / "tsm.toml", topics, query_name="cl-kill", max_records_per_trigger=150
    )
    flags = ("--available-now", "--exactly-once")
    with on_cluster(config, tmp_path, *flags) as run:
        app, executor = busy_executor(run, after_batches=2)
        before = len(run.batches())
        killed = kill_tree(executor_process(app, executor))
        assert len(killed) >= 2  # the JVM and its Python daemon (and workers)
        assert run.wait() == 0, run.tail()
    batches = run.batches()
    assert len(batches) > 4
    want = triples(expected([inputs_of(bootstrap, topics)])["matches"].elements())
    assert len(want) > 1000
    committed = list(
        consume_values(
            bootstrap, topics.matches, from_beginning=True, timeout=3.0, read_committed=True
        )
    )
    assert triples(committed) == want
    counts = Counter(json.loads(v)["match_id"] for v in committed)
    assert max(counts.values()) == 1
    deduplicated_equals_replay(bootstrap, topics, want)
    assert_moved_off(run, executor, before)


def test_a_lost_worker_replaced_by_a_new_one_loses_nothing(
    bootstrap, new_topic, cluster, on_cluster, tmp_path
):
    """SIGKILL a worker with its executor and Python workers mid-batch, and start
    another worker in its place: the job goes on there (at least once), and the
    matches, duplicates dropped, are the engine's."""
    topics = make_topics(new_topic, bootstrap, partitions=2)
    subs, profiles = workload(seed=13, subs=80, profiles=1200, churn=False)
    produce_lines(bootstrap, topics.subscriptions, subs)
    produce_lines(bootstrap, topics.profiles, profiles)
    config = write_config(
        tmp_path / "tsm.toml", topics, query_name="cl-worker", max_records_per_trigger=150
    )
    with on_cluster(config, tmp_path) as run:  # (runs until stopped)
        app, executor = busy_executor(run, after_batches=2)
        before = len(run.batches())
        worker = executor_process(app, executor).parent()
        lost = next(w for w in cluster.workers if w.pid == worker.pid)
        kill_tree(worker)
        replacement = cluster.add_worker()
        # every record read, and the master has given the job an executor on the new worker
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and run.process.poll() is None:
            read = sum(b["input_rows"] for b in run.batches())
            if read >= len(subs) + len(profiles) and (Path(replacement.work_dir) / app).is_dir():
                break
            time.sleep(1)
        run.process.send_signal(signal.SIGTERM)  # (stops between batches)
        assert run.wait() == 0, run.tail()
    want = triples(expected([inputs_of(bootstrap, topics)])["matches"].elements())
    assert len(want) > 1000
    deduplicated_equals_replay(bootstrap, topics, want)
    assert_moved_off(run, executor, before)
    # The master gave the application an executor on the new worker.
    workers = executors_by_worker(cluster, app)
    assert replacement.name in workers.values() and lost.name != replacement.name, workers
