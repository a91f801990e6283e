"""The numeric vector form of filters and profiles.

Every (attribute, type) of a space is one column. A filter is a box of
closed bounds per column: an unconstrained column is [-inf, inf], a
constrained one lies inside [-MAX, MAX]. A profile is a box too, with a
missing column at [inf, -inf], so "the profile has the attribute" needs no
separate mask: such a box meets no constrained bound but every unconstrained
one. Strings are interned to integer codes (equality is a point), booleans are
0 and 1. Whatever the box cannot say exactly (`!=`, multi-value `IN`, string
patterns, `exists`, the residual tests of a `Conjunction`) marks the filter
`exact`: the box is then a necessary condition and the exact test runs on the
few candidates the box lets through.
"""

from __future__ import annotations

import sys

import numpy as np

from matcher.constraints import BOOL, NUM, STR, TAGS, Conjunction, Constraint
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
        """The column of (attribute, type), added if new. O(1)."""
        key = (attr, kind)
        col = self.columns.get(key)
        if col is None:
            col = self.columns[key] = len(self.columns)
        return col

    def code(self, text: str) -> float:
        """The code of a string value, interned if new. O(1)."""
        code = self.codes.get(text)
        if code is None:
            code = self.codes[text] = len(self.codes)
        return float(code)

    def filter_box(
        self, conj: Conjunction, *, grow: bool = True
    ) -> tuple[dict[int, tuple[float, float]], bool] | None:
        """Bounds per constrained column, and whether the box is exact (only a
        necessary condition: the exact test must run); None if the filter
        constrains a column these dims lack and may not `grow`. O(constraints)."""
        bounds: dict[int, tuple[float, float]] = {}
        exact = bool(conj.absent or conj.computed)  # (`residual`): no box says them
        columns, codes = self.columns, self.codes
        for attr, constraint in conj.constraints.items():
            kind = constraint.type
            if kind is None:
                exact = True
                continue
            col = columns.get((attr, kind))
            if col is None:
                if not grow:
                    return None
                col = self.column(attr, kind)
            allowed = constraint.allowed
            if allowed is None:
                if kind == NUM:  # the common range, inline
                    lo, hi = constraint.lo, constraint.hi
                    lo = -MAX if lo is None else lo if lo > -MAX else -MAX
                    hi = MAX if hi is None else hi if hi < MAX else MAX
                    bounds[col] = (lo, hi)
                    if constraint.excluded or constraint.none_of:
                        exact = True
                    continue
            elif kind == STR and len(allowed) == 1:  # one string (`=`), inline
                for value in allowed:
                    code = codes.get(value)
                    low = float(code) if code is not None else self.code(value)
                    bounds[col] = (low, low)
                if constraint.none_of:
                    exact = True
                continue
            lo, hi, is_exact = self._bounds(constraint)
            bounds[col] = (max(lo, -MAX), min(hi, MAX))
            exact = exact or not is_exact or bool(constraint.none_of)
        return bounds, exact

    def _bounds(self, constraint: Constraint) -> tuple[float, float, bool]:
        if constraint.allowed is not None:
            if constraint.type == STR:
                values = [self.code(v) for v in constraint.allowed]
            else:
                values = [float(v) for v in constraint.allowed]
            lo, hi = min(values), max(values)
            return lo, hi, len(values) == 1 or constraint.type == BOOL
        if constraint.type == NUM:
            lo = -MAX if constraint.lo is None else constraint.lo
            hi = MAX if constraint.hi is None else constraint.hi
            return lo, hi, not constraint.excluded
        # Any string (or tag set): the column's presence says it all, exactly.
        # String ranges and patterns: presence only, a necessary condition.
        return -MAX, MAX, constraint == Constraint(constraint.type)

    def profile_box(self, profile: Profile, *, grow: bool = True) -> dict[int, tuple[float, float]]:
        """Bounds per column of the profile's attributes; without `grow`, only of
        those these dims have (no filter asks about the others). O(attributes)."""
        bounds: dict[int, tuple[float, float]] = {}
        columns = self.columns
        for attr, value in profile.attrs.items():
            kind = NUM if isinstance(value, tuple) else BOOL if isinstance(value, bool) else STR
            if isinstance(value, frozenset):
                kind = TAGS  # (a tag set: its column says only that it is there)
            col = columns.get((attr, kind))
            if col is None:
                if not grow:
                    continue
                col = self.column(attr, kind)
            if kind == NUM:
                bounds[col] = value
            elif kind == BOOL:
                bounds[col] = (float(value), float(value))
            elif kind == TAGS:
                bounds[col] = (0.0, 0.0)
            else:
                code = self.codes.get(value)
                if code is None:
                    code = self.code(value)
                bounds[col] = (float(code), float(code))
        return bounds

    def profile_matrix(self, profiles: list[Profile]) -> tuple[np.ndarray, np.ndarray]:
        """`matrix` of the profiles' boxes on these dims' columns (`profile_box`
        without `grow`: the attributes no column has are left out), filled in
        one pass, without a box per profile. O(columns × profiles + attributes)."""
        columns, n = self.columns, len(profiles)
        lo, hi = [PROFILE_FILL[0]] * (len(columns) * n), [PROFILE_FILL[1]] * (len(columns) * n)
        column_of, codes = columns.get, self.codes
        for i, profile in enumerate(profiles):
            for attr, value in profile.attrs.items():
                if isinstance(value, tuple):
                    col = column_of((attr, NUM))
                    if col is not None:
                        lo[col * n + i], hi[col * n + i] = value
                    continue
                if isinstance(value, bool):
                    col, low = column_of((attr, BOOL)), float(value)
                elif isinstance(value, frozenset):
                    col, low = column_of((attr, TAGS)), 0.0
                else:
                    col = column_of((attr, STR))
                    if col is None:
                        continue
                    code = codes.get(value)
                    low = float(code) if code is not None else self.code(value)
                if col is not None:
                    lo[col * n + i] = hi[col * n + i] = low
        return np.array(lo).reshape(len(columns), n), np.array(hi).reshape(len(columns), n)

    def matrix(
        self, boxes: list[dict[int, tuple[float, float]]], fill: tuple[float, float]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Many boxes as (columns × boxes) bound arrays, column-major like the
        forests', `fill` where a box has no bound. O(columns × boxes), filled
        as Python lists (item assignment into numpy costs several times more)."""
        columns, n = len(self.columns), len(boxes)
        lo, hi = [fill[0]] * (columns * n), [fill[1]] * (columns * n)
        for i, bounds in enumerate(boxes):
            for col, (low, high) in bounds.items():
                lo[col * n + i], hi[col * n + i] = low, high
        return np.array(lo).reshape(columns, n), np.array(hi).reshape(columns, n)


FILTER_FILL = (-INF, INF)
PROFILE_FILL = (INF, -INF)
