"""The demo's data directory: claimed only where it is the demo's own (a marker file
says so), and wiped at each start."""

from __future__ import annotations

import shutil
from pathlib import Path

from tsm_cli.args import CliError

MARKER = ".tsm-demo"


def claim_data_dir(directory: Path) -> None:
    """Make `directory` the demo's, or refuse it: one that holds anything without the
    demo's marker is someone else's (`--data-dir .` is the working directory)."""
    if directory.exists() and not directory.is_dir():
        raise CliError(f"--data-dir {directory} is not a directory")
    marked = (directory / MARKER).is_file()
    if directory.is_dir() and not marked and any(directory.iterdir()):
        raise CliError(
            f"--data-dir {directory} is not empty and not one the demo made "
            f"(no {MARKER} in it); the demo wipes its data dir: give a new or empty one"
        )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not marked:
            (directory / MARKER).write_text(
                "made by `tsm demo`, which wipes this directory at each start\n"
            )
    except OSError as exc:
        raise CliError(f"cannot use --data-dir {directory}: {exc.strerror}") from None


def wipe_data_dir(directory: Path) -> None:
    """Stop a broker a previous demo left (`--keep`) and remove all but the marker."""
    from connectors.broker import stop_broker

    stop_broker(directory / "broker")
    for entry in directory.iterdir():
        if entry.name == MARKER:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
