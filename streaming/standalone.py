"""A Spark standalone cluster on this machine: a master and workers from the installed pyspark.

The pyspark wheel carries Spark's own launcher (`bin/spark-class`) and jars, so
`org.apache.spark.deploy.master.Master` and `...worker.Worker` start here with
no download, each a JVM of its own. `start_cluster` starts them detached and
records them in `<data dir>/tsm-cluster.json` (`tsm cluster up`); `LocalCluster`
owns one for a `with` block (tests, the soak benchmark). A data dir holds:

    tsm-cluster.json     the daemons: pid, start time, ports, work dirs
    logs/                master.log, worker-N.log (each daemon's stdout and stderr)
    work/worker-N/       a worker's work dir: <app id>/<executor id>/ holds each
                         executor's stdout and stderr, and is its working directory
    local/               Spark's scratch space (shuffle files, block manager)

Applications reach the master at `spark://HOST:PORT` (`ClusterStatus.master_url`:
the host exactly as the master was started with; Spark refuses another name for
it). Each worker offers `cores` cores and `memory` to applications; an
application's executors take them (`spark.executor.cores` and `.memory`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.background import start_logged

if TYPE_CHECKING:  # (imported where used: `tsm --help` does not need it)
    import psutil

DEFAULT_DATA_DIR = Path(".tsm/cluster")
RECORD_FILE = "tsm-cluster.json"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# The heap of the master and of each worker daemon (not of the executors, which
# the application sizes): they keep little, and Spark's default is 1 GB each.
DAEMON_MEMORY = "256m"


class ClusterError(RuntimeError):
    """The cluster cannot be started, reached or stopped; the message says why."""


@dataclass(frozen=True)
class Daemon:
    """One JVM of the cluster: its pid and start time (a pid can be reused), its web UI port."""

    pid: int
    started: float
    ui_port: int
    log: str


@dataclass(frozen=True)
class WorkerRecord(Daemon):
    name: str = ""
    work_dir: str = ""
    cores: int = 1
    memory: str = "4g"


@dataclass(frozen=True)
class ClusterStatus:
    """What the record says, each daemon checked against the process table."""

    host: str
    port: int
    master: Daemon
    workers: list[WorkerRecord] = field(default_factory=list)
    master_alive: bool = False
    workers_alive: list[bool] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def master_ui(self) -> str:
        return f"http://{self.host}:{self.master.ui_port}"

    @property
    def running(self) -> bool:
        return self.master_alive


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    try:
        import pyspark
    except ModuleNotFoundError:
        raise ClusterError("pyspark is not installed (pip install pyspark)") from None
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise ClusterError(f"the pyspark at {home} carries no bin/spark-class or jars/")
    return home


def _java() -> None:
    """Fail with a clear message when no Java runtime is to be found."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return
    if shutil.which("java") is None:
        raise ClusterError("no Java found: Spark needs Java 17 (set JAVA_HOME or put java on PATH)")


def _environment(data_dir: Path) -> dict[str, str]:
    """The daemons' environment: this one, less what would reach the executors' Python
    workers by accident (a PYTHONPATH that shows them this checkout: the job's code
    must come to them as its package), plus Spark's directories under `data_dir`."""
    home = spark_home()
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env |= {
        "SPARK_HOME": str(home),
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "SPARK_LOG_DIR": str(data_dir / "logs"),
        "SPARK_LOCAL_DIRS": str(data_dir / "local"),
        # (no conf/ of the user's Spark install: this cluster is configured here alone)
        "SPARK_CONF_DIR": str(home / "conf"),
    }
    return env


def _spawn(data_dir: Path, log_name: str, args: list[str], *, detach: bool) -> subprocess.Popen:
    """Start `spark-class ARGS` (it execs the JVM, so the pid is the JVM's), logging to
    `logs/<log_name>`."""
    command = [str(spark_home() / "bin" / "spark-class"), *args]
    log_path = data_dir / "logs" / log_name
    return start_logged(
        command,
        log_path,
        ClusterError,
        detach=detach,
        append=True,
        env=_environment(data_dir),
        cwd=data_dir,
    )


