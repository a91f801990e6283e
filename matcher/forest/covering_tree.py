"""A forest ordered by covering (SEMANTICS §7): where each node sits, and the
bounds of its subtree that a descent prunes and accepts with.

A node is one distinct key (a filter, or a profile) with the entries that
share it; every node is covered by its parent and the roots are covered by
no other node (the minimal cover set). The numeric boxes of all nodes live
in (column × node) arrays, children and entries in `ListStore`s, and each
wide child list keeps its children's bounds contiguous (`WideList`), so that
a batch of queries walks the forest in a few vector operations a level
(`descent`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

from matcher.boxes import Dims
from matcher.forest import tuning
from matcher.forest.arrays import Bounds, Ids, Mask
from matcher.forest.box_kernels import nested_with
from matcher.forest.descent import Descent, ExactTest
from matcher.forest.list_store import ListStore, grown, run_positions
from matcher.forest.point_columns import is_point
from matcher.forest.wide_list import WideList

ROOT = 0  # the list id of the root set; node ids start at 1

Box = tuple[dict[int, tuple[float, float]], bool]  # (bounds per column, exact)


class Forest:
    """Nodes keyed by covering-ordered keys; `covers(a, b)` is the exact order.

    Invariants (`check_invariants`): one node per distinct key (`by_key`),
    each holding at least one entry; a node's parent covers it; no root is
    covered by another node. `lo`/`hi` hold each node's box, `exact[node]`
    whether that box is only a necessary condition (a pair then needs the
    exact test). `core_lo`/`core_hi` hold the core of each node's subtree
    (the intersection of its boxes) and `pure[node]` whether no box in it is
    `exact`: exact once `_flush` has run, which every query does first;
    until then a node in `_stale` (and its ancestors) may have a core
    narrower than the true one and `pure` False where it is True, which
    only accepts fewer subtrees untested. `wide_lists[node]` holds the
    bounds of a wide child list in the list's order (from its first read
    with WIDE children or more, until the node is removed or the columns
    grow).
    """

    def __init__(
        self,
        dims: Dims,
        fill: tuple[float, float],
        covers: Callable[[Hashable, Hashable], bool],
        *,
        entry_values: bool = False,
        box_order: bool = False,
        point_order: bool = False,
    ) -> None:
        self.dims = dims
        self.fill = fill
        self.covers = covers
        # Filters: between two nodes whose boxes say everything (not exact),
        # covering is box containment, and `covers` need not be asked. (Not
        # profiles: one without an attribute is not covered by one with it.)
        self.box_order = box_order
        # Profiles (§2): one covers another only if they have the same attributes,
        # so among point boxes (a value or nothing on each column) only an equal
        # box covers, and an equal box is the same profile, the same node: placing
        # a point among a long list of points (the siena workload's root set)
        # needs no scan of the list.
        self.point_order = point_order
        # Column-major: one contiguous row of bounds per column, so a level's
        # candidate pairs are tested column by column with `np.take` (a
        # row-major gather and `all(axis=1)` cost several times more).
        self.lo = np.full((0, 16), fill[0])
        self.hi = np.full((0, 16), fill[1])
        self.exact = np.zeros(16, dtype=bool)
        # Subtree bounds: the core (intersection of the subtree's boxes) and
        # whether no box in the subtree is `exact`.
        self.core_lo = np.full((0, 16), fill[0])
        self.core_hi = np.full((0, 16), fill[1])
        self.pure = np.zeros(16, dtype=bool)
        self.parent = np.zeros(16, dtype=np.int64)
        self.keys: list[Hashable | None] = [None]
        self.by_key: dict[Hashable, int] = {}
        self.free: list[int] = []
        self.children = ListStore()
        self.entries = ListStore(with_values=entry_values)
        # Wide child lists (the root set above all) with their bounds contiguous
        # in the list's own order, kept up to date on every attach and detach,
        # so that scanning them is a brute-force scan.
        self.wide_lists: dict[int, WideList] = {}
        # Whether a descent must tell covering from overlapping for filter
        # nodes (False while no `covers` subscription is held: saves work).
        self.need_covers = True
        # Nodes whose subtree bounds a removal may have changed, brought up to
        # date together before the next query reads them (`_flush`).
        self._stale: set[int] = set()

    def __len__(self) -> int:
        return len(self.by_key)

    # -- structure ----------------------------------------------------------

    def add(self, key: Hashable, box: Callable[[], Box], entry: int, value: int = 0) -> int:
        """Attach an entry (and the value it carries, if the forest keeps
        entry values) to the node of `key`, creating the node if needed;
        returns the node. `box()` gives the key's (bounds, exact), asked only
        for a new node: a popular filter repeated costs no box.

        O(1) for a key already held. A new node descends from the roots into
        the children that cover it, testing each list on the way (through its
        blocks where inserts keep them), adopts the siblings it covers, and
        narrows its ancestors' cores: O(depth × columns × children tested),
        plus one `covers` call per box candidate."""
        node = self.by_key.get(key)
        if node is None:
            node = self._new_node(key, *box())
            self._place(node, ROOT)
        self.entries.add(node, entry, value)
        return node

    def discard(self, entry: int) -> None:
        """Detach an entry; a node left without entries is spliced out: its
        children go to its parent (which covers them), or are placed again
        among the roots. O(1) for a node that keeps entries; a splice costs
        O(columns) a child, and a root's children an `add` each. Subtree
        bounds are brought up to date before the next query (`_flush`)."""
        node = self.entries.remove(entry)
        if not self.entries.count[node]:
            self._remove_node(node)

    def node_of(self, entry: int) -> int:
        """The node an entry is attached to. O(1)."""
        return self.entries.owner_of(entry)

    def settle(self) -> None:
        """Do now the index work that the next query would otherwise start
        with: bring subtree bounds up to date, give every wide child list its
        contiguous bounds and sort those that need it into blocks. The last
        step of a bulk load, so that a load's cost is not paid by its first
        batch of queries, nor hidden from a benchmark's insert rate.
        O(columns × n log n) for the lists it sorts."""
        self.sync_columns()
        self._flush()
        for node in np.flatnonzero(self.children.count >= tuning.WIDE).tolist():
            self.bounds_of_children(node)
            wide = self.wide_lists[node]
            if not wide.indexed_blocks(lambda order, node=node: self.children.reorder(node, order)):
                wide.sorted_points()  # (a list of points without blocks: its sorted columns)

    def roots(self) -> Ids:
        """The root set's nodes (a copy). O(roots)."""
        return self.children.items(ROOT).copy()

    def kids(self, node: int) -> Ids:
        """A node's children (a copy). O(children)."""
        return self.children.items(node).copy()

    def bounds_of_children(self, node: int) -> tuple[Ids, Bounds, Bounds]:
        """A node's children and their bounds, (columns × children): views of
        its wide list's (made on the first read of a list of WIDE children or
        more), else copies. O(1) for a wide list, else O(columns × children)."""
        children = self.children.items(node)
        wide = self.wide_lists.get(node)
        if wide is None:
            if len(children) < tuning.WIDE:
                return children, self.lo.take(children, axis=1), self.hi.take(children, axis=1)
            wide = self.wide_lists[node] = WideList(self.lo[:, children], self.hi[:, children])
        return children, wide.lo[:, : wide.count], wide.hi[:, : wide.count]

    def sync_columns(self) -> None:
        """Give the bound arrays a row for every column of the dims (a new
        attribute adds one, unconstrained in every node). O(1) if none is new."""
        columns = len(self.dims)
        if self.lo.shape[0] < columns:
            self._resize(columns, self.lo.shape[1])
            self.wide_lists.clear()

    def _resize(self, columns: int, capacity: int) -> None:
        """Grow the (column × node) bound arrays, new cells unconstrained."""
        for name, fill in (("lo", 0), ("hi", 1), ("core_lo", 0), ("core_hi", 1)):
            old = getattr(self, name)
            new = np.full((columns, capacity), self.fill[fill])
            new[: old.shape[0], : old.shape[1]] = old
            setattr(self, name, new)

    def _new_node(self, key: Hashable, bounds: dict[int, tuple[float, float]], exact: bool) -> int:
        self.sync_columns()
        if self.free:
            node = self.free.pop()
            self.keys[node] = key
        else:
            node = len(self.keys)
            self.keys.append(key)
            if node >= self.lo.shape[1]:
                capacity = 2 * self.lo.shape[1]
                self._resize(self.lo.shape[0], capacity)
                self.pure = grown(self.pure, capacity, False)
                self.exact = grown(self.exact, capacity, False)
                self.parent = grown(self.parent, capacity, 0)
        self.lo[:, node], self.hi[:, node] = self.fill
        for col, (lo, hi) in bounds.items():
            self.lo[col, node], self.hi[col, node] = lo, hi
        self.exact[node] = exact
        self.core_lo[:, node], self.core_hi[:, node] = self.lo[:, node], self.hi[:, node]
        self.pure[node] = not exact
        self.by_key[key] = node
        self.children.reserve(len(self.keys))
        self.entries.reserve(len(self.keys))
        return node

    def _covering_child(self, parent: int, node: int) -> int | None:
        if not self.children.size(parent):
            return None
        for child in self._related(node, parent, inside=False).tolist():
            if child != node and self._nested_covers(child, node):
                return int(child)
        return None

    def _nested_covers(self, outer: int, inner: int) -> bool:
        """Does node `outer` cover node `inner`, whose box lies inside its box?"""
        if self.box_order and not (self.exact[outer] or self.exact[inner]):
            return True
        return self.covers(self.keys[outer], self.keys[inner])

    def _attach(self, parent: int, child: int) -> None:
        self.children.add(parent, child)
        self.parent[child] = parent
        wide = self.wide_lists.get(parent)
        if wide is not None:
            wide.append(self.lo[:, child], self.hi[:, child])
            wide.sort_tail_into_runs(lambda order, at: self.children.reorder(parent, order, at))

    def _detach(self, child: int) -> int:
        parent = self.children.owner_of(child)
        wide = self.wide_lists.get(parent)
        if wide is not None:
            index = self.children.index_of(child)
            # The last child fills the hole: first make it the one of the
            # unsorted tail that widens the hole's block least.
            refill = wide.best_refill(index)
            if refill is not None:
                self.children.swap(parent, refill, wide.count - 1)
                wide.swap(refill, wide.count - 1)
        self.children.remove(child)
        if wide is not None:
            wide.swap_remove(index)
        return parent

    def _related(self, node: int, parent: int, *, inside: bool) -> Ids:
        """The children of `parent` that may cover the node (or with `inside`,
        that it may cover): those whose boxes contain its box (lie inside it;
        a necessary condition of covering, tested before the exact `covers`),
        or none among points with `point_order`."""
        children, lo, hi = self.bounds_of_children(parent)
        box_lo, box_hi = self.lo[:, node], self.hi[:, node]
        wide = self.wide_lists.get(parent)
        if wide is None:
            return children[nested_with(lo, hi, box_lo, box_hi, inside=inside)]
        if self.point_order and not wide.non_points and is_point(box_lo, box_hi):
            return children[:0]
        return children[wide.nested_with(box_lo, box_hi, inside=inside)]

    def _place(self, node: int, start: int) -> None:
        """Descend from `start` into a node that covers this one until none
        does, attach there, and adopt the siblings this node covers."""
        at = start
        while (deeper := self._covering_child(at, node)) is not None:
            at = deeper
        if self.children.size(at):
            for sibling in self._related(node, at, inside=True).tolist():
                if sibling != node and self._nested_covers(node, sibling):
                    self._detach(sibling)
                    self._attach(node, sibling)
        self._attach(at, node)
        self._tighten(node)

    def _remove_node(self, node: int) -> None:
        """Splice the node out: its children go to its parent (which covers
        them); at the root level they are placed again among the roots. The
        parent's subtree bounds are brought up to date before the next query
        (`_flush`)."""
        parent = self._detach(node)
        self._stale.discard(node)
        orphans = self.children.items(node).tolist() if self.children.count[node] else []
        for child in orphans:
            self._detach(child)
        self.children.release(node)
        self.wide_lists.pop(node, None)
        self.entries.release(node)
        del self.by_key[self.keys[node]]
        self.keys[node] = None
        self.free.append(node)
        for child in orphans:
            if parent == ROOT:
                self._place(child, ROOT)
            else:
                self._attach(parent, child)
        if parent != ROOT:
            self._stale.add(parent)

    def _tighten(self, node: int) -> None:
        """Subtree bounds after the node was placed: its own from the
        children it adopted, and each ancestor's subtree gained one box
        (its core can only shrink, its purity only fail), up to the
        first ancestor that does not change."""
        children = self.children.items(node)
        lo, hi = self.core_lo[:, node], self.core_hi[:, node]  # (its box, set when made)
        if len(children):
            np.maximum(lo, self.core_lo[:, children].max(axis=1), out=lo)
            np.minimum(hi, self.core_hi[:, children].min(axis=1), out=hi)
            self.pure[node] = self.pure[node] and bool(self.pure[children].all())
        pure = bool(self.pure[node])
        at = int(self.parent[node])
        while at != ROOT:
            at_lo, at_hi = self.core_lo[:, at], self.core_hi[:, at]
            was = bool(self.pure[at])
            if (at_lo >= lo).all() and (at_hi <= hi).all() and (pure or not was):
                return
            np.maximum(at_lo, lo, out=at_lo)
            np.minimum(at_hi, hi, out=at_hi)
            self.pure[at] = was and pure
            at = int(self.parent[at])

    def _flush(self) -> None:
        """Recompute the subtree bounds of the nodes that removals left stale, and of
        their ancestors as far up as they change: deepest first, each node once, a
        level's nodes together. Until then a stale core is only narrower than the
        true one (a subtree lost boxes) and a stale purity only False where it may
        now be True, so queries that read them are still right, merely accepting
        fewer subtrees untested; `descend` flushes first all the same. Deferred so
        that a batch of removals (a micro-batch's expiries) pays one pass, not a
        walk up the tree each."""
        if not self._stale:
            return
        nodes = np.fromiter(self._stale, dtype=np.int64, count=len(self._stale))
        self._stale = set()
        depths, at = np.zeros(len(nodes), dtype=np.int64), nodes
        while (below := at != ROOT).any():  # (the root set's parent is ROOT: at = 0 stays)
            depths += below
            at = self.parent[at]
        levels: dict[int, set[int]] = {}
        for node, depth in zip(nodes.tolist(), depths.tolist(), strict=True):
            levels.setdefault(depth, set()).add(node)
        for depth in range(max(levels), 0, -1):
            level = levels.pop(depth, None)
            if level:
                changed = self._recompute(np.fromiter(level, dtype=np.int64, count=len(level)))
                above = self.parent[changed]
                levels.setdefault(depth - 1, set()).update(above[above != ROOT].tolist())

    def _recompute(self, nodes: Ids) -> Ids:
        """The subtree bounds of `nodes` from their own boxes and their children's
        bounds; the nodes whose bounds changed."""
        counts = self.children.count[nodes]
        lo, hi = self.lo[:, nodes], self.hi[:, nodes]
        pure = ~self.exact[nodes]
        has = counts > 0
        if has.any():
            n = counts[has]
            children = self.children.elements[run_positions(self.children.start[nodes[has]], n)]
            at = np.cumsum(n) - n
            core_lo = np.maximum.reduceat(self.core_lo[:, children], at, 1)
            core_hi = np.minimum.reduceat(self.core_hi[:, children], at, 1)
            lo[:, has] = np.maximum(lo[:, has], core_lo)
            hi[:, has] = np.minimum(hi[:, has], core_hi)
            pure[has] &= np.logical_and.reduceat(self.pure[children], at)
        changed = (pure != self.pure[nodes]) | (lo != self.core_lo[:, nodes]).any(axis=0)
        changed |= (hi != self.core_hi[:, nodes]).any(axis=0)
        self.core_lo[:, nodes], self.core_hi[:, nodes], self.pure[nodes] = lo, hi, pure
        return nodes[changed]

    # -- queries ------------------------------------------------------------

    def descend(
        self,
        query_lo: Bounds,
        query_hi: Bounds,
        query_exact: Mask,
        exact_test: ExactTest,
        *,
        queries_are_filters: bool,
    ) -> tuple[Ids, Ids, Mask]:
        """Every (query, node) pair that overlaps, with whether it also covers:
        arrays (query index, node id, covers). The query boxes are column-major
        like the nodes': (columns × queries); `query_exact` says which need the
        exact test, `exact_test(query, node)` gives its (overlaps, covers).

        A node that does not overlap a query prunes its subtree (nothing below
        it can). When the queries are filters (against profile nodes), a node
        the query covers accepts its whole subtree untested; when they are
        profiles, so does a subtree of boxes that need no exact test whose core
        the query meets. Cost: see `Descent.pairs`, after the pending `_flush`.
        """
        self.sync_columns()
        self._flush()
        descent = Descent(self, query_lo, query_hi, queries_are_filters=queries_are_filters)
        return descent.pairs(ROOT, query_exact, exact_test)

    # -- checks -------------------------------------------------------------

    def _subtree(self, node: int) -> list[int]:
        out, todo = [], [node]
        while todo:
            at = todo.pop()
            out.append(at)
            todo.extend(self.children.items(at).tolist())
        return out

    def check_invariants(self) -> None:
        """Assert the invariants, pending subtree bounds and block widenings
        brought up to date first. O(n²) `covers` calls: for tests."""
        self._flush()
        roots = set(self.roots().tolist())
        for node, key in enumerate(self.keys):
            if key is None:
                continue
            parent = self.children.owner_of(node)
            assert parent >= 0, f"node {node} is detached"
            if parent != ROOT:
                assert self.covers(self.keys[parent], key), f"{parent} does not cover {node}"
            assert self.entries.size(node) > 0, f"node {node} has no entries"
            below = self._subtree(node)
            core_lo = self.lo[:, below].max(axis=1)
            core_hi = self.hi[:, below].min(axis=1)
            assert (core_lo == self.core_lo[:, node]).all(), f"core of {node} is stale"
            assert (core_hi == self.core_hi[:, node]).all(), f"core of {node} is stale"
            assert self.pure[node] == (not self.exact[below].any()), f"purity of {node}"
        for root in roots:
            for other, key in enumerate(self.keys):
                if key is not None and other != root:
                    assert not self.covers(key, self.keys[root]), (
                        f"root {root} is covered by {other}"
                    )
        for node, wide in self.wide_lists.items():
            wide.check(f"the wide list of node {node}")
