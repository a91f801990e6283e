"""A forest ordered by covering, matched a whole batch of queries at a time.

A node is one distinct key (a filter, or a profile box) with the entries that
share it; every node is covered by its parent and the roots are covered by
no other node (the minimal cover set). Numeric boxes of all nodes live in
two (column × node) arrays, and children and entries in `BlockStore`s, so a
descent tests every (query, node) candidate pair of a level in one vector
operation and expands the survivors to their children in a few more.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

from matcher.blocks import BlockStore, _grow
from matcher.boxes import Dims

ROOT = 0  # the list id of the root set; node ids start at 1

ExactTest = Callable[[int, int], tuple[bool, bool]]


class Forest:
    """Nodes keyed by covering-ordered keys; `covers(a, b)` is the exact order."""

    def __init__(self, dims: Dims, fill: tuple[float, float], covers: Callable) -> None:
        self.dims = dims
        self.fill = fill
        self.covers = covers
        # Column-major: one contiguous row of bounds per column, so a level's
        # candidate pairs are tested column by column with `np.take` (a
        # row-major gather and `all(axis=1)` cost several times more).
        self.lo = np.full((0, 16), fill[0])
        self.hi = np.full((0, 16), fill[1])
        self.exact = np.zeros(16, dtype=bool)
        self.parent = np.zeros(16, dtype=np.int64)
        self.keys: list[Hashable | None] = [None]
        self.by_key: dict[Hashable, int] = {}
        self.free: list[int] = []
        self.children = BlockStore()
        self.entries = BlockStore()

    def __len__(self) -> int:
        return len(self.by_key)

    # -- structure ----------------------------------------------------------

    def add(self, key: Hashable, bounds: dict, exact: bool, entry: int) -> int:
        """Attach an entry to the node of `key`, creating the node if needed."""
        node = self.by_key.get(key)
        if node is None:
            node = self._new_node(key, bounds, exact)
            self._place(node, ROOT)
        self.entries.add(node, entry)
        return node

    def discard(self, entry: int) -> None:
        """Detach an entry; a node left without entries is spliced out."""
        node = self.entries.remove(entry)
        if self.entries.size(node) == 0:
            self._remove_node(node)

    def node_of(self, entry: int) -> int:
        return self.entries.owner_of(entry)

    def roots(self) -> np.ndarray:
        return self.children.items(ROOT).copy()

    def kids(self, node: int) -> np.ndarray:
        return self.children.items(node).copy()

    def _sync_columns(self) -> None:
        d = len(self.dims)
        if self.lo.shape[0] < d:
            extra = d - self.lo.shape[0]
            cap = self.lo.shape[1]
            self.lo = np.vstack([self.lo, np.full((extra, cap), self.fill[0])])
            self.hi = np.vstack([self.hi, np.full((extra, cap), self.fill[1])])

    def _new_node(self, key: Hashable, bounds: dict, exact: bool) -> int:
        self._sync_columns()
        if self.free:
            node = self.free.pop()
            self.keys[node] = key
        else:
            node = len(self.keys)
            self.keys.append(key)
            if node >= self.lo.shape[1]:
                cap = 2 * self.lo.shape[1]
                grow = cap - self.lo.shape[1]
                self.lo = np.hstack([self.lo, np.full((self.lo.shape[0], grow), self.fill[0])])
                self.hi = np.hstack([self.hi, np.full((self.hi.shape[0], grow), self.fill[1])])
                self.exact = _grow(self.exact, cap, False)
                self.parent = _grow(self.parent, cap, 0)
        self.lo[:, node], self.hi[:, node] = self.fill
        for col, (a, b) in bounds.items():
            self.lo[col, node], self.hi[col, node] = a, b
        self.exact[node] = exact
        self.by_key[key] = node
        self.children.reserve(len(self.keys))
        self.entries.reserve(len(self.keys))
        return node

    def _covering_child(self, parent: int, node: int) -> int | None:
        kids = self.children.items(parent)
        if not len(kids):
            return None
        inside = self._contains(kids, node)
        key = self.keys[node]
        for kid in kids[inside]:
            if kid != node and self.covers(self.keys[kid], key):
                return int(kid)
        return None

    def _contains(self, outer: np.ndarray, node: int) -> np.ndarray:
        """Which of the `outer` boxes contain the node's box (a necessary
        condition of covering, tested before the exact `covers`)."""
        lo, hi = self.lo, self.hi
        return np.all((lo[:, outer] <= lo[:, node, None]) & (hi[:, node, None] <= hi[:, outer]), 0)

    def _contained(self, inner: np.ndarray, node: int) -> np.ndarray:
        """Which of the `inner` boxes lie inside the node's box."""
        lo, hi = self.lo, self.hi
        return np.all((lo[:, node, None] <= lo[:, inner]) & (hi[:, inner] <= hi[:, node, None]), 0)

    def _place(self, node: int, start: int) -> None:
        """Descend from `start` into a node that covers this one until none
        does, attach there, and adopt the siblings this node covers."""
        at = start
        while (deeper := self._covering_child(at, node)) is not None:
            at = deeper
        siblings = self.children.items(at)
        if len(siblings):
            key = self.keys[node]
            for sib in siblings[self._contained(siblings, node)].tolist():
                if sib != node and self.covers(key, self.keys[sib]):
                    self.children.remove(sib)
                    self.children.add(node, sib)
                    self.parent[sib] = node
        self.children.add(at, node)
        self.parent[node] = at

    def _remove_node(self, node: int) -> None:
        """Splice the node out: its children go to its parent (which covers
        them); at the root level they are placed again among the roots."""
        parent = self.children.remove(node)
        orphans = self.children.items(node).copy()
        for kid in orphans.tolist():
            self.children.remove(kid)
        self.children.release(node)
        self.entries.release(node)
        del self.by_key[self.keys[node]]
        self.keys[node] = None
        self.free.append(node)
        for kid in orphans.tolist():
            if parent == ROOT:
                self._place(kid, ROOT)
            else:
                self.children.add(parent, kid)
                self.parent[kid] = parent

    # -- queries ------------------------------------------------------------

    def descend(
        self,
        q_lo: np.ndarray,
        q_hi: np.ndarray,
        q_exact: np.ndarray,
        exact_test: ExactTest,
        queries_are_filters: bool,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every (query, node) pair that overlaps, with whether it also covers.

        A node that does not overlap a query prunes its subtree (nothing
        below it can). When the queries are filters (against profile nodes),
        a node the query covers accepts its whole subtree without tests.
        Returns arrays (query index, node id, covers). The query boxes are
        column-major like the nodes': shape (columns, queries).
        """
        self._sync_columns()
        qi, ni, cov = self._test_roots(q_lo, q_hi, queries_are_filters)
        ov = np.ones(len(qi), dtype=bool)
        accepted = np.zeros(len(qi), dtype=bool)
        out_q, out_n, out_c = [], [], []
        while len(qi):
            for j in np.flatnonzero(ov & ~accepted & (q_exact[qi] | self.exact[ni])).tolist():
                ov[j], cov[j] = exact_test(int(qi[j]), int(ni[j]))
            qi, ni, cov = qi[ov], ni[ov], cov[ov]
            out_q.append(qi)
            out_n.append(ni)
            out_c.append(cov)
            which, kids = self.children.gather(ni)
            qi, ni = qi[which], kids
            accepted = cov[which] if queries_are_filters else np.zeros(len(qi), dtype=bool)
            ov, cov = self._test_pairs(q_lo, q_hi, qi, ni, queries_are_filters)
            ov |= accepted
            cov = (cov & ov) | accepted
        if not out_q:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0, dtype=bool)
        return np.concatenate(out_q), np.concatenate(out_n), np.concatenate(out_c)

    def _test_roots(self, q_lo, q_hi, queries_are_filters):
        """Every query against every root by broadcasting (no gathers): the
        root set is the widest level. Returns the overlapping pairs."""
        roots = self.children.items(ROOT)
        shape = (q_lo.shape[1], len(roots))
        ov, cov = np.ones(shape, dtype=bool), np.ones(shape, dtype=bool)
        for col in range(q_lo.shape[0]):
            lo, hi = np.take(self.lo[col], roots)[None, :], np.take(self.hi[col], roots)[None, :]
            _compare(q_lo[col][:, None], q_hi[col][:, None], lo, hi, ov, cov, queries_are_filters)
        qi, k = np.nonzero(ov)
        return qi, roots[k], cov[qi, k]

    def _test_pairs(self, q_lo, q_hi, qi, ni, queries_are_filters):
        """Overlap and containment of each (query, node) pair, column by column."""
        ov = np.ones(len(qi), dtype=bool)
        cov = np.ones(len(qi), dtype=bool)
        for col in range(q_lo.shape[0]):
            lo, hi = np.take(self.lo[col], ni), np.take(self.hi[col], ni)
            qlo, qhi = np.take(q_lo[col], qi), np.take(q_hi[col], qi)
            _compare(qlo, qhi, lo, hi, ov, cov, queries_are_filters)
        return ov, cov

    # -- checks -------------------------------------------------------------

    def check_invariants(self) -> None:
        """Parent covers child; no root is covered by another node. For tests."""
        roots = set(self.roots().tolist())
        for node, key in enumerate(self.keys):
            if key is None:
                continue
            parent = self.children.owner_of(node)
            assert parent >= 0, f"node {node} is detached"
            if parent != ROOT:
                assert self.covers(self.keys[parent], key), f"{parent} does not cover {node}"
            assert self.entries.size(node) > 0, f"node {node} has no entries"
        for r in roots:
            for other, key in enumerate(self.keys):
                if key is not None and other != r:
                    assert not self.covers(key, self.keys[r]), f"root {r} is covered by {other}"


def _compare(qlo, qhi, lo, hi, ov, cov, queries_are_filters: bool) -> None:
    """AND one column's overlap and containment into `ov` and `cov` (in place).

    Containment runs the way covering prunes: a filter query contains a
    profile node; a filter node contains a profile query.
    """
    ov &= qlo <= hi
    ov &= lo <= qhi
    if queries_are_filters:
        cov &= qlo <= lo
        cov &= hi <= qhi
    else:
        cov &= lo <= qlo
        cov &= qhi <= hi
