"""`tsm run`: the streaming matcher on Kafka, until stopped or (with --available-now) done.

SIGINT/SIGTERM only set a flag; the query is stopped between micro-batches,
never inside one (PLATFORM.md: `stop()` during a stateful batch has thrown
StackOverflowError), and what a batch wrote is committed with its offsets.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from streaming.cli import CliError

# How often the driver looks at the stop flag and the query's state.
POLL_SECONDS = 0.1


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="run the streaming matcher (Spark) on the Kafka topics",
        description="Read subscriptions and profiles from Kafka, match them per space "
        "in a stateful Spark query, write matches and dead letters to Kafka. "
        "Settings come from --config (tsm.toml); flags override them.",
    )
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap address")
    p.add_argument("--config", metavar="FILE", help="tsm.toml (topics, lateness, sharding, ...)")
    p.add_argument("--checkpoint", metavar="DIR", help="checkpoint dir (default checkpoints/tsm)")
    p.add_argument(
        "--available-now",
        action="store_true",
        default=None,
        help="process what the topics hold now, then stop",
    )
    p.add_argument(
        "--exactly-once",
        action="store_true",
        default=None,
        help="transactional output: read_committed consumers see each record once",
    )
    p.add_argument("--source", choices=("python", "native"), help="Kafka source (default python)")
    p.add_argument("--max-records-per-trigger", type=int, metavar="N", help="records per batch")
    p.add_argument(
        "--trigger-interval", metavar="INTERVAL", help="e.g. '2 seconds' (default back to back)"
    )
    p.add_argument("--lateness", type=int, metavar="MS", help="allowed lateness of event time")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from streaming.config import ConfigError, load_config

    try:
        config = load_config(args.config).with_overrides(
            bootstrap=args.bootstrap,
            checkpoint=args.checkpoint,
            exactly_once=args.exactly_once,
            source=args.source,
            max_records_per_trigger=args.max_records_per_trigger,
            trigger_interval=args.trigger_interval,
            lateness_ms=args.lateness,
        )
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    if config.bootstrap is None:
        raise CliError("no bootstrap address: give --bootstrap or set bootstrap in tsm.toml")
    _create_missing_topics(config, _require_broker(config))
    return run(config, args.master, bool(args.available_now))


def _require_broker(config: Any) -> set[str]:
    """The broker's topics; a CLI error if no broker answers."""
    from connectors.admin import BadClientSetting, BrokerUnreachable, require_broker

    try:
        return require_broker(config.bootstrap, config.kafka_options)
    except (BrokerUnreachable, BadClientSetting) as exc:
        raise CliError(str(exc)) from None


def _create_missing_topics(config: Any, existing: set[str]) -> None:
    """Create the job's topics that do not exist, as `tsm topics create` does.

    Otherwise a missing input reads as empty without a word, and a missing
    output is created by the broker on first write, if it does, with one
    partition and its default retention (on noida-db, records with a
    CreateTime older than 7 days vanish: PLATFORM.md). Where the client may
    not create topics, the job starts all the same, and says so."""
    from confluent_kafka import KafkaException

    from connectors.admin import DEFAULT_PARTITIONS, create_topics

    missing = sorted(set(config.topics.all()) - existing)
    if not missing:
        return
    wanted = dict.fromkeys(missing, DEFAULT_PARTITIONS)
    try:
        created = create_topics(config.bootstrap, wanted, options=config.kafka_options)
    except KafkaException as exc:
        print(f"tsm run: warning: cannot create the topics {missing}: {exc}", file=sys.stderr)
        return
    for name in (name for name, new in created.items() if new):
        print(
            f"tsm run: created topic {name} ({DEFAULT_PARTITIONS} partitions, kept forever)",
            file=sys.stderr,
        )


def run(config: Any, master: str, available_now: bool) -> int:
    """Start the query, log each batch, stop between batches on a signal."""
    from pyspark.errors import IllegalArgumentException

    from streaming import job
    from streaming.listener import Counters, ProgressLogger, failure_reason, live_counts

    spark = job.session(config, master, f"tsm run ({config.query_name})")
    ui = spark.sparkContext.uiWebUrl
    writes = (
        "exactly once (Kafka transactions, for read_committed consumers)"
        if config.exactly_once
        else "at least once (drop duplicates by match_id)"
    )
    print(
        f"tsm run: query {config.query_name!r} writes {writes}; Spark UI at {ui or '(disabled)'}",
        flush=True,
    )
    metrics = spark.sparkContext.accumulator({}, Counters())
    listener = ProgressLogger(config.query_name, metrics)
    spark.streams.addListener(listener)
    stop = StopFlag()
    try:
        listener.live = live_counts(spark, config.checkpoint)
        writer = stop.guard(job.kafka_writer(config))
        query = job.start(spark, config, metrics, available_now=available_now, writer=writer)
        wait_between_batches(query, stop)
        error = query.exception()
    except (ValueError, IllegalArgumentException) as exc:  # (a setting Spark refused)
        raise CliError(str(exc)) from None
    finally:
        stop.restore()
        # Let the last progress events reach the listener, then detach it, so that
        # the JVM does not call back into a Python process that is exiting.
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
        spark.streams.removeListener(listener)
        spark.stop()
    if error is not None and StopRequested.__name__ not in str(error):
        details = str(error).split("\n=== Streaming Query ===")[0]  # (not the plan)
        print(f"tsm run: the query failed: {failure_reason(details)}", file=sys.stderr)
        print(details, file=sys.stderr)
        return 1
    return 130 if stop.signal == signal.SIGINT else 0


class StopRequested(Exception):
    """Raised at the start of a batch's write once a stop is asked (see `StopFlag.guard`)."""


class StopFlag:
    """SIGINT/SIGTERM → a flag (the handlers are restored afterwards).

    With back-to-back triggers there is no idle moment between batches in
    which to call `stop()`, so `guard` also ends the query at the start of
    the next batch's write, before any of its tasks (and state) ran: that
    batch is planned but not committed, and is run again on restart.
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal: int | None = None
        self._previous = {s: signal.signal(s, self._set) for s in (signal.SIGINT, signal.SIGTERM)}

    def _set(self, signum: int, _frame: Any) -> None:
        self.signal = signum
        self.event.set()
        print("tsm run: stopping after the current batch", file=sys.stderr, flush=True)

    def guard(self, writer: Any) -> Any:
        def write(df: Any, batch_id: int) -> None:
            if self.event.is_set():
                raise StopRequested(f"stopped before batch {batch_id}; it runs on restart")
            writer(df, batch_id)

        return write

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def wait_between_batches(query: Any, stop: StopFlag) -> None:
    """Until the query ends by itself, or stop is asked: then stop it between batches."""
    from pyspark.errors import StreamingQueryException

    while query.isActive:
        if stop.event.is_set() and not query.status["isTriggerActive"]:
            query.stop()
            break
        try:
            query.awaitTermination(POLL_SECONDS)
        except StreamingQueryException:
            return  # `run` reports it from query.exception()
