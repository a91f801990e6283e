"""Filter merging of a root set (Tarkoma ch. 8, Mühl): fewer, wider filters to send.

The roots of what lies behind a link (the filters no other one there covers)
are partitioned into groups; each group is sent as one filter, its merger,
which covers every member. Two roots can merge only if they constrain the
same attributes and agree on everything but numeric ranges (their *shape*):
the merger keeps the shared constraints and takes, per numeric attribute, the
range from the lowest bound to the highest (a single value counts as a range).

- **perfect**: a root joins a group only where the merger then allows exactly
  the union: the two agree on every range but one, and on that one their
  ranges meet. A merger that grew may then meet another group's, and the two
  groups become one.
- **imperfect**: a root joins the group whose merger grows least for it (of
  the `CANDIDATES` that grow least), as long as the share of the grown
  merger that none of its members covers, its extra volume, stays within
  `budget`. The share is estimated on `SAMPLES` fixed points spread over the
  merger (a range's open end at the widest extent seen on its attribute);
  the growth is a product of range widths, each a fraction of that extent
  (plus a thousandth, so that a single value weighs something).

A root covered by a merger joins that group without anything being sent.
When a member leaves (an unsubscribe, or a wider root arriving), its group is
re-derived: dissolved, and its other members placed again one by one, so that
a merger never keeps the part that left; only the difference between the
mergers sent before and after goes out.

Costs: placing a root is O(groups of its shape) in numpy; a removal re-places
the members of one group. Invariant: every root is in exactly one group, and
the group's merger covers it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from matcher.constraints import NUM, Conjunction, Constraint

Change = tuple[str, Conjunction]  # ("add" | "remove", filter)
RESOLUTION = 1e-3  # of an attribute's extent: the width a single value weighs
CANDIDATES = 3  # groups tried for a root, those whose merger grows least first
SAMPLES = 128  # points a grown merger is sampled at to estimate its uncovered share
FIRST = 32  # ... of which these are tested first
_UNIT = np.random.default_rng(20_061_116).random((SAMPLES, 64))  # fixed: runs repeat


def _range(c: Constraint) -> tuple[float, float] | None:
    """A numeric constraint as a closed range (None: it is not one)."""
    if c.type != NUM:
        return None
    if c.allowed is not None:
        if len(c.allowed) != 1:
            return None
        (v,) = c.allowed
        return float(v), float(v)
    if c.excluded:
        return None
    return (-math.inf if c.lo is None else c.lo), (math.inf if c.hi is None else c.hi)


def _constraint(lo: float, hi: float) -> Constraint:
    """A closed numeric range in the normalized form `matcher.constraints` makes."""
    if lo == hi:
        return Constraint(NUM, allowed=frozenset([lo]))
    return Constraint(NUM, lo=None if lo == -math.inf else lo, hi=None if hi == math.inf else hi)


@dataclass(frozen=True)
class Shape:
    """What a root must share with the others of a group: the attributes it
    constrains by numeric ranges, and every other constraint as it is."""

    ranges: tuple[str, ...]
    rest: tuple[tuple[str, Constraint], ...]


def shape_of(conj: Conjunction) -> tuple[Shape, np.ndarray, np.ndarray]:
    """A filter's shape and its ranges (lo and hi per range attribute)."""
    names, lo, hi, rest = [], [], [], []
    for attr, c in conj.constraints.items():
        r = _range(c)
        if r is None:
            rest.append((attr, c))
        else:
            names.append(attr)
            lo.append(r[0])
            hi.append(r[1])
    return Shape(tuple(names), tuple(rest)), np.array(lo, dtype=float), np.array(hi, dtype=float)


@dataclass
class _Group:
    members: list[Conjunction]
    merger: Conjunction
    lo: np.ndarray  # the merger's ranges
    hi: np.ndarray
    member_lo: np.ndarray  # the members' ranges, (members × ranges)
    member_hi: np.ndarray

    def join(self, lo: np.ndarray, hi: np.ndarray) -> None:
        self.member_lo = np.vstack([self.member_lo, lo])
        self.member_hi = np.vstack([self.member_hi, hi])


