"""Stopping a streaming query between micro-batches, on SIGINT/SIGTERM.

The signals only set a flag; the query is stopped between micro-batches,
never inside one (PLATFORM.md: `stop()` during a stateful batch has thrown
StackOverflowError), and what a batch wrote is committed with its offsets.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

log = logging.getLogger(__name__)

# How often the driver looks at the stop flag and the query's state.
POLL_SECONDS = 0.1


class StopRequested(Exception):
    """Raised at the start of a batch's write once a stop is asked (see `StopFlag.guard`)."""


class StopFlag:
    """SIGINT/SIGTERM → a flag (the handlers are restored by `restore`).

    With back-to-back triggers there is no idle moment between batches in
    which to call `stop()`, so `guard` also ends the query at the start of
    the next batch's write, before any of its tasks (and state) ran: that
    batch is planned but not committed, and is run again on restart.
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}
        self.listen()

    def listen(self) -> None:
        """Take SIGINT and SIGTERM (again: a SparkContext, when it starts, takes
        SIGINT for itself, to cancel its jobs and raise KeyboardInterrupt)."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous.setdefault(signum, signal.signal(signum, self._set))

    def _set(self, signum: int, _frame: Any) -> None:
        self.signal = signum
        self.event.set()
        log.info("stopping after the current batch")

    def guard(self, writer: Any) -> Any:
        def write(df: Any, batch_id: int) -> None:
            if self.event.is_set():
                raise StopRequested(f"stopped before batch {batch_id}; it runs on restart")
            writer(df, batch_id)

        return write

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def wait_between_batches(query: Any, stop: StopFlag) -> None:
    """Until the query ends by itself, or stop is asked: then stop it between batches."""
    from pyspark.errors import StreamingQueryException

    while query.isActive:
        if stop.event.is_set() and not query.status["isTriggerActive"]:
            query.stop()
            break
        try:
            query.awaitTermination(POLL_SECONDS)
        except StreamingQueryException:
            return  # the caller reports it from query.exception()
