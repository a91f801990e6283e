"""The `tsm` command: one entry point, a subcommand per module of this package.

Each command module registers its subcommands (`register(subparsers)`) and
imports its heavy dependencies (Spark, Kafka clients, numpy) only inside its
handlers, so that `tsm --help` and `tsm replay --help` stay fast and work
without a JVM.
"""

from __future__ import annotations

import argparse
import logging
import sys

from tsm_cli import bench, cluster, demo, kafka, net, replay, run, stats
from tsm_cli.args import CliError, verbosity, verbosity_flags
from tsm_cli.logs import configure

log = logging.getLogger(__name__)

COMMANDS = (replay, kafka, run, net, cluster, demo, bench, stats)


class _Version(argparse.Action):
    """`--version`: the installed package's version, looked up only when asked
    (importlib.metadata costs half of `tsm --help`'s imports)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_args) -> None:
        from importlib import metadata

        try:
            version = metadata.version("tsm")
        except metadata.PackageNotFoundError:  # (a checkout that is not installed)
            version = "unknown"
        print(f"tsm {version}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tsm",
        description="Streaming matcher for temporal subspace queries "
        "(content-based publish/subscribe on Kafka and Spark).",
    )
    parser.add_argument("--version", action=_Version)
    verbosity_flags(parser, top=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure(args.command, verbosity(args))
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        log.error("interrupted")
        return 130
    except BrokenPipeError:  # (stdout closed by its reader: `tsm consume ... | head`)
        return 0
    except CliError as exc:
        log.error("%s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
