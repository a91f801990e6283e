"""The numeric vector form of filters and profiles.

Every (attribute, type) of a space is one column. A filter is a box of
closed bounds per column: an unconstrained column is [-inf, inf], a
constrained one lies inside [-MAX, MAX]. A profile is a box too, with a
missing column at [inf, -inf], so "the profile has the attribute" needs no
separate mask: such a box meets no constrained bound but every unconstrained
one. Strings are interned to integer codes (equality is a point), booleans are
0 and 1. Whatever the box cannot say exactly (`!=`, multi-value `IN`, string
patterns, `exists`) marks the filter `exact`: the box is then a necessary
condition and the exact test runs on the few candidates the box lets through.
"""

from __future__ import annotations

import sys

import numpy as np

from matcher.constraints import BOOL, NUM, STR, Conjunction, Constraint
from matcher.profiles import Profile

MAX = sys.float_info.max
INF = np.inf


class Dims:
    """The columns of one forest of a space, growing as new attributes appear.

    Two `Dims` may share `codes` (the string values' order), so that a box made
    by one compares with a box made by the other on the attributes both have."""

    __slots__ = ("columns", "codes")

    def __init__(self, codes: dict[str, int] | None = None) -> None:
        self.columns: dict[tuple[str, str], int] = {}
        self.codes: dict[str, int] = {} if codes is None else codes

    def __len__(self) -> int:
        return len(self.columns)

    def column(self, attr: str, kind: str) -> int:
        key = (attr, kind)
        col = self.columns.get(key)
        if col is None:
            col = self.columns[key] = len(self.columns)
        return col

    def code(self, text: str) -> float:
        code = self.codes.get(text)
        if code is None:
            code = self.codes[text] = len(self.codes)
        return float(code)

    def filter_box(
        self, conj: Conjunction, grow: bool = True
    ) -> tuple[dict[int, tuple[float, float]], bool] | None:
        """Bounds per constrained column, and whether the box is exact; None if
        the filter constrains a column these dims lack and may not `grow`."""
        bounds: dict[int, tuple[float, float]] = {}
        exact = False
        columns = self.columns
        for attr, c in conj.constraints.items():
            kind = c.type
            if kind is None:
                exact = True
                continue
            col = columns.get((attr, kind))
            if col is None:
                if not grow:
                    return None
                col = self.column(attr, kind)
            if kind == NUM and c.allowed is None:  # the common range, inline
                lo = -MAX if c.lo is None else max(c.lo, -MAX)
                hi = MAX if c.hi is None else min(c.hi, MAX)
                bounds[col] = (lo, hi)
                exact = exact or bool(c.excluded)
                continue
            lo, hi, is_exact = self._bounds(c)
            bounds[col] = (max(lo, -MAX), min(hi, MAX))
            exact = exact or not is_exact
        return bounds, exact

    def _bounds(self, c: Constraint) -> tuple[float, float, bool]:
        if c.allowed is not None:
            if c.type == STR:
                values = [self.code(v) for v in c.allowed]
            else:
                values = [float(v) for v in c.allowed]
            lo, hi = min(values), max(values)
            return lo, hi, len(values) == 1 or c.type == BOOL
        if c.type == NUM:
            lo = -MAX if c.lo is None else c.lo
            hi = MAX if c.hi is None else c.hi
            return lo, hi, not c.excluded
        return -MAX, MAX, False  # string ranges and patterns: presence only

    def profile_box(self, profile: Profile, grow: bool = True) -> dict[int, tuple[float, float]]:
        """Bounds per column of the profile's attributes; without `grow`, only of
        those these dims have (no filter asks about the others)."""
        bounds: dict[int, tuple[float, float]] = {}
        columns = self.columns
        for attr, v in profile.attrs.items():
            kind = NUM if isinstance(v, tuple) else BOOL if isinstance(v, bool) else STR
            col = columns.get((attr, kind))
            if col is None:
                if not grow:
                    continue
                col = self.column(attr, kind)
            if kind == NUM:
                bounds[col] = v
            elif kind == BOOL:
                bounds[col] = (float(v), float(v))
            else:
                code = self.codes.get(v)
                if code is None:
                    code = self.code(v)
                bounds[col] = (float(code), float(code))
        return bounds

    def matrix(
        self, boxes: list[dict[int, tuple[float, float]]], fill: tuple[float, float]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Many boxes as (columns × boxes) bound arrays, column-major like the
        forests' (filled as Python lists: item assignment into numpy costs
        several times more)."""
        d, n = len(self.columns), len(boxes)
        lo, hi = [fill[0]] * (d * n), [fill[1]] * (d * n)
        for i, bounds in enumerate(boxes):
            for col, (a, b) in bounds.items():
                lo[col * n + i], hi[col * n + i] = a, b
        return np.array(lo).reshape(d, n), np.array(hi).reshape(d, n)


FILTER_FILL = (-INF, INF)
PROFILE_FILL = (INF, -INF)
