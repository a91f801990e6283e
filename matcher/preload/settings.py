"""What a space's preloaded cells may use: the memory budget, the attributes.

One process-wide `PreloadSettings` (`current()`), replaced as a whole by
`configure` (the job's settings, a benchmark's contender, a test's tiny
layout). Every field changes only what matching costs, never an answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

MIB = 1 << 20


@dataclass(frozen=True)
class PreloadSettings:
    """The bounds of one space's (or shard's) cells.

    - `enabled`: whether spaces preload at all (off: the forest answers every query).
    - `budget_bytes`: the most memory the cells of one space hold (members, their
      sort keys and the cells' own rows), counted as `SubscriptionCells.nbytes`.
    - `attributes`: numeric attributes to lay a space's grid over, where its live
      subscriptions constrain them; empty (or none constrained): the attributes
      the live subscriptions constrain most.
    - `min_entries`: live subscription entries below which a space has no grid (the
      forest answers a small space in a few microseconds a profile).
    - `fill_after`: visits of a cell (profiles of a batch that fall in it, held
      profiles that lie in it) before it is filled.
    - `measured`: whether the cells answer only while measured cheaper than the
      forest (`path_costs`); off, they answer whatever they can (tests, and a
      benchmark's contender that must take them).
    """

    enabled: bool = True
    budget_bytes: int = 512 * MIB
    attributes: tuple[str, ...] = ()
    min_entries: int = 4096
    fill_after: int = 2
    measured: bool = True


_CURRENT = PreloadSettings()
# `tsm.toml`'s [preload] table: key -> (type, the field it sets, the factor to its unit)
TABLE_KEYS: dict[str, tuple[type, str, int]] = {
    "enabled": (bool, "enabled", 1),
    "budget_mib": (int, "budget_bytes", MIB),
    "attributes": (list, "attributes", 1),
}


def from_table(table: dict[str, Any]) -> dict[str, Any]:
    """The `PreloadSettings` values a `[preload]` table sets (`configure`'s
    arguments); ValueError naming the key that is unknown or of a wrong kind.
    O(keys)."""
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in TABLE_KEYS:
            raise ValueError(f"unknown key {key!r} (known: {', '.join(TABLE_KEYS)})")
        kind, name, unit = TABLE_KEYS[key]
        if type(value) is not kind:
            raise ValueError(f"{key} must be {_KINDS[kind]}, got {value!r}")
        if kind is list:
            if not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"{key} must be a list of attribute names, got {value!r}")
            value = tuple(value)
        elif kind is int:
            if value <= 0:
                raise ValueError(f"{key} must be positive, got {value!r}")
            value *= unit
        values[name] = value
    return values


_KINDS = {bool: "true or false", int: "a whole number", list: "a list of attribute names"}


def current() -> PreloadSettings:
    """The settings in force. O(1)."""
    return _CURRENT


def configure(**values: Any) -> PreloadSettings:
    """Replace the settings in force by a copy with `values` set; returns the old ones."""
    global _CURRENT
    old, _CURRENT = _CURRENT, replace(_CURRENT, **values)
    return old


@contextlib.contextmanager
def configured(**values: Any) -> Iterator[PreloadSettings]:
    """The settings with `values` set inside the block, the old ones back after."""
    old = configure(**values)
    try:
        yield current()
    finally:
        _restore(old)


def _restore(old: PreloadSettings) -> None:
    global _CURRENT
    _CURRENT = old
