"""A space's preloading: its grid and cells, when to choose them again, which
path each batch takes, and what it counts.

The cells are a cache of the forest: `of(owner)` keeps them beside the
owning `DoubleForest` (a weak side table), not in it, so that they are never
part of its pickled state. A snapshot stays the size of the forests, and a
loaded one starts without cells and rebuilds them as profiles visit.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from matcher.preload.equality_index import EqualityIndex
from matcher.preload.grid import Grid
from matcher.preload.path_costs import PathCosts
from matcher.preload.profile_cells import ProfileCells
from matcher.preload.subscription_cells import SubscriptionCells

RECHOOSE = 2.0  # the grid is chosen again once the live entries grow or shrink this much
SIZE_CLASSES = 11  # batches of 1, 2-3, 4-7, ... and 1024 or more are costed apart

_PRELOADERS: weakref.WeakKeyDictionary[Any, Preloader] = weakref.WeakKeyDictionary()


@dataclass
class Counts:
    """Profiles asked, and answered from cells, since the counts were last taken."""

    profiles: int = 0
    from_cells: int = 0
    from_index: int = 0


@dataclass
class Preloader:
    """One space's cells (None: no grid yet, or none worth it), its equality
    index (None: not built, or not worth it), and their costs.

    `chosen_at` is the number of live entries when the grid was last chosen
    (or found not worth it), which `due` compares with."""

    cells: SubscriptionCells | None = None
    profile_cells: ProfileCells | None = None
    index: EqualityIndex | None = None
    chosen_at: int = 0
    costs: dict[tuple[str, int], PathCosts] = field(default_factory=dict)
    counts: Counts = field(default_factory=Counts)
    total: Counts = field(default_factory=Counts)

    def due(self, live: int, min_entries: int) -> bool:
        """Whether the grid should be chosen (again) at `live` entries. O(1)."""
        if live < min_entries:
            if self.cells is not None:
                self.cells = self.profile_cells = None  # (a small space: the forest answers)
            return False
        if not self.chosen_at:
            return True
        return live >= RECHOOSE * self.chosen_at or live * RECHOOSE <= self.chosen_at

    def use(self, grid: Grid | None, live: int) -> None:
        """Take a newly chosen grid (or none), dropping the old cells."""
        self.chosen_at = live
        same = grid is not None and self.cells is not None and _same_grid(grid, self.cells.grid)
        if not same:
            self.cells = SubscriptionCells(grid) if grid is not None else None
            self.profile_cells = None

    def costs_for(
        self, queries: int, side: str = "subscriptions", challenger: str = "cells"
    ) -> PathCosts:
        """The path costs of batches about this size (a power of two's range up to
        SIZE_CLASSES) asking `side`, the forest against `challenger`: a query
        costs less in a large batch, on either path."""
        key = (side, min(queries.bit_length(), SIZE_CLASSES), challenger)
        costs = self.costs.get(key)
        if costs is None:
            costs = self.costs[key] = PathCosts(challenger)
        return costs

    def count(self, profiles: int, from_cells: int, from_index: int = 0) -> None:
        for counts in (self.counts, self.total):
            counts.profiles += profiles
            counts.from_cells += from_cells
            counts.from_index += from_index

    def take_counts(self) -> dict[str, int]:
        """The counts since last taken (then zeroed), and the cells' size now."""
        counts, self.counts = self.counts, Counts()
        cells, profile_cells = self.cells, self.profile_cells
        held = (cells.nbytes if cells is not None else 0) + (
            profile_cells.nbytes if profile_cells is not None else 0
        )
        return {
            "profiles": counts.profiles,
            "profiles_from_cells": counts.from_cells,
            "profiles_from_index": counts.from_index,
            "cells": len(cells) if cells is not None else 0,
            "cells_bytes": held,
            "index_bytes": self.index.nbytes if self.index is not None else 0,
        }


def of(owner: Any) -> Preloader:
    """The preloader of `owner` (made on first use). O(1)."""
    preloader = _PRELOADERS.get(owner)
    if preloader is None:
        preloader = _PRELOADERS[owner] = Preloader()
    return preloader


def peek(owner: Any) -> Preloader | None:
    """The preloader of `owner` if it has one. O(1)."""
    return _PRELOADERS.get(owner)


def _same_grid(a: Grid, b: Grid) -> bool:
    return (
        all(
            (x == y).all() if x.shape == y.shape else False
            for x, y in ((a.columns, b.columns), (a.origin, b.origin), (a.width, b.width))
        )
        and (a.margin == b.margin).all()
    )
