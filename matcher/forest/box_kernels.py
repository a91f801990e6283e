"""Vector tests of query boxes against lists of boxes: which pairs meet, which
boxes contain (or lie inside) one box.

Every function here is pure numpy over column-major bounds (`arrays.Bounds`,
(columns × boxes)): a level of a descent, a wide list's scan, a block's
candidates are each a few calls of these, never a Python loop per box. Two
shapes of test recur. A matrix test broadcasts a column of query bounds
against a row of box bounds, column by column (no gathers, but every cell);
a pair test gathers the bounds of selected (query, box) pairs with `np.take`
(only those pairs, at 4 gathers a column). Each kernel starts with the one
that suits most pairs and switches to pairs once most have failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

import numpy as np

from matcher.forest import tuning
from matcher.forest.arrays import Bounds, Ids, Mask

NUMPY_BUFFER = 8192  # numpy's default ufunc buffer size (elements)
LEAST_BUFFER = 256  # the smallest buffer `RowBuffer` sets


class ColumnPlan(NamedTuple):
    """Filter queries by the set of columns they constrain (a column a filter
    leaves open, [-inf, inf], meets every box and needs no test)."""

    column_set: Ids  # per query: an id of the set of columns it constrains
    constrains: Mask  # (columns × queries): whether the query constrains the column


def column_plan(query_lo: Bounds, query_hi: Bounds) -> ColumnPlan:
    """The plan of a batch of filter queries. O(columns × queries log queries)."""
    mask = (query_lo != -np.inf) | (query_hi != np.inf)
    if mask.shape[0] > 64:
        _, column_set = np.unique(mask.T, axis=0, return_inverse=True)
        return ColumnPlan(column_set.reshape(-1), mask)
    # (a query's columns as the bits of one integer: unique on rows sorts a
    # structured view, several times slower)
    packed = np.zeros((mask.shape[1], 8), dtype=np.uint8)
    packed[:, : -(-mask.shape[0] // 8)] = np.packbits(mask.T, axis=1)
    _, column_set = np.unique(packed.view(np.uint64).reshape(-1), return_inverse=True)
    return ColumnPlan(column_set.reshape(-1), mask)


class RowBuffer:
    """A context in which numpy broadcasts a column against rows of `n` at full speed.

    numpy compares a (q, 1) array with an (n,) one several times slower when
    its ufunc buffer (`NUMPY_BUFFER` elements by default) spans more than two
    rows (`docs/DESIGN.md`, "Short rows"). A buffer of the largest power of two
    not over `n` keeps the fast loop; it is set for one matrix test and the
    one before is put back after, even if the test raises."""

    __slots__ = ("size", "previous")

    def __init__(self, n: int) -> None:
        self.size = min(NUMPY_BUFFER, max(LEAST_BUFFER, 1 << (n.bit_length() - 1)))

    def __enter__(self) -> None:
        self.previous = np.setbufsize(self.size)

    def __exit__(self, *exc: object) -> None:
        np.setbufsize(self.previous)


def meeting_pairs(
    lo: Bounds,
    hi: Bounds,
    queries: Ids,
    query_lo: Bounds,
    query_hi: Bounds,
    plan: ColumnPlan | None,
) -> tuple[Ids, Ids]:
    """Every (query, box) pair whose boxes meet, as (index into `queries`, index
    into the boxes), each pair once. O(queries × boxes × columns) cells at
    worst, a chunk of queries at a time so that the (query × box) matrix
    stays in cache.

    With a `plan` (filter queries), a chunk tests only the columns some of its
    queries constrain; against many boxes, a chunk holds whole sets of queries
    with the same columns where they fit, the most used columns tested first."""
    n = lo.shape[1]
    rows, cols = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    if not n or not len(queries):
        return rows[0], cols[0]
    step = max(1, tuning.CHUNK // n)
    if plan is None or n < tuning.BLOCKED:
        # (a block's few boxes: per-chunk column unions cost less than sets)
        for start in range(0, len(queries), step):
            chunk = queries[start : start + step]
            if plan is None:
                tested: Iterable[int] = range(lo.shape[0])
            else:
                tested = constrained_columns(plan.constrains, chunk, by_use=False)
            cells = meeting_cells(lo, hi, chunk, query_lo, query_hi, tested)
            rows.append(cells // n + start)
            cols.append(cells % n)
        return np.concatenate(rows), np.concatenate(cols)
    column_set = plan.column_set[queries]
    order = np.argsort(column_set, kind="stable")
    set_ends = (np.flatnonzero(np.diff(column_set[order])) + 1).tolist()
    for start, end in packed_chunks(set_ends, len(queries), step):
        chunk = order[start:end]
        tested = constrained_columns(plan.constrains, queries[chunk], by_use=True)
        cells = meeting_cells(lo, hi, queries[chunk], query_lo, query_hi, tested)
        rows.append(chunk[cells // n])
        cols.append(cells % n)
    return np.concatenate(rows), np.concatenate(cols)


def meeting_in_blocks(
    lo: Bounds,
    hi: Bounds,
    size: int,
    queries: Ids,
    pair_rows: Ids,
    pair_blocks: Ids,
    query_lo: Bounds,
    query_hi: Bounds,
    tested: list[int],
) -> tuple[Ids, Ids]:
    """Every (query, box) pair whose boxes meet on the `tested` columns, for
    the (query, block) pairs (`pair_rows` into `queries`, `pair_blocks`,
    sorted by block) where the boxes are cut into blocks of `size`
    consecutive ones: as (index into `queries`, index into the boxes), each
    pair once. O(pairs × size) cells a column while most cells pass, then
    pair by pair on the survivors.

    Many blocks go through one (block × query × box) tensor test of about
    CHUNK cells, each block's queries padded to the most among the blocks
    beside it (blocks are taken in order of their query counts, so that the
    padding stays small): a few numpy calls for many blocks, where a matrix
    a block costs its calls' fixed cost for each."""
    rows, boxes = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    if not len(pair_rows):
        return rows[0], boxes[0]
    starts = np.flatnonzero(np.r_[True, pair_blocks[1:] != pair_blocks[:-1]])
    counts = np.diff(np.r_[starts, len(pair_rows)])
    by_count = np.argsort(counts, kind="stable")
    lo3, hi3 = lo.reshape(lo.shape[0], -1, size), hi.reshape(hi.shape[0], -1, size)
    sorted_counts = counts[by_count].tolist()
    first = 0
    with RowBuffer(size):
        while first < len(by_count):
            end = first + 1  # (the most blocks whose padded tensor stays within CHUNK)
            while (
                end < len(by_count)
                and (end + 1 - first) * sorted_counts[end] * size <= tuning.CHUNK
            ):
                end += 1
            chosen, most = by_count[first:end], sorted_counts[end - 1]
            first = end
            rank = np.arange(most)
            valid = rank < counts[chosen, None]  # (blocks × most)
            at = np.minimum(starts[chosen, None] + rank, len(pair_rows) - 1)
            slot_rows = pair_rows[at]
            slot_ids, block_ids = queries[slot_rows], pair_blocks[starts[chosen]]
            hit = np.repeat(valid[:, :, None], size, axis=2)
            for i, col in enumerate(tested):
                hit &= query_lo[col][slot_ids][:, :, None] <= hi3[col][block_ids][:, None, :]
                hit &= lo3[col][block_ids][:, None, :] <= query_hi[col][slot_ids][:, :, None]
                if i + 1 < len(tested) and tuning.SPARSE * np.count_nonzero(hit) < hit.size:
                    break
            else:
                i = len(tested)
            cells = np.flatnonzero(hit)
            pair, box = cells // size, cells % size
            row, box = slot_rows.reshape(-1)[pair], block_ids[pair // most] * size + box
            ok = meet_on(tested[i + 1 :], query_lo, query_hi, queries[row], lo, hi, box)
            rows.append(row[ok])
            boxes.append(box[ok])
    return np.concatenate(rows), np.concatenate(boxes)


def packed_chunks(set_ends: list[int], n: int, step: int) -> Iterator[tuple[int, int]]:
    """Chunks (start, end) of at most `step` of `n` items in sets that end at
    `set_ends`: a chunk takes whole sets while they fit, and a set too large for
    one is split. O(sets + chunks).

    (One matrix per set makes more calls than its fewer columns save where
    sets are small against a chunk; chunks across sets regardless of them test
    more columns than they save calls.)"""
    start = prev = 0  # the open chunk's start, the current set's
    for end in [*set_ends, n]:
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


def meeting_cells(
    lo: Bounds,
    hi: Bounds,
    queries: Ids,
    query_lo: Bounds,
    query_hi: Bounds,
    tested: Iterable[int],
) -> Ids:
    """The (query × box) cells, flat, whose boxes meet on the `tested` columns.
    O(queries × boxes) a column while most cells pass; then pair by pair on the
    survivors (a matrix would test the failed cells again)."""
    n = lo.shape[1]
    hit = np.ones((len(queries), n), dtype=bool)
    tested = list(tested)
    with RowBuffer(n):
        for i, col in enumerate(tested):
            hit &= query_lo[col, queries][:, None] <= hi[col]
            hit &= lo[col] <= query_hi[col, queries][:, None]
            if i + 1 < len(tested) and tuning.SPARSE * np.count_nonzero(hit) < hit.size:
                break
        else:
            return np.flatnonzero(hit)
    cells = np.flatnonzero(hit)
    ok = meet_on(tested[i + 1 :], query_lo, query_hi, queries[cells // n], lo, hi, cells % n)
    return cells[ok]


def meet_on(
    columns: list[int],
    query_lo: Bounds,
    query_hi: Bounds,
    pair_queries: Ids,
    lo: Bounds,
    hi: Bounds,
    pair_boxes: Ids,
) -> Mask:
    """Whether each pair (pair_queries[i], pair_boxes[i]) meets on `columns`,
    the rest of a matrix test that turned sparse. O(pairs × columns)."""
    ok = np.ones(len(pair_queries), dtype=bool)
    for col in columns:
        ok &= np.take(query_lo[col], pair_queries) <= np.take(hi[col], pair_boxes)
        ok &= np.take(lo[col], pair_boxes) <= np.take(query_hi[col], pair_queries)
    return ok


def constrained_columns(constrains: Mask, queries: Ids, *, by_use: bool) -> list[int]:
    """The columns on which some of `queries` is not (-inf, inf), from a plan's
    (column × query) mask; `by_use`: those that most of them constrain first
    (a matrix test then turns sparse, and goes pair by pair, sooner; worth its
    sort against many boxes only). O(columns × queries)."""
    used = constrains[:, queries]
    if not by_use:
        return np.flatnonzero(used.any(axis=1)).tolist()
    uses = used.sum(axis=1)
    order = np.argsort(-uses, kind="stable")
    return order[uses[order] > 0].tolist()


def with_every_box(rows: Ids, cols: Ids, everywhere: Ids, n: int) -> tuple[Ids, Ids]:
    """The pairs (rows, cols), with every one of `n` boxes added for the queries
    `everywhere` (accepted without tests), each pair once. O(pairs log pairs)."""
    if not len(everywhere):
        return rows, cols
    pairs = np.concatenate([rows * n + cols, (everywhere[:, None] * n + np.arange(n)).ravel()])
    pairs = np.unique(pairs)
    return pairs // n, pairs % n


def nested_with(
    lo: Bounds,
    hi: Bounds,
    box_lo: Bounds,
    box_hi: Bounds,
    *,
    inside: bool = False,
    positions: Ids | None = None,
) -> Ids:
    """The positions of the boxes (only those at `positions`, if given) that
    contain the box [box_lo, box_hi], or with `inside` lie inside it.
    O(boxes × columns): a few in one matrix test, many column by column on
    the survivors of the columns before."""
    n, few = (
        (lo.shape[1], tuning.FEW) if positions is None else (len(positions), tuning.FEW_GATHERED)
    )
    if n < few or not lo.shape[0]:
        if positions is not None:
            # (indexing, not take: take copies a strided view, a wide list's, whole first)
            lo, hi = lo[:, positions], hi[:, positions]
        if inside:
            ok = box_lo[:, None] <= lo
            ok &= hi <= box_hi[:, None]
        else:
            ok = lo <= box_lo[:, None]
            ok &= box_hi[:, None] <= hi
        ok = ok.all(axis=0)
        return np.flatnonzero(ok) if positions is None else positions[ok]
    for col in range(lo.shape[0]):
        if positions is None:
            col_lo, col_hi = lo[col], hi[col]
        else:
            col_lo, col_hi = lo[col][positions], hi[col][positions]
        if inside:
            ok = (box_lo[col] <= col_lo) & (col_hi <= box_hi[col])
        else:
            ok = (col_lo <= box_lo[col]) & (box_hi[col] <= col_hi)
        positions = np.flatnonzero(ok) if positions is None else positions[ok]
        if not len(positions):
            break
    return positions


def pairs_meet(
    query_lo: Bounds,
    query_hi: Bounds,
    queries: Ids,
    boxes: Ids,
    lo: Bounds,
    hi: Bounds,
    test: Mask,
) -> Mask:
    """For the pairs (queries[i], boxes[i]) selected by `test`: does the query's
    box meet the box in (`lo`, `hi`)? False for the others. O(pairs × columns),
    each column on the pairs still standing once most have failed."""
    # (all pairs tested, the usual case below a level nothing accepted: no copies)
    picked = None if test.all() else np.flatnonzero(test)
    if picked is None:
        tested_queries, tested_boxes = queries, boxes
    else:
        tested_queries, tested_boxes = np.take(queries, picked), np.take(boxes, picked)
    ok = np.ones(len(tested_queries), dtype=bool)
    for col in range(query_lo.shape[0]):
        if not len(tested_queries):
            break
        ok &= np.take(query_lo[col], tested_queries) <= np.take(hi[col], tested_boxes)
        ok &= np.take(lo[col], tested_boxes) <= np.take(query_hi[col], tested_queries)
        if 2 * np.count_nonzero(ok) < len(ok):  # most pairs failed: test only the rest
            keep = np.flatnonzero(ok)
            picked = keep if picked is None else picked[keep]
            tested_queries, tested_boxes, ok = tested_queries[keep], tested_boxes[keep], ok[keep]
    if picked is None:
        return ok
    out = np.zeros(len(queries), dtype=bool)
    out[picked[ok]] = True
    return out


def pairs_nested(
    query_lo: Bounds,
    query_hi: Bounds,
    queries: Ids,
    boxes: Ids,
    lo: Bounds,
    hi: Bounds,
    test: Mask,
    *,
    box_inside: bool,
) -> Mask:
    """For the pairs (queries[i], boxes[i]) selected by `test`: is the box
    inside the query's (`box_inside`), or the query's box inside the box?
    False for the others. O(pairs × columns)."""
    out = np.zeros(len(queries), dtype=bool)
    picked = np.flatnonzero(test)
    if not len(picked):
        return out
    tested_queries, tested_boxes = np.take(queries, picked), np.take(boxes, picked)
    if box_inside:
        inner, inner_lo, inner_hi = tested_boxes, lo, hi
        outer, outer_lo, outer_hi = tested_queries, query_lo, query_hi
    else:
        inner, inner_lo, inner_hi = tested_queries, query_lo, query_hi
        outer, outer_lo, outer_hi = tested_boxes, lo, hi
    ok = np.ones(len(picked), dtype=bool)
    for col in range(query_lo.shape[0]):
        ok &= np.take(outer_lo[col], outer) <= np.take(inner_lo[col], inner)
        ok &= np.take(inner_hi[col], inner) <= np.take(outer_hi[col], outer)
    out[picked] = ok
    return out
