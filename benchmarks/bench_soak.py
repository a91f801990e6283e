"""`tsm bench soak`: the job on the local Spark cluster under a steady, expiring stream.

A tracking workload in real time: `subscriptions` live areas (boxes on x and y,
a third with a vehicle kind), each living `lifetime` seconds and replaced as it
expires (new ids at subscriptions / lifetime a second, so the live count stays
level), and `rate` profiles a second from moving objects, each object reporting
every `period` seconds under its id (an upsert: `update`, `unmatch`, `match` as
it moves), each report valid until a bit after the next. Event time is real
time: a record's `ts` is the wall clock when it is produced, less the time the
job took to start and read the live subscriptions (they were written before it
started), so that they expire over the stream's first lifetime as if they had
arrived over the last one, and expiry runs as it would in production.

The job runs as `tsm run --master spark://...` on a `LocalCluster` (a master and
two workers), the space sharded into four cells over two executors. Sampled
over time:

* state: live subscriptions and profiles, state rows and bytes (the batch log);
* memory (RSS): the driver (its Python and its JVM), each executor's JVM, and
  the Python workers under each executor;
* each batch's duration (the batch log);
* produce-to-match latency: a reader of the matches topic, running all along,
  takes each record made by a profile (reason `new-profile` or `changed`) and
  subtracts the profile's `ts` (when it was produced) from the record's Kafka
  timestamp (when the operator wrote it);
* the rate offered and the rate read.

At the end the stream stops, the job drains what is left and stops, and the
engine (`tsm replay`) runs on every record read back from the input topics: the
set of `match` records the reader saw (duplicates dropped) must equal the
engine's. Flatness after warm-up: each series' mean over the last quarter of
the run against its mean over the second quarter (within 10% is flat).
"""

from __future__ import annotations

import json
import logging
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.job_runs import log_tail, stop_job
from benchmarks.kafka_reads import read_back
from benchmarks.report import RESULTS_DIR, update_section
from benchmarks.workloads import SPAN, VEHICLE_KINDS

log = logging.getLogger(__name__)

SPACE = "tracking"
SAMPLE_S = 5.0  # memory and latency buckets
CELLS = 4
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@dataclass(frozen=True)
class Plan:
    minutes: float = 60.0
    subscriptions: int = 100_000
    rate: float = 50.0  # profiles a second
    lifetime_s: float = 600.0  # of a subscription
    period_s: float = 10.0  # between two reports of an object
    box: tuple[float, float] = (4.0, 16.0)  # subscription box widths
    lateness_ms: int = 10_000
    seed: int = 0


@dataclass
class Series:
    """Samples over time: seconds since the stream started, and a value each."""

    t: list[float] = field(default_factory=list)
    v: list[float] = field(default_factory=list)

    def add(self, t: float, v: float) -> None:
        self.t.append(round(t, 2))
        self.v.append(v)


# -- the stream ----------------------------------------------------------------------------