def _started(pid: int) -> float:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def _process(daemon: Daemon) -> psutil.Process | None:
    """The live JVM of `daemon`, or None (gone, a zombie, or its pid now another's)."""
    import psutil

    try:
        process = psutil.Process(daemon.pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        if abs(process.create_time() - daemon.started) > 1.0:
            return None
    except psutil.Error:
        return None
    return process


def _free_port() -> int:
    from connectors.broker import free_port

    return free_port()


def _tail(path: str | Path, limit: int = 12) -> str:
    """The last lines of a daemon's log that say something (not its classpath banner)."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    lines = [line for line in lines if line.strip() and not line.startswith("Spark Command:")]
    return "\n".join(lines[-limit:])


def master_state(host: str, ui_port: int, timeout: float = 5.0) -> dict[str, Any] | None:
    """The master's own JSON view (`/json/`: workers, their state, applications), or None
    when its UI does not answer."""
    try:
        with urllib.request.urlopen(f"http://{host}:{ui_port}/json/", timeout=timeout) as answer:
            return json.load(answer)
    except (OSError, ValueError, urllib.error.URLError):
        return None


def alive_workers(state: dict[str, Any] | None) -> set[int]:
    """The web UI ports of the workers the master holds ALIVE."""
    ports = set()
    for worker in (state or {}).get("workers", ()):
        if worker.get("state") == "ALIVE":
            address = worker.get("webuiaddress", "")
            port = address.rsplit(":", 1)[-1]
            if port.isdigit():
                ports.add(int(port))
    return ports


class LocalCluster:
    """A master and `workers` workers on this machine, recorded in `data_dir`.

    `start()` starts the daemons and waits until every worker is registered;
    `stop()` ends them (SIGTERM: a worker then ends its executors, and they
    their Python workers). `add_worker()` starts one more, as a replacement for
    a lost one. Also a context manager: `with LocalCluster(dir) as cluster:`."""

    def __init__(
        self,
        data_dir: Path,
        *,
        workers: int = 2,
        host: str = "127.0.0.1",
        port: int | None = None,
        cores: int = 1,
        memory: str = "4g",
        detach: bool = False,
    ) -> None:
        if workers < 1 or cores < 1:
            raise ClusterError("a cluster needs at least one worker of at least one core")
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port or _free_port()
        self.worker_count, self.cores, self.memory = workers, cores, memory
        self.detach = detach
        self.master: Daemon | None = None
        self.workers: list[WorkerRecord] = []
        self._children: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def master_ui(self) -> str:
        assert self.master is not None
        return f"http://{self.host}:{self.master.ui_port}"

    def start(self, timeout: float = 180.0) -> LocalCluster:
        """Start the master and the workers; wait until the master holds every worker ALIVE."""
        from connectors.broker import port_in_use

        _java()
        if port_in_use(self.port):
            raise ClusterError(f"port {self.port} is already in use; pick another with --port")
        ui_port = _free_port()
        args = [MASTER_CLASS, "--host", self.host, "--port", str(self.port)]
        process = self._spawn("master.log", [*args, "--webui-port", str(ui_port)])
        self.master = Daemon(process.pid, _started(process.pid), ui_port, "logs/master.log")
        try:
            for _ in range(self.worker_count):
                self.add_worker(wait=False)
            self.wait_for_workers(timeout)
        except BaseException:
            self.stop()
            raise
        self._save()
        return self

    def add_worker(self, *, wait: bool = True, timeout: float = 180.0) -> WorkerRecord:
        """Start one more worker (named after the count so far) and, with `wait`, wait
        until it is registered."""
        assert self.master is not None, "start() the cluster first"
        name = f"worker-{len(self.workers) + 1}"
        work_dir = self.data_dir / "work" / name
        work_dir.mkdir(parents=True, exist_ok=True)
        ui_port = _free_port()
        args = [WORKER_CLASS, "--host", self.host, "--cores", str(self.cores)]
        args += ["--memory", self.memory, "--work-dir", str(work_dir)]
        args += ["--webui-port", str(ui_port), self.master_url]
        process = self._spawn(f"{name}.log", args)
        worker = WorkerRecord(
            process.pid,
            _started(process.pid),
            ui_port,
            f"logs/{name}.log",
            name=name,
            work_dir=str(work_dir),
            cores=self.cores,
            memory=self.memory,
        )
        self.workers.append(worker)
        if wait:
            self.wait_for_workers(timeout, [worker])
            self._save()
        return worker

    def wait_for_workers(self, timeout: float, workers: list[WorkerRecord] | None = None) -> None:
        """Block until the master holds `workers` (default: all) ALIVE; raise ClusterError,
        with the log of a daemon that exited, if one does, or at `timeout`."""
        assert self.master is not None
        wanted = {w.ui_port: w for w in (self.workers if workers is None else workers)}
        deadline = time.monotonic() + timeout
        while True:
            for daemon in (self.master, *wanted.values()):
                if _process(daemon) is None:
                    what = "the master" if daemon is self.master else "a worker"
                    raise ClusterError(
                        f"{what} exited at start ({self.data_dir / daemon.log}):\n"
                        + _tail(self.data_dir / daemon.log)
                    )
            missing = set(wanted) - alive_workers(master_state(self.host, self.master.ui_port))
            if not missing:
                return
            if time.monotonic() > deadline:
                names = ", ".join(sorted(wanted[p].name for p in missing))
                raise ClusterError(
                    f"{names} not registered with the master within {timeout:g}s "
                    f"(logs in {self.data_dir / 'logs'})"
                )
            time.sleep(0.5)

    def stop(self, timeout: float = 30.0) -> None:
        """End every daemon (workers first); remove the record."""
        daemons = [*self.workers, *([self.master] if self.master else [])]
        stop_daemons(daemons, timeout)
        for child in self._children:  # (reap them)
            try:
                child.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        self._children.clear()
        (self.data_dir / RECORD_FILE).unlink(missing_ok=True)

    def status(self) -> ClusterStatus:
        assert self.master is not None
        return ClusterStatus(
            self.host,
            self.port,
            self.master,
            list(self.workers),
            _process(self.master) is not None,
            [_process(w) is not None for w in self.workers],
        )

    def _spawn(self, log_name: str, args: list[str]) -> subprocess.Popen:
        process = _spawn(self.data_dir, log_name, args, detach=self.detach)
        if not self.detach:
            self._children.append(process)
        return process

    def _save(self) -> None:
        assert self.master is not None
        record = {
            "host": self.host,
            "port": self.port,
            "master": asdict(self.master),
            "workers": [asdict(w) for w in self.workers],
        }
        (self.data_dir / RECORD_FILE).write_text(json.dumps(record, indent=1) + "\n")

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def stop_daemons(daemons: list[Daemon], timeout: float = 30.0) -> int:
    """SIGTERM each live daemon, wait for all to exit, SIGKILL those still there after
    `timeout` (and their children: executors and their Python workers). Returns how
    many were running."""
    import psutil

    processes = [p for p in map(_process, daemons) if p is not None]
    for process in processes:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    for process in alive:
        try:
            for child in process.children(recursive=True):
                child.kill()
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(processes)


def _read_record(data_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(data_dir) / RECORD_FILE).read_text())
    except (OSError, ValueError):
        return None


def cluster_status(data_dir: Path = DEFAULT_DATA_DIR) -> ClusterStatus | None:
    """The cluster recorded in `data_dir`, each daemon checked; None if none is recorded."""
    record = _read_record(data_dir)
    if record is None:
        return None
    try:
        master = Daemon(**record["master"])
        workers = [WorkerRecord(**w) for w in record["workers"]]
        host, port = str(record["host"]), int(record["port"])
    except (KeyError, TypeError, ValueError):
        return None
    return ClusterStatus(
        host,
        port,
        master,
        workers,
        _process(master) is not None,
        [_process(w) is not None for w in workers],
    )


def start_cluster(
    data_dir: Path = DEFAULT_DATA_DIR,
    *,
    workers: int = 2,
    host: str = "127.0.0.1",
    port: int = 7077,
    cores: int = 1,
    memory: str = "4g",
    timeout: float = 180.0,
) -> tuple[ClusterStatus, bool]:
    """Start a detached cluster for `data_dir` (it outlives this process; `stop_cluster`
    ends it) and wait until its workers are registered. Returns its status, and
    whether it was started now (False: one was already running there)."""
    data_dir = Path(data_dir).resolve()
    current = cluster_status(data_dir)
    if current is not None and current.running:
        return current, False
    if current is not None:  # (what is left of one whose master died)
        stop_daemons([current.master, *current.workers])
    cluster = LocalCluster(
        data_dir, workers=workers, host=host, port=port, cores=cores, memory=memory, detach=True
    )
    cluster.start(timeout)
    return cluster.status(), True


def stop_cluster(data_dir: Path = DEFAULT_DATA_DIR, timeout: float = 30.0) -> int:
    """Stop the daemons recorded in `data_dir` (workers first); returns how many ran."""
    status = cluster_status(data_dir)
    if status is None:
        return 0
    try:
        stopped = stop_daemons([*status.workers, status.master], timeout)
    except PermissionError as exc:
        raise ClusterError(f"not allowed to stop the cluster of {data_dir}: {exc}") from None
    (Path(data_dir) / RECORD_FILE).unlink(missing_ok=True)
    return stopped


def python_without_project(directory: Path) -> Path:
    """An interpreter that sees this one's installed packages but not the project.

    A virtual environment made at `directory` with a `.pth` line per site-packages
    directory of this interpreter: their packages import, but the `.pth` files in
    them are not run, so an editable install of the project (a `.pth` hook) is not
    on its path. Executors that run it import the job's code from the package the
    driver ships (`streaming.shipping`), or fail. Returns its `python`."""
    import site
    import venv

    python = directory / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(symlinks=True, with_pip=False, clear=True).create(directory)
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    paths = [p for p in site.getsitepackages() if Path(p).is_dir()]
    pth = directory / "lib" / version / "site-packages" / "tsm-dependencies.pth"
    pth.write_text("\n".join(paths) + "\n")
    return python
