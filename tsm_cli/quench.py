"""`tsm produce profiles FILE --quench`: send only what some subscriber of the network wants.

With `--network NET.toml --producer NAME` (the file names `[producers.NAME]
site = "SITE"`, and the site's job runs with that file) the producer is a
leaf site of the network (`streaming.quenching_producer`): it speaks the
link protocol to its site, and the match records equal one matcher's given
the unquenched file, record for record. `--quench-wait` keeps it answering
interest that long after the file; at the end it hands its site what it
still holds back and ends its link (closes). It keeps its state in `--state`
(default `.tsm/producers/NAME.state`): the same command run again after a
crash goes on where it was. `--close` retires it without reading more.

Without `--network`, the producer (`connectors.quench.QuenchingProducer`)
reads the interest its site publishes (`<prefix>tsm.interest`) and sends a
held-back profile when interest for it appears, stamped with its own clock: it
enters the network then (not exact: a subscriber that came meanwhile gets it
as `new-profile`).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from tsm_cli.args import CliError, seconds

log = logging.getLogger(__name__)


def quench_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quench",
        action="store_true",
        help="profiles only: hold back what no interest of the network overlaps "
        "(ROUTING §4); the site's job must be running (tsm run --network)",
    )
    parser.add_argument(
        "--interest-topic",
        metavar="NAME",
        default="tsm.interest",
        help="with --quench: the site's interest topic (default tsm.interest, after "
        "the site's prefix)",
    )
    parser.add_argument(
        "--network",
        metavar="NET.toml",
        help="with --quench and --producer: the network file (exact quenching, ROUTING §4)",
    )
    parser.add_argument(
        "--producer",
        metavar="NAME",
        help="with --quench and --network: this producer's name in the network file's "
        "[producers.NAME] (its site's job must run with that file); exact",
    )
    parser.add_argument(
        "--state",
        type=Path,
        metavar="FILE",
        help="with --producer: where the producer keeps its state, to go on after a "
        "crash by running the same command again (default .tsm/producers/NAME.state)",
    )
    parser.add_argument(
        "--close",
        action="store_true",
        help="with --producer: retire it now, reading no more of FILE: hand its site "
        "what it holds back and end its link (the site waits for it no more)",
    )
    parser.add_argument(
        "--quench-wait",
        type=seconds,
        metavar="SECONDS",
        help="with --quench: after the file, wait this long for interest in what is "
        "held back (default: no wait)",
    )


def produce_quenched(
    args: argparse.Namespace,
    stream: IO[bytes],
    bootstrap: str,
    topic: str,
    options: Mapping[str, str],
) -> int:
    """Send the lines of `stream` to `topic`, quenched; log the counts."""
    from confluent_kafka import KafkaException

    from connectors.errors import ConnectorError
    from connectors.produce import read_lines
    from connectors.quench import QuenchingProducer

    if args.kind != "profiles":
        raise CliError("--quench is for profiles: subscriptions are never held back")
    if args.network or args.producer:
        return _produce_linked(args, stream, options)
    if args.state or args.close:
        raise CliError("--state and --close are for a producer of a network file (--producer)")
    try:
        with QuenchingProducer(bootstrap, topic, args.interest_topic, options) as producer:
            producer.send_lines(read_lines(stream))
            counts = producer.close(args.quench_wait or 0.0)
    except (ConnectorError, KafkaException, ValueError) as exc:
        raise CliError(str(exc)) from None
    log.info(
        "to %s: %d sent, %d held back (%d sent later when interest appeared, %d never)",
        topic,
        counts.sent + counts.released,
        counts.held_back,
        counts.released,
        counts.dropped,
    )
    return 0


def linked_bootstrap(args: argparse.Namespace) -> str:
    """With `--network` and `--producer`: the bootstrap of the producer's site."""
    from tsm_cli.network_replay import load_network

    if not (args.network and args.producer):
        raise CliError("--quench: give both --network NET.toml and --producer NAME, or neither")
    net = load_network(args.network)
    sites = {s.name: s for s in net.sites}
    hosts = dict(net.producers)
    if args.producer not in hosts:
        raise CliError(
            f"{args.network} names no producer {args.producer!r}: add "
            f'[producers.{args.producer}] site = "SITE" (and run the site\'s job with it)'
        )
    bootstrap = sites[hosts[args.producer]].bootstrap
    if not bootstrap:
        raise CliError(f"site {hosts[args.producer]!r} has no bootstrap in {args.network}")
    return bootstrap


def _produce_linked(args: argparse.Namespace, stream: IO[bytes], options: Mapping[str, str]) -> int:
    """`--quench --network FILE --producer NAME`: the producer as a leaf site."""
    from confluent_kafka import KafkaException

    from connectors.errors import ConnectorError
    from connectors.produce import read_lines
    from streaming.quenching_producer import LinkedQuenchingProducer
    from tsm_cli.network_replay import load_network

    net = load_network(args.network)
    try:
        with LinkedQuenchingProducer(net, args.producer, options, state=args.state) as producer:
            if producer.restarted:
                log.info(
                    "producer %s goes on from %s: %d lines of the input read",
                    args.producer,
                    producer.state,
                    producer.job.input_lines,
                )
            if not args.close:
                producer.send_lines(read_lines(stream))
            counts = producer.close(0.0 if args.close else args.quench_wait or 0.0)
    except (ConnectorError, KafkaException, ValueError) as exc:
        raise CliError(str(exc)) from None
    log.info(
        "producer %s: %d read, %d sent to its site (%d handed over at the end); closed",
        args.producer,
        counts.lines,
        counts.forwarded,
        counts.handed_over,
    )
    return 0
