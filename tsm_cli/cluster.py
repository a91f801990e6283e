"""`tsm cluster up|down|status|package`: a Spark standalone cluster on this machine (CLI.md).

`up` starts a master and workers from the installed pyspark (`streaming.standalone`)
in the background and prints the master URL, the one value a script reads
(`M=$(tsm cluster up)`, then `tsm run --master $M`); `status` prints it while the
master runs (exit status 0), nothing when it does not (1); `down` stops them.
`package` writes the job's code as the zip that `spark-submit --py-files` takes
and prints its path. What a person reads goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path

from tsm_cli.args import CliError, add_command, seconds, whole

log = logging.getLogger(__name__)

_MEMORY = re.compile(r"[1-9][0-9]*[kmgtKMGT]")


def _memory(text: str) -> str:
    if not _MEMORY.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected a size such as 512m or 4g, got {text!r}")
    return text.lower()


def register(subparsers: argparse._SubParsersAction) -> None:
    from streaming.standalone import DEFAULT_DATA_DIR

    parser = add_command(
        subparsers,
        "cluster",
        help="run a Spark standalone cluster (a master and workers) on this machine",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = add_command(
        actions,
        "up",
        help="start a master and workers in the background; print the master URL",
        description="Start Spark's own Master and Worker classes from the installed "
        "pyspark (no download) and wait until every worker is registered. Logs, pids "
        "and the workers' executor dirs go under --data-dir.",
    )
    up.add_argument("--workers", type=whole(1, 64), default=2, help="workers (default 2)")
    up.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    up.add_argument("--port", type=whole(1, 65535), default=7077, help="master port (7077)")
    up.add_argument(
        "--worker-cores", type=whole(1, 256), default=1, help="cores each worker offers (1)"
    )
    up.add_argument(
        "--worker-memory", type=_memory, default="4g", help="memory each worker offers (4g)"
    )
    up.add_argument("--timeout", type=seconds, default=180.0, help="start-up wait (s, 180)")
    up.set_defaults(handler=_up)
    down = add_command(actions, "down", help="stop the master and the workers")
    down.set_defaults(handler=_down)
    status = add_command(
        actions,
        "status",
        help="print the master URL if it runs (exit status 0), nothing if not (exit status 1)",
    )
    status.set_defaults(handler=_status)
    for sub in (up, down, status):
        sub.add_argument(
            "--data-dir",
            type=Path,
            default=DEFAULT_DATA_DIR,
            help=f"logs, pids and work dirs (default {DEFAULT_DATA_DIR})",
        )
    package = add_command(
        actions,
        "package",
        help="write the job's code as a zip for spark-submit --py-files; print its path",
    )
    package.add_argument(
        "--out-dir", type=Path, default=Path("dist"), help="where to write it (default dist)"
    )
    package.set_defaults(handler=_package)


def _up(args: argparse.Namespace) -> int:
    from streaming.standalone import ClusterError, start_cluster

    try:
        status, started = start_cluster(
            args.data_dir,
            workers=args.workers,
            host=args.host,
            port=args.port,
            cores=args.worker_cores,
            memory=args.worker_memory,
            timeout=args.timeout,
        )
    except ClusterError as exc:
        raise CliError(str(exc)) from None
    if started:
        log.info(
            "started a master and %d worker(s) of %d core(s) and %s each; master UI at %s; "
            "logs in %s",
            len(status.workers),
            args.worker_cores,
            args.worker_memory,
            status.master_ui,
            Path(args.data_dir) / "logs",
        )
    else:
        log.info("already running (master pid %s, UI at %s)", status.master.pid, status.master_ui)
    print(status.master_url, flush=True)
    return 0


def _down(args: argparse.Namespace) -> int:
    from streaming.standalone import ClusterError, stop_cluster

    try:
        stopped = stop_cluster(args.data_dir)
    except ClusterError as exc:
        raise CliError(str(exc)) from None
    log.info(f"stopped {stopped} daemon(s)" if stopped else "not running")
    return 0


def _status(args: argparse.Namespace) -> int:
    from streaming.standalone import alive_workers, cluster_status, master_state

    status = cluster_status(args.data_dir)
    if status is None or not status.running:
        log.info("not running (%s)", args.data_dir)
        return 1
    registered = alive_workers(master_state(status.host, status.master.ui_port))
    for worker, alive in zip(status.workers, status.workers_alive, strict=True):
        state = "registered" if worker.ui_port in registered else "running" if alive else "gone"
        log.info(
            "%s: %s (pid %s, %d core(s), %s, UI at http://%s:%s)",
            worker.name,
            state,
            worker.pid,
            worker.cores,
            worker.memory,
            status.host,
            worker.ui_port,
        )
    log.info("master UI at %s", status.master_ui)
    print(status.master_url, flush=True)
    return 0


def _package(args: argparse.Namespace) -> int:
    from streaming.shipping import build_job_package

    try:
        path = build_job_package(args.out_dir)
    except OSError as exc:
        raise CliError(f"cannot write to {args.out_dir}: {exc.strerror or exc}") from None
    log.info("the job's code for spark-submit --py-files (%d bytes)", path.stat().st_size)
    print(path, flush=True)
    return 0