class _Class:
    """The groups of one shape, their mergers' ranges column-major (a column a group,
    freed columns reused) for vector tests."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.groups: dict[int, _Group] = {}
        k = len(shape.ranges)
        self.lo = np.full((k, 8), np.inf)
        self.hi = np.full((k, 8), -np.inf)
        self.gid = np.full(8, -1, dtype=np.int64)  # per column, -1 when free
        self.used = 0  # columns ever used
        self.column: dict[int, int] = {}
        self.free: list[int] = []
        # every root of the shape, a row each (freed rows reused): what a merger's
        # extra volume is judged against
        self.root_lo = np.full((8, k), np.inf)
        self.root_hi = np.full((8, k), -np.inf)
        self.root_row: dict[Conjunction, int] = {}
        self.root_free: list[int] = []

    def hold_root(self, root: Conjunction, lo: np.ndarray, hi: np.ndarray) -> None:
        if self.root_free:
            row = self.root_free.pop()
        else:
            row = len(self.root_row)
            if row >= len(self.root_lo):
                self.root_lo = np.vstack([self.root_lo, np.full_like(self.root_lo, np.inf)])
                self.root_hi = np.vstack([self.root_hi, np.full_like(self.root_hi, -np.inf)])
        self.root_row[root] = row
        self.root_lo[row], self.root_hi[row] = lo, hi

    def drop_root(self, root: Conjunction) -> None:
        row = self.root_row.pop(root)
        self.root_lo[row], self.root_hi[row] = np.inf, -np.inf
        self.root_free.append(row)

    def put(self, gid: int, group: _Group) -> None:
        self.groups[gid] = group
        if self.free:
            col = self.free.pop()
        else:
            col = self.used
            self.used += 1
            if col >= self.lo.shape[1]:
                self.lo = np.concatenate([self.lo, np.full_like(self.lo, np.inf)], axis=1)
                self.hi = np.concatenate([self.hi, np.full_like(self.hi, -np.inf)], axis=1)
                self.gid = np.concatenate([self.gid, np.full_like(self.gid, -1)])
        self.gid[col] = gid
        self.column[gid] = col
        self.lo[:, col], self.hi[:, col] = group.lo, group.hi

    def grew(self, gid: int) -> None:
        col, group = self.column[gid], self.groups[gid]
        self.lo[:, col], self.hi[:, col] = group.lo, group.hi

    def pop(self, gid: int) -> _Group:
        col = self.column.pop(gid)
        self.gid[col] = -1
        self.lo[:, col], self.hi[:, col] = np.inf, -np.inf
        self.free.append(col)
        return self.groups.pop(gid)

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The live columns' group ids and ranges."""
        n = self.used
        ids = self.gid[:n]
        live = np.flatnonzero(ids >= 0)
        return ids[live], self.lo[:, live], self.hi[:, live]


