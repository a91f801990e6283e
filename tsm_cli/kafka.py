"""`tsm broker|topics|produce|consume`: the Kafka side of the CLI (CLI.md).

Handlers import the Kafka client only when they run, so that `tsm --help`
stays fast. Stdout carries data only: the records `tsm consume` reads, one
JSON value a line, and the bootstrap address that `tsm broker start` and
`tsm broker status` print (the one value a script reads: `B=$(tsm broker
start)`; `status` prints it when a broker runs, nothing when none does).
Reports and progress go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from tsm_cli import follow
from tsm_cli.args import (
    CliError,
    add_command,
    bootstrap_of,
    client_options,
    config_flag,
    kafka_flag,
    load_settings,
    seconds,
    whole,
)
from tsm_cli.progress import Bar
from tsm_cli.quench import linked_bootstrap, produce_quenched, quench_flags

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    _register_broker(subparsers)
    _register_topics(subparsers)
    _register_produce(subparsers)
    _register_consume(subparsers)


def _client_flags(parser: argparse.ArgumentParser) -> None:
    """--bootstrap, --config and --kafka, as every command talking to Kafka takes them."""
    parser.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        help="Kafka bootstrap address (default: bootstrap in the settings file)",
    )
    config_flag(parser)
    kafka_flag(parser)


def _connect(args: argparse.Namespace):
    """(settings, bootstrap, client options), after checking that the broker answers."""
    from connectors.admin import BadClientSetting, BrokerUnreachable, require_broker

    config = load_settings(args)
    bootstrap = bootstrap_of(args, config)
    options = client_options(args, config)
    try:
        require_broker(bootstrap, options)
    except (BrokerUnreachable, BadClientSetting) as exc:
        raise CliError(str(exc)) from None
    return config, bootstrap, options


# --- broker -----------------------------------------------------------------


def _register_broker(subparsers: argparse._SubParsersAction) -> None:
    from connectors.broker import DEFAULT_DATA_DIR

    parser = add_command(
        subparsers, "broker", help="run the embedded Kafka-protocol broker (noida-db)"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = add_command(actions, "start", help="start it in the background; print its address")
    start.add_argument(
        "--port", type=whole(1, 65535), default=9092, help="Kafka port (default 9092)"
    )
    start.add_argument("--timeout", type=seconds, default=15.0, help="readiness wait (s)")
    start.set_defaults(handler=_broker_start)
    stop = add_command(actions, "stop", help="stop it (SIGTERM: it saves its data)")
    stop.set_defaults(handler=_broker_stop)
    status = add_command(
        actions,
        "status",
        help="print its address if it runs (exit status 0), nothing if not (exit status 1)",
    )
    status.set_defaults(handler=_broker_status)
    for sub in (start, stop, status):
        sub.add_argument(
            "--data-dir",
            type=Path,
            default=DEFAULT_DATA_DIR,
            help=f"its data and pid file (default {DEFAULT_DATA_DIR})",
        )


def _broker_start(args: argparse.Namespace) -> int:
    from connectors.broker import BrokerError, broker_status, start_broker

    was_running = broker_status(args.data_dir).running
    try:
        status = start_broker(args.port, args.data_dir, args.timeout)
    except BrokerError as exc:
        raise CliError(str(exc)) from None
    if was_running:
        log.info("already running (pid %s)", status.pid)
    else:
        log.info("started (pid %s), data in %s", status.pid, args.data_dir)
    print(status.bootstrap, flush=True)
    return 0


def _broker_stop(args: argparse.Namespace) -> int:
    from connectors.broker import BrokerError, stop_broker

    try:
        stopped = stop_broker(args.data_dir)
    except BrokerError as exc:
        raise CliError(str(exc)) from None
    log.info("stopped" if stopped else "not running")
    return 0


def _broker_status(args: argparse.Namespace) -> int:
    from connectors.broker import broker_status

    status = broker_status(args.data_dir)
    if status.running:
        log.info("running at %s (pid %s)", status.bootstrap, status.pid)
        print(status.bootstrap, flush=True)
        return 0
    log.info("not running (%s)", args.data_dir)
    return 1


# --- topics -----------------------------------------------------------------


def _register_topics(subparsers: argparse._SubParsersAction) -> None:
    from connectors.admin import DEFAULT_PARTITIONS

    parser = add_command(subparsers, "topics", help="manage the tsm topics")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = add_command(
        actions,
        "create",
        help="create the tsm topics with retention.ms=-1 (existing ones are left as they are)",
    )
    _client_flags(create)
    create.add_argument(
        "--partitions",
        type=whole(1),
        default=DEFAULT_PARTITIONS,
        help=f"partitions per data topic (default {DEFAULT_PARTITIONS})",
    )
    create.set_defaults(handler=_topics_create)


def _topics_create(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from connectors.admin import create_tsm_topics

    config, bootstrap, options = _connect(args)
    try:
        created = create_tsm_topics(bootstrap, args.partitions, config.topics, options)
    except KafkaException as exc:
        raise CliError(f"cannot create topics on {bootstrap}: {exc}") from None
    for name, new in created.items():
        log.info("%s: %s", name, "created" if new else "exists")
    return 0


# --- produce ----------------------------------------------------------------


def _register_produce(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "produce", help="send a JSON-lines file to the subscriptions or profiles topic"
    )
    parser.add_argument("kind", choices=("subscriptions", "profiles"))
    parser.add_argument("file", metavar="FILE", help="JSON lines; - reads stdin")
    _client_flags(parser)
    parser.add_argument("--topic", help="topic name (default: the kind's topic in the settings)")
    quench_flags(parser)
    parser.set_defaults(handler=_produce)


def _produce(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from connectors.errors import ConnectorError
    from connectors.produce import produce_lines, read_lines

    if args.quench and (args.network or args.producer):
        args.bootstrap = args.bootstrap or linked_bootstrap(args)
    config, bootstrap, options = _connect(args)
    topic = args.topic or getattr(config.topics, args.kind)
    if args.quench:
        with _open_input(args.file) as stream:
            return produce_quenched(args, stream, bootstrap, topic, options)
    try:
        with _open_input(args.file) as stream, Bar(f"to {topic}", unit="records") as bar:
            lines = read_lines(stream)
            count = produce_lines(bootstrap, topic, lines, options, bar.update_to)
    except (ConnectorError, KafkaException) as exc:
        raise CliError(str(exc)) from None
    log.info("produced %d records to %s", count, topic)
    return 0


@contextlib.contextmanager
def _open_input(name: str) -> Iterator[IO[bytes]]:
    if name == "-":
        yield sys.stdin.buffer
        return
    try:
        stream = open(name, "rb")
    except OSError as exc:
        raise CliError(f"cannot read {name}: {exc.strerror}") from None
    with stream:
        yield stream


# --- consume ----------------------------------------------------------------


def _register_consume(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "consume", help="print the matches or dead letters as JSON lines"
    )
    parser.add_argument("kind", choices=("matches", "deadletter"))
    _client_flags(parser)
    parser.add_argument("--topic", help="topic name (default: the kind's topic in the settings)")
    parser.add_argument("--from-beginning", action="store_true", help="start at the oldest record")
    parser.add_argument("--max", type=whole(0), metavar="N", help="stop after N records")
    parser.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        metavar="SECONDS",
        help="stop after this long without a new record (default 10)",
    )
    parser.add_argument(
        "--read-committed",
        action="store_true",
        help="hide records of open and aborted transactions (use with `run --exactly-once`)",
    )
    parser.add_argument("--group", help="consumer group (default: a fresh one per run)")
    follow.add_arguments(parser)
    parser.set_defaults(handler=_consume)


def _consume(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from connectors.consume import as_json_line, consume_values

    if follow.wanted(args):
        return follow.run(args)

    config, bootstrap, options = _connect(args)
    topic = args.topic or getattr(config.topics, args.kind)
    values = consume_values(
        bootstrap,
        topic,
        from_beginning=args.from_beginning,
        max_records=args.max,
        timeout=args.timeout,
        read_committed=args.read_committed,
        group=args.group,
        options=options,
    )
    out = sys.stdout.buffer
    not_json = 0
    try:
        with contextlib.closing(values):
            for value in values:
                line, was_json = as_json_line(value)
                not_json += not was_json
                out.write(line + b"\n")
                out.flush()
    except KafkaException as exc:
        raise CliError(f"reading {topic}: {exc}") from None
    finally:
        if not_json:
            log.warning("%d values were not JSON; printed as JSON strings", not_json)
    return 0
