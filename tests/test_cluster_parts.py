"""The parts of running on a Spark cluster that need neither Spark nor a broker: the job's
package and what executors can import from it, the executor id of a Python worker,
the batch log's `placed` field, and `tsm cluster` where nothing runs."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from streaming.executors import executor_id, parse_ran_counter, ran_counter
from streaming.shipping import (
    EXECUTOR_PACKAGES,
    build_job_package,
    is_cluster,
    package_bytes,
    shipped,
)
from streaming.standalone import alive_workers, cluster_status, python_without_project
from tsm_cli.main import main as tsm


def test_the_package_holds_every_module_of_the_executor_packages_and_is_reproducible(tmp_path):
    path = build_job_package(tmp_path)
    assert path.name.startswith("tsm-job-") and path.suffix == ".zip"
    names = set(zipfile.ZipFile(path).namelist())
    root = Path(__file__).resolve().parents[1]
    for package in EXECUTOR_PACKAGES:
        on_disk = {
            p.relative_to(root).as_posix()
            for p in (root / package).rglob("*.py")
            if "__pycache__" not in p.parts
        }
        assert on_disk and on_disk <= names
    assert not any(name.startswith(("tsm_cli/", "tests/", "benchmarks/")) for name in names)
    assert package_bytes() == path.read_bytes()
    assert build_job_package(tmp_path) == path  # (same tree, same name)


def test_an_interpreter_without_the_project_imports_the_job_from_the_package_alone(tmp_path):
    """What an executor's Python worker imports, from the zip and the dependencies only."""
    python = python_without_project(tmp_path / "python")
    modules = "streaming.processor, streaming.decode_stage, connectors.kafka_source"
    probe = f"import {modules}, connectors.kafka_sink, streaming.listener; print('ok')"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    bare = subprocess.run(
        [str(python), "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert bare.returncode != 0 and "No module named" in bare.stderr
    package = build_job_package(tmp_path / "dist")
    shipped_run = subprocess.run(
        [str(python), "-c", probe + "; import streaming; print(streaming.__file__)"],
        cwd=tmp_path,
        env=env | {"PYTHONPATH": str(package)},
        capture_output=True,
        text=True,
    )
    assert shipped_run.returncode == 0, shipped_run.stderr
    assert shipped_run.stdout.splitlines()[0] == "ok"
    assert shipped_run.stdout.splitlines()[1].startswith(str(package))


def test_cluster_or_local_and_a_package_given_by_spark_submit():
    assert not is_cluster("local[2]") and not is_cluster("local")
    assert is_cluster("spark://127.0.0.1:7077")
    assert shipped("/x/a.py,/dist/tsm-job-0.1.0-abc.zip")
    assert not shipped("") and not shipped("/x/other.zip")


def test_the_executor_id_comes_from_the_executor_s_environment():
    url = "http://127.0.0.1:18081/logPage/?appId=app-1-0000&executorId=3&logType=stderr"
    assert executor_id({"SPARK_LOG_URL_STDERR": url}) == "3"
    assert executor_id({"SPARK_EXECUTOR_ID": "7"}) == "7"
    assert executor_id({}) is None  # (local mode)
    assert parse_ran_counter(ran_counter("vehicles#2:x", "1")) == ("vehicles#2:x", "1")
    assert parse_ran_counter("matches") is None


def test_the_batch_log_says_where_each_key_ran_when_that_changes(caplog):
    from streaming.listener import ProgressLogger

    caplog.set_level("INFO", logger="streaming.listener.batches")
    metrics = SimpleNamespace(value={})
    logger = ProgressLogger("tsm", metrics)
    runs = [
        {ran_counter("a#0", "0"): 1, ran_counter("a#1", "1"): 1},
        {ran_counter("a#0", "0"): 2, ran_counter("a#1", "1"): 2},  # where they were
        {ran_counter("a#0", "0"): 2, ran_counter("a#1", "1"): 2, ran_counter("a#0", "2"): 1},
    ]
    for batch, totals in enumerate(runs):
        metrics.value = totals
        progress = {"name": "tsm", "batchId": batch}
        logger.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json.dumps(progress))))
    lines = [json.loads(r.getMessage()) for r in caplog.records]
    assert lines[0]["placed"] == {"a#0": "0", "a#1": "1"}
    assert "placed" not in lines[1]
    assert lines[2]["placed"] == {"a#0": "2"}


def test_alive_workers_are_read_from_the_master_s_view():
    state = {
        "workers": [
            {"state": "ALIVE", "webuiaddress": "http://127.0.0.1:4100"},
            {"state": "DEAD", "webuiaddress": "http://127.0.0.1:4101"},
        ]
    }
    assert alive_workers(state) == {4100}
    assert alive_workers(None) == set()


def test_cluster_status_and_down_where_none_runs(tmp_path, capsys):
    assert cluster_status(tmp_path) is None
    assert tsm(["cluster", "status", "--data-dir", str(tmp_path)]) == 1
    assert tsm(["cluster", "down", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""


def test_cluster_package_prints_the_zip_s_path(tmp_path, capsys):
    assert tsm(["cluster", "package", "--out-dir", str(tmp_path)]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed.parent == tmp_path and zipfile.is_zipfile(printed)


def test_cluster_up_refuses_a_bad_memory_size(capsys):
    with pytest.raises(SystemExit) as exited:
        tsm(["cluster", "up", "--worker-memory", "lots"])
    assert exited.value.code == 2
    assert "expected a size such as 512m or 4g" in capsys.readouterr().err


def test_the_soak_stream_reports_each_object_once_a_period_and_lives_its_lifetime():
    from benchmarks.bench_soak import Plan, Stream

    plan = Plan(rate=20.0, period_s=5.0)
    stream = Stream(plan)
    reports = [r for step in range(1, 201) for r in stream.reports(step * 0.05, 1000)]
    assert len(reports) == 200 == plan.rate * 10  # (10 s: two periods)
    ids = Counter(json.loads(r)["id"] for r in reports)
    assert set(ids.values()) == {2} and len(ids) == plan.rate * plan.period_s
    record = json.loads(stream.subscription(1000, 60.0))
    assert record["valid_to"] - record["ts"] == 60_000 and "x BETWEEN" in record["where"]


def test_the_soak_s_flatness_compares_the_second_quarter_with_the_last():
    from benchmarks.bench_soak import Series, _quarters

    rising = Series()
    for t in range(100):
        rising.add(t, 100.0 if t < 50 else 130.0)
    assert _quarters(rising, 0, 100) == {"second": 100.0, "last": 130.0, "change": 0.3}
    assert _quarters(Series(), 0, 100)["change"] is None


def test_the_soak_reads_the_batch_log_as_it_grows(tmp_path):
    from benchmarks.bench_soak import BatchLog

    path = tmp_path / "batches.jsonl"
    path.write_bytes(b'{"query": "soak"}\n{"batch": 0, "input_rows": 5}\n{"batch": 1, "inp')
    log = BatchLog(path, start=0.0)
    assert log.rows() == 5
    with open(path, "ab") as more:
        more.write(b'ut_rows": 7}\n')
    assert log.rows() == 12 and [b["batch"] for b in log.read()] == [0, 1]
