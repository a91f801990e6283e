"""A progress bar on stderr for long work of known size (tqdm), only on a terminal.

One bar says how far, how fast and how long still; a log line every so often
says only the first. Where stderr is not a terminal (a pipe, a file, CI)
there is no bar, and the command's log lines say what was done.
"""

from __future__ import annotations

import contextlib
import sys
from types import TracebackType
from typing import Any


class Bar:
    """`with Bar("written", unit="records", total=n) as bar: bar.add(k)` (or `update_to`).

    Shown when stderr is a terminal and the total is at least `minimum`
    (with a `minimum`, from the first `update_to`, which brings the total;
    without a total, the bar is a count and a rate). Log records emitted
    meanwhile are printed above it, not through it.
    """

    def __init__(
        self, label: str, *, unit: str, total: int | None = None, minimum: int = 0
    ) -> None:
        self.label, self.unit, self.minimum = label, unit, minimum
        self._bar: Any = None
        self._stack = contextlib.ExitStack()
        if not minimum:
            self._open(total)

    def _open(self, total: int | None) -> None:
        if (total or 0) < self.minimum or not sys.stderr.isatty():
            self._bar = False
            return
        from tqdm import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        self._stack.enter_context(logging_redirect_tqdm())
        self._bar = self._stack.enter_context(
            tqdm(total=total, desc=self.label, unit=f" {self.unit}", unit_scale=True, leave=False)
        )

    def add(self, count: int) -> None:
        if self._bar:
            self._bar.update(count)

    def update_to(self, done: int, total: int | None = None) -> None:
        if self._bar is None:
            self._open(total)
        if self._bar:
            self._bar.update(done - self._bar.n)

    def __enter__(self) -> Bar:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stack.close()
