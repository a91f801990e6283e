"""The embedded Kafka-protocol broker (noida-db) as a tracked child process.

Apache Kafka cannot be downloaded here; noida-db speaks its wire protocol
(PLATFORM.md). We run its binary in the foreground (`start --only kafka`) as
our own child, so that we know its pid, its port and its log, and can stop it
with SIGTERM, on which it saves its data. `tsm broker start` leaves it running
in its own session and records it in `<data dir>/tsm-broker.json`; the
`EmbeddedBroker` context manager owns it for the length of a `with` block.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from connectors.background import start_logged
from connectors.config import confluent_config
from connectors.errors import BrokerError

if TYPE_CHECKING:  # (imported where used: `tsm --help` does not need it)
    import psutil

DEFAULT_DATA_DIR = Path(".tsm/broker")
PID_FILE = "tsm-broker.json"
LOG_FILE = "broker.log"
# The binary links against GLIBC_2.39 weakly and says so on every start.
_HARMLESS = "GLIBC_2.39"


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None = None
    port: int | None = None

    @property
    def bootstrap(self) -> str | None:
        return f"localhost:{self.port}" if self.port is not None else None


def noida_binary() -> Path:
    """The native binary shipped in the noida-db wheel.

    Not the `noida-db` console script: that Python wrapper runs the binary
    as a grandchild and does not forward SIGTERM, so stopping it would kill
    the wrapper and orphan the server.
    """
    try:
        path = Path(str(files("noida_db").joinpath("noida-db")))
    except ModuleNotFoundError:
        raise BrokerError("noida-db is not installed (pip install noida-db)") from None
    if not path.is_file():
        raise BrokerError(f"noida-db binary not found at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def free_port() -> int:
    """A TCP port that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def wait_ready(
    bootstrap: str, timeout: float = 15.0, process: subprocess.Popen | None = None
) -> None:
    """Block until the broker answers a metadata request, or raise `BrokerError`.

    A real request, not a port probe: the port opens before the broker serves.
    If `process` exits meanwhile, fail at once with what it printed.
    """
    from confluent_kafka.admin import AdminClient

    # Quiet: while the port is closed librdkafka would log every refused connect;
    # and quick to try again, as the port opens within milliseconds.
    required = {"log_level": 0, "reconnect.backoff.ms": 20}
    admin = AdminClient(confluent_config(bootstrap, required=required))
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise BrokerError(f"the broker exited with status {process.returncode}")
        try:
            admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            return
        except Exception as exc:  # KafkaException; anything else is retried alike
            last_error = exc
            time.sleep(0.05)
    raise BrokerError(f"no answer from {bootstrap} within {timeout:g}s ({last_error})")


