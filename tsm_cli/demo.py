"""`tsm demo`: the whole system on one machine, with a scenario replayed in event time.

Starts the embedded broker and a local Spark, creates the topics, starts the
job exactly as `tsm run` does (`streaming.job.start`), then replays the
bundled scenario (`streaming.demo.Director`) while it prints the matches and
dead letters as they reach their topics, and ends with a summary.

Stdout is the show: each tick as published, each match and dead letter, the
summary. The demo's own notices go to the log (stderr). What Spark's JVM,
its Python workers and the Kafka clients print by themselves goes to
`<data dir>/spark.log`, unless -v.

The data directory (broker data, checkpoint, Spark's output) is wiped at
each start, so the demo only takes one it made (it leaves a marker file in
it) or a new or empty one.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from collections import Counter
from pathlib import Path

from streaming.demo import DEFAULT_SPEED, SCENARIO, TRIGGER, clock
from tsm_cli.args import CliError, add_command, verbosity
from tsm_cli.demo_data_dir import claim_data_dir, wipe_data_dir
from tsm_cli.logs import client_log_level, jvm_output_to, spark_log_level

log = logging.getLogger(__name__)

DATA_DIR = Path(".tsm/demo")
# Written in a data directory the demo made; the demo wipes no other.


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers,
        "demo",
        help="run the whole system locally on a bundled scenario and print the matches live",
        description="Start the embedded broker and a local Spark, run the streaming job, "
        "replay a scenario (buses, trams and ferries through alert zones) in event time, "
        "print the matches as they arrive, and end with a summary. Ctrl-C stops cleanly. "
        "Spark's and the Kafka clients' own output goes to DIR/spark.log (-v: to stderr).",
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
        help=f"broker data, checkpoint and Spark's output (default {DATA_DIR}); wiped at "
        "start, so it must be new, empty, or one the demo made",
    )
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument(
        "--network",
        action="store_true",
        help="the city as three sites (harbour, centre, airport: examples/network), a "
        "broker each, routing by content; data dir .tsm/demo-network by default",
    )
    p.add_argument(
        "--moves",
        action="store_true",
        help="with --network: the four sites of examples/network/moves, where a ferry's "
        "publisher and a commuter's subscriptions move between sites",
    )
    p.set_defaults(handler=_demo)


# -- what it shows ------------------------------------------------------------------------------


class Report:
    """Prints match and dead-letter records as one line each, and counts them
    (a `streaming.demo.Display`)."""

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

    def published(self, ts: int, counts: dict[str, int]) -> None:
        said = [f"{n} {role if n > 1 else role[:-1]}" for role, n in counts.items()]
        print(f"── {clock(ts)} published {', '.join(said)}", flush=True)

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


# -- running it -------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    if args.moves and not args.network:
        raise CliError("--moves goes with --network (tsm demo --network --moves)")
    if args.network:
        from tsm_cli import demo_network

        return demo_network.run(args)
    from connectors.broker import BrokerError, free_port, start_broker, stop_broker
    from streaming.demo import ScenarioError, load_ticks

    if not 0 <= args.speed < float("inf"):  # (nan too)
        raise CliError("--speed must be a finite number, 0 or more")
    try:
        ticks = load_ticks(args.scenario)
    except ScenarioError as exc:
        raise CliError(str(exc)) from None
    claim_data_dir(args.data_dir)
    broker_dir = args.data_dir / "broker"
    try:
        wipe_data_dir(args.data_dir)
        # Detached (its own session): a Ctrl-C meant for the demo must not kill the
        # broker before the job has stopped between batches.
        bootstrap = start_broker(free_port(), broker_dir).bootstrap
    except BrokerError as exc:
        raise CliError(str(exc)) from None
    assert bootstrap is not None
    try:
        return _run(args, ticks, bootstrap)
    finally:
        if args.keep:
            log.info(
                "broker left running at %s; stop it with `tsm broker stop --data-dir %s`",
                bootstrap,
                broker_dir,
            )
        else:
            stop_broker(broker_dir)


def _run(args: argparse.Namespace, ticks: list, bootstrap: str) -> int:
    from connectors.admin import create_tsm_topics
    from streaming import job
    from streaming.config import JobConfig
    from streaming.demo import Director, OutputReader, progress_listener
    from streaming.listener import Counters, failure_reason
    from streaming.stopping import StopFlag, wait_between_batches

    started = time.monotonic()
    level = verbosity(args)
    config = JobConfig(
        bootstrap=bootstrap,
        checkpoint=str(args.data_dir / "checkpoint"),
        trigger_interval=TRIGGER,
        query_name="tsm-demo",
        kafka={"log_level": client_log_level(level)},
        # The scenario is published in event-time order, so a drained partition may
        # stop holding the watermark back soon: the last expiries show before the
        # demo ends (SETTLE_S after its last batch).
        idle_ms=1000,
    )
    options = config.kafka_options
    create_tsm_topics(bootstrap, partitions=2, topics=config.topics, options=options)
    spark_log = None if level > 0 else args.data_dir / "spark.log"
    log.info("broker at %s; starting Spark (%s)", bootstrap, args.master)
    if spark_log is not None:
        log.info("Spark's and the Kafka clients' own output: %s (-v: here)", spark_log)
    with jvm_output_to(spark_log):
        spark = job.session(config, args.master, "tsm demo", log_level=spark_log_level(level))
    log.info(
        "Spark UI at %s (Structured Streaming tab, query %r)",
        spark.sparkContext.uiWebUrl,
        config.query_name,
    )
    listener = progress_listener(config.query_name)
    spark.streams.addListener(listener)
    reader = OutputReader(bootstrap, [config.topics.matches, config.topics.deadletter], options)
    report = Report(config.topics.matches)
    stop = StopFlag()
    ended = "interrupted"
    try:
        metrics = spark.sparkContext.accumulator({}, Counters())
        query = job.start(spark, config, metrics)
        director = Director(
            ticks,
            bootstrap,
            config,
            listener,
            reader,
            report,
            stop,
            speed=args.speed,
            follow=args.follow,
        )
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
            where = f"; Spark's output: {spark_log}" if spark_log else ""
            log.error("the query failed: %s%s", failure_reason(str(error)), where)
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
