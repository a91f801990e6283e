"""`tsm broker|topics|produce|consume`: the Kafka side of the CLI (CLI.md).

Handlers import the Kafka client only when they run, so that `tsm --help`
stays fast. Data goes to stdout, reports and progress to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from connectors.admin import DEFAULT_PARTITIONS
from streaming.cli import CliError, seconds, whole


def register(subparsers: argparse._SubParsersAction) -> None:
    _register_broker(subparsers)
    _register_topics(subparsers)
    _register_produce(subparsers)
    _register_consume(subparsers)


def _kafka_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kafka",
        metavar="KEY=VALUE",
        action="append",
        help="a librdkafka client setting, e.g. security.protocol=SASL_SSL (repeatable)",
    )


def _options(args: argparse.Namespace) -> dict[str, str]:
    """The `--kafka` options, after checking that the broker answers with them."""
    from connectors.admin import BadClientSetting, BrokerUnreachable, require_broker
    from connectors.config import parse_cli_options

    try:
        options = parse_cli_options(args.kafka)
    except ValueError as exc:
        raise CliError(f"--kafka: {exc}") from None
    try:
        require_broker(args.bootstrap, options)
    except (BrokerUnreachable, BadClientSetting) as exc:
        raise CliError(str(exc)) from None
    return options


# --- broker -----------------------------------------------------------------


def _register_broker(subparsers: argparse._SubParsersAction) -> None:
    from connectors.broker import DEFAULT_DATA_DIR

    parser = subparsers.add_parser(
        "broker", help="run the embedded Kafka-protocol broker (noida-db)"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="start it in the background; print its address")
    start.add_argument(
        "--port", type=whole(1, 65535), default=9092, help="Kafka port (default 9092)"
    )
    start.add_argument("--timeout", type=seconds, default=15.0, help="readiness wait (s)")
    start.set_defaults(handler=_broker_start)
    stop = actions.add_parser("stop", help="stop it (SIGTERM: it saves its data)")
    stop.set_defaults(handler=_broker_stop)
    status = actions.add_parser(
        "status", help="say whether it runs, and where (exit status 1 if not)"
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
        print(f"already running (pid {status.pid})", file=sys.stderr)
    print(status.bootstrap)
    return 0


def _broker_stop(args: argparse.Namespace) -> int:
    from connectors.broker import BrokerError, stop_broker

    try:
        stopped = stop_broker(args.data_dir)
    except BrokerError as exc:
        raise CliError(str(exc)) from None
    print("stopped" if stopped else "not running", file=sys.stderr)
    return 0


def _broker_status(args: argparse.Namespace) -> int:
    from connectors.broker import broker_status

    status = broker_status(args.data_dir)
    if status.running:
        print(f"running {status.bootstrap} (pid {status.pid})")
        return 0
    print("not running")
    return 1


# --- topics -----------------------------------------------------------------


def _register_topics(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("topics", help="manage the tsm topics")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser(
        "create",
        help="create the tsm topics with retention.ms=-1 (existing ones are left as they are)",
    )
    create.add_argument("--bootstrap", required=True, metavar="HOST:PORT")
    create.add_argument(
        "--partitions",
        type=int,
        default=DEFAULT_PARTITIONS,
        help=f"partitions per data topic (default {DEFAULT_PARTITIONS})",
    )
    _kafka_flag(create)
    create.set_defaults(handler=_topics_create)


def _topics_create(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from connectors.admin import create_tsm_topics

    if args.partitions < 1:
        raise CliError("--partitions must be at least 1")
    try:
        created = create_tsm_topics(args.bootstrap, args.partitions, options=_options(args))
    except KafkaException as exc:
        raise CliError(f"cannot create topics on {args.bootstrap}: {exc}") from None
    for name, new in created.items():
        print(f"{name}: {'created' if new else 'exists'}", file=sys.stderr)
    return 0


# --- produce ----------------------------------------------------------------


def _register_produce(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "produce", help="send a JSON-lines file to the subscriptions or profiles topic"
    )
    parser.add_argument("kind", choices=("subscriptions", "profiles"))
    parser.add_argument("file", metavar="FILE", help="JSON lines; - reads stdin")
    parser.add_argument("--bootstrap", required=True, metavar="HOST:PORT")
    parser.add_argument("--topic", help="topic name (default: the kind's tsm topic)")
    _kafka_flag(parser)
    parser.set_defaults(handler=_produce)


def _produce(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from connectors.config import Topics
    from connectors.errors import ConnectorError
    from connectors.produce import produce_lines, read_lines, terminal_progress

    topic = args.topic or getattr(Topics(), args.kind)
    progress = terminal_progress(f"producing to {topic}")
    try:
        with _open_input(args.file) as stream:
            count = produce_lines(
                args.bootstrap, topic, read_lines(stream), _options(args), progress
            )
    except (ConnectorError, KafkaException) as exc:
        raise CliError(str(exc)) from None
    if progress is not None:
        print(file=sys.stderr)
    print(f"produced {count} records to {topic}", file=sys.stderr)
    return 0


@contextlib.contextmanager
def _open_input(name: str):
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
    parser = subparsers.add_parser(
        "consume", help="print the matches or dead letters as JSON lines"
    )
    parser.add_argument("kind", choices=("matches", "deadletter"))
    parser.add_argument("--bootstrap", required=True, metavar="HOST:PORT")
    parser.add_argument("--topic", help="topic name (default: the kind's tsm topic)")
    parser.add_argument("--from-beginning", action="store_true", help="start at the oldest record")
    parser.add_argument("--max", type=int, metavar="N", help="stop after N records")
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
    _kafka_flag(parser)
    parser.set_defaults(handler=_consume)


def _consume(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from connectors.config import Topics
    from connectors.consume import as_json_line, consume_values

    if args.max is not None and args.max < 0:
        raise CliError("--max must not be negative")
    topic = args.topic or getattr(Topics(), args.kind)
    values = consume_values(
        args.bootstrap,
        topic,
        from_beginning=args.from_beginning,
        max_records=args.max,
        timeout=args.timeout,
        read_committed=args.read_committed,
        group=args.group,
        options=_options(args),
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
            print(f"note: {not_json} values were not JSON; printed as strings", file=sys.stderr)
    return 0
