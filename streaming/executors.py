"""Which executor the current Python worker serves, for the batch log's `placed` field.

Python workers inherit their executor's environment. A standalone worker gives
each executor the address of its log page, `SPARK_LOG_URL_STDERR`, whose query
names the executor (`...&executorId=1&...`); Kubernetes sets `SPARK_EXECUTOR_ID`.
In `local[N]` there is no executor of its own (the driver runs the tasks), and
a cluster manager that says neither is not told apart: both give None.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import parse_qs, urlsplit

# The counter name a stage adds for a state key it ran (`streaming.listener`).
RAN_PREFIX = "ran:"


def executor_id(environ: Mapping[str, str] | None = None) -> str | None:
    """The executor id of this process (its environment's), or None where none is told."""
    environ = os.environ if environ is None else environ
    if environ.get("SPARK_EXECUTOR_ID"):
        return environ["SPARK_EXECUTOR_ID"]
    query = parse_qs(urlsplit(environ.get("SPARK_LOG_URL_STDERR", "")).query)
    ids = query.get("executorId")
    return ids[0] if ids else None


def ran_counter(key: str, executor: str) -> str:
    """The counter that says `key` ran on `executor` in a batch."""
    return f"{RAN_PREFIX}{executor}:{key}"


def parse_ran_counter(name: str) -> tuple[str, str] | None:
    """(key, executor) of a `ran_counter` name; None for any other counter."""
    if not name.startswith(RAN_PREFIX):
        return None
    executor, _, key = name[len(RAN_PREFIX) :].partition(":")
    return key, executor
