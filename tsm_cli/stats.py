"""`tsm stats`: what the matcher holds per space after reading topic records:
live counts and the equi-depth histograms of live subscriptions per numeric
attribute (docs/DELIVERY.md §7), one JSON object a space on stdout. A running
job writes the same histograms into its progress log, each batch.
"""

from __future__ import annotations

import argparse
import json
import sys

from tsm_cli.args import CliError, add_command, whole


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers,
        "stats",
        help="per space: live counts and histograms of live subscriptions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--subscriptions", required=True, metavar="FILE", help="JSON lines")
    p.add_argument("--profiles", metavar="FILE", help="JSON lines (their time expires records)")
    p.add_argument(
        "--buckets", type=whole(1, 1024), default=16, metavar="N", help="buckets (default 16)"
    )
    p.set_defaults(handler=_stats)


def _stats(args: argparse.Namespace) -> int:
    from matcher.engine import Engine
    from streaming.replay import input_lines

    engine = Engine()
    items = []
    try:
        items += list(input_lines(args.subscriptions, "subscription"))
        if args.profiles:
            items += list(input_lines(args.profiles, "profile"))
    except OSError as exc:
        raise CliError(f"cannot read {exc.filename}: {exc.strerror}") from None
    engine.process_batch(items)
    spaces: dict[str, list] = {}
    for matcher in engine.matchers.values():
        spaces.setdefault(matcher.space, []).append(matcher)
    for space in sorted(spaces):
        first = spaces[space][0]  # (every cell of a sharded space holds every record)
        record = {
            "space": space,
            "subscriptions": len(first.subs),
            "profiles": len(first.profiles),
            "histograms": first.histograms().summary(args.buckets),
        }
        sys.stdout.write(json.dumps(record) + "\n")
    return 0
