"""A batch of query boxes walked down a covering forest, level by level.

Every (query, node) candidate pair of a level is tested in a few vector
operations, and the pairs that meet expand to their children: a node that
does not overlap a query prunes its subtree. Short child lists are expanded
pair by pair through the forest's `ListStore` (all child lists in one array,
gathered with `np.take`); a long one is tested against all its queries at
once as (query × child) matrices over its contiguous bounds (`WideList`),
through its sorted blocks where it has them, or its sorted point columns.

Two ways accept a subtree without testing it. Filter queries against profile
nodes: a node the query covers (its box inside the query's) covers its whole
subtree. Profile queries against filter nodes: a query that meets the core
of a subtree whose boxes are all exact (the intersection of every box in it,
the thesis's subtree bound, §6.4) overlaps every box below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from matcher.forest import tuning
from matcher.forest.arrays import Bounds, Ids, Mask
from matcher.forest.box_kernels import (
    column_plan,
    constrained_columns,
    meeting_pairs,
    pairs_meet,
    pairs_nested,
    with_every_box,
)

if TYPE_CHECKING:
    from matcher.forest.covering_tree import Forest

# (query index, node id) -> (overlaps, covers), for a pair whose box is not exact
ExactTest = Callable[[int, int], tuple[bool, bool]]
# Pairs of a level: (query index, node id, covers, accepted without tests)
Pairs = tuple[Ids, Ids, Mask, Mask]


class Descent:
    """One batch of queries, (columns × queries) bounds, against one forest."""

    __slots__ = ("forest", "query_lo", "query_hi", "queries_are_filters", "plan")

    def __init__(
        self, forest: Forest, query_lo: Bounds, query_hi: Bounds, *, queries_are_filters: bool
    ) -> None:
        self.forest = forest
        self.query_lo, self.query_hi = query_lo, query_hi
        self.queries_are_filters = queries_are_filters
        # Filter queries: which columns each constrains (those it leaves open need no test).
        self.plan = column_plan(query_lo, query_hi) if queries_are_filters else None

    def pairs(self, roots: int, query_exact: Mask, exact_test: ExactTest) -> tuple[Ids, Ids, Mask]:
        """Every (query, node) pair that overlaps, with whether it also covers:
        (query index, node id, covers), from the children of `roots` (the
        forest's root set) down. O(pairs tested × columns), the pairs
        tested being the children of the pairs that meet, level by level; plus
        one `exact_test` a pair whose query or node box is not exact and that
        no subtree acceptance took."""
        forest = self.forest
        n_queries = self.query_lo.shape[1]
        queries, nodes, covers, accepted = self._broadcast(
            roots, np.arange(n_queries), np.zeros(n_queries, dtype=bool)
        )
        out_queries, out_nodes, out_covers = [], [], []
        # Which side may need exact tests, decided once: most batches have
        # none, and the pairs are then never scanned for them.
        any_query_exact, any_node_exact = bool(query_exact.any()), bool(forest.exact.any())
        while len(queries):
            if any_query_exact or any_node_exact:
                if any_query_exact:
                    need = query_exact[queries]
                    if any_node_exact:
                        need |= forest.exact[nodes]
                else:
                    need = forest.exact[nodes]
                tests = np.flatnonzero(~accepted & need)
                if len(tests):
                    ok = np.ones(len(queries), dtype=bool)
                    for j in tests.tolist():
                        ok[j], covers[j] = exact_test(int(queries[j]), int(nodes[j]))
                    queries, nodes = queries[ok], nodes[ok]
                    covers, accepted = covers[ok], accepted[ok]
            out_queries.append(queries)
            out_nodes.append(nodes)
            out_covers.append(covers)
            accept_children = covers if self.queries_are_filters else accepted
            queries, nodes, covers, accepted = self._expand(queries, nodes, accept_children)
        if not out_queries:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0, dtype=bool)
        return np.concatenate(out_queries), np.concatenate(out_nodes), np.concatenate(out_covers)

    def _expand(self, queries: Ids, nodes: Ids, accept_children: Mask) -> Pairs:
        """The next level: every child of the matched pairs, tested. A long
        child list is tested against all its queries at once by broadcasting
        (no gathers); short ones are gathered pair by pair."""
        forest, filters = self.forest, self.queries_are_filters
        count = np.take(forest.children.count, nodes)
        parents = count > 0
        if not parents.all():  # most matched nodes are leaves: drop them first
            queries, nodes = queries[parents], nodes[parents]
            accept_children, count = accept_children[parents], count[parents]
        if filters and not forest.need_covers:  # a query containing a node takes its subtree
            accept_children = accept_children | self._nested(
                queries, nodes, ~accept_children, node_inside=True
            )
        elif not filters:  # (a leaf has no subtree to accept: tested after the drop)
            accept_children = accept_children | self._core_hits(queries, nodes, accept_children)
        wide = count >= tuning.WIDE
        if not filters and wide.any():
            # Broadcast only a matrix big enough to pay for its calls; the
            # many long lists that few profiles reach are cheaper pair by pair.
            wide_nodes, which, n_queries = np.unique(
                nodes[wide], return_inverse=True, return_counts=True
            )
            cells = n_queries * forest.children.count[wide_nodes]
            wide[wide] = (cells >= tuning.BROADCAST_CELLS)[which]
        narrow = ~wide
        parts = [self._gathered(queries[narrow], nodes[narrow], accept_children[narrow])]
        if wide.any():
            order = np.flatnonzero(wide)[np.argsort(nodes[wide], kind="stable")]
            wide_queries, wide_nodes = queries[order], nodes[order]
            wide_accept = accept_children[order]
            distinct, starts = np.unique(wide_nodes, return_index=True)
            ends = np.append(starts[1:], len(wide_nodes))
            for node, start, end in zip(
                distinct.tolist(), starts.tolist(), ends.tolist(), strict=True
            ):
                parts.append(self._broadcast(node, wide_queries[start:end], wide_accept[start:end]))
        return tuple(np.concatenate(arrays) for arrays in zip(*parts, strict=True))

    def _broadcast(self, node: int, queries: Ids, accept_children: Mask) -> Pairs:
        """One node's children against some queries, as (query × child)
        matrices: for the root set this is the brute-force scan, column by
        column over contiguous bounds, except that a very long list is kept
        in sorted blocks, and a block whose box a query misses is not
        scanned for it (in the blocks met, each against its own queries, the
        boxes its blocks' bit rows leave: `BlockBits.meeting`)."""
        forest, plan = self.forest, self.plan
        query_lo, query_hi = self.query_lo, self.query_hi
        children, lo, hi = forest.bounds_of_children(node)
        wide = forest.wide_lists.get(node)
        blocks = (
            wide.indexed_blocks(lambda order: forest.children.reorder(node, order)) if wide else 0
        )
        if blocks:
            # the reorder moved the children; the bound views follow the wide list
            children = forest.children.items(node)
        accepting = bool(accept_children.any())
        query_positions, child_positions = [], []  # (into `queries`, into `children`)
        if blocks:
            block_queries, hit_blocks = meeting_pairs(
                wide.block_lo[:, :blocks],
                wide.block_hi[:, :blocks],
                queries,
                query_lo,
                query_hi,
                plan,
            )
            if accepting:  # accepted queries take every block
                block_queries, hit_blocks = with_every_box(
                    block_queries, hit_blocks, np.flatnonzero(accept_children), blocks
                )
            if len(block_queries) * tuning.SCAN_SHARE > len(queries) * blocks:
                blocks = 0  # the blocks hardly prune for these queries: one scan costs less
        if blocks:
            cut = blocks * wide.block_size
            if accepting:  # (accepted queries take every box of every block, untested)
                tested_pair = ~accept_children[block_queries]
                block_queries, hit_blocks = block_queries[tested_pair], hit_blocks[tested_pair]
                everywhere = np.flatnonzero(accept_children)
                query_positions.append(np.repeat(everywhere, cut))
                child_positions.append(np.tile(np.arange(cut), len(everywhere)))
            if plan is None:
                columns: list[int] = list(range(lo.shape[0]))
            else:
                columns = constrained_columns(plan.constrains, queries, by_use=True)
            at_query, at_child = wide.bits.meeting(
                lo[:, :cut],
                hi[:, :cut],
                queries,
                block_queries,
                hit_blocks,
                query_lo,
                query_hi,
                columns,
            )
            query_positions.append(at_query)
            child_positions.append(at_child)
        tail = blocks * wide.block_size if blocks else 0  # (`in_tail`: positions from here)
        points = wide.sorted_points() if self.queries_are_filters and wide and not blocks else None
        if points is None:
            found = meeting_pairs(lo[:, tail:], hi[:, tail:], queries, query_lo, query_hi, plan)
            at_query, in_tail = found
        else:
            at_query, in_tail, rest = points.hits(lo, queries, query_lo, query_hi, plan.constrains)
            in_rest, rest_child = meeting_pairs(lo, hi, queries[rest], query_lo, query_hi, plan)
            at_query = np.concatenate([at_query, rest[in_rest]])
            in_tail = np.concatenate([in_tail, rest_child])
        if accepting:
            everywhere = np.flatnonzero(accept_children)
            at_query, in_tail = with_every_box(at_query, in_tail, everywhere, len(children) - tail)
        query_positions.append(at_query)
        child_positions.append(in_tail + tail)
        at_query, at_child = np.concatenate(query_positions), np.concatenate(child_positions)
        pair_queries, pair_nodes = queries[at_query], children[at_child]
        accepted = accept_children[at_query]
        return pair_queries, pair_nodes, self._covers(pair_queries, pair_nodes, accepted), accepted

    def _gathered(self, queries: Ids, nodes: Ids, accept_children: Mask) -> Pairs:
        """The children of (query, node) pairs, tested pair by pair."""
        forest = self.forest
        counts, children = forest.children.gather_counts(nodes)
        queries, accepted = np.repeat(queries, counts), np.repeat(accept_children, counts)
        meet = accepted | pairs_meet(
            self.query_lo, self.query_hi, queries, children, forest.lo, forest.hi, ~accepted
        )
        queries, children, accepted = queries[meet], children[meet], accepted[meet]
        return queries, children, self._covers(queries, children, accepted), accepted

    def _core_hits(self, queries: Ids, nodes: Ids, accepted: Mask) -> Mask:
        """Pairs whose query meets the core of the node's pure subtree (every
        box in it exact): it then overlaps every box below, which are accepted
        without tests (the thesis's subtree bound, §6.4)."""
        forest = self.forest
        test = ~accepted & np.take(forest.pure, nodes)
        return pairs_meet(
            self.query_lo, self.query_hi, queries, nodes, forest.core_lo, forest.core_hi, test
        )

    def _covers(self, queries: Ids, nodes: Ids, accepted: Mask) -> Mask:
        """Box containment of overlapping pairs, the way covering prunes: a
        filter query contains a profile node (an accepted pair is contained
        already), or a filter node contains a profile query. Only where the
        caller's `covers` subscriptions read it (`need_covers`): subtree
        acceptance below a profile node is found in `_expand`, on the nodes
        that have children."""
        filters = self.queries_are_filters
        if not self.forest.need_covers:
            return accepted.copy() if filters else np.ones(len(queries), dtype=bool)
        if filters:
            return accepted | self._nested(queries, nodes, ~accepted, node_inside=True)
        return self._nested(queries, nodes, np.ones(len(queries), dtype=bool), node_inside=False)

    def _nested(self, queries: Ids, nodes: Ids, test: Mask, *, node_inside: bool) -> Mask:
        """For the pairs selected by `test`: is the node's box inside the
        query's (`node_inside`), or the query's inside the node's?"""
        forest = self.forest
        return pairs_nested(
            self.query_lo,
            self.query_hi,
            queries,
            nodes,
            forest.lo,
            forest.hi,
            test,
            box_inside=node_inside,
        )
