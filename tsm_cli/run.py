"""`tsm run`: the streaming matcher on Kafka, until stopped or (with --available-now) done.

Nothing goes to stdout: the job's output is its Kafka topics. Its log on
stderr is the human lines (`tsm run: ...`) and the batch log, one JSON
object per micro-batch (`streaming.listener`). SIGINT/SIGTERM stop it
between micro-batches (`streaming.stopping`).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from tsm_cli import network_run
from tsm_cli.args import (
    CliError,
    add_command,
    client_options,
    config_flag,
    kafka_flag,
    load_settings,
    verbosity,
    whole,
)
from tsm_cli.logs import jvm_output_to, quiet_query_errors, spark_log_level

if TYPE_CHECKING:
    from streaming.config import JobConfig
    from streaming.shipping import Executors

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers,
        "run",
        help="run the streaming matcher (Spark) on the Kafka topics",
        description="Read subscriptions and profiles from Kafka, match them per space "
        "in a stateful Spark query, write matches and dead letters to Kafka. "
        "Settings come from --config (default ./tsm.toml when it exists); flags override them.",
    )
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap address")
    config_flag(p)
    kafka_flag(p)
    p.add_argument("--checkpoint", metavar="DIR", help="checkpoint dir (default checkpoints/tsm)")
    p.add_argument(
        "--available-now",
        action="store_true",
        default=None,
        help="process what the topics hold now, then stop",
    )
    p.add_argument(
        "--exactly-once",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="transactional output: read_committed consumers see each record once "
        "(--no-exactly-once: at least once, whatever the settings say)",
    )
    p.add_argument("--source", choices=("python", "native"), help="Kafka source (default python)")
    p.add_argument("--max-records-per-trigger", type=int, metavar="N", help="records per batch")
    p.add_argument(
        "--trigger-interval", metavar="INTERVAL", help="e.g. '2 seconds' (default back to back)"
    )
    p.add_argument("--lateness", type=int, metavar="MS", help="allowed lateness of event time")
    p.add_argument(
        "--master",
        default="local[2]",
        help="Spark master (default local[2]); spark://HOST:PORT ships the job's code to the "
        "cluster's executors as a package (tsm cluster up starts a cluster here)",
    )
    p.add_argument(
        "--executors",
        type=whole(1),
        metavar="N",
        help="on a cluster: executors of one core to use, and to wait for before the first "
        "batch (default: one per state partition, shuffle_partitions)",
    )
    p.add_argument(
        "--executor-memory", default="2g", help="on a cluster: each executor's heap (default 2g)"
    )
    p.add_argument(
        "--executor-python",
        metavar="PATH",
        help="on a cluster: the Python the executors run, with the job's dependencies "
        "installed (default: this interpreter's path)",
    )
    p.add_argument(
        "--spark-log",
        type=Path,
        metavar="FILE",
        help="append what Spark's JVM, its Python workers and their Kafka clients print "
        "by themselves (start-up notices, worker lines, librdkafka) to FILE, not stderr",
    )
    network_run.add_arguments(p)
    p.set_defaults(handler=_run)


def settings(args: argparse.Namespace) -> JobConfig:
    """The job's settings: the settings file, the flags over it."""
    from streaming.config import ConfigError

    config = load_settings(args)
    options = client_options(args, config)
    try:
        config = config.with_overrides(
            bootstrap=args.bootstrap,
            checkpoint=args.checkpoint,
            exactly_once=args.exactly_once,
            source=args.source,
            max_records_per_trigger=args.max_records_per_trigger,
            trigger_interval=args.trigger_interval,
            lateness_ms=args.lateness,
            kafka={key.removeprefix("kafka."): value for key, value in options.items()},
        )
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    if config.bootstrap is None:
        raise CliError("no bootstrap address: give --bootstrap or set bootstrap in tsm.toml")
    return config


