"""A set of distinct filters, each with a count, asked the covering questions of routing.

Covering-based routing asks two things of what lies behind a link and of what
was sent over it: which members cover a filter (then it need not be sent),
and which members a filter covers (those it may have kept from being sent).
Members are grouped by the columns they constrain (`matcher.boxes.Dims`): a
member covers a filter only if it constrains no attribute the filter leaves
free, so only the groups whose columns are a subset are scanned; within a
group, the members' boxes are tested against the filter's in one vector
operation per column, and `Conjunction.covers_filter` decides the few whose
box does not say everything.

Costs: `add`/`discard` O(1) amortized (a row written or freed); `covering` and
`covered_by` O(members of the groups scanned) in numpy plus an exact test per
inexact candidate. Invariant: every member with a positive count has exactly
one live row, in the group of its columns.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from matcher.boxes import Dims
from matcher.constraints import Conjunction
from matcher.profiles import Profile


class _Group:
    """The members constraining one set of columns: their bounds, column-major."""

    __slots__ = ("columns", "lo", "hi", "members", "free", "row_of")

    def __init__(self, columns: tuple[int, ...]) -> None:
        self.columns = columns
        self.lo = np.zeros((len(columns), 8))
        self.hi = np.zeros((len(columns), 8))
        self.members: list[Conjunction | None] = []
        self.free: list[int] = []
        self.row_of: dict[Conjunction, int] = {}

    def put(self, conj: Conjunction, bounds: dict[int, tuple[float, float]]) -> None:
        if self.free:
            row = self.free.pop()
            self.members[row] = conj
        else:
            row = len(self.members)
            self.members.append(conj)
            if row >= self.lo.shape[1]:
                self.lo = np.concatenate([self.lo, np.zeros_like(self.lo)], axis=1)
                self.hi = np.concatenate([self.hi, np.zeros_like(self.hi)], axis=1)
        for i, col in enumerate(self.columns):
            self.lo[i, row], self.hi[i, row] = bounds[col]
        self.row_of[conj] = row

    def drop(self, conj: Conjunction) -> None:
        row = self.row_of.pop(conj)
        self.members[row] = None
        self.lo[:, row], self.hi[:, row] = np.inf, -np.inf  # (contains nothing, inside nothing)
        self.free.append(row)

    def rows(self, outer: bool, bounds: dict[int, tuple[float, float]]) -> np.ndarray:
        """Rows whose box contains the filter's (`outer`) or lies inside it."""
        n = len(self.members)
        ends = [bounds.get(col, _FREE) for col in self.columns]
        lo = np.array([e[0] for e in ends])[:, None]
        hi = np.array([e[1] for e in ends])[:, None]
        if outer:
            keep = (self.lo[:, :n] <= lo) & (self.hi[:, :n] >= hi)
        else:
            keep = (self.lo[:, :n] >= lo) & (self.hi[:, :n] <= hi)
        return np.flatnonzero(keep.all(axis=0))


_FREE = (-np.inf, np.inf)
_MISSING = (np.inf, -np.inf)  # a profile without the attribute: meets no constrained column
_CHUNK = 64  # profiles tested against a group at once


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
        self._boxes: dict[Conjunction, tuple[dict, bool, int]] = {}
        self._groups: dict[int, _Group] = {}  # by column mask

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
        mask = _mask(bounds)
        group = self._groups.get(mask)
        if group is None:
            group = self._groups[mask] = _Group(tuple(sorted(bounds)))
        group.put(conj, bounds)
        self._boxes[conj] = (bounds, inexact, mask)
        return True

    def discard(self, conj: Conjunction, n: int = 1) -> bool:
        """Count `conj` out; True if that was its last count (it is no member now)."""
        left = self.counts[conj] - n
        if left > 0:
            self.counts[conj] = left
            return False
        del self.counts[conj]
        _, _, mask = self._boxes.pop(conj)
        self._groups[mask].drop(conj)
        return True

    def covering(self, conj: Conjunction) -> list[Conjunction]:
        """The members other than `conj` that cover it."""
        return self._related(conj, outer=True)

    def covered_by(self, conj: Conjunction) -> list[Conjunction]:
        """The members other than `conj` that it covers."""
        return self._related(conj, outer=False)

    def _related(self, conj: Conjunction, *, outer: bool) -> list[Conjunction]:
        bounds, inexact = self._box(conj)
        mask = _mask(bounds)
        out = []
        for gmask, group in self._groups.items():
            # a coverer constrains no column the covered one leaves free
            if (gmask & ~mask) if outer else (mask & ~gmask):
                continue
            out += self._exact(group, group.rows(outer, bounds), conj, inexact, outer=outer)
        return out

    def overlapping(self, profiles: list[Profile]) -> np.ndarray:
        """Per profile, whether some member overlaps it. O(members × profiles) in
        numpy (in chunks), and `Conjunction.overlaps` for the candidates whose box
        does not say everything: adding a member costs O(1), which a set that
        changes as often as it is asked (a link's interest) needs more than a
        forest's pruning."""
        out = np.zeros(len(profiles), dtype=bool)
        if not self.counts or not profiles:
            return out
        dims = self.boxes.dims
        boxes = [dims.profile_box(p) for p in profiles]
        for group in self._groups.values():
            n = len(group.members)
            if not n or not group.row_of:
                continue
            todo = np.flatnonzero(~out)
            for start in range(0, len(todo), _CHUNK):
                qs = todo[start : start + _CHUNK]
                ends = [[boxes[q].get(col, _MISSING) for col in group.columns] for q in qs]
                lo = np.array([[e[0] for e in row] for row in ends]).reshape(len(qs), -1)
                hi = np.array([[e[1] for e in row] for row in ends]).reshape(len(qs), -1)
                meet = (group.lo[None, :, :n] <= hi[:, :, None]) & (
                    group.hi[None, :, :n] >= lo[:, :, None]
                )
                qi, rows = np.nonzero(meet.all(axis=1))
                for q, row in zip(qi.tolist(), rows.tolist(), strict=True):
                    query = int(qs[q])
                    if out[query]:
                        continue
                    member = group.members[row]
                    if member is None:
                        continue
                    if not self._boxes[member][1] or member.overlaps(profiles[query]):
                        out[query] = True
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

    def _exact(
        self, group: _Group, rows: np.ndarray, conj: Conjunction, inexact: bool, outer: bool
    ) -> list[Conjunction]:
        if not len(rows):
            return []
        out = []
        own = group.row_of.get(conj)  # (a member equal to `conj` has its box: this group)
        for row in rows.tolist():
            member = group.members[row]
            if member is None or row == own:
                continue
            if inexact or self._boxes[member][1]:
                ok = member.covers_filter(conj) if outer else conj.covers_filter(member)
                if not ok:
                    continue
            out.append(member)
        return out

    def _box(self, conj: Conjunction) -> tuple[dict[int, tuple[float, float]], bool]:
        known = self._boxes.get(conj)
        if known is not None:
            return known[0], known[1]
        return self.boxes.of(conj)


def _mask(bounds: dict[int, tuple[float, float]]) -> int:
    mask = 0
    for col in bounds:
        mask |= 1 << col
    return mask
