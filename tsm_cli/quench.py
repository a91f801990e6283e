"""`tsm produce profiles FILE --quench`: send only what some subscriber of the network wants.

The producer (`connectors.quench.QuenchingProducer`) reads the interest its
site publishes (`<prefix>tsm.interest`, written by the site's `tsm run
--network` job) and holds back the profiles no interest overlaps; it sends
one when interest for it appears while it is still valid. `--quench-wait`
keeps it waiting that long after the file for such interest.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
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