class Merger:
    """A root set's groups and the mergers sent for them (see the module docstring)."""

    def __init__(self, *, imperfect: bool, budget: float) -> None:
        self.imperfect = imperfect
        self.budget = budget
        self.sent: Counter[Conjunction] = Counter()
        self._classes: dict[Shape, _Class] = {}
        self._group_of: dict[Conjunction, tuple[Shape, int]] = {}
        self._next_id = 0
        self._extent: dict[str, tuple[float, float]] = {}  # per attribute: lowest, highest bound
        self._pending: dict[Conjunction, int] = {}  # mergers issued (+) and retired (-) so far

    def __len__(self) -> int:
        return sum(self.sent.values())

    def groups(self) -> list[tuple[Conjunction, list[Conjunction]]]:
        """Every group as (merger, members): for tests and reports."""
        classes = self._classes.values()
        return [(g.merger, list(g.members)) for cls in classes for g in cls.groups.values()]

    # -- the root set changes -------------------------------------------------

    def add_root(self, root: Conjunction) -> list[Change]:
        """A filter became a root: place it; the mergers to add and remove."""
        shape, lo, hi = shape_of(root)
        self._class(shape).hold_root(root, lo, hi)
        self._place(root)
        return self._flush()

    def _class(self, shape: Shape) -> _Class:
        cls = self._classes.get(shape)
        if cls is None:
            cls = self._classes[shape] = _Class(shape)
        return cls

    def remove_root(self, root: Conjunction) -> list[Change]:
        """A root left: its group's merger is re-derived from the members that stay,
        as the range from their lowest bound to their highest. Where that one's extra
        volume is over the budget (imperfect), or its ranges no longer meet
        (perfect), the group is dissolved and its members placed again one by one."""
        shape, gid = self._group_of.pop(root)
        cls = self._classes[shape]
        cls.drop_root(root)
        group = cls.groups[gid]
        at = group.members.index(root)
        others = group.members[:at] + group.members[at + 1 :]
        if others:
            keep = np.ones(len(group.members), dtype=bool)
            keep[at] = False
            lo, hi = group.member_lo[keep].min(axis=0), group.member_hi[keep].max(axis=0)
            if self._still_fits(cls, group, keep, lo, hi):
                self._retire(group.merger)
                group.members = others
                group.member_lo, group.member_hi = group.member_lo[keep], group.member_hi[keep]
                group.lo, group.hi = lo, hi
                group.merger = self._merged(shape, lo, hi)
                cls.grew(gid)
                self._issue(group.merger)
                return self._flush()
        cls.pop(gid)
        self._retire(group.merger)
        for member in others:
            del self._group_of[member]
        for member in others:
            self._place(member)
        if not cls.groups:
            del self._classes[shape]
        return self._flush()

    def _still_fits(self, cls: _Class, group: _Group, keep: np.ndarray, lo, hi) -> bool:
        """Whether the members that stay (two or more) can keep one merger spanning
        them (one alone is placed again: it may join another group)."""
        if keep.sum() > 1 and self.imperfect:
            return self._uncovered(cls, *self._clipped(cls.shape, lo, hi)) <= self.budget
        return False  # perfect: placed again, as its ranges may no longer meet

    # -- placing one root -----------------------------------------------------

    def _place(self, root: Conjunction) -> None:
        """Put `root` in a group of its shape (a new one if none fits)."""
        shape, lo, hi = shape_of(root)
        self._widen_extent(shape, lo, hi)
        cls = self._class(shape)
        gid = self._covering_group(cls, lo, hi)
        if gid is None:
            gid = self._best_group(cls, lo, hi)
        if gid is None:
            gid = self._next_id
            self._next_id += 1
            cls.put(gid, _Group([root], root, lo, hi, lo[None, :], hi[None, :]))
            self._issue(root)
        else:
            group = cls.groups[gid]
            group.members.append(root)
            group.join(lo, hi)
            if not self._covers(group, lo, hi):
                self._retire(group.merger)
                group.lo, group.hi = np.minimum(group.lo, lo), np.maximum(group.hi, hi)
                group.merger = self._merged(shape, group.lo, group.hi)
                cls.grew(gid)
                if not self.imperfect:
                    gid = self._join_meeting(cls, gid)
                self._issue(cls.groups[gid].merger)
        self._group_of[root] = (shape, gid)

    def _covering_group(self, cls: _Class, lo: np.ndarray, hi: np.ndarray) -> int | None:
        """The oldest group whose merger covers the ranges, if any."""
        ids, glo, ghi = cls.columns()
        hit = ((glo <= lo[:, None]) & (ghi >= hi[:, None])).all(axis=0)
        return int(ids[hit].min()) if hit.any() else None

    @staticmethod
    def _covers(group: _Group, lo: np.ndarray, hi: np.ndarray) -> bool:
        return bool((group.lo <= lo).all() and (group.hi >= hi).all())

    def _best_group(self, cls: _Class, lo: np.ndarray, hi: np.ndarray) -> int | None:
        if not cls.groups or not len(lo):
            return None
        ids, glo, ghi = cls.columns()
        if not self.imperfect:
            meeting = ids[_meets_one(glo, ghi, lo, hi)]
            return int(meeting.min()) if len(meeting) else None
        new_lo, new_hi = np.minimum(glo, lo[:, None]), np.maximum(ghi, hi[:, None])
        grown = self._volumes(cls.shape, new_lo, new_hi) - self._volumes(cls.shape, glo, ghi)
        for j in np.lexsort((ids, grown))[:CANDIDATES].tolist():
            grown_lo, grown_hi = self._clipped(cls.shape, new_lo[:, j], new_hi[:, j])
            if self._uncovered(cls, grown_lo, grown_hi) <= self.budget:
                return int(ids[j])
        return None

    def _uncovered(self, cls: _Class, lo: np.ndarray, hi: np.ndarray) -> float:
        """The share of a grown merger's volume that no root of its shape covers (where a
        profile would be sent for nothing), estimated on `SAMPLES` fixed points spread
        over it, tested against the roots that meet it. The first `FIRST` points
        decide alone when a quarter of them is uncovered (far over any budget)."""
        meet = ((cls.root_lo <= hi) & (cls.root_hi >= lo)).all(axis=1)
        rlo, rhi = cls.root_lo[meet], cls.root_hi[meet]
        points = lo + _UNIT[:, : len(lo)] * (hi - lo)  # (samples × ranges)
        first = _covered(points[:FIRST], rlo, rhi)
        if (~first).sum() >= FIRST // 4:
            return 1.0 - float(first.mean())
        rest = _covered(points[FIRST:], rlo, rhi)
        return 1.0 - float((first.sum() + rest.sum()) / SAMPLES)

    def _clipped(self, shape: Shape, lo: np.ndarray, hi: np.ndarray):
        """Ranges within the extent seen on each attribute (open ends at its edge)."""
        low = np.array([self._extent.get(a, (0.0, 0.0))[0] for a in shape.ranges])
        high = np.array([self._extent.get(a, (0.0, 0.0))[1] for a in shape.ranges])
        return np.clip(lo, low, high), np.clip(hi, low, high)

    def _join_meeting(self, cls: _Class, gid: int) -> int:
        """Perfect: while the grown group's merger meets another's on one range and
        equals it on the rest, the two become one (their union is still exact)."""
        group = cls.groups[gid]
        while True:
            ids, glo, ghi = cls.columns()
            meeting = ids[_meets_one(glo, ghi, group.lo, group.hi) & (ids != gid)]
            if not len(meeting):
                return gid
            og = cls.pop(int(meeting.min()))
            self._retire(og.merger)
            group.members += og.members
            group.join(og.member_lo, og.member_hi)
            group.lo, group.hi = np.minimum(group.lo, og.lo), np.maximum(group.hi, og.hi)
            group.merger = self._merged(cls.shape, group.lo, group.hi)
            cls.grew(gid)
            for m in og.members:
                self._group_of[m] = (cls.shape, gid)

    def _merged(self, shape: Shape, lo: np.ndarray, hi: np.ndarray) -> Conjunction:
        constraints = dict(shape.rest)
        for attr, a, b in zip(shape.ranges, lo.tolist(), hi.tolist(), strict=True):
            constraints[attr] = _constraint(a, b)
        return Conjunction(constraints)

    # -- volumes --------------------------------------------------------------

    def _widen_extent(self, shape: Shape, lo: np.ndarray, hi: np.ndarray) -> None:
        for attr, a, b in zip(shape.ranges, lo.tolist(), hi.tolist(), strict=True):
            ends = [v for v in (a, b) if math.isfinite(v)]
            if not ends:
                continue
            seen = self._extent.get(attr)
            low, high = min(ends), max(ends)
            if seen is not None:
                low, high = min(low, seen[0]), max(high, seen[1])
            self._extent[attr] = (low, high)

    def _volumes(self, shape: Shape, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Estimated volumes of boxes given column-major (ranges × boxes)."""
        out = np.ones(lo.shape[1])
        for i, attr in enumerate(shape.ranges):
            low, high = self._extent.get(attr, (0.0, 0.0))
            span = max(high - low, 1.0)
            a = np.clip(lo[i], low, high)
            b = np.clip(hi[i], low, high)
            out *= np.minimum((b - a) / span + RESOLUTION, 1.0)
        return out

    # -- what is sent ---------------------------------------------------------

    def _issue(self, merger: Conjunction) -> None:
        self._pending[merger] = self._pending.get(merger, 0) + 1

    def _retire(self, merger: Conjunction) -> None:
        self._pending[merger] = self._pending.get(merger, 0) - 1

    def _flush(self) -> list[Change]:
        """The net of what was issued and retired: adds first, so that what is sent
        never stops covering a root while the changes travel."""
        adds: list[Change] = []
        removes: list[Change] = []
        for merger, net in self._pending.items():
            for _ in range(net):
                self.sent[merger] += 1
                adds.append(("add", merger))
            for _ in range(-net):
                self.sent[merger] -= 1
                if not self.sent[merger]:
                    del self.sent[merger]
                removes.append(("remove", merger))
        self._pending.clear()
        return adds + removes


def _covered(points: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per point, whether one of the boxes (rows of `lo`/`hi`) holds it."""
    inside = (points[:, None, :] >= lo[None]) & (points[:, None, :] <= hi[None])
    return inside.all(axis=2).any(axis=1)


def _meets_one(glo: np.ndarray, ghi: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per group (columns of `glo`/`ghi`): equal ranges but on one attribute, where
    the two ranges meet, so that one range holds exactly their union."""
    same = (glo == lo[:, None]) & (ghi == hi[:, None])
    meet = np.maximum(glo, lo[:, None]) <= np.nextafter(np.minimum(ghi, hi[:, None]), np.inf)
    return ((~same).sum(axis=0) == 1) & (same | meet).all(axis=0)
