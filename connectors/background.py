"""A daemon started as a child process, its output in a log file.

The embedded broker (`connectors.broker`) and the standalone Spark cluster
(`streaming.standalone`) run as processes of their own; both start them the
same way: stdin closed, stdout and stderr into one log file, and optionally a
session of their own so that a Ctrl-C meant for `tsm` does not reach them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path


def start_logged(
    command: list[str],
    log_path: Path,
    error: type[Exception],
    *,
    detach: bool,
    append: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen:
    """Run `command` in the background with its output in `log_path` (made, with its
    folder, if missing; truncated unless `append`).

    `detach` starts it in a new session. A log that cannot be opened, or a command
    that cannot be run, raises `error` with a one-line message.
    """
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab" if append else "wb")
    except OSError as exc:
        raise error(f"cannot use data dir {log_path.parent}: {exc.strerror}") from None
    with log:
        try:
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=detach,
            )
        except OSError as exc:
            raise error(f"cannot run {command[0]}: {exc}") from exc
