"""`tsm demo`: the whole system on one machine, with a scenario replayed in event time.

Starts the embedded broker and a local Spark, creates the topics, starts the
job exactly as `tsm run` does (`streaming.job.start`), then replays the
bundled scenario (`examples/demo/`) tick by tick of event time while it
prints the matches and dead letters as they reach their topics, and ends
with a summary once everything published has been matched and read back.

The first tick (the subscriptions of 08:00) is published before the clock
starts and the clock waits for the job's first batch, so that the start-up
of Spark's Python workers does not swallow the first minutes of the
scenario. Output topics are read by offset ranges, never by an idle
subscribed consumer (PLATFORM.md: an idle consumer makes noida-db spin).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streaming.cli import CliError

SCENARIO = Path(__file__).resolve().parents[1] / "examples" / "demo"
DATA_DIR = Path(".tsm/demo")
# Event-time seconds replayed per wall second: the 5-minute scenario in ~30 s.
DEFAULT_SPEED = 10.0
TRIGGER = "1 second"
# Quiet time after the last batch before the demo calls the output drained:
# longer than the trigger, so that a no-data batch (event-time timers) runs first.
SETTLE_S = 2.5
POLL_S = 0.25


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run the whole system locally on a bundled scenario and print the matches live",
        description="Start the embedded broker and a local Spark, run the streaming job, "
        "replay a scenario (buses, trams and ferries through alert zones) in event time, "
        "print the matches as they arrive, and end with a summary. Ctrl-C stops cleanly.",
    )
    p.add_argument(
        "--speed",
        type=float,
        default=DEFAULT_SPEED,
        metavar="X",
        help=f"event-time seconds per wall second (default {DEFAULT_SPEED:g}: the 5-minute "
        "scenario in ~30 s); 0 publishes everything at once",
    )
    p.add_argument(
        "--keep", action="store_true", help="leave the broker running (and its data) at the end"
    )
    p.add_argument(
        "--follow", action="store_true", help="keep running after the scenario, until Ctrl-C"
    )
    p.add_argument("--scenario", type=Path, default=SCENARIO, metavar="DIR", help="scenario dir")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=DATA_DIR,
        metavar="DIR",
        help=f"broker data and checkpoint, wiped at start (default {DATA_DIR})",
    )
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.set_defaults(handler=_demo)


# -- the scenario ---------------------------------------------------------------------------


@dataclass
class Tick:
    """The records of one event-time instant, by topic role, in file order."""

    ts: int
    lines: dict[str, list[bytes]] = field(
        default_factory=lambda: {"subscriptions": [], "profiles": []}
    )


def load_ticks(directory: Path) -> list[Tick]:
    """Both files merged by `ts`; a line without a readable `ts` (a bad record on purpose)
    goes out with the line before it in its file."""
    from matcher.errors import RecordError
    from matcher.records import Source, decode

    ticks: dict[int, Tick] = {}
    for role, kind in (("subscriptions", "subscription"), ("profiles", "profile")):
        path = directory / f"{role}.jsonl"
        if not path.is_file():
            raise CliError(f"no scenario file {path}")
        ts = None
        for line in path.read_bytes().splitlines():
            if not line.strip():
                continue
            try:
                ts = decode(kind, line, Source()).ts
            except RecordError:
                pass
            if ts is None:
                raise CliError(f"{path}: the first record needs a readable ts")
            ticks.setdefault(ts, Tick(ts)).lines[role].append(line)
    return [ticks[ts] for ts in sorted(ticks)]


def clock(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S")


# -- reading the output topics ----------------------------------------------------------------


class OutputReader:
    """New records of the output topics since the last call, read by offset range."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        from confluent_kafka import Consumer

        from connectors.config import confluent_config

        self.config = confluent_config(
            bootstrap, required={"group.id": "tsm-demo", "enable.auto.commit": False}
        )
        self.watermarks = Consumer(self.config)  # metadata only: never assigned, never fetches
        self.next: dict[tuple[str, int], int] = {}
        for topic in topics:
            for partition in (
                self.watermarks.list_topics(topic, timeout=10).topics[topic].partitions
            ):
                self.next[(topic, partition)] = 0

    def poll(self) -> list[tuple[str, bytes, int]]:
        """(topic, value, Kafka timestamp in ms) of every record since the last call."""
        from confluent_kafka import TopicPartition

        from connectors.kafka_source import OffsetRange, read_range

        out = []
        for (topic, partition), start in self.next.items():
            _low, high = self.watermarks.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=10, cached=False
            )
            if high <= start:
                continue
            part = OffsetRange(topic, partition, start, high)
            for batch in read_range(self.config, part, poll_timeout=30.0):
                values, stamps = batch.column("value").to_pylist(), batch.column("timestamp")
                micros = stamps.cast("int64").to_pylist()
                out.extend((topic, v, t // 1000) for v, t in zip(values, micros, strict=True))
            self.next[(topic, partition)] = high
        return out

    def close(self) -> None:
        self.watermarks.close()


class Report:
    """Prints match and dead-letter records as one line each, and counts them."""

    def __init__(self, matches_topic: str) -> None:
        self.matches_topic = matches_topic
        self.events: Counter[tuple[str, str]] = Counter()
        self.dead: list[str] = []
        self.lock = threading.Lock()

    def show(self, records: list[tuple[str, bytes, int]]) -> None:
        matches = [json.loads(v) for t, v, _ in records if t == self.matches_topic]
        letters = [json.loads(v) for t, v, _ in records if t != self.matches_topic]
        with self.lock:
            for r in sorted(matches, key=lambda r: r["ts"]):  # two partitions: merge by time
                self.events[(r["event"], r["reason"])] += 1
                print(
                    f"{clock(r['ts'])}  {r['event']:<8} {r['reason']:<17} "
                    f"{r['profile_id']} → {r['subscription_id']} ({r['subscriber']})",
                    flush=True,
                )
            for d in letters:
                src = d.get("source") or {}
                where = f"{src.get('topic')}[{src.get('partition')}]@{src.get('offset')}"
                self.dead.append(f"{where}: {d['reason']}")
                print(f"{'':8}  dead letter  {where}: {d['reason']}", flush=True)

    def summary(self, batches: int, rows: int, seconds: float, ended: str) -> str:
        lines = [
            "",
            f"── summary ({ended}) " + "─" * 40,
            f"match records: {sum(self.events.values())}",
        ]
        for (event, reason), n in sorted(self.events.items()):
            lines.append(f"  {event:<8} {reason:<17} {n:>5}")
        lines.append(f"dead letters: {len(self.dead)}")
        lines += [f"  {d}" for d in self.dead]
        lines.append(f"batches: {batches} ({rows} input records); time: {seconds:.1f} s")
        return "\n".join(lines)


# -- the job's progress -----------------------------------------------------------------------


def progress_listener(query_name: str) -> Any:
    """A listener counting the query's batches and input rows (for the summary and
    to know when everything published has been processed)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):
        def __init__(self) -> None:
            self.batches = 0
            self.rows = 0
            self.last = time.monotonic()

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            if event.progress.name == query_name:
                self.batches += 1
                self.rows += event.progress.numInputRows
                self.last = time.monotonic()

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return Progress()


# -- running it -------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    from connectors.broker import BrokerError

    if not 0 <= args.speed < float("inf"):  # (nan too)
        raise CliError("--speed must be a finite number, 0 or more")
    ticks = load_ticks(args.scenario)
    try:
        bootstrap = _fresh_broker(args.data_dir / "broker")
    except BrokerError as exc:
        raise CliError(str(exc)) from None
    try:
        return _run(args, ticks, bootstrap)
    finally:
        if args.keep:
            print(
                f"tsm demo: broker left running at {bootstrap}; stop it with "
                f"`tsm broker stop --data-dir {args.data_dir / 'broker'}`",
                file=sys.stderr,
            )
        else:
            from connectors.broker import stop_broker

            stop_broker(args.data_dir / "broker")


def _fresh_broker(data_dir: Path) -> str:
    """Stop a broker a previous demo left (`--keep`), wipe its data, start a new one."""
    from connectors.broker import free_port, start_broker, stop_broker

    stop_broker(data_dir)
    shutil.rmtree(data_dir.parent, ignore_errors=True)
    # Detached (its own session): a Ctrl-C meant for the demo must not kill the
    # broker before the job has stopped between batches.
    status = start_broker(free_port(), data_dir)
    assert status.bootstrap is not None
    return status.bootstrap


def _run(args: argparse.Namespace, ticks: list[Tick], bootstrap: str) -> int:
    from connectors.admin import create_tsm_topics
    from streaming import job
    from streaming.commands import StopFlag, wait_between_batches
    from streaming.config import JobConfig
    from streaming.listener import Counters

    started = time.monotonic()
    config = JobConfig(
        bootstrap=bootstrap,
        checkpoint=str(args.data_dir / "checkpoint"),
        trigger_interval=TRIGGER,
        query_name="tsm-demo",
        # The scenario is published in event-time order, so a drained partition may
        # stop holding the watermark back soon: the last expiries show before the
        # demo ends (SETTLE_S after its last batch).
        idle_ms=1000,
    )
    create_tsm_topics(bootstrap, partitions=2, topics=config.topics)
    print(f"tsm demo: broker at {bootstrap}; starting Spark ({args.master})", flush=True)
    spark = job.session(config, args.master, "tsm demo", log_level="ERROR")
    print(
        f"tsm demo: Spark UI at {spark.sparkContext.uiWebUrl} (Structured Streaming tab, "
        f"query {config.query_name!r})",
        flush=True,
    )
    listener = progress_listener(config.query_name)
    spark.streams.addListener(listener)
    reader = OutputReader(bootstrap, [config.topics.matches, config.topics.deadletter])
    report = Report(config.topics.matches)
    stop = StopFlag()
    ended = "interrupted"
    try:
        metrics = spark.sparkContext.accumulator({}, Counters())
        query = job.start(spark, config, metrics)
        director = Director(args, ticks, bootstrap, config, listener, reader, report, stop)
        thread = threading.Thread(target=director.run, args=(query,), daemon=True)
        thread.start()
        wait_between_batches(query, stop)
        thread.join()
        report.show(reader.poll())  # what the last batch wrote
        error = query.exception()
        if director.finished:
            ended = "scenario done"
        if error is not None:
            ended = "the query failed"
            print(f"tsm demo: the query failed: {error}", file=sys.stderr)
    finally:
        stop.restore()
        reader.close()
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
        spark.streams.removeListener(listener)
        spark.stop()
        print(report.summary(listener.batches, listener.rows, time.monotonic() - started, ended))
    if ended == "the query failed":
        return 1
    return 130 if stop.signal == signal.SIGINT else 0


class Director:
    """Publishes the ticks on the event-time clock while printing the output,
    then waits until everything published is processed and read back."""

    def __init__(
        self,
        args: argparse.Namespace,
        ticks: list[Tick],
        bootstrap: str,
        config: Any,
        listener: Any,
        reader: OutputReader,
        report: Report,
        stop: Any,
    ) -> None:
        self.speed, self.follow = args.speed, args.follow
        self.ticks, self.bootstrap, self.topics = ticks, bootstrap, config.topics
        self.listener, self.reader, self.report, self.stop = listener, reader, report, stop
        self.published = 0
        self.finished = False

    def run(self, query: Any) -> None:
        try:
            self._publish(self.ticks[0])
            self._await(lambda: self.listener.rows > 0, query)  # the job is warm
            origin_ts, origin = self.ticks[0].ts, time.monotonic()
            for tick in self.ticks[1:]:
                if self.speed:
                    due = origin + (tick.ts - origin_ts) / 1000 / self.speed
                    self._await(lambda due=due: time.monotonic() >= due, query)
                if self.stop.event.is_set() or not query.isActive:
                    return
                self._publish(tick)
            self._await(lambda: self._drained(query), query)
            self.finished = not self.stop.event.is_set()
            if self.finished and not self.follow:
                self.stop.event.set()
            elif self.finished:
                print("tsm demo: scenario done; following the topics until Ctrl-C", flush=True)
                self._await(lambda: False, query)
        except Exception:
            self.stop.event.set()  # the main thread stops the query and reports
            raise

    def _publish(self, tick: Tick) -> None:
        from connectors.produce import produce_lines

        counts = []
        for role in ("subscriptions", "profiles"):
            lines = tick.lines[role]
            if lines:
                self.published += produce_lines(self.bootstrap, getattr(self.topics, role), lines)
                counts.append(f"{len(lines)} {role if len(lines) > 1 else role[:-1]}")
        print(f"── {clock(tick.ts)} published {', '.join(counts)}", flush=True)

    def _drained(self, query: Any) -> bool:
        return (
            self.listener.rows >= self.published
            and not query.status["isTriggerActive"]
            and time.monotonic() - self.listener.last > SETTLE_S
        )

    def _await(self, done: Any, query: Any) -> None:
        """Print the output while waiting for `done()`, a stop request or the query's end."""
        while not done() and not self.stop.event.is_set() and query.isActive:
            self.report.show(self.reader.poll())
            self.stop.event.wait(POLL_S)
        self.report.show(self.reader.poll())
