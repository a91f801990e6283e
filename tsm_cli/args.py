"""What every command shares: its error type, argparse value types, common flags,
and the settings file (`tsm.toml`) of the commands that name topics."""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (streaming.config: no import cost for `tsm --help`)
    from streaming.config import JobConfig

log = logging.getLogger(__name__)

# Read from the working directory by every command that names topics, when it exists.
DEFAULT_CONFIG = Path("tsm.toml")


class CliError(Exception):
    """An error to report on stderr, one line, with exit status 2 and no traceback."""


def whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` (to `high`)."""

    def parse(text: str) -> int:
        value = int(text) if text.strip().lstrip("+-").isdigit() else None
        if value is None or value < low or (high is not None and value > high):
            within = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise argparse.ArgumentTypeError(f"expected a whole number {within}, got {text!r}")
        return value

    return parse


def seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def verbosity_flags(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """`-q`/`-v`, repeatable, on the top-level parser and on every command's.

    A command's own copies have no default, so that `tsm -v demo` keeps the
    top level's count (argparse copies a subcommand's defaults over it)."""
    default = 0 if top else argparse.SUPPRESS
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default,
        help="log more: debug lines, and Spark's and librdkafka's own output (-vv: their info)",
    )
    parser.add_argument(
        "-q", "--quiet", action="count", default=default, help="log warnings and errors only"
    )


def verbosity(args: argparse.Namespace) -> int:
    return getattr(args, "verbose", 0) - getattr(args, "quiet", 0)


def config_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        type=Path,
        help=f"settings: topics, bootstrap, [kafka] client options, ... "
        f"(default {DEFAULT_CONFIG} in the working directory, when it exists)",
    )


def kafka_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kafka",
        metavar="KEY=VALUE",
        action="append",
        help="a librdkafka client setting, e.g. security.protocol=SASL_SSL (repeatable; "
        "over [kafka] in the settings file)",
    )


def load_settings(args: argparse.Namespace) -> JobConfig:
    """`--config`, else `tsm.toml` in the working directory if there is one, else the defaults."""
    from streaming.config import ConfigError, load_config

    path = args.config
    if path is None and DEFAULT_CONFIG.is_file():
        path = DEFAULT_CONFIG
        log.info("settings from %s", path)
    try:
        return load_config(path)
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def client_options(args: argparse.Namespace, config: JobConfig) -> dict[str, str]:
    """The Kafka client options: `[kafka]` of the settings, then `--kafka` over them, then
    the verbosity's librdkafka log level under both."""
    from connectors.config import parse_cli_options
    from tsm_cli.logs import with_client_log_level

    try:
        flags = parse_cli_options(getattr(args, "kafka", None))
    except ValueError as exc:
        raise CliError(f"--kafka: {exc}") from None
    return with_client_log_level({**config.kafka_options, **flags}, verbosity(args))


def bootstrap_of(args: argparse.Namespace, config: JobConfig) -> str:
    """`--bootstrap`, else the settings' `bootstrap`."""
    bootstrap = args.bootstrap or config.bootstrap
    if not bootstrap:
        raise CliError("no bootstrap address: give --bootstrap or set bootstrap in tsm.toml")
    return bootstrap


def add_command(
    subparsers: argparse._SubParsersAction, name: str, **kwargs
) -> argparse.ArgumentParser:
    """A (sub)command's parser, with `-q`/`-v`."""
    parser = subparsers.add_parser(name, **kwargs)
    verbosity_flags(parser)
    return parser
