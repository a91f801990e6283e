"""A forest ordered by covering, matched a whole batch of queries at a time.

A node is one distinct key (a filter, or a profile box) with the entries that
share it; every node is covered by its parent and the roots are covered by
no other node (the minimal cover set). Numeric boxes of all nodes live in
two (column × node) arrays, and children and entries in `BlockStore`s, so a
descent tests every (query, node) candidate pair of a level in one vector
operation and expands the survivors to their children in a few more.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator

import numpy as np

from matcher.blocks import BlockStore, _grow, run_positions
from matcher.boxes import Dims

ROOT = 0  # the list id of the root set; node ids start at 1
WIDE = 32  # a child list this long is tested by broadcasting
BROADCAST_CELLS = 4096  # ... if its (query × child) matrix has this many cells
CHUNK = 1 << 18  # (query × child) matrix cells tested at once
BLOCKED = 4096  # a child list this long is also indexed by sorted blocks
BLOCK = 512  # children per block
SPARSE = 32  # a (query × box) matrix under 1/32 true: the rest is tested pair by pair
# (a pair costs 4 gathers a column, about what 20-30 cells of a matrix cost)
POINT_SHARE = 8  # a filter whose narrowest column range holds under 1/8 of a point list's
# boxes tests only those (`_Points`), not the whole list
FEW = 4096  # boxes tested in one matrix op; more, column by column on the survivors
# ... but boxes gathered by position (a wide list's candidate blocks) are tested
# column by column from this many: only the survivors of a column are gathered for
# the next, not every column of every candidate (uniform 200k: inserts 4.8k/s -> 7.3k/s)
FEW_GATHERED = 256
SETTLED = 16384  # a child list this long is kept in blocks by inserts too
RUN = 8  # blocks: an insert sorts the unsorted tail into a run of blocks this long
RATIO = 4  # a run is merged into the one before it once that is under RATIO times as long
SCAN_SHARE = 2  # blocks are scanned one by one only if queries meet under 1/2 of them
FINITE_SHARE = 0.9  # blocks sort on the columns finite on this share of boxes
MAX_FINITE = 1e300  # bounds beyond this are the open ends of a box
BUFFER, MIN_BUFFER = 8192, 256  # numpy's ufunc buffer size: its default, and `_Rows`' least

ExactTest = Callable[[int, int], tuple[bool, bool]]


class _Rows:
    """A context in which numpy broadcasts a column against rows of `n` at full speed.

    numpy 2.4 compares a (q, 1) array with an (n,) one about 5 times slower when
    its ufunc buffer (8192 elements by default) spans more than two rows: 0.5 ns a
    cell instead of 0.1 at n = 512 (`docs/DESIGN.md`, "Short rows"). A buffer of
    the largest power of two not over `n` keeps the fast loop; setting it and
    back costs 1.4 µs, once per matrix test (`_meet_cells`)."""

    __slots__ = ("size", "previous")

    def __init__(self, n: int) -> None:
        self.size = min(BUFFER, max(MIN_BUFFER, 1 << (n.bit_length() - 1)))

    def __enter__(self) -> None:
        self.previous = np.setbufsize(self.size)

    def __exit__(self, *exc: object) -> None:
        np.setbufsize(self.previous)


class Forest:
    """Nodes keyed by covering-ordered keys; `covers(a, b)` is the exact order."""

    def __init__(
        self,
        dims: Dims,
        fill: tuple[float, float],
        covers: Callable,
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
        # whether every box in the subtree is exact.
        self.core_lo = np.full((0, 16), fill[0])
        self.core_hi = np.full((0, 16), fill[1])
        self.pure = np.zeros(16, dtype=bool)
        self.parent = np.zeros(16, dtype=np.int64)
        self.keys: list[Hashable | None] = [None]
        self.by_key: dict[Hashable, int] = {}
        self.free: list[int] = []
        self.children = BlockStore()
        self.entries = BlockStore(entry_values)
        # Long child lists (the root set above all) mirrored as contiguous
        # (columns × children) bounds in the list's own order, kept up to date
        # on every attach and detach, so scanning them is a brute-force scan.
        self._wide: dict[int, _Mirror] = {}
        # Whether a descent must tell covering from overlapping for filter
        # nodes (False while no `covers` subscription is held: saves work).
        self.need_covers = True
        # During a descent of filter queries: which columns each constrains.
        self._plan: tuple[np.ndarray, np.ndarray] | None = None
        # Nodes whose subtree bounds a removal may have widened, brought up to
        # date together before the next query reads them (`_flush`).
        self._stale: set[int] = set()

    def __len__(self) -> int:
        return len(self.by_key)

    # -- structure ----------------------------------------------------------

    def add(
        self, key: Hashable, box: Callable[[], tuple[dict, bool]], entry: int, value: int = 0
    ) -> int:
        """Attach an entry (and the value it carries, if the forest keeps
        entry values) to the node of `key`, creating the node if needed.
        `box()` gives the key's (bounds, exact), asked only for a new node:
        a popular filter repeated costs no box."""
        node = self.by_key.get(key)
        if node is None:
            node = self._new_node(key, *box())
            self._place(node, ROOT)
        self.entries.add(node, entry, value)
        return node

    def discard(self, entry: int) -> None:
        """Detach an entry; a node left without entries is spliced out."""
        node = self.entries.remove(entry)
        if not self.entries.count[node]:
            self._remove_node(node)

    def node_of(self, entry: int) -> int:
        return self.entries.owner_of(entry)

    def settle(self) -> None:
        """Do now the index work that the next query would otherwise start
        with: mirror every long child list and sort those that need it into
        blocks. The last step of a bulk load, so that a load's cost is not
        paid by its first batch of queries (1.7x the time of the next one
        for 1000 filters against 100k nested profiles), nor hidden from a
        benchmark's insert rate."""
        self._sync_columns()
        self._flush()
        for node in np.flatnonzero(self.children.count >= WIDE).tolist():
            self._bounds_of_kids(node)
            mirror = self._wide[node]
            if not mirror.blocks(lambda order, node=node: self.children.reorder(node, order)):
                mirror.points()  # (a list of points without blocks: its sorted columns)

    def roots(self) -> np.ndarray:
        return self.children.items(ROOT).copy()

    def kids(self, node: int) -> np.ndarray:
        return self.children.items(node).copy()

    def _sync_columns(self) -> None:
        d = len(self.dims)
        if self.lo.shape[0] < d:
            self._resize(d, self.lo.shape[1])
            self._wide.clear()

    def _resize(self, columns: int, cap: int) -> None:
        """Grow the (column × node) bound arrays, new cells unconstrained."""
        for name, fill in (("lo", 0), ("hi", 1), ("core_lo", 0), ("core_hi", 1)):
            old = getattr(self, name)
            new = np.full((columns, cap), self.fill[fill])
            new[: old.shape[0], : old.shape[1]] = old
            setattr(self, name, new)

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
                self._resize(self.lo.shape[0], cap)
                self.pure = _grow(self.pure, cap, False)
                self.exact = _grow(self.exact, cap, False)
                self.parent = _grow(self.parent, cap, 0)
        self.lo[:, node], self.hi[:, node] = self.fill
        for col, (a, b) in bounds.items():
            self.lo[col, node], self.hi[col, node] = a, b
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
        for kid in self._contains(node, parent).tolist():
            if kid != node and self._nested_covers(kid, node):
                return int(kid)
        return None

    def _nested_covers(self, outer: int, inner: int) -> bool:
        """Does node `outer` cover node `inner`, whose box lies inside its box?"""
        if self.box_order and not (self.exact[outer] or self.exact[inner]):
            return True
        return self.covers(self.keys[outer], self.keys[inner])

    def _attach(self, parent: int, kid: int) -> None:
        self.children.add(parent, kid)
        self.parent[kid] = parent
        mirror = self._wide.get(parent)
        if mirror is not None:
            mirror.append(self.lo[:, kid], self.hi[:, kid])
            mirror.settle(lambda order, at: self.children.reorder(parent, order, at))

    def _detach(self, kid: int) -> int:
        parent = self.children.owner_of(kid)
        mirror = self._wide.get(parent)
        if mirror is not None:
            index = self.children.index_of(kid)
            # The last child fills the hole: first make it the one of the
            # unsorted tail that widens the hole's block least.
            fit = mirror.fitting(index)
            if fit is not None:
                self.children.swap(parent, fit, mirror.n - 1)
                mirror.swap(fit, mirror.n - 1)
        self.children.remove(kid)
        if mirror is not None:
            mirror.swap_remove(index)
        return parent

    def _bounds_of_kids(self, node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A node's children and their bounds, (columns × children)."""
        kids = self.children.items(node)
        mirror = self._wide.get(node)
        if mirror is None:
            if len(kids) < WIDE:
                return kids, self.lo.take(kids, axis=1), self.hi.take(kids, axis=1)
            mirror = self._wide[node] = _Mirror(self.lo[:, kids], self.hi[:, kids])
        return kids, mirror.lo[:, : mirror.n], mirror.hi[:, : mirror.n]

    def _contains(self, node: int, parent: int) -> np.ndarray:
        """Which children of `parent` have a box containing the node's (a
        necessary condition of covering, tested before the exact `covers`)."""
        return self._related(node, parent, False)

    def _contained(self, node: int, parent: int) -> np.ndarray:
        """Which children of `parent` have a box inside the node's."""
        return self._related(node, parent, True)

    def _related(self, node: int, parent: int, inside: bool) -> np.ndarray:
        """The children of `parent` that may cover the node (or that it may
        cover): those whose boxes contain it (lie inside it), or none among
        points with `point_order`."""
        kids, lo, hi = self._bounds_of_kids(parent)
        a, b = self.lo[:, node], self.hi[:, node]
        mirror = self._wide.get(parent)
        if self.point_order and mirror is not None and not mirror.spread and _is_point(a, b):
            return kids[:0]
        if mirror is None or mirror.n < SETTLED or not mirror.nblocks:
            return kids[_around(lo, hi, a, b, inside)]
        cut = mirror.nblocks * mirror.block
        found = _around(lo[:, cut:], hi[:, cut:], a, b, inside) + cut  # the tail
        pos = mirror.candidates(a, b, inside)
        if len(pos) * SCAN_SHARE > cut:  # the blocks hardly prune: scan them whole
            pos = None
            lo, hi = lo[:, :cut], hi[:, :cut]
        return kids[np.concatenate([_around(lo, hi, a, b, inside, pos), found])]

    def _place(self, node: int, start: int) -> None:
        """Descend from `start` into a node that covers this one until none
        does, attach there, and adopt the siblings this node covers."""
        at = start
        while (deeper := self._covering_child(at, node)) is not None:
            at = deeper
        if self.children.size(at):
            for sib in self._contained(node, at).tolist():
                if sib != node and self._nested_covers(node, sib):
                    self._detach(sib)
                    self._attach(node, sib)
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
        for kid in orphans:
            self._detach(kid)
        self.children.release(node)
        self._wide.pop(node, None)
        self.entries.release(node)
        del self.by_key[self.keys[node]]
        self.keys[node] = None
        self.free.append(node)
        for kid in orphans:
            if parent == ROOT:
                self._place(kid, ROOT)
            else:
                self._attach(parent, kid)
        if parent != ROOT:
            self._stale.add(parent)

    def _tighten(self, node: int) -> None:
        """Subtree bounds after the node was placed: its own from the
        children it adopted, and each ancestor's subtree gained one box
        (its core can only shrink, its purity only fail), up to the
        first ancestor that does not change."""
        kids = self.children.items(node)
        lo, hi = self.core_lo[:, node], self.core_hi[:, node]  # (its box, set when made)
        if len(kids):
            np.maximum(lo, self.core_lo[:, kids].max(axis=1), out=lo)
            np.minimum(hi, self.core_hi[:, kids].min(axis=1), out=hi)
            self.pure[node] = self.pure[node] and bool(self.pure[kids].all())
        pure = bool(self.pure[node])
        at = int(self.parent[node])
        while at != ROOT:
            a_lo, a_hi = self.core_lo[:, at], self.core_hi[:, at]
            was = bool(self.pure[at])
            if (a_lo >= lo).all() and (a_hi <= hi).all() and (pure or not was):
                return
            np.maximum(a_lo, lo, out=a_lo)
            np.minimum(a_hi, hi, out=a_hi)
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
        walk up the tree each (siena 10k: 458 walks in 1,000 deletes, up to 44
        levels deep, about half their time)."""
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
            nodes = levels.pop(depth, None)
            if nodes:
                changed = self._recompute(np.fromiter(nodes, dtype=np.int64, count=len(nodes)))
                above = self.parent[changed]
                levels.setdefault(depth - 1, set()).update(above[above != ROOT].tolist())

    def _recompute(self, nodes: np.ndarray) -> np.ndarray:
        """The subtree bounds of `nodes` from their own boxes and their children's
        bounds; the nodes whose bounds changed."""
        counts = self.children.count[nodes]
        lo, hi = self.lo[:, nodes], self.hi[:, nodes]
        pure = ~self.exact[nodes]
        has = counts > 0
        if has.any():
            n = counts[has]
            kids = self.children.data[run_positions(self.children.start[nodes[has]], n)]
            at = np.cumsum(n) - n
            lo[:, has] = np.maximum(lo[:, has], np.maximum.reduceat(self.core_lo[:, kids], at, 1))
            hi[:, has] = np.minimum(hi[:, has], np.minimum.reduceat(self.core_hi[:, kids], at, 1))
            pure[has] &= np.logical_and.reduceat(self.pure[kids], at)
        changed = (pure != self.pure[nodes]) | (lo != self.core_lo[:, nodes]).any(axis=0)
        changed |= (hi != self.core_hi[:, nodes]).any(axis=0)
        self.core_lo[:, nodes], self.core_hi[:, nodes], self.pure[nodes] = lo, hi, pure
        return nodes[changed]

    # -- queries ------------------------------------------------------------

    def descend(
        self,
        q_lo: np.ndarray,
        q_hi: np.ndarray,
        q_exact: np.ndarray,
        exact_test: ExactTest,
        qaf: bool,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every (query, node) pair that overlaps, with whether it also covers.

        A node that does not overlap a query prunes its subtree (nothing
        below it can). When the queries are filters (`qaf`: against profile
        nodes), a node the query covers accepts its whole subtree untested.
        Returns arrays (query index, node id, covers). The query boxes are
        column-major like the nodes': shape (columns, queries).
        """
        self._sync_columns()
        self._flush()
        n_q = q_lo.shape[1]
        qs = np.arange(n_q)
        self._plan = _column_plan(q_lo, q_hi) if qaf else None
        qi, ni, cov, acc = self._broadcast(ROOT, qs, np.zeros(n_q, dtype=bool), q_lo, q_hi, qaf)
        out_q, out_n, out_c = [], [], []
        # Which side may need exact tests, decided once: most batches have
        # none, and the pairs are then never scanned for them.
        q_any, n_any = bool(q_exact.any()), bool(self.exact.any())
        while len(qi):
            if q_any or n_any:
                need = q_exact[qi] if q_any else self.exact[ni]
                if q_any and n_any:
                    need |= self.exact[ni]
                tests = np.flatnonzero(~acc & need)
                if len(tests):
                    ok = np.ones(len(qi), dtype=bool)
                    for j in tests.tolist():
                        ok[j], cov[j] = exact_test(int(qi[j]), int(ni[j]))
                    qi, ni, cov, acc = qi[ok], ni[ok], cov[ok], acc[ok]
            out_q.append(qi)
            out_n.append(ni)
            out_c.append(cov)
            inherit = cov if qaf else acc
            qi, ni, cov, acc = self._expand(qi, ni, inherit, q_lo, q_hi, qaf)
        if not out_q:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0, dtype=bool)
        return np.concatenate(out_q), np.concatenate(out_n), np.concatenate(out_c)

    def _expand(self, qi, ni, inherit, q_lo, q_hi, qaf):
        """The next level: every child of the matched pairs, tested. A long
        child list is tested against all its queries at once by broadcasting
        (no gathers); short ones are gathered pair by pair."""
        count = np.take(self.children.count, ni)
        parents = count > 0
        if not parents.all():  # most matched nodes are leaves: drop them first
            qi, ni, inherit, count = qi[parents], ni[parents], inherit[parents], count[parents]
        if qaf and not self.need_covers:  # a query containing a node takes its subtree
            inherit = inherit | self._inside(q_lo, q_hi, qi, ni, ~inherit, True)
        elif not qaf:  # (a leaf has no subtree to accept: tested after the drop)
            inherit = inherit | self._core_hits(q_lo, q_hi, qi, ni, inherit)
        wide = count >= WIDE
        if not qaf and wide.any():
            # Broadcast only a matrix big enough to pay for its calls; the
            # many long lists that few profiles reach are cheaper pair by pair.
            nodes, which, queries = np.unique(ni[wide], return_inverse=True, return_counts=True)
            wide[wide] = (queries * self.children.count[nodes] >= BROADCAST_CELLS)[which]
        parts = [self._gathered(qi[~wide], ni[~wide], inherit[~wide], q_lo, q_hi, qaf)]
        if wide.any():
            wq, wn, wa = qi[wide], ni[wide], inherit[wide]
            order = np.argsort(wn, kind="stable")
            wq, wn, wa = wq[order], wn[order], wa[order]
            nodes, starts = np.unique(wn, return_index=True)
            ends = np.append(starts[1:], len(wn))
            for node, s, e in zip(nodes.tolist(), starts.tolist(), ends.tolist(), strict=True):
                parts.append(self._broadcast(node, wq[s:e], wa[s:e], q_lo, q_hi, qaf))
        return tuple(np.concatenate(arrays) for arrays in zip(*parts, strict=True))

    def _broadcast(self, node, qs, inherit, q_lo, q_hi, qaf):
        """One node's children against some queries, as (query × child)
        matrices: for the root set this is the brute-force scan, column by
        column over contiguous bounds, except that a very long list is kept
        in tiled blocks, and a block whose bounding box a query misses is
        not scanned for it."""
        kids, lo, hi = self._bounds_of_kids(node)
        mirror = self._wide.get(node)
        blocks = mirror.blocks(lambda order: self.children.reorder(node, order)) if mirror else 0
        if blocks:
            # the reorder moved the kids; the bound views follow the mirror
            kids = self.children.items(node)
        inherited = bool(inherit.any())
        rows, cols = [], []
        if blocks:
            b_q, b_k = _hits(
                mirror.blo[:, :blocks], mirror.bhi[:, :blocks], qs, q_lo, q_hi, self._plan
            )
            if inherited:  # accepted queries take every block
                b_q, b_k = _with_all(b_q, b_k, np.flatnonzero(inherit), blocks)
            if len(b_q) * SCAN_SHARE > len(qs) * blocks:
                blocks = 0  # the blocks hardly prune for these queries: one scan costs less
        if blocks:
            size = mirror.block
            order = np.argsort(b_k, kind="stable")
            b_q, b_k = b_q[order], b_k[order]
            cut = np.flatnonzero(np.diff(b_k)) + 1
            starts = b_k[np.r_[0, cut]].tolist() if len(b_k) else []
            for part, b in zip(np.split(b_q, cut), starts, strict=False):
                a = b * size
                r, k = _hits(
                    lo[:, a : a + size], hi[:, a : a + size], qs[part], q_lo, q_hi, self._plan
                )
                if inherited:
                    r, k = _with_all(r, k, np.flatnonzero(inherit[part]), size)
                rows.append(part[r])
                cols.append(k + a)
        tail = blocks * mirror.block if blocks else 0
        points = mirror.points() if qaf and mirror and not blocks else None
        if points is None:
            r, k = _hits(lo[:, tail:], hi[:, tail:], qs, q_lo, q_hi, self._plan)
        else:
            r, k, rest = points.hits(lo, qs, q_lo, q_hi, self._plan[1])
            r2, k2 = _hits(lo, hi, qs[rest], q_lo, q_hi, self._plan)
            r, k = np.concatenate([r, rest[r2]]), np.concatenate([k, k2])
        if inherited:
            r, k = _with_all(r, k, np.flatnonzero(inherit), len(kids) - tail)
        rows.append(r)
        cols.append(k + tail)
        r, k = np.concatenate(rows), np.concatenate(cols)
        qi, ni, inherit = qs[r], kids[k], inherit[r]
        return qi, ni, self._covers(q_lo, q_hi, qi, ni, inherit, qaf), inherit

    def _gathered(self, qi, ni, inherit, q_lo, q_hi, qaf):
        """The children of (query, node) pairs, tested pair by pair."""
        counts, kids = self.children.gather_counts(ni)
        qi, inherit = np.repeat(qi, counts), np.repeat(inherit, counts)
        ov = inherit | self._meets(q_lo, q_hi, qi, kids, self.lo, self.hi, ~inherit)
        qi, kids, inherit = qi[ov], kids[ov], inherit[ov]
        return qi, kids, self._covers(q_lo, q_hi, qi, kids, inherit, qaf), inherit

    def _core_hits(self, q_lo, q_hi, qi, ni, accepted):
        """Pairs whose query meets the core of the node's pure subtree: it
        then overlaps every box below, which are accepted without tests
        (the thesis's subtree bound, §6.4)."""
        test = ~accepted & np.take(self.pure, ni)
        return self._meets(q_lo, q_hi, qi, ni, self.core_lo, self.core_hi, test)

    @staticmethod
    def _meets(q_lo, q_hi, qi, ni, lo, hi, test: np.ndarray) -> np.ndarray:
        """For the pairs selected by `test`: does the query's box meet the
        node's box in (`lo`, `hi`)? False for the others."""
        # (all pairs tested, the usual case below a level nothing accepted: no copies)
        picked = None if test.all() else np.flatnonzero(test)
        tq, tn = (qi, ni) if picked is None else (np.take(qi, picked), np.take(ni, picked))
        ok = np.ones(len(tq), dtype=bool)
        for col in range(q_lo.shape[0]):
            if not len(tq):
                break
            ok &= np.take(q_lo[col], tq) <= np.take(hi[col], tn)
            ok &= np.take(lo[col], tn) <= np.take(q_hi[col], tq)
            if 2 * np.count_nonzero(ok) < len(ok):  # most pairs failed: test only the rest
                keep = np.flatnonzero(ok)
                picked = keep if picked is None else picked[keep]
                tq, tn, ok = tq[keep], tn[keep], ok[keep]
        if picked is None:
            return ok
        out = np.zeros(len(qi), dtype=bool)
        out[picked[ok]] = True
        return out

    def _covers(self, q_lo, q_hi, qi, ni, inherit, qaf):
        """Box containment of overlapping pairs, the way covering prunes: a
        filter query contains a profile node (`qaf`: an inherited pair is
        contained already), or a filter node contains a profile query. Only
        where the caller's `covers` subscriptions read it (`need_covers`):
        subtree acceptance below a profile node is found in `_expand`, on
        the nodes that have children."""
        if not self.need_covers:
            return inherit.copy() if qaf else np.ones(len(qi), dtype=bool)
        if qaf:
            return inherit | self._inside(q_lo, q_hi, qi, ni, ~inherit, True)
        return self._inside(q_lo, q_hi, qi, ni, np.ones(len(qi), dtype=bool), False)

    def _inside(self, q_lo, q_hi, qi, ni, test: np.ndarray, qaf: bool) -> np.ndarray:
        """For the pairs selected by `test`: is the node's box inside the
        query's (`qaf`), or the query's inside the node's? False elsewhere."""
        out = np.zeros(len(qi), dtype=bool)
        picked = np.flatnonzero(test)
        if not len(picked):
            return out
        tq, tn = np.take(qi, picked), np.take(ni, picked)
        if qaf:
            inner, inner_lo, inner_hi, outer, outer_lo, outer_hi = (
                tn,
                self.lo,
                self.hi,
                tq,
                q_lo,
                q_hi,
            )
        else:
            inner, inner_lo, inner_hi, outer, outer_lo, outer_hi = (
                tq,
                q_lo,
                q_hi,
                tn,
                self.lo,
                self.hi,
            )
        ok = np.ones(len(picked), dtype=bool)
        for col in range(q_lo.shape[0]):
            ok &= np.take(outer_lo[col], outer) <= np.take(inner_lo[col], inner)
            ok &= np.take(inner_hi[col], inner) <= np.take(outer_hi[col], outer)
        out[picked] = ok
        return out

    # -- checks -------------------------------------------------------------

    def _subtree(self, node: int) -> list[int]:
        out, todo = [], [node]
        while todo:
            n = todo.pop()
            out.append(n)
            todo.extend(self.children.items(n).tolist())
        return out

    def check_invariants(self) -> None:
        """Parent covers child; no root is covered by another node; subtree bounds
        exact and a long list's block boxes holding their children once flushed.
        For tests."""
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
        for r in roots:
            for other, key in enumerate(self.keys):
                if key is not None and other != r:
                    assert not self.covers(key, self.keys[r]), f"root {r} is covered by {other}"
        for node, mirror in self._wide.items():
            lo, hi = mirror.lo[:, : mirror.n], mirror.hi[:, : mirror.n]
            assert mirror.spread == np.count_nonzero(~_is_point(lo, hi)), f"spread of {node}"
            mirror._widen_moved()
            nb, size = mirror.nblocks, mirror.block
            shape = (lo.shape[0], nb, size)
            lo, hi = lo[:, : nb * size].reshape(shape), hi[:, : nb * size].reshape(shape)
            assert (mirror.blo[:, :nb] <= lo.min(axis=2)).all(), f"block bounds of {node}"
            assert (mirror.bhi[:, :nb] >= hi.max(axis=2)).all(), f"block bounds of {node}"
            assert (mirror.ilo[:, :nb] >= lo.max(axis=2)).all(), f"block bounds of {node}"
            assert (mirror.ihi[:, :nb] <= hi.min(axis=2)).all(), f"block bounds of {node}"


