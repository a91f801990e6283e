"""A `tsm run` job started by a benchmark as its own process group: its log's
errors for a message, and its stop."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def log_tail(path: Path, lines: int = 20) -> str:
    """The last lines of the job's stderr that are not batch lines (its errors)."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join([line for line in text if not line.startswith("{")][-lines:])


def stop_job(job: subprocess.Popen, timeout: float = 120.0) -> None:
    """SIGTERM the job (it stops its queries and Spark), SIGKILL its process group if
    it has not stopped within `timeout` seconds."""
    if job.poll() is not None:
        return
    job.send_signal(signal.SIGTERM)
    try:
        job.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
