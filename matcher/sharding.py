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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matcher.constraints import NUM, Conjunction
from matcher.errors import SettingError
from matcher.profiles import Profile
from matcher.records import Publish, Record, Subscribe

EVERYWHERE = (-math.inf, math.inf)

# State keys start with NUL only where a space's name could not serve as its key:
# the job keeps such keys for itself (its dead letters'), and a space whose name
# starts with NUL, or reads as a cell key of a sharded space (`v#1` when `v` is
# sharded), is keyed `ESCAPED + name`. Spaces are independent (SEMANTICS §1)
# whatever they are named: a space `v#1` must not share the state of `v`'s cell 1.
RESERVED = "\x00"
ESCAPED = "\x00space:"
# A cell's key: the space, `#`, the cell and, where the job spread the cells over
# partitions, `.salt` (`streaming.placement`).
SALT = r"\.[0-9]+"
CELL_KEY = re.compile(rf"(.*)#[0-9]+(?:{SALT})?", re.DOTALL)


# Every record of a sharded space goes to every cell, so cells multiply its rows.
MAX_CELLS = 1024


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class ShardSpec:
    """Cells split at `cuts` (ascending): cell i holds [cuts[i-1], cuts[i]).

    Checked here, since cuts out of order or not numbers would not fail but
    report some pairs twice and others never."""

    attribute: str
    cuts: tuple[float, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.attribute, str) or not self.attribute:
            raise SettingError(f"attribute must be an attribute's name, got {self.attribute!r}")
        bad = [c for c in self.cuts if not _number(c)]
        if bad:
            raise SettingError(f"cuts must be finite numbers, got {bad[0]!r}")
        if any(a >= b for a, b in zip(self.cuts, self.cuts[1:], strict=False)):
            raise SettingError(f"cuts must ascend, each above the one before: {list(self.cuts)}")
        if len(self.cuts) >= MAX_CELLS:
            raise SettingError(f"at most {MAX_CELLS} cells (every record goes to every cell)")

    @classmethod
    def grid(cls, attribute: str, width: float, cells: int, origin: float = 0.0) -> ShardSpec:
        if not (_number(width) and width > 0 and _number(origin)):
            raise SettingError(
                f"width must be a positive number and origin a number: {width!r}, {origin!r}"
            )
        if not isinstance(cells, int) or isinstance(cells, bool) or not 1 <= cells <= MAX_CELLS:
            raise SettingError(f"cells must be a whole number from 1 to {MAX_CELLS}, got {cells!r}")
        return cls(attribute, tuple(origin + width * i for i in range(1, cells)))

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> ShardSpec:
        """A `[sharding.<space>]` table: `attribute` with `cuts = [...]`, or `attribute`,
        `width`, `cells` (and `origin`) for an even grid. Raises SettingError."""
        table = dict(table)
        try:
            if "cuts" in table:
                spec = cls(table.pop("attribute"), tuple(table.pop("cuts")))
                if table:
                    raise TypeError(f"unexpected {', '.join(table)}")
                return spec
            return cls.grid(**table)
        except (KeyError, TypeError) as exc:
            raise SettingError(
                f"needs attribute and cuts, or attribute, width and cells (and origin): {exc}"
            ) from None

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


def cell_keys(space: str, cells: int) -> list[str]:
    """The plain state keys of a sharded space's cells."""
    return [f"{space}#{cell}" for cell in range(cells)]


class Sharding:
    """The state keys of records: the space, or one key per cell of a sharded space.

    A cell's key is `space#cell` unless `names` gives the space's keys (one
    per cell, in cell order): the job names cells so that Spark places them
    on different partitions (`streaming.placement`); the matching does not
    depend on the names."""

    def __init__(
        self,
        config: Mapping[str, ShardSpec] | None = None,
        names: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.config = dict(config or {})
        for space in self.config:
            if space.startswith(RESERVED):
                raise SettingError(f"{space!r}: a sharded space's name must not start with NUL")
        names = names or {}
        self.names = {
            space: tuple(names.get(space) or cell_keys(space, spec.cells))
            for space, spec in self.config.items()
        }
        self._cells = {}
        for space, keys in self.names.items():
            spec = self.config[space]
            if len(keys) != spec.cells or len(set(keys)) != len(keys):
                raise SettingError(f"{space}: {spec.cells} distinct cell keys needed, got {keys}")
            self._cells.update((key, (space, spec, cell)) for cell, key in enumerate(keys))

    def keys_for(self, record: Record) -> Sequence[str]:
        return self.names.get(record.space) or (self.key_of(record.space),)

    def key_of(self, space: str) -> str:
        """The state key of an unsharded space: its name unless that is reserved."""
        if space.startswith(RESERVED) or ("#" in space and self._cell_like(space)):
            return ESCAPED + space
        return space

    def _cell_like(self, name: str) -> bool:
        found = CELL_KEY.fullmatch(name)
        return found is not None and found.group(1) in self.config

    def cell_of(self, key: str) -> tuple[ShardSpec, int] | None:
        """The shard spec and cell number of a state key (None: unsharded)."""
        found = self._cells.get(key)
        return None if found is None else found[1:]

    def is_first(self, key: str) -> bool:
        """Whether `key` is its space's first (or only) key. Each cell of a sharded
        space receives and holds every record of it, so what is said once a record
        (a late record's dead letter, the count of held records) is said by the first."""
        found = self._cells.get(key)
        return found is None or found[2] == 0

    def space_of(self, key: str) -> str:
        found = self._cells.get(key)
        if found is not None:
            return found[0]
        return key[len(ESCAPED) :] if key.startswith(ESCAPED) else key


def span_of(attribute: str, record: Subscribe | Publish) -> tuple[float, float]:
    if isinstance(record, Subscribe):
        return predicate_span(attribute, record.predicate)
    return profile_span(attribute, record.profile)
