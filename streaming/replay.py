"""`tsm replay`: run topic records from JSON-lines files through the engine.

The offline twin of the Spark job: the same engine, so the same input gives
the same matches. Both files are merged in the order of SEMANTICS §5 as one
micro-batch (or, with `--batch-lines N`, as batches of N lines of each file,
to see how micro-batch boundaries and lateness play out).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # the engine pulls in numpy: keep `tsm --help` fast
    from matcher.engine import Engine, Input


def _lines(path: str, kind: str) -> Iterator[Input]:
    from matcher.engine import Input
    from matcher.records import Source

    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip(b"\r\n")
            if line.strip():
                yield Input(kind, line, Source(file=path, line=number))


def _batches(subs: list[Input], profiles: list[Input], size: int | None) -> Iterator[list[Input]]:
    if not size:
        yield subs + profiles
        return
    for start in range(0, max(len(subs), len(profiles)), size):
        yield subs[start : start + size] + profiles[start : start + size]


class _Progress:
    """A one-line progress bar on stderr, only when it is a terminal."""

    def __init__(self, total: int, stream: IO[str] = sys.stderr) -> None:
        self.total, self.stream = total, stream
        self.enabled = stream.isatty() and total > 10_000

    def show(self, done: int) -> None:
        if self.enabled:
            width = 30
            filled = width * done // max(self.total, 1)
            bar = "#" * filled + "." * (width - filled)
            print(f"\r[{bar}] {done}/{self.total} records", end="", file=self.stream, flush=True)

    def close(self) -> None:
        if self.enabled:
            print(file=self.stream)


def replay(
    subscriptions: str,
    profiles: str,
    out: IO[bytes],
    dead_letters: IO[bytes],
    lateness_ms: int = 0,
    batch_lines: int | None = None,
    engine: Engine | None = None,
) -> tuple[int, int]:
    """Run both files through an engine; returns (match records, dead letters)."""
    from matcher.engine import Engine
    from matcher.events import encode

    engine = engine or Engine(lateness_ms=lateness_ms)
    subs = list(_lines(subscriptions, "subscription"))
    profs = list(_lines(profiles, "profile"))
    progress = _Progress(len(subs) + len(profs))
    counts = {"matches": 0, "deadletter": 0}
    done = 0
    for batch in _batches(subs, profs, batch_lines):
        for output in engine.process_batch(batch):
            target = out if output.topic == "matches" else dead_letters
            target.write(encode(output.value) + b"\n")
            counts[output.topic] += 1
        done += len(batch)
        progress.show(done)
    progress.close()
    return counts["matches"], counts["deadletter"]


def _run(args: argparse.Namespace) -> int:
    from streaming.cli import CliError

    for path in (args.subscriptions, args.profiles):
        if not Path(path).is_file():
            raise CliError(f"no such file: {path}")
    with ExitStack() as stack:
        out = stack.enter_context(open(args.out, "wb")) if args.out else sys.stdout.buffer
        if args.dead_letter:
            dead = stack.enter_context(open(args.dead_letter, "wb"))
        else:
            dead = sys.stderr.buffer
        matches, rejected = replay(
            args.subscriptions, args.profiles, out, dead, args.lateness, args.batch_lines
        )
        out.flush()
    print(f"tsm replay: {matches} match records, {rejected} dead letters", file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay",
        help="run subscription and profile files through the matcher offline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--subscriptions", required=True, metavar="FILE", help="JSON lines")
    p.add_argument("--profiles", required=True, metavar="FILE", help="JSON lines")
    p.add_argument("--out", metavar="FILE", help="match records (default: stdout)")
    p.add_argument(
        "--dead-letter", metavar="FILE", help="rejected records with reasons (default: stderr)"
    )
    p.add_argument("--lateness", type=int, default=0, metavar="MS", help="allowed lateness")
    p.add_argument(
        "--batch-lines",
        type=int,
        default=None,
        metavar="N",
        help="cut the input into micro-batches of N lines of each file (default: one batch)",
    )
    p.set_defaults(handler=_run)
