"""Equi-depth histograms of a space's live subscriptions per numeric attribute
(docs/DELIVERY.md §7).

A subscription counts on an attribute when every one of its filters
constrains that attribute to numbers: for the hull of what they allow there
(an unbounded end stays infinite). `Histograms` keeps each live
subscription's ranges as it comes and goes (O(attributes) a change) and
makes the buckets when asked (O(n log n) for n live ranges, cached until the
next change): the edges cut the finite range ends into `BUCKETS` runs of
about equal counts. `supply` estimates, for routing, how many live
subscriptions allow a value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from matcher.constraints import NUM, Conjunction

BUCKETS = 16


def ranges_of(predicate: list[Conjunction]) -> dict[str, tuple[float, float]]:
    """Per attribute that every filter constrains to numbers, the hull of what they allow."""
    out: dict[str, tuple[float, float]] | None = None
    for conj in predicate:
        mine = {}
        for attr, c in conj.constraints.items():
            if c.type != NUM:
                continue
            if c.allowed is not None:
                values = [float(v) for v in c.allowed]
                if not values:
                    continue
                lo, hi = min(values), max(values)
            else:
                lo = -math.inf if c.lo is None else float(c.lo)
                hi = math.inf if c.hi is None else float(c.hi)
            mine[attr] = (lo, hi)
        if out is None:
            out = mine
        else:
            out = {
                a: (min(out[a][0], mine[a][0]), max(out[a][1], mine[a][1]))
                for a in out.keys() & mine.keys()
            }
    return out or {}


class Histograms:
    """The live subscriptions' numeric ranges of one space, and their histograms."""

    def __init__(self) -> None:
        self._ranges: dict[str, dict[str, tuple[float, float]]] = {}
        self._summary: dict[str, dict[str, Any]] | None = None

    def add(self, ident: str, predicate: list[Conjunction]) -> None:
        """A subscription held (replacing any range it had). O(attributes)."""
        self.remove(ident)
        for attr, span in ranges_of(predicate).items():
            self._ranges.setdefault(attr, {})[ident] = span
        self._summary = None

    def remove(self, ident: str) -> None:
        """A subscription no longer held. O(attributes of the space)."""
        for attr in list(self._ranges):
            spans = self._ranges[attr]
            if spans.pop(ident, None) is not None:
                self._summary = None
                if not spans:
                    del self._ranges[attr]

    def summary(self, buckets: int = BUCKETS) -> dict[str, dict[str, Any]]:
        """Per attribute: `live` (subscriptions counted) and `edges` (at most
        `buckets` + 1 values cutting the finite range ends into runs of about equal
        counts). O(n log n) when the ranges changed since the last call, else O(1)."""
        if self._summary is not None and buckets == BUCKETS:
            return self._summary
        out = {}
        for attr in sorted(self._ranges):
            ends = np.array(list(self._ranges[attr].values()), dtype=float).ravel()
            ends = ends[np.isfinite(ends)]
            edges: list[float] = []
            if ends.size:
                cuts = np.quantile(ends, np.linspace(0.0, 1.0, buckets + 1), method="inverted_cdf")
                edges = sorted({round(float(x), 6) for x in cuts})
            out[attr] = {"live": len(self._ranges[attr]), "edges": edges}
        if buckets == BUCKETS:
            self._summary = out
        return out

    def supply(self, attr: str, value: float) -> int:
        """How many live subscriptions allow `value` on `attr` (exact, from the kept
        ranges; an upper bound of what match: other attributes may exclude). O(n)."""
        return sum(lo <= value <= hi for lo, hi in self._ranges.get(attr, {}).values())
