"""The answers of a batch of profiles from their filled cells, in one compiled pass.

A profile inside a cell is answered by a few runs of each group of the cell's
members (`subscription_cells`): a binary search narrows the run (to the
residual value, then by the sort key), and the run is copied as it is, or
copied where each member passes one more test (a corner's second bound, a
band's high bound, a mixed member's columns). In numpy that is a dozen passes over the answer
(positions, gathers, masks, compaction), each a full sweep of memory; here
each member is read once and each answer written once, by a loop that numba
compiles to machine code (cached on disk: beside this module, or in numba's
user-wide cache where the module lies in a zip, as on a cluster's executors;
so a process pays the compile once per install, not per start).

The exact test of a mixed member whose box is only a necessary condition
stays with the caller, which asks the conjunction itself: `answer` returns
where such members lie in its answer, and they are few.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _first_at_least(keys: np.ndarray, start: int, stop: int, value: float) -> int:
    """The first position in `keys[start:stop]` (sorted) whose key is at least
    `value`, or `stop`. O(log(stop - start))."""
    while start < stop:
        middle = (start + stop) >> 1
        if keys[middle] < value:
            start = middle + 1
        else:
            stop = middle
    return start


@numba.njit(cache=True, nogil=True)
def _first_above(keys: np.ndarray, start: int, stop: int, value: float) -> int:
    """The first position in `keys[start:stop]` (sorted) whose key is above
    `value`, or `stop`. O(log(stop - start))."""
    while start < stop:
        middle = (start + stop) >> 1
        if keys[middle] <= value:
            start = middle + 1
        else:
            stop = middle
    return start


@numba.njit(cache=True, nogil=True)
def _bound(
    query_lo: np.ndarray, query_hi: np.ndarray, column: int, query: int, high: bool, covers: bool
) -> float:
    """The profile bound that a key on `column` is compared with: a low key
    meets (`overlaps`) a profile up to its high end and lies below (`covers`)
    its low end; a high key the other way round."""
    if high == covers:
        return query_hi[column, query]
    return query_lo[column, query]


@numba.njit(cache=True, nogil=True)
def answer(
    queries: np.ndarray,
    slots: np.ndarray,
    order: np.ndarray,
    base: np.ndarray,
    ends: np.ndarray,
    query_lo: np.ndarray,
    query_hi: np.ndarray,
    member_entry: np.ndarray,
    member_key: np.ndarray,
    member_key2: np.ndarray,
    member_res: np.ndarray,
    group_column: np.ndarray,
    group_high: np.ndarray,
    group_column2: np.ndarray,
    group_high2: np.ndarray,
    group_covers: np.ndarray,
    group_tested: np.ndarray,
    grid_columns: np.ndarray,
    res_column: np.ndarray,
    mixed_columns: np.ndarray,
    node_lo: np.ndarray,
    node_hi: np.ndarray,
    owner: np.ndarray,
    covers: np.ndarray,
    exact: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """See `SubscriptionCells.match`: per query, how many entries hold; the
    entries, in query order (each query's groups in order, each group's
    members in order); and the positions in them of members still to be
    tested exactly. Two passes over the queries in `order` (by cell: a cell's
    members are read while the caches hold them): the runs narrowed by
    search (their lengths bound the answer), then the runs copied or tested
    into it; then each query's answer is moved into query order."""
    n, groups = len(queries), ends.shape[1]
    mixed = groups - 1
    run_start = np.empty((n, groups), dtype=np.int64)
    run_stop = np.empty((n, groups), dtype=np.int64)
    most = 0
    for i in order:
        query, slot = queries[i], slots[i]
        stop = base[i]
        for group in range(groups):
            start, stop = stop, base[i] + ends[slot, group]
            begin, end = start, stop
            if end > begin and group_tested[group]:
                value = query_lo[res_column[slot], query]
                begin = _first_at_least(member_res, begin, end, value)
                end = _first_above(member_res, begin, end, value)
            column = group_column[group]
            if end > begin and column >= 0:
                high = group_high[group]
                value = _bound(
                    query_lo, query_hi, grid_columns[column], query, high, group_covers[group]
                )
                if high:  # a high bound holds from the profile's bound on: a suffix
                    begin = _first_at_least(member_key, begin, end, value)
                else:  # a low one up to it: a prefix
                    end = _first_above(member_key, begin, end, value)
            run_start[i, group], run_stop[i, group] = begin, end
            most += max(end - begin, 0)
    scratch = np.empty(most, dtype=member_entry.dtype)
    counts = np.zeros(n, dtype=np.int64)
    firsts = np.zeros(n, dtype=np.int64)
    pending = np.empty(0, dtype=np.int64)  # (where in scratch, query)
    pending_query = np.empty(0, dtype=np.int64)
    pending_count = 0
    columns = min(node_lo.shape[0], mixed_columns.shape[1])
    written = 0
    for i in order:
        query, slot = queries[i], slots[i]
        first = written
        for group in range(groups):
            begin, end = run_start[i, group], run_stop[i, group]
            if end <= begin:
                continue
            column2 = group_column2[group]
            if group == mixed:
                for at in range(begin, end):
                    entry = member_entry[at]
                    node = owner[entry]
                    covering = covers[entry]
                    holds = True
                    for column in range(columns):
                        if not mixed_columns[slot, column]:
                            continue
                        box_lo, box_hi = node_lo[column, node], node_hi[column, node]
                        p_lo, p_hi = query_lo[column, query], query_hi[column, query]
                        if not (box_lo <= p_hi and p_lo <= box_hi):
                            holds = False
                            break
                        if covering and not (box_lo <= p_lo and p_hi <= box_hi):
                            holds = False
                            break
                    if holds:
                        if exact[node]:
                            if pending_count == len(pending):
                                pending = _grown(pending, pending_count)
                                pending_query = _grown(pending_query, pending_count)
                            pending[pending_count] = written
                            pending_query[pending_count] = i
                            pending_count += 1
                        scratch[written] = entry
                        written += 1
            elif column2 >= 0:
                high2 = group_high2[group]
                value = _bound(
                    query_lo, query_hi, grid_columns[column2], query, high2, group_covers[group]
                )
                # (each member written, and kept by its test: no branch to mispredict)
                if high2:
                    for at in range(begin, end):
                        scratch[written] = member_entry[at]
                        written += member_key2[at] >= value
                else:
                    for at in range(begin, end):
                        scratch[written] = member_entry[at]
                        written += member_key2[at] <= value
            else:
                scratch[written : written + end - begin] = member_entry[begin:end]
                written += end - begin
        counts[i], firsts[i] = written - first, first
    # back in query order, and the pending positions with them
    out = np.empty(written, dtype=member_entry.dtype)
    at = 0
    starts = np.empty(n, dtype=np.int64)
    for i in range(n):
        starts[i] = at
        out[at : at + counts[i]] = scratch[firsts[i] : firsts[i] + counts[i]]
        at += counts[i]
    for k in range(pending_count):
        i = pending_query[k]
        pending[k] += starts[i] - firsts[i]
    return counts, out, pending[:pending_count]


@numba.njit(cache=True, nogil=True)
def _grown(array: np.ndarray, used: int) -> np.ndarray:
    """`array` copied into one twice as long (16 at least)."""
    out = np.empty(max(16, 2 * len(array)), dtype=array.dtype)
    out[:used] = array[:used]
    return out


def warm() -> None:
    """Compile `answer` for the types the cells pass it (or load it from the
    disk cache), on an empty batch: what an install runs, so that a job's
    first batch does not wait for the compiler."""
    ids, flags = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=bool)
    bounds, none = np.zeros((1, 1)), np.zeros(0, dtype=np.int64)
    answer(
        *(none, none, none, none, np.zeros((0, 1), dtype=np.int64), bounds, bounds),
        *(np.zeros(1, dtype=np.int32), bounds[0], bounds[0], np.zeros(1, dtype=np.float32)),
        *(ids, flags, ids, flags, flags, flags, ids, ids),
        *(np.zeros((1, 1), dtype=bool), bounds, bounds, ids, flags, flags),
    )
