"""`tsm consume matches --network NET.toml --subscriber NAME --follow-moves`.

Prints one subscriber's match records across the sites of a network, as if
she never moved (ROUTING §5; `connectors.follow_moves`): from her site
(`--site`, the network file's first by default) up to her `moved` record,
then on at the site it names, and so on. Each site's matches topic is its
`prefix` followed by the matches topic of the settings (or `--topic`), on its
`bootstrap` (the settings' or `--bootstrap` where the file gives none).
"""

from __future__ import annotations

import argparse
import sys

from tsm_cli.args import CliError, client_options, load_settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`tsm consume`'s flags for following a subscriber."""
    parser.add_argument(
        "--network", metavar="NET.toml", help="with --follow-moves: the network file"
    )
    parser.add_argument("--subscriber", metavar="NAME", help="with --follow-moves: whom to follow")
    parser.add_argument(
        "--follow-moves",
        action="store_true",
        help="read one subscriber's matches across the network's sites, switching at her "
        "`moved` records (needs --network and --subscriber)",
    )
    parser.add_argument(
        "--site", metavar="NAME", help="with --follow-moves: her site at the start (default: first)"
    )


def wanted(args: argparse.Namespace) -> bool:
    """Whether the flags ask to follow a subscriber; a CLI error where they do not fit."""
    given = [f for f in ("network", "subscriber", "site") if getattr(args, f) is not None]
    if not args.follow_moves:
        if given:
            raise CliError(f"--{given[0]} needs --follow-moves")
        return False
    if args.kind != "matches":
        raise CliError("--follow-moves reads matches, not dead letters")
    for flag in ("network", "subscriber"):
        if getattr(args, flag) is None:
            raise CliError(f"--follow-moves needs --{flag}")
    if args.group is not None:
        raise CliError("--follow-moves reads each site from where it left off, not as a group")
    return True


def run(args: argparse.Namespace) -> int:
    """Follow the subscriber; print her records as JSON lines."""
    from confluent_kafka import KafkaException

    from connectors.follow_moves import KafkaReader, follow_moves
    from matcher.events import encode
    from tsm_cli.network_replay import load_network

    net = load_network(args.network)
    start = args.site or net.first
    if start not in net.names:
        raise CliError(f"--site {start!r}: the network file names {', '.join(net.names)}")
    config = load_settings(args)
    topic = args.topic or config.topics.matches
    sites = {}
    for site in net.sites:
        bootstrap = site.bootstrap or args.bootstrap or config.bootstrap
        if not bootstrap:
            raise CliError(f"site {site.name!r} has no bootstrap: give one in the network file")
        sites[site.name] = (bootstrap, f"{site.prefix}{topic}")
    options = client_options(args, config)
    if args.read_committed:
        options = {**options, "isolation.level": "read_committed"}
    reader = KafkaReader(sites, timeout=args.timeout, options=options)
    out = sys.stdout.buffer
    count = 0
    try:
        for record in follow_moves(args.subscriber, start, reader):
            out.write(encode(record) + b"\n")
            out.flush()
            count += 1
            if args.max is not None and count >= args.max:
                break
    except KafkaException as exc:
        raise CliError(f"reading the network's matches: {exc}") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return 0
