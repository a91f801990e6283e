"""What a state key holds of a subscription or profile (`SpaceMatcher`'s state).

Below the engine and the match writers, which both read it: a record, the
version it is known by in `match_id`s, and where it is indexed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from matcher.records import Publish, Subscribe


@dataclass(slots=True)
class Held:
    """A held subscription or profile: its record, version and forest slot."""

    record: Subscribe | Publish
    version: str
    slot: int | None  # None: held but not indexed in this cell
    span: tuple[float, float] | None = None
    # What a writer made once of this record for all its events (`MatchWriter`): not
    # state, so not compared, and not in the job's snapshots (`streaming.state.codec`).
    memo: Any = field(default=None, init=False, compare=False, repr=False)
