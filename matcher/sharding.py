"""Splitting a hot space by a grid on one numeric attribute (SEMANTICS §8).

Every record of a sharded space goes to every cell, but a cell indexes (puts
in its forests, and so matches against) only what its range on the attribute
touches; a record without a numeric range there touches every cell. A pair is
reported only by the cell holding the lower end of the pair's intersection on
the attribute: both members are indexed in that cell, so each pair comes out
exactly once, with no coordination between cells. Cells keep the records they
do not index so that an upsert that moves a record between cells still tells
`update` from `match` exactly as an unsharded run does.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from matcher.constraints import NUM, Conjunction
from matcher.profiles import Profile
from matcher.records import Publish, Record, Subscribe

EVERYWHERE = (-math.inf, math.inf)


@dataclass(frozen=True)
class ShardSpec:
    """Cells split at `cuts` (ascending): cell i holds [cuts[i-1], cuts[i])."""

    attribute: str
    cuts: tuple[float, ...]

    @classmethod
    def grid(cls, attribute: str, width: float, cells: int, origin: float = 0.0) -> ShardSpec:
        return cls(attribute, tuple(origin + width * i for i in range(1, cells)))

    @property
    def cells(self) -> int:
        return len(self.cuts) + 1

    def cell(self, value: float) -> int:
        return bisect.bisect_right(self.cuts, value)

    def cells_of(self, span: tuple[float, float]) -> range:
        return range(self.cell(span[0]), self.cell(span[1]) + 1)


def predicate_span(attribute: str, predicate: list[Conjunction]) -> tuple[float, float]:
    """The hull of the values a predicate allows on the attribute."""
    lo, hi = math.inf, -math.inf
    for conj in predicate:
        c = conj.constraints.get(attribute)
        if c is None or c.type != NUM:
            return EVERYWHERE
        if c.allowed is not None:
            a, b = min(c.allowed), max(c.allowed)
        else:
            a = -math.inf if c.lo is None else c.lo
            b = math.inf if c.hi is None else c.hi
        lo, hi = min(lo, a), max(hi, b)
    return (lo, hi) if lo <= hi else EVERYWHERE


def profile_span(attribute: str, profile: Profile) -> tuple[float, float]:
    value = profile.attrs.get(attribute)
    return value if isinstance(value, tuple) else EVERYWHERE


class Sharding:
    """The state keys of records: the space, or `space#cell` for sharded spaces."""

    def __init__(self, config: dict[str, ShardSpec] | None = None) -> None:
        self.config = dict(config or {})

    def keys_for(self, record: Record) -> list[str]:
        spec = self.config.get(record.space)
        if spec is None:
            return [record.space]
        return [f"{record.space}#{cell}" for cell in range(spec.cells)]

    def cell_of(self, key: str) -> tuple[ShardSpec, int] | None:
        """The shard spec and cell number of a state key (None: unsharded)."""
        space, _, cell = key.rpartition("#")
        spec = self.config.get(space) if cell.isdigit() else None
        return None if spec is None else (spec, int(cell))


def span_of(attribute: str, record: Subscribe | Publish) -> tuple[float, float]:
    if isinstance(record, Subscribe):
        return predicate_span(attribute, record.predicate)
    return profile_span(attribute, record.profile)