def _run(args: argparse.Namespace) -> int:
    network_run.check_arguments(args)
    if args.network is not None:
        return network_run.run_network(args)
    from streaming.shipping import Executors

    config = settings(args)
    _create_missing_topics(config, _require_broker(config))
    return run(
        config,
        args.master,
        available_now=bool(args.available_now),
        verbosity=verbosity(args),
        spark_log=args.spark_log,
        executors=Executors(args.executor_python, args.executor_memory, args.executors),
    )


def _require_broker(config: JobConfig) -> set[str]:
    """The broker's topics; a CLI error if no broker answers."""
    from connectors.admin import BadClientSetting, BrokerUnreachable, require_broker

    try:
        return require_broker(config.bootstrap, config.kafka_options)
    except (BrokerUnreachable, BadClientSetting) as exc:
        raise CliError(str(exc)) from None


def _create_missing_topics(config: JobConfig, existing: set[str]) -> None:
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
        log.warning("cannot create the topics %s: %s", missing, exc)
        return
    for name in (name for name, new in created.items() if new):
        log.info("created topic %s (%d partitions, kept forever)", name, DEFAULT_PARTITIONS)


def run(
    config: JobConfig,
    master: str,
    *,
    available_now: bool,
    verbosity: int = 0,
    spark_log: Path | None = None,
    executors: Executors | None = None,
) -> int:
    """Start the query, log each batch, stop between batches on a signal.

    Returns 0 when the query is done (`available_now`) or stopped by SIGINT or
    SIGTERM, at any moment from here on: a stop is no failure, and the restart
    goes on from the checkpoint. A failed query is one line on stderr and 1."""
    from pyspark.errors import IllegalArgumentException

    from streaming import job
    from streaming.listener import Counters, ProgressLogger, live_counts
    from streaming.stopping import StopFlag, StopRequested, wait_between_batches

    stop = StopFlag()  # (from here: the JVM takes seconds to start)
    try:
        name, level = f"tsm run ({config.query_name})", spark_log_level(verbosity)
        with jvm_output_to(spark_log):
            spark = job.session(config, master, name, log_level=level, executors=executors)
        stop.listen()
        quiet_query_errors(spark)
        ui = spark.sparkContext.uiWebUrl
        log.info(
            "query %r writes %s; Spark UI at %s",
            config.query_name,
            _writes(config),
            ui or "(disabled)",
        )
        metrics = spark.sparkContext.accumulator({}, Counters())
        listener = ProgressLogger(config.query_name, metrics)
        spark.streams.addListener(listener)
        error = None
        try:
            listener.live = live_counts(spark, config.checkpoint)
            if not stop.event.is_set():
                writer = stop.guard(job.kafka_writer(config))
                query = job.start(
                    spark, config, metrics, available_now=available_now, writer=writer
                )
                wait_between_batches(query, stop)
                error = query.exception()
        except (ValueError, IllegalArgumentException) as exc:  # (a setting Spark refused)
            raise CliError(str(exc)) from None
        finally:
            # Let the last progress events reach the listener, then detach it, so that
            # the JVM does not call back into a Python process that is exiting.
            spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
            spark.streams.removeListener(listener)
            spark.stop()
    finally:
        stop.restore()
    if error is not None and StopRequested.__name__ not in str(error):
        _report_failure(str(error))
        return 1
    return 0


def _writes(config: JobConfig) -> str:
    if config.exactly_once:
        return "exactly once (Kafka transactions, for read_committed consumers)"
    return "at least once (drop duplicates by match_id)"


def _report_failure(error: str) -> None:
    """One line: why the query failed, that a restart resumes from the checkpoint, and
    where Spark's whole report (Java and Python stack traces) is kept."""
    from streaming.listener import failure_reason

    details = error.split("\n=== Streaming Query ===")[0]  # (not the plan)
    with tempfile.NamedTemporaryFile(
        "w", prefix="tsm-run-failure-", suffix=".txt", delete=False
    ) as file:
        file.write(details + "\n")
    log.error(
        "the query failed: %s; started again, it resumes from its checkpoint "
        "(Spark's whole report: %s)",
        failure_reason(details),
        file.name,
    )
