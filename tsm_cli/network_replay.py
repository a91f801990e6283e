"""`tsm replay --network NET.toml`: every site of a network file in one process.

The files are read as `tsm replay` reads them; each record may carry `"site"`
(its home site, the file's first where absent). The match records of every
site come out in one matcher's order, each with `site` (ROUTING §7); the
per-link counts of ROUTING §6 go to stderr as a table, or as JSON to
`--stats FILE`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import IO, Any

from tsm_cli.args import CliError

COLUMNS = (
    ("interest", "interest_messages"),
    ("adverts", "advert_messages"),
    ("profiles", "profiles_forwarded"),
    ("retracts", "retracts_forwarded"),
    ("false+", "false_positives"),
    ("moves", "move_messages"),
    ("table", "table_peak"),
    ("bytes", "bytes"),
)


def load_network(path: str) -> Any:
    """The network file, parsed and checked; a CLI error naming the fault."""
    from matcher.routing.network import NetworkError, parse_network

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not UTF-8 text") from None
    try:
        return parse_network(text, path)
    except NetworkError as exc:
        raise CliError(str(exc)) from None


def read_inputs(args: argparse.Namespace) -> list[Any]:
    """The records of both files, subscriptions first, as `tsm replay` reads them."""
    from streaming.replay import input_lines

    subscriptions = input_lines(args.subscriptions, "subscription")
    return [*subscriptions, *input_lines(args.profiles, "profile")]


def run(args: argparse.Namespace, inputs: list[Any], out: IO[bytes], dead: IO[bytes]) -> int:
    """Replay `inputs` through the network of `args.network`; write, report."""
    from matcher.events import encode
    from matcher.routing.offline import Delays
    from matcher.routing.replay import replay_network

    net = load_network(args.network)
    result = replay_network(net, inputs, Delays(seed=args.seed or 0))
    for record in result.matches:
        out.write(encode(record) + b"\n")
    out.flush()
    for letter in result.dead_letters:
        dead.write(encode(letter) + b"\n")
    dead.flush()
    stats = result.stats()
    if args.stats:
        try:
            with open(args.stats, "w", encoding="utf-8") as handle:
                json.dump(stats, handle, indent=1)
                handle.write("\n")
        except OSError as exc:
            raise CliError(f"cannot write {args.stats}: {exc.strerror}") from None
    else:
        print(table(stats), file=sys.stderr)
    print(
        f"tsm replay: {len(net.sites)} sites, routing {net.routing}: "
        f"{len(result.matches)} match records, {len(result.dead_letters)} dead letters",
        file=sys.stderr,
    )
    return 0


def table(stats: dict[str, Any]) -> str:
    """The per-link counts as a text table, totals last."""
    rows = [("link", *(name for name, _ in COLUMNS))]
    for link, counts in stats["links"].items():
        rows.append((link, *(str(counts[key]) for _, key in COLUMNS)))
    total = stats["total"]
    rows.append(("total", *(str(total.get(key, "")) for _, key in COLUMNS)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    latency = stats["latency_ms"]
    lines.append(
        f"simulated {stats['simulated_ms']:.0f} ms; a match waited p50 {latency['p50']:.0f} ms, "
        f"p99 {latency['p99']:.0f} ms for every link's watermark"
    )
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`tsm replay`'s network flags."""
    p.add_argument(
        "--network",
        metavar="NET.toml",
        help='run every site of this network file (ROUTING.md); records may carry "site"',
    )
    p.add_argument("--stats", metavar="FILE", help="with --network: per-link counts as JSON")
    p.add_argument(
        "--seed", type=int, default=None, help="with --network: seed of the link delays (default 0)"
    )


def check_arguments(args: argparse.Namespace) -> None:
    """The flags that go with --network, and those that do not."""
    if args.network is None:
        for flag in ("stats", "seed"):
            if getattr(args, flag) is not None:
                raise CliError(f"--{flag} needs --network")
        return
    if args.batch_lines is not None or args.lateness:
        raise CliError(
            "--batch-lines and --lateness are for one matcher; a network replays its input "
            "as one batch per site"
        )
