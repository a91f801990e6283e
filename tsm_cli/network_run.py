"""`tsm run --network NET.toml --site NAME`: the streaming job of one site of a network.

Each `--site` (repeatable; default every site of the file) runs as one query
of one local Spark application (`streaming.network_job`), against the
clusters the network file names. Checkpoints: `<--checkpoint>/<site>`. With
`--available-now` the run reads what its sites' clients' topics hold when it
starts and stops once every one of its sites is done (it waits for the other
sites of the network as long as they are not: run them too).
"""

from __future__ import annotations

import argparse
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tsm_cli.args import CliError, client_options, load_settings, verbosity
from tsm_cli.logs import jvm_output_to, spark_log_level
from tsm_cli.network_replay import load_network

if TYPE_CHECKING:
    from matcher.routing.network import Network
    from streaming.config import JobConfig

log = logging.getLogger(__name__)

# A query failure that says nothing about the query: its Python worker started too
# slowly (Spark waits 10 s for it, which a busy 2-core machine can take).
TRANSIENT = "Python worker failed to connect back"
RESTARTS = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`tsm run`'s network flags."""
    p.add_argument(
        "--network",
        metavar="NET.toml",
        help="run sites of this network file (ROUTING.md): their clusters are in the file",
    )
    p.add_argument(
        "--site",
        action="append",
        metavar="NAME",
        help="with --network: the site to run (repeatable; default every site of the file)",
    )


def check_arguments(args: argparse.Namespace) -> None:
    if args.network is None:
        if args.site:
            raise CliError("--site needs --network")
        return
    if args.bootstrap is not None:
        raise CliError("--bootstrap is for one site: with --network, the file names each cluster")
    if args.exactly_once:
        raise CliError("--exactly-once is not available with --network (at least once)")


def run_network(args: argparse.Namespace) -> int:
    """`tsm run --network`: the sites' queries until done or stopped."""
    net = load_network(args.network)
    names = args.site or list(net.names)
    for name in names:
        if name not in net.names:
            raise CliError(
                f"site {name!r} is not in {args.network} (its sites: {', '.join(net.names)})"
            )
    config = load_settings(args)
    status, _ = run_sites(
        net,
        names,
        config,
        client_options(args, config),
        Path(args.checkpoint or config.checkpoint),
        master=args.master,
        available_now=bool(args.available_now),
        max_records_per_trigger=args.max_records_per_trigger,
        trigger_interval=args.trigger_interval,
        spark_log=args.spark_log,
        verbosity=verbosity(args),
        app=f"tsm run (network {Path(args.network).name}: {', '.join(names)})",
    )
    return status


def run_sites(
    net: Network,
    names: list[str],
    config: JobConfig,
    options: dict[str, str],
    checkpoint: Path,
    *,
    master: str,
    available_now: bool,
    max_records_per_trigger: int | None = None,
    trigger_interval: str | None = None,
    spark_log: Path | None = None,
    verbosity: int = 0,
    app: str = "tsm run --network",
) -> tuple[int, dict[str, dict[str, Any]]]:
    """Start the sites' queries in one Spark application; log each batch; stop when
    every site is done (`available_now`) or on a signal. The exit status, and each
    site's last batch report (`SiteJob.report`)."""
    from pyspark.errors import StreamingQueryException

    from connectors.admin import BadClientSetting
    from streaming import job, network_job
    from streaming.checkpoint_guard import check_producers
    from streaming.network_site import control_start
    from streaming.stopping import POLL_SECONDS, StopFlag, StopRequested

    for name in names:
        try:
            check_producers(str(checkpoint / name), net, name)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    runs = {}
    for name in names:
        try:
            here = network_job.prepare(net, name, config.topics, options)
        except (ValueError, ConnectionError, BadClientSetting) as exc:
            raise CliError(str(exc)) from None
        ends = network_job.local_ends(here, options) if available_now else None
        network_job.write_control(here, control_start(ends), options)
        runs[name] = network_job.SiteRun(here)
    with jvm_output_to(spark_log):
        spark = job.session(config, master, app, log_level=spark_log_level(verbosity))
    stop = StopFlag()
    failed = None

    def start(name: str) -> None:
        runs[name].query = network_job.start_site(
            spark,
            net,
            runs[name],
            options=options,
            checkpoint=str(checkpoint / name),
            max_records_per_trigger=max_records_per_trigger or config.max_records_per_trigger,
            trigger_interval=trigger_interval or "1 second",
            guard=stop.guard,
        )

    try:
        for name, site in runs.items():
            start(name)
            log.info("site %s: query started (checkpoint %s)", name, checkpoint / name)
            # one at a time: each query's first batch starts its Python workers, which
            # must connect back to Spark within 10 s; several at once on a busy machine
            # miss that
            tries = 0
            while site.batches == 0 and not stop.event.is_set():
                if not site.query.isActive:
                    if TRANSIENT not in str(site.query.exception()) or tries == RESTARTS:
                        break  # (`_wait` reports it)
                    tries += 1
                    log.warning("site %s: %s; starting its query again", name, TRANSIENT)
                    start(name)
                try:
                    site.query.awaitTermination(POLL_SECONDS)
                except StreamingQueryException:
                    pass  # (read from query.exception())
        ticker = None
        if not available_now:
            every = max(net.idle_ms / 2000, 0.5)
            ticker = network_job.Ticker([r.topics for r in runs.values()], options, every)
            ticker.__enter__()
        try:
            failed = _wait(runs, stop, POLL_SECONDS, available_now=available_now, restart=start)
        finally:
            if ticker is not None:
                ticker.__exit__()
    finally:
        stop.restore()
        _stop_between_batches(runs, POLL_SECONDS)
        spark.stop()
    if failed is not None and StopRequested.__name__ not in failed[1]:
        log.error("site %s: the query failed: %s", failed[0], failed[1].split("\n")[0])
        return 1, {}
    for name, site in runs.items():
        log.info("site %s: %d batches, %s", name, site.batches, "done" if site.done else "not done")
    reports = {name: site.report for name, site in runs.items()}
    return (130 if stop.signal == signal.SIGINT else 0), reports


def _wait(
    runs: dict, stop, poll: float, *, available_now: bool, restart: Callable[[str], None]
) -> tuple[str, str] | None:
    """Until every site is done (available now), a stop is asked or a query fails;
    (site, error) of a failure. A query whose Python worker did not start in time (a
    busy machine) is started again from its checkpoint, up to `RESTARTS` times."""
    from pyspark.errors import StreamingQueryException

    restarts = dict.fromkeys(runs, 0)
    while True:
        for name, site in runs.items():
            error = site.query.exception()
            if error is None:
                continue
            if TRANSIENT in str(error) and restarts[name] < RESTARTS and not stop.event.is_set():
                restarts[name] += 1
                log.warning("site %s: %s; starting its query again", name, TRANSIENT)
                restart(name)
                continue
            return name, str(error)
        if available_now and all(site.done for site in runs.values()):
            return None
        if stop.event.is_set():
            _stop_between_batches(runs, poll)
            return None
        if not any(site.query.isActive for site in runs.values()):
            return None
        try:
            runs[next(iter(runs))].query.awaitTermination(poll)
        except StreamingQueryException:
            pass  # (read from query.exception() above)


def _stop_between_batches(runs: dict, poll: float) -> None:
    """Stop each query when it is between batches (PLATFORM.md: not inside one)."""
    import time

    while True:
        active = [s.query for s in runs.values() if s.query is not None and s.query.isActive]
        if not active:
            return
        for query in active:
            if not query.status["isTriggerActive"]:
                query.stop()
        time.sleep(poll)
