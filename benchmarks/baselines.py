"""Contenders that the DoubleForest is measured against, on the same boxes.

Each holds subscriptions (conjunctive filters) and profiles under integer keys
and answers the two `overlaps` queries of SEMANTICS §2: the filters that a
profile overlaps, and the profiles that a filter overlaps. Exactness comes
from the matcher's own model (`Conjunction.overlaps`, `covers_filter`,
`Profile.covers`) and box form (`matcher.boxes.Dims`), so that a difference
in results is a bug and not a difference of semantics.

- `BruteForce`: a vectorized numpy scan, column-major, one `&=` per bound.
- `SienaPoset`: Siena's filters poset (Tarkoma §3.2): a DAG of all covering
  relations; insertion finds the immediate predecessors and successors,
  deletion reconnects, matching walks down from the roots while nodes hit.
- `RTree`: an R-tree (libspatialindex) over the boxes, exact test after.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable
from typing import Any

import numpy as np

from matcher.boxes import FILTER_FILL, PROFILE_FILL, Dims
from matcher.constraints import Conjunction
from matcher.profiles import Profile

Bounds = dict[int, tuple[float, float]]
# One query's answer: the matching keys in whatever form the contender makes
# them (a numpy array for the scans and the forest, a set for the poset and
# the R-tree); the benchmark compares them as sets, outside the timing.
Keys = Collection[int]
# The array contenders' key type: the benchmark's keys are sequence numbers
# (under 2**31 at 1M entries a side), and answers of millions of keys cost
# their memory's writes, the same for every contender that makes arrays.
KEY = np.int32


def key_set(keys: Keys) -> set[int]:
    """An answer as a set; an array that repeats a key is a wrong answer."""
    out = set(keys.tolist()) if isinstance(keys, np.ndarray) else set(keys)
    if len(out) != len(keys):
        raise ValueError(f"an answer repeats keys: {len(keys)} keys, {len(out)} distinct")
    return out


class Contender:
    """Two indexes, one per direction, behind the interface the benchmark drives."""

    name = "?"
    batched = False  # answers a batch of profiles faster than one at a time

    def __init__(self, subscriptions: Any, profiles: Any) -> None:
        self._subs, self._profiles = subscriptions, profiles

    def insert(self, key: int, conj: Conjunction) -> None:
        self._subs.insert(key, conj)

    def delete(self, key: int) -> None:
        self._subs.delete(key)

    def settle_subscriptions(self) -> None:
        """Finish the index work that the subscription inserts deferred (timed
        with them); nothing for a structure that does it all on insert."""

    def settle_profiles(self) -> None:
        """The same after the profile inserts."""

    def match_profile(self, profile: Profile) -> Keys:
        """Keys of the filters that overlap `profile`."""
        return self._subs.match(profile)

    def match_profiles(self, profiles: list[Profile]) -> list[Keys]:
        """A batch at once; a baseline simply loops (the DoubleForest does not)."""
        return [self._subs.match(p) for p in profiles]

    def insert_profile(self, key: int, profile: Profile) -> None:
        self._profiles.insert(key, profile)

    def delete_profile(self, key: int) -> None:
        self._profiles.delete(key)

    def match_subscription(self, conj: Conjunction) -> Keys:
        """Keys of the profiles that `conj` overlaps."""
        return self._profiles.match(conj)

    def match_subscriptions(self, conjs: list[Conjunction]) -> list[Keys]:
        return [self._profiles.match(c) for c in conjs]


def _filter_hit(profile: Profile, conj: Conjunction) -> bool:
    return conj.overlaps(profile)


def _profile_hit(conj: Conjunction, profile: Profile) -> bool:
    return conj.overlaps(profile)


# ---------------------------------------------------------------- brute force


class _Scan:
    """Boxes as column-major arrays (`lo[col, row]`), grown by doubling.

    A row whose box is only a necessary condition (`!=`, patterns …) is
    tested exactly after the scan; deletion moves the last row into the hole.
    """

    def __init__(self, dims: Dims, fill: tuple[float, float], box: Callable, hit: Callable):
        self.dims, self.fill, self.box, self.hit = dims, fill, box, hit
        self.n = 0
        self.lo = np.full((0, 16), fill[0])
        self.hi = np.full((0, 16), fill[1])
        self.keys = np.zeros(16, dtype=KEY)
        self.check = np.zeros(16, dtype=bool)
        self.items: list[Any] = []
        self.row_of: dict[int, int] = {}

    def _fit(self, rows: int) -> None:
        cols, cap = len(self.dims), self.lo.shape[1]
        new_cap = cap * 2 if rows > cap else cap
        if cols == self.lo.shape[0] and new_cap == cap:
            return
        lo = np.full((cols, new_cap), self.fill[0])
        hi = np.full((cols, new_cap), self.fill[1])
        lo[: self.lo.shape[0], :cap], hi[: self.hi.shape[0], :cap] = self.lo, self.hi
        self.lo, self.hi = lo, hi
        if new_cap != cap:
            self.keys = np.resize(self.keys, new_cap)
            self.check = np.resize(self.check, new_cap)

    def insert(self, key: int, item: Any) -> None:
        bounds, check = self.box(item)
        self._fit(self.n + 1)
        row = self.n
        self.lo[:, row], self.hi[:, row] = self.fill
        for col, (a, b) in bounds.items():
            self.lo[col, row], self.hi[col, row] = a, b
        self.keys[row], self.check[row] = key, check
        self.items.append(item)
        self.row_of[key] = row
        self.n += 1

    def delete(self, key: int) -> None:
        row, last = self.row_of.pop(key), self.n - 1
        if row != last:
            self.lo[:, row], self.hi[:, row] = self.lo[:, last], self.hi[:, last]
            self.keys[row], self.check[row] = self.keys[last], self.check[last]
            self.items[row] = self.items[last]
            self.row_of[int(self.keys[row])] = row
        self.items.pop()
        self.n = last

    def match(self, query: Any, bounds: Bounds, cols: Iterable[int]) -> np.ndarray:
        """Rows whose box meets `bounds` on every column in `cols` (and
        that pass the exact test where the box is only necessary)."""
        n = self.n
        mask = np.ones(n, dtype=bool)
        for col in cols:
            a, b = bounds.get(col, self.fill[::-1])
            mask &= self.lo[col, :n] <= b
            mask &= self.hi[col, :n] >= a
        rows = np.flatnonzero(mask)
        checked = self.check[rows]
        if checked.any():
            for i in np.flatnonzero(checked).tolist():
                checked[i] = not self.hit(query, self.items[rows[i]])
            rows = rows[~checked]
        return rows


class _ScanFilters(_Scan):
    def __init__(self, dims: Dims) -> None:
        super().__init__(dims, FILTER_FILL, dims.filter_box, _filter_hit)

    def match(self, profile: Profile) -> np.ndarray:  # type: ignore[override]
        bounds = self.dims.profile_box(profile)
        self._fit(self.n)
        # Every column: a filter constraining an attribute the profile lacks must fail.
        return self.keys[super().match(profile, bounds, range(self.lo.shape[0]))]


class _ScanProfiles(_Scan):
    def __init__(self, dims: Dims) -> None:
        super().__init__(dims, PROFILE_FILL, lambda p: (dims.profile_box(p), False), _profile_hit)

    def match(self, conj: Conjunction) -> np.ndarray:  # type: ignore[override]
        bounds, check = self.dims.filter_box(conj)
        self._fit(self.n)
        # Only constrained columns: an unconstrained one meets every profile.
        rows = super().match(conj, bounds, bounds)
        if check:
            rows = rows[[conj.overlaps(self.items[r]) for r in rows.tolist()]]
        return self.keys[rows]


class BruteForce(Contender):
    """The scan that PLATFORM.md times: ~100 µs per query at 100k boxes."""

    name = "brute-force"

    def __init__(self, dims: Dims) -> None:
        super().__init__(_ScanFilters(dims), _ScanProfiles(dims))


# ---------------------------------------------------------------- Siena poset


class _Node:
    __slots__ = ("value", "keys", "parents", "children")

    def __init__(self, value: Hashable) -> None:
        self.value = value
        self.keys: set[int] = set()
        self.parents: set[_Node] = set()
        self.children: set[_Node] = set()


class Poset:
    """Siena's filters poset: every covering relation is a path in the DAG.

    `covers(a, b)`: a covers b; `hit(query, value)` must be monotone in
    covering (if a value misses, everything it covers misses too), which is
    what lets matching skip the nodes below a miss.
    """

    def __init__(self, covers: Callable[[Any, Any], bool], hit: Callable[[Any, Any], bool]):
        self.covers, self.hit = covers, hit
        self.roots: set[_Node] = set()
        self.nodes: dict[Hashable, _Node] = {}
        self.node_of: dict[int, _Node] = {}

    def insert(self, key: int, value: Hashable) -> None:
        node = self.nodes.get(value)
        if node is None:
            node = self.nodes[value] = self._link(value)
        node.keys.add(key)
        self.node_of[key] = node

    def _link(self, value: Hashable) -> _Node:
        preds = self._predecessors(value)
        succs = self._successors(value, preds)
        node = _Node(value)
        for p in preds:
            for s in succs:
                p.children.discard(s)
                s.parents.discard(p)
            p.children.add(node)
            node.parents.add(p)
        for s in succs:
            s.parents.add(node)
            node.children.add(s)
            self.roots.discard(s)
        if not preds:
            self.roots.add(node)
        return node

    def _predecessors(self, value: Hashable) -> list[_Node]:
        """The nodes that cover `value` and have no child that covers it."""
        covering = [r for r in self.roots if self.covers(r.value, value)]
        seen, preds = set(covering), []
        while covering:
            node = covering.pop()
            below = [c for c in node.children if self.covers(c.value, value)]
            if not below:
                preds.append(node)
            for c in below:
                if c not in seen:
                    seen.add(c)
                    covering.append(c)
        return preds

    def _successors(self, value: Hashable, preds: list[_Node]) -> list[_Node]:
        """The maximal nodes that `value` covers: all lie below every predecessor."""
        start = min((p.children for p in preds), key=len) if preds else self.roots
        stack, seen, found = list(start), set(), []
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if self.covers(value, node.value):
                found.append(node)
            else:
                stack.extend(node.children)
        return [s for s in found if not any(self.covers(value, p.value) for p in s.parents)]

    def delete(self, key: int) -> None:
        node = self.node_of.pop(key)
        node.keys.discard(key)
        if node.keys:
            return
        del self.nodes[node.value]
        self.roots.discard(node)
        for p in node.parents:
            p.children.discard(node)
        for c in node.children:
            c.parents.discard(node)
        for c in node.children:
            # A parent of the removed node is immediate for c unless it covers
            # one of c's remaining parents (then the path already exists).
            adopt = [
                p for p in node.parents if not any(self.covers(p.value, q.value) for q in c.parents)
            ]
            for p in adopt:
                p.children.add(c)
                c.parents.add(p)
            if not c.parents:
                self.roots.add(c)

    def match(self, query: Any) -> set[int]:
        out: set[int] = set()
        stack, seen = list(self.roots), set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if self.hit(query, node.value):
                out |= node.keys
                stack.extend(node.children)
        return out


class SienaPoset(Contender):
    """Filters poset for subscriptions, the same structure over profile covering."""

    name = "siena-poset"

    def __init__(self) -> None:
        super().__init__(
            Poset(Conjunction.covers_filter, _filter_hit),
            Poset(Profile.covers, _profile_hit),
        )


# ---------------------------------------------------------------- R-tree

# libspatialindex computes areas, so its coordinates must stay finite and
# moderate. Bounds are clamped into [-LIMIT, LIMIT] (monotone, so no match is
# lost) and an entry or query that was clamped is tested exactly. An
# unconstrained filter column is [-ANY, ANY]; a profile's missing column is
# the point MISSING, which only an unconstrained column meets.
LIMIT = 1e12
ANY = (-4 * LIMIT, 4 * LIMIT)
MISSING = (-2 * LIMIT, -2 * LIMIT)


class _RTree:
    """One R-tree over boxes of a fixed set of columns."""

    def __init__(self, dims: Dims, box: Callable, fill: tuple[float, float]) -> None:
        from rtree import index

        props = index.Property()
        props.dimension = self.width = max(2, len(dims))
        self.index = index.Index(properties=props)
        self.dims, self.box, self.fill = dims, box, fill
        self.coords: dict[int, tuple[float, ...]] = {}
        self.items: dict[int, Any] = {}
        self.checked: set[int] = set()

    def coordinates(self, bounds: Bounds, fill: tuple[float, float]) -> tuple[tuple, bool]:
        """The box as R-tree coordinates, and whether clamping changed it."""
        if len(self.dims) > self.width:
            raise ValueError("an R-tree has fixed columns: register every attribute first")
        lo, hi = [fill[0]] * self.width, [fill[1]] * self.width
        clamped = False
        for col, (a, b) in bounds.items():
            lo[col], hi[col] = min(max(a, -LIMIT), LIMIT), min(max(b, -LIMIT), LIMIT)
            clamped = clamped or lo[col] != a or hi[col] != b
        return tuple(lo + hi), clamped

    def insert(self, key: int, item: Any) -> None:
        bounds, check = self.box(item)
        coords, clamped = self.coordinates(bounds, self.fill)
        self.index.insert(key, coords)
        self.coords[key], self.items[key] = coords, item
        if check or clamped:
            self.checked.add(key)

    def delete(self, key: int) -> None:
        self.index.delete(key, self.coords.pop(key))
        del self.items[key]
        self.checked.discard(key)

    def candidates(self, bounds: Bounds, fill: tuple[float, float]) -> tuple[list[int], bool]:
        coords, clamped = self.coordinates(bounds, fill)
        return list(self.index.intersection(coords)), clamped


class _RTreeFilters(_RTree):
    def __init__(self, dims: Dims) -> None:
        super().__init__(dims, dims.filter_box, ANY)

    def match(self, profile: Profile) -> set[int]:
        keys, clamped = self.candidates(self.dims.profile_box(profile), MISSING)
        checked, items = self.checked, self.items
        return {k for k in keys if (not clamped and k not in checked) or items[k].overlaps(profile)}


class _RTreeProfiles(_RTree):
    def __init__(self, dims: Dims) -> None:
        super().__init__(dims, lambda p: (dims.profile_box(p), False), MISSING)

    def match(self, conj: Conjunction) -> set[int]:
        bounds, check = self.dims.filter_box(conj)
        keys, clamped = self.candidates(bounds, ANY)
        if check or clamped:
            return {k for k in keys if conj.overlaps(self.items[k])}
        checked, items = self.checked, self.items
        return {k for k in keys if k not in checked or conj.overlaps(items[k])}


class RTree(Contender):
    """R-trees over the same boxes; the columns must be known when it is built."""

    name = "r-tree"

    def __init__(self, dims: Dims) -> None:
        super().__init__(_RTreeFilters(dims), _RTreeProfiles(dims))
