"""`tsm net up|status|down NET.toml`: every site of a network file on this machine.

`up` starts an embedded broker for each site, on the port of its
`bootstrap` (which must name this machine), and the sites' streaming job:
one `tsm run --network` process running every site as a query of one local
Spark application, or with `--process-per-site` one process (and Spark) per
site. It returns once every site's query has started; the job runs on, in the
background, until `down`. `status` shows what runs and, from the jobs' batch
logs, each link's counts (ROUTING §6) and watermarks. `down` stops the jobs
between batches (SIGTERM; SIGKILL after `--timeout`), then the brokers.

Everything lives under the data dir (default `.tsm/net/<file name>`):
`brokers/<site>/` (each broker's data and log), `checkpoints/<site>/`,
`job-<name>.log` (a job's stderr: its batch log, one JSON object a batch and
site), `spark.log`, and `net.json` (the jobs' process ids).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tsm_cli.args import CliError, add_command, config_flag, seconds
from tsm_cli.network_replay import load_network

log = logging.getLogger(__name__)

STATE_FILE = "net.json"
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
COLUMNS = (
    ("interest", "interest_messages"),
    ("adverts", "advert_messages"),
    ("profiles", "profiles_forwarded"),
    ("retracts", "retracts_forwarded"),
    ("catch-ups", "catch_ups"),
    ("table", "table_entries"),
    ("bytes", "bytes"),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(
        subparsers,
        "net",
        help="start, list and stop every site of a network file on this machine",
        description="Run a network of sites (ROUTING.md) here: a broker per site and "
        "their streaming jobs, for trying a network and for tests.",
    )
    commands = p.add_subparsers(dest="net_command", metavar="COMMAND", required=True)
    up = add_command(commands, "up", help="start every site's broker and the sites' job")
    _common(up)
    up.add_argument(
        "--process-per-site",
        action="store_true",
        help="one job process (and Spark) per site, not one for all",
    )
    up.add_argument(
        "--timeout",
        type=seconds,
        default=600.0,
        help="how long to wait for the queries to start (default 600 s)",
    )
    config_flag(up)
    up.set_defaults(handler=_up)
    status = add_command(commands, "status", help="what runs; per-link counts and watermarks")
    _common(status)
    status.add_argument("--json", action="store_true", help="print the status as one JSON object")
    status.set_defaults(handler=_status)
    down = add_command(commands, "down", help="stop the sites' jobs, then their brokers")
    _common(down)
    down.add_argument(
        "--timeout",
        type=seconds,
        default=120.0,
        help="how long a job may take to stop between batches before it is killed",
    )
    down.set_defaults(handler=_down)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("network", metavar="NET.toml", help="the network file")
    p.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="where brokers, checkpoints and logs live (default .tsm/net/<file name>)",
    )


def data_dir(args: argparse.Namespace) -> Path:
    return (args.data_dir or Path(".tsm/net") / Path(args.network).stem).resolve()


def _local_port(name: str, bootstrap: str | None) -> int:
    host, _, port = (bootstrap or "").rpartition(":")
    if host not in LOCAL_HOSTS or not port.isdigit():
        raise CliError(
            f"site {name!r}: bootstrap {bootstrap!r} is not on this machine "
            '(tsm net runs brokers here: give bootstrap = "localhost:PORT")'
        )
    return int(port)


# -- up ----------------------------------------------------------------------------


def _up(args: argparse.Namespace) -> int:
    from connectors.broker import BrokerError, broker_status, start_broker

    net = load_network(args.network)
    home = data_dir(args)
    if _alive_jobs(home):
        raise CliError(f"the network of {args.network} is already up: tsm net down first")
    ports = {s.name: _local_port(s.name, s.bootstrap) for s in net.sites}
    for name, port in ports.items():
        broker_dir = home / "brokers" / name
        running = broker_status(broker_dir).running
        try:
            start_broker(port, broker_dir)
        except BrokerError as exc:
            raise CliError(f"site {name!r}: {exc}") from None
        log.info(
            "site %s: broker on localhost:%d (%s)", name, port, "running" if running else "started"
        )
    groups = [[n] for n in net.names] if args.process_per_site else [list(net.names)]
    jobs = []
    for sites in groups:
        tag = sites[0] if args.process_per_site else "all"
        jobs.append(_spawn(args, home, sites, tag))
    _write_state(home, {"network": str(Path(args.network).resolve()), "jobs": jobs})
    _await_queries(home, jobs, args.timeout)
    log.info(
        "up: %d sites; tsm net status %s, tsm net down %s",
        len(net.names),
        args.network,
        args.network,
    )
    return 0


def _spawn(args: argparse.Namespace, home: Path, sites: list[str], tag: str) -> dict[str, Any]:
    tsm = Path(sys.executable).parent / "tsm"
    command = [str(tsm), "run", "--network", str(Path(args.network).resolve())]
    command += ["--checkpoint", str(home / "checkpoints"), "--spark-log", str(home / "spark.log")]
    if args.config is not None:
        command += ["--config", str(args.config)]
    for site in sites:
        command += ["--site", site]
    path = home / f"job-{tag}.log"
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    with open(path, "ab") as out:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=out,
            env=env,
            start_new_session=True,
        )
    log.info("job of %s: pid %d, log %s", ", ".join(sites), process.pid, path)
    return {"pid": process.pid, "sites": sites, "log": str(path), "start": _log_size(path)}


def _log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _await_queries(home: Path, jobs: list[dict[str, Any]], timeout: float) -> None:
    """Until every site's query has started (its job says so), printing each."""
    waiting = {site: job for job in jobs for site in job["sites"]}
    deadline = time.monotonic() + timeout
    while waiting:
        for site, job in list(waiting.items()):
            text = _read_log(Path(job["log"]), job["start"])
            if f"site {site}: query started" in text:
                log.info("site %s: query started", site)
                del waiting[site]
            elif not _alive(job["pid"]):
                tail = "\n".join(text.splitlines()[-15:])
                raise CliError(f"the job of site {site} ended at start; its log says:\n{tail}")
        if waiting and time.monotonic() > deadline:
            raise CliError(
                f"the queries of {', '.join(waiting)} did not start within {timeout:g} s "
                f"(see {home}/job-*.log; tsm net down to stop)"
            )
        time.sleep(0.5)


