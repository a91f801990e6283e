"""`tsm replay`: run topic records from JSON-lines files through the engine.

The offline twin of the Spark job: the same engine, so the same input gives
the same matches. Both files are merged in the order of SEMANTICS §5 as one
micro-batch (or, with `--batch-lines N`, as batches of at most N records,
each taking from each file its records up to a common time, as the job's
source cuts a backlog: SEMANTICS §3). Match records go
to stdout (or --out), dead letters to stderr (or --dead-letter), one JSON
object a line.
"""

from __future__ import annotations

import argparse
import logging
import sys
from contextlib import ExitStack
from pathlib import Path

from matcher.times import MAX_LATENESS_MS
from tsm_cli import network_replay
from tsm_cli.args import CliError, add_command, whole
from tsm_cli.progress import Bar

log = logging.getLogger(__name__)

# Fewer input records than this are replayed without a progress bar.
BAR_FROM = 10_000


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers,
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
        help="cut the input into micro-batches of at most N records, from each file "
        "those up to a common time, as the job reads a backlog (default: one batch)",
    )
    network_replay.add_arguments(p)
    p.set_defaults(handler=_replay)


def _replay(args: argparse.Namespace) -> int:
    from streaming.replay import replay

    network_replay.check_arguments(args)
    inputs = (args.subscriptions, args.profiles)
    outputs = (args.out, args.dead_letter, args.stats)
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
            return network_replay.run(args, network_replay.read_inputs(args), out, dead)
        bar = stack.enter_context(Bar("replayed", unit="records", minimum=BAR_FROM))
        matches, rejected = replay(
            args.subscriptions,
            args.profiles,
            out,
            dead,
            args.lateness,
            args.batch_lines,
            progress=bar.update_to,
        )
        out.flush()
    log.info("%d match records, %d dead letters", matches, rejected)
    return 0


def _refuse_clobbering(inputs: list[Path], outputs: list[Path]) -> None:
    """An output opened for writing is emptied before the inputs are read: one that is
    an input would be lost, and two outputs in one file would interleave."""
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
