"""A pair's sustained state (docs/DELIVERY.md §4): off, pending, on, leaving.

`Pair` is what a state key keeps of one (subscription, profile) pair of a
subscription with delivery fields, while it holds or is delivered; `step`
moves it through one step of its space, `fire` through its timer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OFF, PENDING, ON, LEAVING = 0, 1, 2, 3
DELIVERED = (ON, LEAVING)


@dataclass(slots=True)
class Pair:
    """One pair's state. `reason` is why it became what it is (a pending or leaving
    pair's: the reason its timer's record will carry)."""

    phase: int = OFF
    due: int | None = None  # a pending or leaving pair's timer (event time, ms)
    reason: str = ""
    raw: bool = False  # holds by the relation (SEMANTICS §2-§3)
    holds: bool = False  # holds, with the margin (§3)
    told: bool = False  # its subscriber holds it: sent `match`, no `unmatch` since
    group: str | None = None  # the group it was told in, if any
    sent: tuple[str, float] | None = None  # (profile version, valid_to) last sent

    def to_json(self) -> list[Any]:
        return [
            self.phase,
            self.due,
            self.reason,
            self.raw,
            self.holds,
            self.told,
            self.group,
            None if self.sent is None else [self.sent[0], _finite(self.sent[1])],
        ]

    @classmethod
    def from_json(cls, data: list[Any]) -> Pair:
        phase, due, reason, raw, holds, told, group, sent = data
        if sent is not None:
            sent = (sent[0], float("inf") if sent[1] is None else sent[1])
        return cls(phase, due, reason, raw, holds, told, group, sent)


def _finite(x: float) -> float | None:
    return None if x == float("inf") else x


def step(
    pair: Pair, holds: bool, gone: bool, ts: int, reason: str, dwell: int, exit_dwell: int
) -> bool:
    """Move `pair` through a step at `ts` after which it holds or not (`gone`: it
    ended for good), `reason` the step's for this pair; `dwell` and `exit_dwell`
    of the subscription version held. Returns whether it set a timer. O(1)."""
    was = pair.phase
    if gone:
        if was != OFF:
            pair.phase, pair.due, pair.reason = OFF, None, reason
        return False
    if was == OFF and holds:
        if dwell:
            pair.phase, pair.due, pair.reason = PENDING, ts + dwell, reason
            return True
        pair.phase, pair.reason = ON, reason
    elif was == PENDING and not holds:
        pair.phase, pair.due, pair.reason = OFF, None, reason
    elif was == ON and not holds:
        if exit_dwell:
            pair.phase, pair.due, pair.reason = LEAVING, ts + exit_dwell, reason
            return True
        pair.phase, pair.reason = OFF, reason
    elif was == LEAVING and holds:
        pair.phase, pair.due, pair.reason = ON, None, reason
    return False


def fire(pair: Pair) -> None:
    """A pending pair's timer: on; a leaving pair's: off (the reason kept). O(1)."""
    pair.phase = ON if pair.phase == PENDING else OFF
    pair.due = None
