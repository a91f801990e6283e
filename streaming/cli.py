"""The `tsm` command: one entry point, subcommands registered by each part.

Each part registers its own subcommands (`register(subparsers)`) and imports
its heavy dependencies (Spark, Kafka clients) only inside the handler, so
that `tsm replay --help` stays fast and works without a JVM.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Callable

# Modules that define `register(subparsers)`; missing ones are skipped so the
# CLI keeps working while a part is being built.
COMMAND_MODULES = (
    "streaming.replay",
    "connectors.commands",
    "streaming.commands",
    "streaming.demo",
    "benchmarks.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tsm",
        description="Streaming matcher for temporal subspace queries "
        "(content-based publish/subscribe on Kafka and Spark).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except CliError as exc:
        print(f"tsm {args.command}: error: {exc}", file=sys.stderr)
        return 2


class CliError(Exception):
    """An error to report on stderr with a non-zero exit status, without a traceback."""


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


if __name__ == "__main__":
    # Run the imported module's main, so that `CliError` raised by the
    # subcommands (imported from `streaming.cli`) is the class caught here.
    from streaming.cli import main as _main

    sys.exit(_main())