def _read_log(path: Path, start: int = 0) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(start)
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


# -- processes ---------------------------------------------------------------------


def _write_state(home: Path, state: dict[str, Any]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / STATE_FILE).write_text(json.dumps(state, indent=1) + "\n")


def _read_state(home: Path) -> dict[str, Any]:
    try:
        return json.loads((home / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {"jobs": []}


def _alive(pid: int) -> bool:
    """Whether `pid` is a running `tsm run` (not a zombie, not a stranger with its pid)."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return "run" in process.cmdline() and "--network" in process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _alive_jobs(home: Path) -> list[dict[str, Any]]:
    return [job for job in _read_state(home)["jobs"] if _alive(job["pid"])]


# -- down --------------------------------------------------------------------------


def _down(args: argparse.Namespace) -> int:
    from connectors.broker import BrokerError, stop_broker

    net = load_network(args.network)
    home = data_dir(args)
    for job in _alive_jobs(home):
        sites = ", ".join(job["sites"])
        log.info("job of %s (pid %d): stopping between batches", sites, job["pid"])
        os.kill(job["pid"], signal.SIGTERM)
        deadline = time.monotonic() + args.timeout
        while _alive(job["pid"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(job["pid"]):
            log.warning("job of %s ignored SIGTERM for %g s: killed", sites, args.timeout)
            os.killpg(job["pid"], signal.SIGKILL)
    for name in net.names:
        try:
            stopped = stop_broker(home / "brokers" / name)
        except BrokerError as exc:
            raise CliError(f"site {name!r}: {exc}") from None
        log.info("site %s: broker %s", name, "stopped" if stopped else "was not running")
    (home / STATE_FILE).unlink(missing_ok=True)
    return 0


# -- status ------------------------------------------------------------------------


def latest_reports(text: str) -> dict[str, dict[str, Any]]:
    """The last batch report of each site in a job's log."""
    out = {}
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                report = json.loads(line)
            except ValueError:
                continue
            if isinstance(report, dict) and "site" in report and "links" in report:
                out[report["site"]] = report
    return out


def _status(args: argparse.Namespace) -> int:
    from connectors.broker import broker_status

    net = load_network(args.network)
    home = data_dir(args)
    state = _read_state(home)
    reports: dict[str, dict[str, Any]] = {}
    running: dict[str, bool] = {}
    for job in state["jobs"]:
        reports |= latest_reports(_read_log(Path(job["log"]), job.get("start", 0)))
        running |= dict.fromkeys(job["sites"], _alive(job["pid"]))
    sites = {}
    for site in net.sites:
        broker = broker_status(home / "brokers" / site.name)
        report = reports.get(site.name, {})
        sites[site.name] = {
            "broker": site.bootstrap if broker.running else None,
            "job": running.get(site.name, False),
            "batch": report.get("batch"),
            "local_watermark": report.get("local_watermark"),
            "matcher_watermark": report.get("matcher_watermark"),
            "done": report.get("done", False),
            "members": report.get("members", {}),  # (the spaces it selects for: DELIVERY §9)
        }
    links = {}
    for report in reports.values():
        links |= report.get("links", {})
    watermarks = {}
    for report in reports.values():
        watermarks |= report.get("inbound_watermarks", {})
    status = {"data_dir": str(home), "sites": sites, "links": links, "watermarks": watermarks}
    if args.json:
        print(json.dumps(status))
    else:
        print(status_text(status))
    return 0


def status_text(status: dict[str, Any]) -> str:
    """The status as two text tables: sites, then links."""
    rows = [("site", "broker", "job", "batch", "input wm", "matcher wm")]
    for name, s in status["sites"].items():
        job = "done" if s["done"] else ("running" if s["job"] else "stopped")
        rows.append(
            (
                name,
                s["broker"] or "stopped",
                job,
                *(_text(s[k]) for k in ("batch", "local_watermark", "matcher_watermark")),
            )
        )
    lines = _table(rows)
    rows = [("link", *(name for name, _ in COLUMNS), "watermarks (interest/profile)")]
    for link, counts in sorted(status["links"].items()):
        marks = status["watermarks"].get(link, {})
        wm = "/".join(_text(marks.get(p)) for p in ("interest", "profile"))
        rows.append((link, *(str(counts.get(key, 0)) for _, key in COLUMNS), wm))
    return "\n".join([*lines, "", *_table(rows)])


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def _table(rows: list[tuple]) -> list[str]:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
