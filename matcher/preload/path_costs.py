"""Which path a batch of queries takes: the forest or a challenger (the cells, the
equality index), by measured cost.

Both paths give the same answers; they differ in what they cost, which
depends on the space (how many subscriptions a cell holds, how large the
answers are, how often a cell is asked). Each path's cost per query is kept
as a moving average of what whole batches that took it measured: the forest
takes the first batches (after the challenger's, where the challenger is
ready: built, nothing to build first) and then one in every `REMEASURE`
times as many as its batches cost the challenger's (at most
`MAX_REMEASURE`), so that its average follows the space as it changes while
measuring it costs about a `REMEASURE`th of the time; the challenger takes
the others while it costs less. When it costs more it sits out a number of
batches that doubles each time it loses (the forest measured meanwhile), and
is then measured afresh.
"""

from __future__ import annotations

SMOOTHING = 0.25  # weight of a new measurement in the moving averages
SAMPLES = 2  # measurements of each path before the averages decide
REMEASURE = 64  # the forest takes one batch in this many (times its cost ratio) ...
MAX_REMEASURE = 4096  # ... and at least one in this many, while the challenger wins
PAUSE = 8  # batches the challenger sits out after losing, doubled each loss ...
MAX_PAUSE = 1024  # ... up to this many


class PathCosts:
    """Seconds per query of each path (`challenger` and "forest");
    `challenger_turn()` says which path a batch takes. Invariant: `pause_left
    > 0` only while the challenger lost the last comparison; `since_forest`
    counts the challenger's batches since the forest's last."""

    def __init__(self, challenger: str = "cells") -> None:
        self.challenger = challenger
        self.seconds = {challenger: 0.0, "forest": 0.0}
        self.samples = {challenger: 0, "forest": 0}
        self.pause = PAUSE
        self.pause_left = 0
        self.since_forest = 0

    def note(self, path: str, seconds: float, queries: int) -> None:
        """Record that a whole batch of `queries` took `seconds` on `path`. O(1)."""
        if queries <= 0:
            return
        per_query = seconds / queries
        n = self.samples[path]
        average = self.seconds[path]
        self.seconds[path] = (
            per_query if n == 0 else (1 - SMOOTHING) * average + SMOOTHING * per_query
        )
        self.samples[path] = n + 1

    def challenger_turn(self, *, ready: bool = False) -> bool:
        """Whether this batch is the challenger's (else the forest's, to be
        noted). `ready`: the challenger answers without being built first, so
        that it is measured before the forest (whose first batches cost
        what they cost wherever the challenger is the cheaper path). O(1)."""
        mine = self.challenger
        if self.pause_left > 0:
            self.pause_left -= 1
            if self.pause_left == 0:  # try again, measured afresh
                self.samples[mine] = 0
            return False
        if ready and self.samples[mine] < SAMPLES:
            return True
        if self.samples["forest"] < SAMPLES:
            return False
        if self.samples[mine] >= SAMPLES:
            if self.seconds[mine] > self.seconds["forest"]:
                self.pause_left = self.pause
                self.pause = min(2 * self.pause, MAX_PAUSE)
                return False
            self.pause = PAUSE  # (it wins: a later loss pauses it briefly again)
        self.since_forest += 1
        if self.since_forest >= self._remeasure_every():
            self.since_forest = 0
            return False
        return True

    def _remeasure_every(self) -> int:
        """Batches between the forest's while the challenger wins: REMEASURE
        times the forest's cost over the challenger's, within [REMEASURE,
        MAX_REMEASURE]."""
        ratio = self.seconds["forest"] / max(self.seconds[self.challenger], 1e-12)
        return int(min(max(REMEASURE * ratio, REMEASURE), MAX_REMEASURE))
