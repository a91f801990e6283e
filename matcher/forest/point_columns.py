"""The columns of a list of point boxes, each sorted, so that a filter tests
only the boxes in its narrowest column range.

A point box has one value, or nothing ([inf, -inf]: the attribute is
missing), on each column. Notifications are often points (Siena's and the
thesis's workloads), where no covering relates them and a list stays flat,
and where boxes lack different attributes no column is dense enough for
sorted blocks (`wide_list`). A filter's range on a column is a run of that
column's sorted order (`searchsorted`); its narrowest run is all it needs to
test, on its other columns, instead of the whole list.
"""

from __future__ import annotations

import numpy as np

from matcher.forest import tuning
from matcher.forest.arrays import Bounds, Ids, Mask
from matcher.forest.list_store import run_positions


def is_point(lo: Bounds, hi: Bounds) -> Mask | bool:
    """Whether a box (or each box of a (columns × boxes) matrix) is a point:
    on each column one value, or missing (lo > hi). O(columns × boxes)."""
    return ((lo == hi) | (lo > hi)).all(axis=0)


def spans(lo: Bounds, hi: Bounds) -> bool:
    """Whether one box is not a point: it spans a range on some column. O(columns)."""
    return bool((lo < hi).any())


class PointColumns:
    """A list of point boxes, each column sorted (a missing value, inf, sorts last).

    Built in O(columns × n log n) from the list as it is; it describes that
    version of the list only (its owner drops it at any change)."""

    __slots__ = ("order", "values", "present")

    def __init__(self, lo: Bounds) -> None:
        self.order = np.argsort(lo, axis=1, kind="stable")  # per column: positions, sorted
        self.values = np.take_along_axis(lo, self.order, axis=1)
        self.present = np.isfinite(self.values).sum(axis=1).tolist()  # boxes with the column

    def hits(
        self,
        lo: Bounds,
        queries: Ids,
        query_lo: Bounds,
        query_hi: Bounds,
        constrains: Mask,
    ) -> tuple[Ids, Ids, Ids]:
        """(index into `queries`, position) of every pair that meets, for the
        filters whose narrowest run is under 1/POINT_SHARE of the list, and
        the indices into `queries` of the others (a scan serves them better).
        `lo` is the list's bounds, `constrains` the (column × query) mask of
        the columns each filter constrains. O(queries × columns × log n +
        the runs' boxes × columns)."""
        n = lo.shape[1]
        used = constrains[:, queries]
        cols = np.flatnonzero(used.any(axis=1))
        start = np.zeros((len(cols), len(queries)), dtype=np.int64)
        count = np.full((len(cols), len(queries)), n, dtype=np.int64)
        for i, col in enumerate(cols.tolist()):
            j = np.flatnonzero(used[col])
            values = self.values[col, : self.present[col]]
            start[i, j] = np.searchsorted(values, query_lo[col, queries[j]], "left")
            count[i, j] = np.searchsorted(values, query_hi[col, queries[j]], "right") - start[i, j]
        if not len(cols):
            empty = np.zeros(0, dtype=np.int64)
            return empty, np.zeros(0, dtype=np.int64), np.arange(len(queries))
        best = count.argmin(axis=0)
        every = np.arange(len(queries))
        runs, starts = count[best, every], start[best, every]
        taken = np.flatnonzero(runs * tuning.POINT_SHARE < n)
        runs, chosen = runs[taken], cols[best[taken]]
        pair_query = np.repeat(taken, runs)
        positions = self.order[np.repeat(chosen, runs), run_positions(starts[taken], runs)]
        begins = np.cumsum(runs) - runs  # each filter's pairs, in `pair_query` order
        ok = np.ones(len(pair_query), dtype=bool)
        for col in cols.tolist():  # each on the pairs of the filters it constrains but
            which = np.flatnonzero(used[col, taken] & (chosen != col))  # did not choose
            selected = run_positions(begins[which], runs[which])
            value = lo[col, positions[selected]]
            query = np.repeat(queries[taken[which]], runs[which])
            ok[selected] &= (
                (query_lo[col, query] <= value) & (value <= query_hi[col, query]) & (value < np.inf)
            )  # (missing: inf)
        scanned = np.ones(len(queries), dtype=bool)
        scanned[taken] = False
        return pair_query[ok], positions[ok], np.flatnonzero(scanned)
