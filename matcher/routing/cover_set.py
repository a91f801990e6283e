"""A set of distinct filters, each with a count, asked the covering questions of routing.

Covering-based routing asks two things of what lies behind a link and of what
was sent over it: which members cover a filter (then it need not be sent),
and which members a filter covers (those it may have kept from being sent);
a link's interest table asks a third: which profiles some member overlaps.

Every member is one row of two dense bound arrays, column-major over every
column of the space (`matcher.boxes.Dims`): a column the member leaves free
is [-inf, inf], a constrained one lies inside [-MAX, MAX], and a free row is
NaN (it compares false to everything). Each question is then a few vector
comparisons over all rows, whatever attributes the members constrain: a
member covers a filter only if it is free wherever the filter is (-inf <=
-inf), a profile without an attribute is [inf, -inf] there and meets only
the members free on it. `Conjunction.covers_filter` and
`Conjunction.overlaps` decide the few candidates whose box does not say
everything.

Costs: `add`/`discard` O(columns) amortized (a row written or freed);
`covering` and `covered_by` O(rows × columns) in numpy plus an exact test
per inexact candidate; `overlapping` O(rows × columns) per profile in numpy.
Invariant: every member with a positive count has exactly one live row, and
every other row is NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from matcher.boxes import PROFILE_FILL, Dims
from matcher.constraints import Conjunction
from matcher.profiles import Profile

_CHUNK = 64  # profiles tested against the rows at once


class Boxes:
    """Filters' boxes, made once for the CoverSets that share it (their columns)."""

    def __init__(self) -> None:
        self.dims = Dims()
        self._made: dict[Conjunction, tuple[dict[int, tuple[float, float]], bool]] = {}

    def of(self, conj: Conjunction) -> tuple[dict[int, tuple[float, float]], bool]:
        made = self._made.get(conj)
        if made is None:
            if len(self._made) > 1 << 16:
                self._made.clear()  # (a bound on memory: boxes are remade on demand)
            made = self._made[conj] = self.dims.filter_box(conj)
        return made