def _hits(lo, hi, qs, q_lo, q_hi, plan) -> tuple[np.ndarray, np.ndarray]:
    """Every (query, box) pair whose boxes meet, as (index into `qs`, index
    into the boxes), a chunk of queries at a time so the (query × box)
    matrix stays in cache. With a `plan` (filter queries: the set of
    columns each constrains), a chunk tests only the columns some of its
    queries constrain (a column a filter leaves open meets every box);
    against many boxes, a chunk holds whole sets of queries with the same
    columns where they fit, the most used columns tested first."""
    n = lo.shape[1]
    rows, cols = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    if not n or not len(qs):
        return rows[0], cols[0]
    step = max(1, CHUNK // n)
    if plan is None or n < BLOCKED:
        # (a block's few boxes: per-chunk column unions cost less than sets)
        for start in range(0, len(qs), step):
            q = qs[start : start + step]
            tested = _constrained(plan[1], q, False) if plan is not None else range(lo.shape[0])
            cells = _meet_cells(lo, hi, q, q_lo, q_hi, tested)
            rows.append(cells // n + start)
            cols.append(cells % n)
        return np.concatenate(rows), np.concatenate(cols)
    sig, used = plan
    s = sig[qs]
    order = np.argsort(s, kind="stable")
    sets = (np.flatnonzero(np.diff(s[order])) + 1).tolist()
    for a, b in _packed(sets, len(qs), step):
        p = order[a:b]
        cells = _meet_cells(lo, hi, qs[p], q_lo, q_hi, _constrained(used, qs[p], True))
        rows.append(p[cells // n])
        cols.append(cells % n)
    return np.concatenate(rows), np.concatenate(cols)


def _packed(cuts: list[int], n: int, step: int) -> Iterator[tuple[int, int]]:
    """Chunks (start, end) of at most `step` of `n` items in sets that end at
    `cuts`: a chunk takes whole sets while they fit and a set too large for
    one is split. (A matrix per set cost more calls than its fewer columns
    saved where sets are small against a chunk: 1000 filters against 10k
    siena profiles, 417 sets, 26 queries a chunk, 31.7 -> 23.0 ms. Chunks
    across any sets at 100k profiles, 2 queries a chunk, tested more columns
    than they saved calls, 173 -> 190 ms; packing whole sets, 192 -> 181.)"""
    start = prev = 0  # the open chunk's start, the current set's
    for end in [*cuts, n]:
        if end - start > step:
            if prev > start:  # close the chunk before this set
                yield start, prev
                start = prev
            while end - start > step:
                yield start, start + step
                start += step
        prev = end
    if start < n:
        yield start, n


def _around(
    lo: np.ndarray,
    hi: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    inside: bool = False,
    pos: np.ndarray | None = None,
) -> np.ndarray:
    """The positions of the boxes (columns × boxes; only those at `pos`, if
    given) that contain the box [a, b] (or lie inside it): a few in one
    matrix test, many column by column on the survivors of the columns
    before."""
    n, few = (lo.shape[1], FEW) if pos is None else (len(pos), FEW_GATHERED)
    if n < few or not lo.shape[0]:
        if pos is not None:
            # (indexing, not take: take copies a strided view, a mirror's, whole first)
            lo, hi = lo[:, pos], hi[:, pos]
        if inside:
            ok = a[:, None] <= lo
            ok &= hi <= b[:, None]
        else:
            ok = lo <= a[:, None]
            ok &= b[:, None] <= hi
        ok = ok.all(axis=0)
        return np.flatnonzero(ok) if pos is None else pos[ok]
    for col in range(lo.shape[0]):
        c_lo, c_hi = (lo[col], hi[col]) if pos is None else (lo[col][pos], hi[col][pos])
        ok = (a[col] <= c_lo) & (c_hi <= b[col]) if inside else (c_lo <= a[col]) & (b[col] <= c_hi)
        pos = np.flatnonzero(ok) if pos is None else pos[ok]
        if not len(pos):
            break
    return pos


def _with_all(r: np.ndarray, k: np.ndarray, everywhere: np.ndarray, n: int):
    """Add every box for the queries `everywhere` (accepted without tests)."""
    if not len(everywhere):
        return r, k
    pairs = np.unique(np.concatenate([r * n + k, (everywhere[:, None] * n + np.arange(n)).ravel()]))
    return pairs // n, pairs % n


def _meet_cells(lo, hi, q, q_lo, q_hi, tested) -> np.ndarray:
    """The (query × box) cells, flat, whose boxes meet on the `tested`
    columns: tested as a matrix while most cells pass, then pair by pair
    on the survivors (a matrix would test the failed cells again)."""
    n = lo.shape[1]
    hit = np.ones((len(q), n), dtype=bool)
    tested = list(tested)
    with _Rows(n):
        for i, col in enumerate(tested):
            hit &= q_lo[col, q][:, None] <= hi[col]
            hit &= lo[col] <= q_hi[col, q][:, None]
            if i + 1 < len(tested) and SPARSE * np.count_nonzero(hit) < hit.size:
                break
        else:
            return np.flatnonzero(hit)
    cells = np.flatnonzero(hit)
    qq, kk = q[cells // n], cells % n
    ok = np.ones(len(cells), dtype=bool)
    for col in tested[i + 1 :]:
        ok &= np.take(q_lo[col], qq) <= np.take(hi[col], kk)
        ok &= np.take(lo[col], kk) <= np.take(q_hi[col], qq)
    return cells[ok]


def _constrained(constrains: np.ndarray, qs: np.ndarray, by_use: bool) -> list[int]:
    """The columns on which some of the queries `qs` is not (-inf, inf), from the
    plan's (column × query) mask; `by_use`: those that most of them constrain
    first (a matrix test then turns sparse, and goes pair by pair, sooner;
    worth its sort against many boxes only)."""
    used = constrains[:, qs]
    if not by_use:
        return np.flatnonzero(used.any(axis=1)).tolist()
    uses = used.sum(axis=1)
    order = np.argsort(-uses, kind="stable")
    return order[uses[order] > 0].tolist()


def _column_plan(q_lo: np.ndarray, q_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Filter queries by the set of columns they constrain: (a set id per
    query, the (column × query) mask of which columns each constrains)."""
    mask = (q_lo != -np.inf) | (q_hi != np.inf)
    _, sig = np.unique(mask.T, axis=0, return_inverse=True)
    return sig.reshape(-1), mask


class _Mirror:
    """Contiguous bounds of one child list, in the list's own order.

    A list of at least BLOCKED children is also cut into blocks of `block`
    children in Sort-Tile-Recursive order, with each block's bounding box
    (the min of its lows, the max of its highs), so a query skips the
    blocks it misses. Children appended since the last sort
    form an unsorted tail that every query scans; when it outgrows an eighth
    of the list, the list is sorted again. A removal moves the last child
    into the hole, and that block's box is widened to hold it before the
    next read of the boxes (a batch of removals pays one vector pass, not
    four numpy calls each): boxes stay conservative, and once there have
    been more such widenings than blocks, the list is sorted again too (the
    boxes have loosened).

    Inserts test a new box against the list (which children contain it,
    which lie inside it) through the blocks too, so they keep the tail
    short: every RUN blocks of it are sorted into a run of blocks of their
    own, merged with the runs before while those are not RATIO times
    longer (a log-structured merge: a child is sorted again only a few
    times). For the "inside" test each block also keeps its inner bounds
    (the max of its lows, the min of its highs).
    """

    __slots__ = (
        "lo",
        "hi",
        "n",
        "blo",
        "bhi",
        "ilo",
        "ihi",
        "runs",
        "nblocks",
        "block",
        "tried",
        "widened",
        "pts",
        "spread",
        "moved",
    )

    def __init__(self, lo: np.ndarray, hi: np.ndarray) -> None:
        self.n = lo.shape[1]
        cap = max(2 * self.n, 64)
        self.lo = np.empty((lo.shape[0], cap))
        self.hi = np.empty((lo.shape[0], cap))
        self.lo[:, : self.n], self.hi[:, : self.n] = lo, hi
        self.nblocks = self.tried = self.widened = 0
        self.block = BLOCK
        self.blo = self.bhi = self.ilo = self.ihi = np.empty((lo.shape[0], 0))
        self.runs: list[int] = []  # the first block of each sorted run
        self.pts: _Points | bool | None = None  # None: not built since the list changed
        self.spread = int(np.count_nonzero(~_is_point(lo, hi)))  # boxes that are not points
        self.moved: list[int] = []  # positions in blocks a removal moved a child into

    def points(self) -> _Points | None:
        """The list's sorted columns if every box is a point (or lacks the
        column), built once per version of the list; else None."""
        if self.pts is None:
            self.pts = False if self.spread else _Points(self.lo[:, : self.n])
        return self.pts or None

    def append(self, lo: np.ndarray, hi: np.ndarray) -> None:
        self.pts = None
        if self.n == self.lo.shape[1]:
            self.lo = np.hstack([self.lo, np.empty_like(self.lo)])
            self.hi = np.hstack([self.hi, np.empty_like(self.hi)])
        self.lo[:, self.n], self.hi[:, self.n] = lo, hi
        self.spread += _spans(lo, hi)
        self.n += 1

    def swap_remove(self, index: int) -> None:
        self.pts = None
        self.n -= 1
        self.tried = min(self.tried, self.n)
        lo, hi = self.lo, self.hi
        self.spread -= _spans(lo[:, index], hi[:, index])
        lo[:, index], hi[:, index] = lo[:, self.n], hi[:, self.n]
        if self.nblocks * self.block > self.n:
            self.nblocks = self.n // self.block  # the last block became tail
            while self.runs and self.runs[-1] >= self.nblocks:
                self.runs.pop()
        b = index // self.block
        if b < self.nblocks:
            self.widened += 1
            self.moved.append(index)

    def _widen_moved(self, upto: int | None = None) -> None:
        """Widen the boxes of the blocks (below `upto`) that removals moved
        children into, to hold those children."""
        if not self.moved:
            return
        pos = np.array(self.moved, dtype=np.int64)
        self.moved = []
        pos = pos[pos < (self.nblocks if upto is None else min(upto, self.nblocks)) * self.block]
        if not len(pos):
            return
        at = (slice(None), pos // self.block)
        lo, hi = self.lo[:, pos], self.hi[:, pos]  # (the children there now)
        np.minimum.at(self.blo, at, lo)
        np.maximum.at(self.bhi, at, hi)
        np.maximum.at(self.ilo, at, lo)
        np.minimum.at(self.ihi, at, hi)

    def fitting(self, index: int) -> int | None:
        """If `index` lies in a block of a list the inserts keep in blocks:
        the position of a child at the end of the unsorted tail whose box
        widens that block's bounds least (None if the tail is empty)."""
        b, cut, n = index // self.block, self.nblocks * self.block, self.n
        if n < SETTLED or b >= self.nblocks or cut >= n - 1:
            return None
        # (the block's box as stored, even if not yet widened for a child a removal
        # moved in: the choice only keeps the block tight, and the box is widened
        # before a read)
        cut = max(cut, n - self.block)  # (the last few suffice: a removal stays cheap)
        lo, hi = self.lo[:, cut:n], self.hi[:, cut:n]
        b_lo, b_hi = self.blo[:, b, None], self.bhi[:, b, None]
        # (computed only where the box sticks out: no inf - inf)
        out = np.subtract(b_lo, lo, out=np.zeros(lo.shape), where=lo < b_lo)
        out += np.subtract(hi, b_hi, out=np.zeros(hi.shape), where=hi > b_hi)
        return cut + int(out.sum(axis=0).argmin())

    def swap(self, i: int, j: int) -> None:
        """Exchange two children of the unsorted tail."""
        self.pts = None
        self.lo[:, [i, j]], self.hi[:, [i, j]] = self.lo[:, [j, i]], self.hi[:, [j, i]]

    def settle(self, reorder: Callable[[np.ndarray, int], None]) -> None:
        """After an append: sort the tail into a run once it is RUN blocks
        long, merging it with the shorter runs before it."""
        size = self.block
        tail = self.n - self.nblocks * size
        if self.n < SETTLED or tail < RUN * size or self.n - self.tried < RUN * size:
            return
        first = self.nblocks
        while self.runs and (first - self.runs[-1]) * size < RATIO * (self.n - first * size):
            first = self.runs.pop()
        self._sort_from(first, reorder)
        self.tried = self.n  # (no sortable column: not tried again until it grows)

    def candidates(self, a: np.ndarray, b: np.ndarray, inside: bool) -> np.ndarray:
        """Positions of the children that may contain the box [a, b] (or lie
        inside it) among the blocks': those of the blocks whose bounds allow it."""
        self._widen_moved()
        nb, size = self.nblocks, self.block
        if inside:
            ok = (self.ilo[:, :nb] >= a[:, None]).all(axis=0)
            ok &= (self.ihi[:, :nb] <= b[:, None]).all(axis=0)
        else:
            ok = (self.blo[:, :nb] <= a[:, None]).all(axis=0)
            ok &= (self.bhi[:, :nb] >= b[:, None]).all(axis=0)
        return (np.flatnonzero(ok)[:, None] * size + np.arange(size)).ravel()

    def blocks(self, reorder: Callable[[np.ndarray], None]) -> int:
        """How many leading blocks are indexed, sorting the list again first
        (through `reorder`, which permutes the child list to match) when
        the unsorted tail has grown too long."""
        if self.n < BLOCKED:
            self.nblocks = 0
            return 0
        grown = max(self.block, self.n // 8)
        tail = self.n - self.nblocks * self.block
        if (tail > grown and self.n - self.tried > grown) or self.widened > self.nblocks:
            self._sort(reorder)
            self.tried = self.n  # (no sortable column: not tried again until it grows)
        self._widen_moved()
        return self.nblocks

    def _sort(self, reorder: Callable[[np.ndarray], None]) -> None:
        self.widened = 0
        self._sort_from(0, lambda order, at: reorder(order))

    def _sort_from(self, first: int, reorder: Callable[[np.ndarray, int], None]) -> None:
        """Sort the children from block `first` on into blocks (the rest of
        a block stays tail), through `reorder(order, at)`, which permutes
        the child list from position `at` to match."""
        self._widen_moved(first)  # (the blocks before `first` stay; the rest are made anew)
        n, size, at = self.n, self.block, first * self.block
        lo, hi = self.lo[:, at:n], self.hi[:, at:n]
        order = _tiled_order(lo, hi, size)
        self.runs = [r for r in self.runs if r < first]
        if order is None:
            self.nblocks = first
            return
        reorder(order, at)
        self.pts = None
        self.lo[:, at:n], self.hi[:, at:n] = lo[:, order], hi[:, order]
        self.nblocks = n // size
        if self.nblocks > first:
            self.runs.append(first)
        cut = self.nblocks * size
        shape = (lo.shape[0], self.nblocks - first, size)
        new_lo, new_hi = self.lo[:, at:cut].reshape(shape), self.hi[:, at:cut].reshape(shape)
        self.blo = np.hstack([self.blo[:, :first], new_lo.min(axis=2)])
        self.bhi = np.hstack([self.bhi[:, :first], new_hi.max(axis=2)])
        self.ilo = np.hstack([self.ilo[:, :first], new_lo.max(axis=2)])
        self.ihi = np.hstack([self.ihi[:, :first], new_hi.min(axis=2)])


def _spans(lo: np.ndarray, hi: np.ndarray) -> bool:
    """Whether one box is not a point (`_is_point`): it spans a range on some column."""
    return bool((lo < hi).any())


def _is_point(lo: np.ndarray, hi: np.ndarray) -> np.ndarray | bool:
    """Whether a box (or each column of a matrix) is a point: each column one
    value, or missing (lo > hi)."""
    return ((lo == hi) | (lo > hi)).all(axis=0)


class _Points:
    """The columns of a list of point boxes (a missing column is [inf, -inf]),
    each sorted: a filter's range on a column is a run of this order
    (`searchsorted`), and its narrowest run is all it needs to test, on its
    other columns, instead of the whole list. Notifications are points in the
    thesis's and Siena's workloads, where no covering relates them and the
    list is flat: at 100k siena profiles a filter's narrowest run holds 2.5%
    of them on average."""

    __slots__ = ("order", "values", "present")

    def __init__(self, lo: np.ndarray) -> None:
        self.order = np.argsort(lo, axis=1, kind="stable")
        self.values = np.take_along_axis(lo, self.order, axis=1)
        self.present = np.isfinite(self.values).sum(axis=1).tolist()  # (missing: inf, last)

    def hits(self, lo, qs, q_lo, q_hi, constrains) -> tuple[np.ndarray, ...]:
        """(index into `qs`, box) of every pair that meets, for the filters
        whose narrowest run is under 1/POINT_SHARE of the list, and the
        indices into `qs` of the others (a scan serves them better)."""
        n = lo.shape[1]
        used = constrains[:, qs]
        cols = np.flatnonzero(used.any(axis=1))
        start = np.zeros((len(cols), len(qs)), dtype=np.int64)
        count = np.full((len(cols), len(qs)), n, dtype=np.int64)
        for i, col in enumerate(cols.tolist()):
            j = np.flatnonzero(used[col])
            values = self.values[col, : self.present[col]]
            start[i, j] = np.searchsorted(values, q_lo[col, qs[j]], "left")
            count[i, j] = np.searchsorted(values, q_hi[col, qs[j]], "right") - start[i, j]
        if not len(cols):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.arange(len(qs))
        best = count.argmin(axis=0)
        every = np.arange(len(qs))
        runs, starts = count[best, every], start[best, every]
        taken = np.flatnonzero(runs * POINT_SHARE < n)
        runs, chosen = runs[taken], cols[best[taken]]
        rq = np.repeat(taken, runs)
        pos = self.order[np.repeat(chosen, runs), run_positions(starts[taken], runs)]
        begins = np.cumsum(runs) - runs  # each filter's pairs, in `rq` order
        ok = np.ones(len(rq), dtype=bool)
        for col in cols.tolist():  # each on the pairs of the filters it constrains but
            which = np.flatnonzero(used[col, taken] & (chosen != col))  # did not choose
            sel = run_positions(begins[which], runs[which])
            v, q = lo[col, pos[sel]], np.repeat(qs[taken[which]], runs[which])
            ok[sel] &= (q_lo[col, q] <= v) & (v <= q_hi[col, q]) & (v < np.inf)  # (missing: inf)
        scanned = np.ones(len(qs), dtype=bool)
        scanned[taken] = False
        return rq[ok], pos[ok], np.flatnonzero(scanned)


def _tiled_order(lo: np.ndarray, hi: np.ndarray, size: int) -> np.ndarray | None:
    """Sort-Tile-Recursive order (the packed R-tree's bulk load): sorted on
    the centres of the first column, cut into slabs, each slab sorted on the
    next column and cut again, so consecutive runs of `size` boxes are tight
    on every column that is finite on nearly every box. None if none is."""
    centres = []
    for col in range(lo.shape[0]):
        a, b = lo[col], hi[col]
        finite = (np.abs(a) < MAX_FINITE) & (np.abs(b) < MAX_FINITE)
        centre = np.where(finite, a, 0.0) + np.where(finite, b, 0.0)  # (no inf - inf)
        if finite.mean() >= FINITE_SHARE and np.ptp(centre) > 0:
            centres.append(centre)
    if not centres:
        return None
    groups = [np.arange(lo.shape[1])]
    for level, centre in enumerate(centres):
        left = len(centres) - level
        cut_groups = []
        for g in groups:
            g = g[np.argsort(centre[g], kind="stable")]
            blocks = -(-len(g) // size)
            slabs = max(1, round(blocks ** (1 / left)))
            step = -(-blocks // slabs) * size
            cut_groups += [g[i : i + step] for i in range(0, len(g), step)]
        groups = cut_groups
    return np.concatenate(groups)
