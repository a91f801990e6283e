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

from matcher.times import MAX_LATENESS_MS
from streaming import network_replay
from streaming.cli import whole

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

    network_replay.check_arguments(args)
    inputs = (args.subscriptions, args.profiles)
    outputs = (args.out, args.dead_letter, getattr(args, "stats", None))
    for path in inputs:
        try:
            open(path, "rb").close()  # (a pipe stays unread: the process keeps its own fd)
        except OSError as exc:
            raise CliError(f"cannot read {path}: {exc.strerror}") from None
    _refuse_clobbering([Path(p) for p in inputs], [Path(p) for p in outputs if p])
    with ExitStack() as stack:
        try:
            out = stack.enter_context(open(args.out, "wb")) if args.out else sys.stdout.buffer
            if args.dead_letter:
                dead = stack.enter_context(open(args.dead_letter, "wb"))
            else:
                dead = sys.stderr.buffer
        except OSError as exc:
            raise CliError(f"cannot write {exc.filename}: {exc.strerror}") from None
        if args.network is not None:
            items = list(_lines(args.subscriptions, "subscription"))
            return network_replay.run(
                args, items + list(_lines(args.profiles, "profile")), out, dead
            )
        matches, rejected = replay(
            args.subscriptions, args.profiles, out, dead, args.lateness, args.batch_lines
        )
        out.flush()
    print(f"tsm replay: {matches} match records, {rejected} dead letters", file=sys.stderr)
    return 0


def _refuse_clobbering(inputs: list[Path], outputs: list[Path]) -> None:
    """An output opened for writing is emptied before the inputs are read: one that is
    an input would be lost, and two outputs in one file would interleave."""
    from streaming.cli import CliError

    for i, out in enumerate(outputs):
        for other in inputs + outputs[:i]:
            if _same_file(out, other):
                raise CliError(
                    f"{out} is also {'an input' if other in inputs else 'the other output'}"
                )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:  # (an output that does not exist yet is no other file)
        return False


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
    p.add_argument(
        "--lateness",
        type=whole(0, MAX_LATENESS_MS),
        default=0,
        metavar="MS",
        help="allowed lateness (default 0)",
    )
    p.add_argument(
        "--batch-lines",
        type=whole(1),
        default=None,
        metavar="N",
        help="cut the input into micro-batches of N lines of each file (default: one batch)",
    )
    network_replay.add_arguments(p)
    p.set_defaults(handler=_run)