class CoverSet:
    """Distinct filters with counts; see the module's docstring."""

    def __init__(self, boxes: Boxes | None = None) -> None:
        self.boxes = boxes or Boxes()
        self.counts: dict[Conjunction, int] = {}  # (insertion order: the members' age)
        self._boxes: dict[Conjunction, tuple[dict, bool, int]] = {}  # bounds, inexact, row
        self._members: list[Conjunction | None] = []
        self._free: list[int] = []
        self._lo = np.full((0, 8), np.nan)  # (columns × rows)
        self._hi = np.full((0, 8), np.nan)
        self._inexact = np.zeros(8, dtype=bool)

    def __len__(self) -> int:
        return len(self.counts)

    def __contains__(self, conj: object) -> bool:
        return conj in self.counts

    def __iter__(self) -> Iterator[Conjunction]:
        return iter(self.counts)

    def count(self, conj: Conjunction) -> int:
        return self.counts.get(conj, 0)

    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, conj: Conjunction, n: int = 1) -> bool:
        """Count `conj` in; True if it was not a member."""
        if conj in self.counts:
            self.counts[conj] += n
            return False
        self.counts[conj] = n
        bounds, inexact = self._box(conj)
        if self._free:
            row = self._free.pop()
            self._members[row] = conj
        else:
            row = len(self._members)
            self._members.append(conj)
        self._fit(len(self.boxes.dims), row + 1)
        self._lo[:, row], self._hi[:, row] = -np.inf, np.inf
        for col, (lo, hi) in bounds.items():
            self._lo[col, row], self._hi[col, row] = lo, hi
        self._inexact[row] = inexact
        self._boxes[conj] = (bounds, inexact, row)
        return True

    def discard(self, conj: Conjunction, n: int = 1) -> bool:
        """Count `conj` out; True if that was its last count (it is no member now)."""
        left = self.counts[conj] - n
        if left > 0:
            self.counts[conj] = left
            return False
        del self.counts[conj]
        _, _, row = self._boxes.pop(conj)
        self._members[row] = None
        self._lo[:, row], self._hi[:, row] = np.nan, np.nan
        self._free.append(row)
        return True

    def _fit(self, columns: int, rows: int) -> None:
        """Room for `columns` × `rows`: new columns free for every live row, new rows NaN."""
        have_cols, have_rows = self._lo.shape
        if rows > have_rows:
            more = max(rows, 2 * have_rows) - have_rows
            pad = np.full((have_cols, more), np.nan)
            self._lo = np.concatenate([self._lo, pad], axis=1)
            self._hi = np.concatenate([self._hi, pad], axis=1)
            self._inexact = np.concatenate([self._inexact, np.zeros(more, dtype=bool)])
        if columns > have_cols:
            width = self._lo.shape[1]
            live = np.zeros(width, dtype=bool)
            live[[row for row, m in enumerate(self._members) if m is not None]] = True
            lo = np.where(live, -np.inf, np.nan)
            hi = np.where(live, np.inf, np.nan)
            extra = columns - have_cols
            self._lo = np.vstack([self._lo] + [lo[None]] * extra)
            self._hi = np.vstack([self._hi] + [hi[None]] * extra)

    def covering(self, conj: Conjunction) -> list[Conjunction]:
        """The members other than `conj` that cover it."""
        return self._related(conj, outer=True)

    def covered_by(self, conj: Conjunction) -> list[Conjunction]:
        """The members other than `conj` that it covers."""
        return self._related(conj, outer=False)

    def _related(self, conj: Conjunction, *, outer: bool) -> list[Conjunction]:
        if not self.counts:
            return []
        bounds, inexact = self._box(conj)
        self._fit(len(self.boxes.dims), len(self._members))
        n = len(self._members)
        lo, hi = self._lo[:, :n], self._hi[:, :n]
        qlo = np.full(len(lo), -np.inf)
        qhi = np.full(len(lo), np.inf)
        for col, (a, b) in bounds.items():
            qlo[col], qhi[col] = a, b
        if outer:
            keep = (lo <= qlo[:, None]).all(axis=0) & (hi >= qhi[:, None]).all(axis=0)
        else:
            keep = (lo >= qlo[:, None]).all(axis=0) & (hi <= qhi[:, None]).all(axis=0)
        rows = np.flatnonzero(keep)
        if not len(rows):
            return []
        own = self._boxes.get(conj)
        own_row = own[2] if own is not None else -1
        out = []
        members, flags = self._members, self._inexact
        for row in rows.tolist():
            member = members[row]
            if member is None or row == own_row:
                continue
            if inexact or flags[row]:
                ok = member.covers_filter(conj) if outer else conj.covers_filter(member)
                if not ok:
                    continue
            out.append(member)
        return out

    def overlapping(self, profiles: list[Profile]) -> np.ndarray:
        """Per profile, whether some member overlaps it. O(members × columns) a profile
        in numpy (in chunks), and `Conjunction.overlaps` for the candidates whose box
        does not say everything: adding a member costs O(columns), which a set that
        changes as often as it is asked (a link's interest) needs more than a
        forest's pruning."""
        out = np.zeros(len(profiles), dtype=bool)
        if not self.counts or not profiles:
            return out
        dims = self.boxes.dims
        plo, phi = dims.matrix([dims.profile_box(p) for p in profiles], PROFILE_FILL)
        self._fit(len(dims), len(self._members))
        n = len(self._members)
        lo, hi = self._lo[:, :n], self._hi[:, :n]
        inexact = self._inexact[:n]
        exact = ~inexact
        any_inexact = bool(inexact.any())
        members = self._members
        for start in range(0, len(profiles), _CHUNK):
            stop = min(start + _CHUNK, len(profiles))
            if not len(lo):  # (no columns yet: every member is TRUE)
                live = np.array([m is not None for m in members[:n]], dtype=bool)
                meet = np.tile(live, (stop - start, 1))
            else:
                meet = (lo[0] <= phi[0, start:stop, None]) & (hi[0] >= plo[0, start:stop, None])
            for col in range(1, len(lo)):
                meet &= lo[col] <= phi[col, start:stop, None]
                meet &= hi[col] >= plo[col, start:stop, None]
            hit = (meet & exact).any(axis=1) if any_inexact else meet.any(axis=1)
            out[start:stop] = hit
            if any_inexact:
                for q in np.flatnonzero(~hit).tolist():
                    rows = np.flatnonzero(meet[q] & inexact).tolist()
                    profile = profiles[start + q]
                    out[start + q] = any(members[r].overlaps(profile) for r in rows)
        return out

    def widest_first(self, members: list[Conjunction]) -> list[Conjunction]:
        """Members ordered so that one that covers another comes first: by the
        number of attributes constrained, then by box size, larger first."""

        def breadth(conj: Conjunction) -> tuple[int, float]:
            bounds = self._boxes[conj][0]
            size = sum(math.log1p(min(hi - lo, 1e300)) for lo, hi in bounds.values())
            return len(conj.constraints), -size

        return sorted(members, key=breadth)

    def is_covered(self, conj: Conjunction) -> bool:
        """Whether a member other than `conj` covers it."""
        return bool(self.covering(conj))

    def _box(self, conj: Conjunction) -> tuple[dict[int, tuple[float, float]], bool]:
        known = self._boxes.get(conj)
        if known is not None:
            return known[0], known[1]
        return self.boxes.of(conj)