def _log_tail(log_path: Path, limit: int = 10) -> str:
    """The end of the broker's output, without the known warning, with a hint where we have one."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    tail = "\n".join(line for line in lines[-limit:] if _HARMLESS not in line)
    if "GLIBC" in tail:
        tail += "\nhint: noida-db needs glibc >= 2.34 (ldd --version shows this system's)"
    return tail


def _noida(pid: int, data_dir: Path | None = None) -> psutil.Process | None:
    """The live noida-db process `pid` (not a zombie), and, given `data_dir`, the one
    serving it (a pid file can outlive its broker, and the pid be taken by another
    one's); None if it is not."""
    import psutil

    try:
        process = psutil.Process(pid)
        args = process.cmdline()
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.Error:  # gone, a zombie, or not ours to look at
        return None
    if not args or not args[0].endswith("noida-db"):
        return None
    if data_dir is not None and str(Path(data_dir).resolve()) not in args:
        return None
    return process


def spawn(port: int, data_dir: Path, *, detach: bool) -> subprocess.Popen:
    """Start noida-db on `port` in the background, logging to `<data_dir>/broker.log`.

    `detach` puts it in its own session, so that it survives the terminal
    and a Ctrl-C meant for the command that started it.

    Raises `BrokerError` if the port is taken, before the broker can find a
    foreign broker there and look "ready".
    """
    if port_in_use(port):
        raise BrokerError(f"port {port} is already in use; pick another with --port")
    command = [str(noida_binary()), "start", "--only", "kafka", "--kafka-port", str(port)]
    command += ["--data-dir", str(data_dir)]
    # (the log holds this run's output only)
    return start_logged(command, data_dir / LOG_FILE, BrokerError, detach=detach)


def start_broker(
    port: int = 9092, data_dir: Path = DEFAULT_DATA_DIR, timeout: float = 15.0
) -> BrokerStatus:
    """Start a detached broker for `data_dir` and wait until it serves.

    Idempotent for the same port: if one is already running for `data_dir`,
    return it. The process outlives this one; `stop_broker` ends it.
    """
    data_dir = Path(data_dir).resolve()
    current = broker_status(data_dir)
    if current.running:
        if current.port != port:
            raise BrokerError(f"a broker is already running for {data_dir} on port {current.port}")
        return current
    process = spawn(port, data_dir, detach=True)
    try:
        wait_ready(f"localhost:{port}", timeout, process)
    except BrokerError as exc:
        _end(process)
        raise BrokerError(f"{exc}\n{_log_tail(data_dir / LOG_FILE)}".rstrip()) from None
    status = BrokerStatus(True, process.pid, port)
    (data_dir / PID_FILE).write_text(json.dumps({"pid": status.pid, "port": port}) + "\n")
    return status


def broker_status(data_dir: Path = DEFAULT_DATA_DIR) -> BrokerStatus:
    """What the pid file says, checked against the process table."""
    try:
        record = json.loads((Path(data_dir) / PID_FILE).read_text())
        pid, port = int(record["pid"]), int(record["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return BrokerStatus(False)
    if _noida(pid, data_dir) is None:
        return BrokerStatus(False, port=port)
    return BrokerStatus(True, pid, port)


def stop_broker(data_dir: Path = DEFAULT_DATA_DIR, timeout: float = 15.0) -> bool:
    """SIGTERM the broker of `data_dir` (it saves its data) and wait for it to exit.

    Returns False if none was running. Escalates to SIGKILL after `timeout`,
    which loses about the last second of writes (PLATFORM.md).
    """
    import psutil

    pid_file = Path(data_dir) / PID_FILE
    status = broker_status(data_dir)
    process = None if status.pid is None else _noida(status.pid, data_dir)
    try:
        if process is not None:
            _terminate(process, timeout)
        if pid_file.is_file():
            pid_file.unlink()
    except (PermissionError, psutil.AccessDenied) as exc:
        reason = getattr(exc, "strerror", None) or "permission denied"
        raise BrokerError(f"not allowed to stop the broker of {data_dir}: {reason}") from None
    return process is not None


def _terminate(process: psutil.Process, timeout: float) -> None:
    """SIGTERM `process` and wait until it is gone; SIGKILL it after `timeout`.

    psutil signals only the process it looked at: if the pid was reused meanwhile
    (its start time differs), it raises `NoSuchProcess` instead of signalling a
    stranger, and the broker is gone anyway."""
    import psutil

    try:
        process.terminate()
        deadline = time.monotonic() + timeout
        while True:
            try:
                process.wait(0.05)  # reaps it if it is our child
                return
            except psutil.TimeoutExpired:
                if process.status() == psutil.STATUS_ZOMBIE:  # exited; another's to reap
                    return
            if time.monotonic() > deadline:
                process.kill()
                raise BrokerError(
                    f"broker (pid {process.pid}) ignored SIGTERM for {timeout:g}s; killed it"
                )
    except psutil.NoSuchProcess:
        return


def _end(process: subprocess.Popen, timeout: float = 15.0) -> None:
    """SIGTERM a child broker and reap it; SIGKILL if it ignores that for `timeout`."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class EmbeddedBroker:
    """A private broker for tests, the demo and benchmarks: `with EmbeddedBroker() as b:`.

    Starts on a free port (or `port`) with `data_dir` (default: a fresh
    temporary directory, removed on exit) and stops on exit. `bootstrap` is
    the address to give clients.
    """

    def __init__(self, data_dir: Path | None = None, port: int | None = None):
        self._tmp = None
        if data_dir is None:
            import tempfile

            self._tmp = tempfile.TemporaryDirectory(prefix="tsm-broker-")
            data_dir = Path(self._tmp.name)
        self.data_dir = Path(data_dir).resolve()
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"localhost:{self.port}"

    def start(self, timeout: float = 15.0) -> EmbeddedBroker:
        self.process = spawn(self.port, self.data_dir, detach=False)
        try:
            wait_ready(self.bootstrap, timeout, self.process)
        except BrokerError as exc:
            log = _log_tail(self.data_dir / LOG_FILE)
            self.stop()
            raise BrokerError(f"{exc}\n{log}".rstrip()) from None
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM and reap the process; remove the temporary data dir if we made it."""
        if self.process is not None:
            _end(self.process, timeout)
        self.process = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