class Stream:
    """Generates the soak's records in real time (`ts` = now)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.next_sub = 0
        objects = max(1, round(plan.rate * plan.period_s))
        self.objects = [self._object() for _ in range(objects)]
        self.next_report = [self.rng.uniform(0, plan.period_s) for _ in range(objects)]

    def _object(self) -> dict[str, Any]:
        rng = self.rng
        return {
            "x": rng.uniform(0, SPAN),
            "y": rng.uniform(0, SPAN),
            "vx": rng.uniform(-5, 5),
            "vy": rng.uniform(-5, 5),
            "r": rng.uniform(1, 4),
            "kind": rng.choice(VEHICLE_KINDS[:5]),
            "seq": 0,
        }

    def subscription(self, now_ms: int, lifetime_s: float) -> bytes:
        rng, (lo, hi) = self.rng, self.plan.box
        where = []
        for attr in ("x", "y"):
            width = rng.uniform(lo, hi)
            start = rng.uniform(0, SPAN - width)
            where.append(f"{attr} BETWEEN {start:.2f} AND {start + width:.2f}")
        if rng.random() < 0.3:
            where.append(f"kind = '{rng.choice(VEHICLE_KINDS[:5])}'")
        record = {
            "op": "subscribe",
            "id": f"s{self.next_sub}",
            "space": SPACE,
            "subscriber": f"u{self.next_sub % 997}",
            "where": " AND ".join(where),
            "relation": "covers" if rng.random() < 0.2 else "overlaps",
            "ts": now_ms,
            "valid_to": now_ms + int(lifetime_s * 1000),
        }
        self.next_sub += 1
        return json.dumps(record).encode()

    def reports(self, elapsed_s: float, now_ms: int) -> list[bytes]:
        """The reports of the objects due by `elapsed_s` since the start."""
        out = []
        period = self.plan.period_s
        for k, due in enumerate(self.next_report):
            if due > elapsed_s:
                continue
            self.next_report[k] = due + period
            o = self.objects[k]
            x, y = _bounce(o["x"] + o["vx"] * elapsed_s), _bounce(o["y"] + o["vy"] * elapsed_s)
            r = o["r"]
            attrs = {
                "x": [round(max(0.0, x - r), 2), round(min(SPAN, x + r), 2)],
                "y": [round(max(0.0, y - r), 2), round(min(SPAN, y + r), 2)],
                "kind": o["kind"],
            }
            record = {
                "op": "publish",
                "id": f"o{k}",
                "space": SPACE,
                "attrs": attrs,
                "ts": now_ms,
                "valid_to": now_ms + int(1.5 * period * 1000),
                "payload": {"seq": o["seq"]},
            }
            o["seq"] += 1
            out.append(json.dumps(record).encode())
        return out


def _bounce(v: float) -> float:
    v %= 2 * SPAN
    return 2 * SPAN - v if v > SPAN else v


# -- watching the job -------------------------------------------------------------------------


class MatchReader(threading.Thread):
    """Reads the matches topic all along: the set of match records (for the check against
    the engine), and the produce-to-match latency of each profile's records."""

    def __init__(self, bootstrap: str, topic: str, start: float, shift_ms: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.start_wall = bootstrap, topic, start
        self.shift_ms = shift_ms  # wall clock = event time + shift_ms
        self.matches: set[tuple[str, str, str]] = set()
        self.records = 0
        self.latency: dict[int, list[int]] = defaultdict(list)  # bucket → ms
        self.stop = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        from connectors.config import confluent_config

        config = confluent_config(self.bootstrap, required={"group.id": f"soak-{time.time()}"})
        consumer = Consumer(config | {"enable.auto.commit": False})
        try:
            partitions = consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions
            consumer.assign([TopicPartition(self.topic, p, 0) for p in partitions])
            while not self.stop.is_set():
                for message in consumer.consume(2000, timeout=0.5):
                    if message.error() is None:
                        self._take(message.value(), message.timestamp()[1])
        finally:
            consumer.close()

    def _take(self, value: bytes, written_ms: int) -> None:
        record = json.loads(value)
        self.records += 1
        if record["event"] == "match":
            self.matches.add((record["subscription_id"], record["profile_id"], record["match_id"]))
        if record["reason"] in ("new-profile", "changed") and record["profile_id"].startswith("o"):
            produced_ms = record["ts"] + self.shift_ms
            bucket = int((produced_ms / 1000 - self.start_wall) // SAMPLE_S)
            self.latency[bucket].append(written_ms - produced_ms)


def _processes(job_pid: int) -> dict[str, list[Any]]:
    """The driver's Python and JVM, each executor's JVM, and their Python workers."""
    import psutil

    found: dict[str, list[Any]] = {"driver": [], "driver_jvm": [], "executors": [], "workers": []}
    try:
        driver = psutil.Process(job_pid)
    except psutil.Error:
        return found
    found["driver"] = [driver]
    found["driver_jvm"] = [c for c in driver.children() if "java" in c.name()]
    for process in psutil.process_iter(["cmdline"]):
        if EXECUTOR_CLASS in (process.info["cmdline"] or []):
            found["executors"].append(process)
            found["workers"] += process.children(recursive=True)
    return found


def _rss_mb(processes: list[Any]) -> float:
    import psutil

    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            pass
    return round(total / 2**20, 1)


class BatchLog:
    """The job's batch log as it grows: each batch line with the time it appeared
    (`at`, seconds since the stream started; read every 50 ms or so)."""

    def __init__(self, path: Path, start: float) -> None:
        self.path, self.start = path, start
        self.batches: list[dict] = []
        self._offset, self._partial = 0, b""

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as log:
                log.seek(self._offset)
                data = log.read()
        except OSError:
            return self.batches
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        at = round(time.time() - self.start, 2)
        for line in lines:
            if line.startswith(b'{"batch"'):
                self.batches.append(json.loads(line) | {"at": at})
        return self.batches

    def rows(self) -> int:
        return sum(b.get("input_rows", 0) for b in self.read())


# -- the run ------------------------------------------------------------------------------------


def run(plan: Plan, work: Path) -> dict[str, Any]:
    """Run the soak in `work` (broker, cluster, checkpoint, logs); return the results."""
    from confluent_kafka import Producer

    from connectors.admin import create_topics
    from connectors.broker import EmbeddedBroker
    from connectors.config import SINK_COMMITS_TOPIC, confluent_config, producer_config
    from streaming.standalone import LocalCluster

    work.mkdir(parents=True, exist_ok=True)
    with (
        EmbeddedBroker(data_dir=work / "broker") as broker,
        LocalCluster(work / "cluster", workers=2, memory="4g") as cluster,
    ):
        bootstrap = broker.bootstrap
        topics = {"subscriptions": 2, "profiles": 2, "matches": 4, "deadletter": 1}
        create_topics(bootstrap, {f"soak.{k}": n for k, n in topics.items()})
        create_topics(bootstrap, {SINK_COMMITS_TOPIC: 1})
        settings = work / "tsm.toml"
        settings.write_text(
            f'query_name = "soak"\nlateness_ms = {plan.lateness_ms}\n[topics]\n'
            + "".join(f'{k} = "soak.{k}"\n' for k in topics)
            + f'[sharding.{SPACE}]\nattribute = "x"\nwidth = {SPAN / CELLS}\ncells = {CELLS}\n'
        )
        producer = Producer(producer_config(confluent_config(bootstrap)))
        stream = Stream(plan)
        start = time.time()
        # The live subscriptions at the start, as if they had arrived over the last
        # lifetime: their ends spread evenly over the next one.
        now_ms = int(start * 1000)
        for _ in range(plan.subscriptions):
            left = stream.rng.uniform(0, plan.lifetime_s)
            producer.produce("soak.subscriptions", stream.subscription(now_ms, left))
            producer.poll(0)
        producer.flush(60)
        log.info("%d live subscriptions written; starting the job", plan.subscriptions)
        batches_path = work / "batches.jsonl"
        command = [sys.executable, "-m", "tsm_cli", "run", "-q", "--bootstrap", bootstrap]
        command += ["--master", cluster.master_url, "--config", str(settings)]
        command += [
            "--checkpoint",
            str(work / "checkpoint"),
            "--spark-log",
            str(work / "spark.log"),
        ]
        with open(batches_path, "wb") as batches_out:
            job = subprocess.Popen(command, cwd=work, stderr=batches_out, start_new_session=True)
        try:
            # The stream starts once the job has read the live subscriptions (its first
            # batch): the run's minutes are all of steady stream.
            loaded = BatchLog(batches_path, start)
            while not loaded.read():
                if job.poll() is not None or time.time() > start + 1800:
                    raise RuntimeError(f"the job did not start:\n{log_tail(batches_path)}")
                time.sleep(1)
            log.info("the job read the live subscriptions in %.0f s", time.time() - start)
            # Event time goes on from the preload's: the stream's `ts` is the wall clock
            # less the time the job took to start, so that the live subscriptions expire
            # over the first lifetime of the stream, not while the job was starting.
            loaded_at = time.time()
            shift_ms = int((loaded_at - start) * 1000)
            return _soak(plan, stream, producer, job, bootstrap, batches_path, loaded_at, shift_ms)
        finally:
            stop_job(job)


def _soak(plan, stream, producer, job, bootstrap, batches_path, start, shift_ms) -> dict[str, Any]:
    reader = MatchReader(bootstrap, "soak.matches", start, shift_ms)
    reader.start()
    batch_log = BatchLog(batches_path, start)
    memory = {name: Series() for name in ("driver", "driver_jvm", "executors", "workers")}
    offered = Series()
    produced = {"subscriptions": plan.subscriptions, "profiles": 0}
    end = start + plan.minutes * 60
    renew_per_s = plan.subscriptions / plan.lifetime_s
    renew_debt, next_sample = 0.0, start
    last = start
    while time.time() < end:
        if job.poll() is not None:
            raise RuntimeError(
                f"the job stopped (status {job.returncode}):\n{log_tail(batches_path)}"
            )
        now = time.time()
        now_ms = int(now * 1000) - shift_ms  # (event time)
        renew_debt += renew_per_s * (now - last)
        last = now
        while renew_debt >= 1:
            producer.produce("soak.subscriptions", stream.subscription(now_ms, plan.lifetime_s))
            produced["subscriptions"] += 1
            renew_debt -= 1
        for value in stream.reports(now - start, now_ms):
            producer.produce("soak.profiles", value)
            produced["profiles"] += 1
        producer.poll(0)
        batch_log.read()
        if now >= next_sample:
            processes = _processes(job.pid)
            for name, series in memory.items():
                series.add(now - start, _rss_mb(processes[name]))
            offered.add(now - start, produced["profiles"] + produced["subscriptions"])
            next_sample += SAMPLE_S
        time.sleep(0.05)
    producer.flush(60)
    stream_end = time.time()
    log.info("stream stopped after %.1f min; the job drains", (stream_end - start) / 60)
    inputs = produced["subscriptions"] + produced["profiles"]
    deadline = time.time() + max(600.0, plan.minutes * 30)
    while time.time() < deadline and job.poll() is None:
        if batch_log.rows() >= inputs:
            break
        time.sleep(2)
    if job.poll() is not None:
        raise RuntimeError(f"the job stopped (status {job.returncode}):\n{log_tail(batches_path)}")
    drained_after = time.time() - stream_end
    time.sleep(10)  # (the last batch's records reach the reader)
    batch_log.read()
    job.send_signal(signal.SIGTERM)
    job.wait(180)
    reader.stop.set()
    reader.join(30)
    batches = batch_log.read()
    replayed = _replay(bootstrap, plan)
    return _results(
        plan, batches, memory, offered, reader, replayed, produced, start, stream_end, drained_after
    )


def _replay(bootstrap: str, plan: Plan) -> set[tuple[str, str, str]]:
    """The engine's `match` records (what `tsm replay` makes) on everything the input
    topics hold, in one batch."""
    from matcher.admission import Input
    from matcher.engine import Engine
    from matcher.records import Source

    items = [
        Input(kind, value, Source(topic, partition, offset), stamp)
        for kind, topic in (("subscription", "soak.subscriptions"), ("profile", "soak.profiles"))
        for partition, offset, value, stamp in read_back(bootstrap, topic)
    ]
    engine = Engine(lateness_ms=plan.lateness_ms)
    return {
        (o.value["subscription_id"], o.value["profile_id"], o.value["match_id"])
        for o in engine.process_batch(items)
        if o.topic == "matches" and o.value["event"] == "match"
    }


def _quarters(series: Series, start_s: float, end_s: float) -> dict[str, float | None]:
    """Mean of the samples in the second and the last quarter of [start, end], and the
    change from one to the other (flat: within 10%)."""
    span = (end_s - start_s) / 4
    second = [
        v
        for t, v in zip(series.t, series.v, strict=True)
        if start_s + span <= t < start_s + 2 * span
    ]
    last = [v for t, v in zip(series.t, series.v, strict=True) if t >= start_s + 3 * span]
    if not second or not last:
        return {"second": None, "last": None, "change": None}
    a, b = statistics.fmean(second), statistics.fmean(last)
    return {
        "second": round(a, 1),
        "last": round(b, 1),
        "change": round(b / a - 1, 3) if a else None,
    }


def _results(
    plan, batches, memory, offered, reader, replayed, produced, start, stream_end, drained_after
) -> dict[str, Any]:
    run_s = stream_end - start
    names = ("batch_ms", "state_bytes", "live_subscriptions", "live_profiles", "input_rows")
    series = {name: Series() for name in names}
    for b in batches:  # (each at the time its line appeared)
        for name, s in series.items():
            s.add(b["at"], b.get(name) or 0)
    latency_p50, latency_p99 = Series(), Series()
    for bucket in sorted(reader.latency):
        values = sorted(reader.latency[bucket])
        at = (bucket + 0.5) * SAMPLE_S
        latency_p50.add(at, values[len(values) // 2])
        latency_p99.add(at, values[min(len(values) - 1, int(len(values) * 0.99))])
    rate = Series()
    for (t0, n0), (t1, n1) in zip(
        zip(offered.t, offered.v, strict=True),
        zip(offered.t[1:], offered.v[1:], strict=True),
        strict=False,
    ):
        rate.add(t1, (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0)
    read_rate = Series()  # rows read over the time since the previous batch line
    previous = None
    for b in batches:
        if previous is not None and b["at"] > previous:
            read_rate.add(b["at"], b.get("input_rows", 0) / (b["at"] - previous))
        previous = b["at"]
    flat = {
        "batch_ms": _quarters(series["batch_ms"], 0, run_s),
        "state_bytes": _quarters(series["state_bytes"], 0, run_s),
        "live_subscriptions": _quarters(series["live_subscriptions"], 0, run_s),
        "latency_p50_ms": _quarters(latency_p50, 0, run_s),
        "latency_p99_ms": _quarters(latency_p99, 0, run_s),
        "offered_per_s": _quarters(rate, 0, run_s),
        "read_rows_per_s": _quarters(read_rate, 0, run_s),
        **{f"rss_{name}_mb": _quarters(s, 0, run_s) for name, s in memory.items()},
    }
    missing, extra = replayed - reader.matches, reader.matches - replayed
    return {
        "plan": asdict(plan),
        "run_minutes": round(run_s / 60, 2),
        "produced": produced,
        "match_records_read": reader.records,
        "matches": {
            "replay": len(replayed),
            "job": len(reader.matches),
            "missing": len(missing),
            "extra": len(extra),
        },
        "drained_after_s": round(drained_after, 1),
        "batches": len(batches),
        "flat": flat,
        "series": {
            **{name: asdict(s) for name, s in series.items()},
            **{f"rss_{name}_mb": asdict(s) for name, s in memory.items()},
            "latency_p50_ms": asdict(latency_p50),
            "latency_p99_ms": asdict(latency_p99),
            "offered_per_s": asdict(rate),
            "read_rows_per_s": asdict(read_rate),
        },
    }


# -- output ---------------------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = result["series"]
    panels = [
        (
            "state",
            [("live_subscriptions", "live subscriptions"), ("live_profiles", "live profiles")],
        ),
        ("state store (MB)", [("state_bytes", "state bytes")]),
        (
            "memory RSS (MB)",
            [
                ("rss_driver_mb", "driver Python"),
                ("rss_driver_jvm_mb", "driver JVM"),
                ("rss_executors_mb", "executor JVMs"),
                ("rss_workers_mb", "Python workers"),
            ],
        ),
        ("batch duration (s)", [("batch_ms", "batch")]),
        ("produce→match latency (s)", [("latency_p50_ms", "p50"), ("latency_p99_ms", "p99")]),
        ("records / s", [("offered_per_s", "offered"), ("read_rows_per_s", "read by the job")]),
    ]
    scale = {
        "state_bytes": 2**-20,
        "batch_ms": 1e-3,
        "latency_p50_ms": 1e-3,
        "latency_p99_ms": 1e-3,
    }
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.2 * len(panels)), sharex=True)
    for ax, (title, lines) in zip(axes, panels, strict=True):
        for name, label in lines:
            s = series[name]
            factor = scale.get(name, 1)
            ax.plot([t / 60 for t in s["t"]], [v * factor for v in s["v"]], label=label, lw=1)
        ax.set_ylabel(title, fontsize=8)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes since the stream started")
    plan = result["plan"]
    fig.suptitle(
        f"tsm bench soak: {plan['subscriptions']:,} live subscriptions, "
        f"{plan['rate']:g} profiles/s, {result['run_minutes']:.0f} min, 2-worker local cluster",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _percent(change: float | None) -> str:
    return "-" if change is None else f"{change * 100:+.1f}%"


def readme_section(result: dict[str, Any], png: str, command: str) -> str:
    plan, m, flat = result["plan"], result["matches"], result["flat"]
    rows = "\n".join(
        f"| {name} | {q['second']} | {q['last']} | {_percent(q['change'])} |"
        for name, q in flat.items()
    )
    return f"""## Soak: the job on the local cluster under a steady, expiring stream

    {command}

{plan["subscriptions"]:,} live subscriptions (each lives {plan["lifetime_s"]:g} s and is replaced as
it expires), {plan["rate"]:g} profiles/s from objects reporting every {plan["period_s"]:g} s, for
{result["run_minutes"]:.1f} minutes on a master and two workers of this machine (2 cores shared
with other work), the space in {CELLS} cells over two executors. {result["batches"]} batches;
the job drained the stream {result["drained_after_s"]:.0f} s after it stopped.

Against the engine (`tsm replay`) on the same input: {m["replay"]:,} `match` records, the job
{m["job"]:,}; missing {m["missing"]}, extra {m["extra"]}.

Mean of the second quarter of the run against the last (flat: within 10%):

| series | 2nd quarter | last quarter | change |
|---|---|---|---|
{rows}

![soak]({png})
"""


def main(
    *,
    minutes: float,
    subscriptions: int,
    rate: float,
    lifetime_s: float | None,
    json_path: Path | None,
    command: str,
) -> int:
    if lifetime_s is None:
        lifetime_s = max(60.0, min(600.0, minutes * 60 / 2))
    plan = Plan(minutes=minutes, subscriptions=subscriptions, rate=rate, lifetime_s=lifetime_s)
    json_path = json_path or RESULTS_DIR / "soak.json"
    with tempfile.TemporaryDirectory(prefix="tsm-soak-") as work:
        result = run(plan, Path(work))
    out = json_path.parent
    out.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    png = json_path.with_suffix(".png")
    plot(result, png)
    update_section(out / "README.md", "soak", readme_section(result, png.name, command))
    m = result["matches"]
    log.info(
        "matches: replay %d, job %d, missing %d, extra %d; results in %s",
        m["replay"],
        m["job"],
        m["missing"],
        m["extra"],
        json_path,
    )
    return 0 if m["missing"] == 0 else 1
