"""The subscription forest's nodes indexed for point profiles, by the values
they require and the attributes they constrain.

Where subscriptions constrain a few of many attributes, mostly to a value (a
symbol, an exchange) and the rest to ranges, covering prunes little, and a
grid over two numeric columns would test most of its members in full. Here
each node of the forest sits in one *list*, chosen by its box:

- a node that constrains some columns to a point is listed under the (code
  of the) value of its most selective point column, or of its two most
  selective ones (a pair key): a point profile looks up each of its values,
  and each pair of them, by one binary search of the list keys; where a
  value's list is long (VALUE_SPLIT), those of its members that constrain a
  range too are listed under the value and a range, as below (a profile
  reads the range lists under each of its values, of the columns it has);
- a node without a point column is listed under its most selective range
  column and the form of its range there (a low bound only, a high bound
  only, or both, by the binary order of magnitude of its width), sorted by
  the bound: a profile's value cuts such a list to the members whose bound
  it passes by two binary searches (or, for both bounds, to those whose low
  bound lies in `[value - widest, value]`; of these, the ones whose low bound
  is within the list's narrowest width of the value hold, a third search
  finds them, and only the others' high bound is tested);
- a node that constrains nothing is in a list that every profile reads.

The members a profile's lists give are then tested, in a few vector passes
over all the batch's candidates: the bounds of the columns their key does
not settle (a missing attribute fails them), and the exact test where a box
is only a necessary condition. Members that need neither (a value alone, a
range alone) have lists of their own, whose runs are answers as
they are. So a point profile costs what its candidates cost, not what the
held subscriptions do.

Each member keeps its node's entries (their subscription slots) beside it,
in list order, so that a run of members that need no test is one run of
entries to copy (`match_grouped`), not a gather per node.

The index covers a set of nodes built at once (`_Part`); nodes added later
wait in a small second part, rebuilt as they come, until it grows past a
share of the first and both are built again from the forest. A removed node
is marked dead where it is listed; a node whose entries change is marked
dead and waits to be listed again. Only point profiles are answered here:
for a point, a box that meets it also covers it (SEMANTICS §2), and an
interval profile takes the forest.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from matcher.boxes import MAX
from matcher.forest import Forest
from matcher.forest.arrays import Bounds, Ids, Mask
from matcher.forest.list_store import ELEMENT, run_positions
from matcher.preload import segments

REBUILD_SHARE = 8  # the added part is merged once it holds an eighth of the main one ...
MIN_ADDED = 2048  # ... and at least this many nodes
DEAD_SHARE = 4  # a part is rebuilt once a quarter of its members are dead
MAX_PAIR_KEYS = 256  # column pairs a profile's values are looked up by, at most
VALUE_SPLIT = 64  # a value's list this long lists its members with ranges by range too
WIDTH_STEPS = 2  # two-sided ranges grouped by width: classes per binary order ...
WIDTH_CLASSES = 128  # ... and classes in all
_EXPONENT_LOW = -30  # (exponents below this share the lowest class)

MEMBER_BYTES = 58 + 32  # a member's own arrays (`_Part.nbytes`), its share of the lists' at most
TEST_BYTES = 24  # a residual test slot of a member (column, low, high)
ENTRY_BYTES = 5  # an entry's value (int32) and whether it is alive

# (query, node) -> (overlaps, covers): the exact test for boxes that are not exact
ExactTest = Callable[[int, int], tuple[bool, bool]]
# What a part finds: runs of members that need no test (start, length, query),
# and the tested members that passed (position, query, covers)
_Found = tuple[tuple[Ids, Ids, Ids], tuple[Ids, Ids, Mask]]


class EqualityIndex:
    """The live nodes of a subscription forest, listed for point profiles.

    Invariant: every live node of the forest is in exactly one of `main`,
    `added` (alive there, with the entries the forest holds on it) or
    `waiting`; a node removed is in none (dead where it was listed). Built
    from the forest (O(nodes × columns + nodes log nodes + entries));
    `node_added` O(1), `node_removed`/`node_changed` O(the node's entries);
    `match` as the module says."""

    def __init__(self, forest: Forest) -> None:
        self.main = _Part(forest, _live_nodes(forest))
        self.added = _Part(forest, np.zeros(0, dtype=np.int64))
        self.waiting: set[int] = set()

    @property
    def nbytes(self) -> int:
        return self.main.nbytes + self.added.nbytes

    def node_added(self, node: int) -> None:
        """Note a node new to the forest (listed at the next query). O(1)."""
        self.waiting.add(node)

    def node_removed(self, node: int) -> None:
        """Note a node gone from the forest (its id may come back as another).
        O(its entries)."""
        if node in self.waiting:
            self.waiting.discard(node)
            return
        self.main.kill(node)
        self.added.kill(node)

    def node_changed(self, node: int) -> None:
        """Note an entry added to or removed from a live node: it is listed
        again, with its entries, at the next query. O(its entries)."""
        if node not in self.waiting:
            self.node_removed(node)
            self.waiting.add(node)

    def catch_up(self, forest: Forest) -> None:
        """List the waiting nodes: the added part built again with them, or both
        parts from the forest once the added part is large, or the dead many."""
        main, added = self.main, self.added
        rebuild = main.dead * DEAD_SHARE > max(len(main), MIN_ADDED)
        if self.waiting or added.dead:
            grown = len(added) - added.dead + len(self.waiting)
            rebuild |= grown > max(MIN_ADDED, len(main) // REBUILD_SHARE)
            if not rebuild:
                nodes = np.concatenate(
                    [added.live_nodes(), np.fromiter(self.waiting, dtype=np.int64)]
                )
                self.added = _Part(forest, nodes)
        if rebuild:
            self.main = _Part(forest, _live_nodes(forest))
            self.added = _Part(forest, np.zeros(0, dtype=np.int64))
        self.waiting.clear()

    def match(
        self, forest: Forest, values: Bounds, present: Mask, exact: ExactTest
    ) -> tuple[Ids, Ids, Mask]:
        """Every (query, node) pair whose node holds for the point profile of
        the query, and whether it covers it (always, for a point): `values`
        are the profiles' points over the forest's columns (columns × queries),
        `present` where they have the attribute. The waiting nodes listed first."""
        self.catch_up(forest)
        parts = [p.match(forest, values, present, exact) for p in (self.main, self.added) if len(p)]
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0, dtype=bool)
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))

    def match_grouped(
        self,
        forest: Forest,
        values: Bounds,
        present: Mask,
        exact: ExactTest,
        slot_map: np.ndarray | None = None,
    ) -> tuple[Ids, np.ndarray]:
        """The entry values (subscription slots) of every node that holds for
        the point profiles (as `match`), grouped by query: (how many each query
        has, the values), or what `slot_map` keeps for those slots. Runs of
        members are copied as runs of their entries, so the cost is that of
        `match` with no per-node gather of entries; `slot_map` is read for the
        index's entries or for the answers, whichever are fewer."""
        self.catch_up(forest)
        n_queries = values.shape[1]
        parts = [p for p in (self.main, self.added) if len(p)]
        if not parts:
            return np.zeros(n_queries, dtype=np.int64), np.zeros(0, dtype=ELEMENT)
        found = [p.entry_runs(values, present, exact) for p in parts]
        offsets = np.cumsum([0] + [len(p.entry_value) for p in parts])
        owner = np.concatenate([f[0] for f in found])
        start = np.concatenate([f[1] + offset for f, offset in zip(found, offsets, strict=False)])
        length = np.concatenate([f[2] for f in found])
        order = np.argsort(owner.astype(np.int16) if n_queries < 2**15 else owner, kind="stable")
        owner, start, length = owner[order], start[order], length[order]
        positions = run_positions(start, length)
        source = (
            parts[0].entry_value
            if len(parts) == 1
            else np.concatenate([p.entry_value for p in parts])
        )
        early = slot_map is not None and len(source) < len(positions)
        if early:
            source = np.take(slot_map, source.astype(np.intp), mode="clip")  # (dead too)
        if not any(p.dead for p in parts):
            counts = np.bincount(owner, weights=length, minlength=n_queries).astype(np.int64)
        else:
            alive = np.concatenate([p.entry_alive for p in parts])[positions]
            counts = np.bincount(np.repeat(owner, length)[alive], minlength=n_queries)
            positions = positions[alive]
        found = np.take(source, positions)
        if slot_map is not None and not early:
            found = np.take(slot_map, found.astype(np.intp))
        return counts, found

    def check(self, forest: Forest) -> None:
        """Assert that every live node is listed once, alive (the waiting ones
        first), with its entries as the forest holds them, and no other node.
        O(nodes + entries): for tests."""
        self.catch_up(forest)
        listed = np.concatenate([self.main.live_nodes(), self.added.live_nodes()])
        assert len(np.unique(listed)) == len(listed), "a node listed twice"
        assert (np.sort(listed) == _live_nodes(forest)).all(), "listed nodes are not the live ones"
        for part in (self.main, self.added):
            for position in np.flatnonzero(part.alive).tolist():
                a, b = part.entry_start[position], part.entry_start[position + 1]
                held = forest.entries.gather_counts(
                    part.node[position : position + 1], values=True
                )[1]
                assert part.entry_alive[a:b].all(), "a live member's entries marked dead"
                assert sorted(part.entry_value[a:b].tolist()) == sorted(held.tolist()), (
                    "a member's entries are not its node's"
                )


_NO_DOUBT = (*(np.zeros(0, dtype=np.int64),) * 4, np.zeros(0))  # (see `_Part._cut`)


def _width_class(width: np.ndarray) -> np.ndarray:
    """The class of two-sided ranges' widths: WIDTH_STEPS classes per binary
    order of magnitude (so a class's narrowest is most of its widest)."""
    with np.errstate(all="ignore"):
        mantissa, exponent = np.frexp(np.minimum(width, MAX))
    step = np.clip(((mantissa - 0.5) * 2 * WIDTH_STEPS).astype(np.int64), 0, WIDTH_STEPS - 1)
    return np.clip((exponent - _EXPONENT_LOW) * WIDTH_STEPS + step, 0, WIDTH_CLASSES - 1)


def _sure_low(value: np.ndarray, narrowest: np.ndarray) -> np.ndarray:
    """A low bound at or above which a range at least `narrowest` wide holds
    `value`: value - narrowest, raised past the rounding of the subtraction
    and of the widths (a few units in the last place)."""
    with np.errstate(all="ignore"):
        return (value - narrowest) + (np.abs(value) + narrowest) * 2.0**-50


def estimated_bytes(forest: Forest) -> int:
    """At least the `nbytes` of an index of the forest's live nodes, before
    building it: every member with as many residual test slots as the most
    constrained node has constrained columns less its key's one.
    O(nodes × columns)."""
    forest.sync_columns()
    nodes = _live_nodes(forest)
    if not len(nodes):
        return 0
    n = len(forest.keys)
    lo, hi = forest.lo[:, :n], forest.hi[:, :n]
    constrained = ((lo > -np.inf) | (hi < np.inf)).sum(axis=0)[nodes]
    depth = max(int(constrained.max()) - 1, 0)
    entries = int(forest.entries.count[nodes].sum())
    positions = 8 * (int(nodes.max()) + 1)  # (`pos_of`)
    return len(nodes) * (MEMBER_BYTES + TEST_BYTES * depth) + entries * ENTRY_BYTES + positions


def _live_nodes(forest: Forest) -> Ids:
    return np.flatnonzero(forest.entries.count[: len(forest.keys)] > 0).astype(np.int64)


class _Part:
    """Nodes built into lists at once: members sorted by (list key, sort bound).

    Member arrays (one row per member, in list order): `node`, `key`, `sort`
    (the bound a range list is sorted by), and its residual tests (`tests` of
    them in `res_col`/`res_lo`/`res_hi`, T × members; column `columns` is a
    dummy that every value passes). A list key is twice the key of its
    value, pair or range form, plus one where its members need tests."""

    def __init__(self, forest: Forest, nodes: Ids) -> None:
        forest.sync_columns()
        self.columns = columns = forest.lo.shape[0]
        n = len(nodes)
        self.dead = 0
        self.pos_of = np.full(int(nodes.max()) + 1 if n else 0, -1, dtype=np.int64)
        lo, hi = forest.lo[:, nodes], forest.hi[:, nodes]
        constrained = (lo > -np.inf) | (hi < np.inf)
        point = constrained & (lo == hi)
        # codes of the point values, column after column
        self.values: list[np.ndarray] = []
        self.base = np.zeros(columns + 1, dtype=np.int64)
        code = np.full((columns, n), -1, dtype=np.int64)
        for c in range(columns):
            found = np.unique(lo[c, point[c]])
            self.values.append(found)
            self.base[c + 1] = self.base[c] + len(found)
            if len(found):
                code[c, point[c]] = self.base[c] + np.searchsorted(found, lo[c, point[c]])
        self.codes = ncodes = int(self.base[-1])
        # the key columns: the point columns of most distinct values, two at most
        score = np.where(
            point, np.diff(self.base)[:, None] * columns + np.arange(columns)[:, None], -1
        )
        idx = np.arange(n)
        has_point = point.any(axis=0)
        first = np.argmax(score, axis=0) if columns else np.zeros(n, dtype=np.int64)
        if columns:
            score[first, idx] = -1
        second = np.argmax(score, axis=0) if columns else np.zeros(n, dtype=np.int64)
        has_pair = has_point & (score[second, idx] >= 0 if columns else False)
        a = np.minimum(first, second)
        b = np.maximum(first, second)
        pair_columns = np.unique(a[has_pair] * columns + b[has_pair])
        if len(pair_columns) > MAX_PAIR_KEYS:  # (too many pairs to look up: single keys)
            has_pair[:] = False
            pair_columns = pair_columns[:0]
        width = max(columns, 1)
        self.pair_columns = np.stack([pair_columns // width, pair_columns % width])
        key = np.zeros(n, dtype=np.int64)
        key[has_point] = code[first[has_point], idx[has_point]]
        pairs = np.flatnonzero(has_pair)
        key[pairs] = ncodes + code[a[pairs], pairs] * ncodes + code[b[pairs], pairs]
        self.always_key = ncodes + ncodes * ncodes
        self.range_base = self.always_key + 1
        keyed = np.zeros((columns, n), dtype=bool)
        keyed[first[has_point], idx[has_point]] = True
        keyed[second[pairs], pairs] = True
        # nodes without a point column: listed by their most selective range column
        ranged = np.flatnonzero(~has_point & constrained.any(axis=0))
        key[~has_point] = self.always_key
        sort = np.zeros(n)
        bound_col = np.full(n, columns, dtype=np.int64)  # (the dummy column: no bound)
        bound_hi = np.full(n, np.inf)
        # (the spread of each column's finite bounds: what a range passes a share of)
        low = np.minimum(
            np.where(np.abs(lo) < MAX, lo, np.inf).min(axis=1, initial=np.inf),
            np.where(np.abs(hi) < MAX, hi, np.inf).min(axis=1, initial=np.inf),
        )
        high = np.maximum(
            np.where(np.abs(lo) < MAX, lo, -np.inf).max(axis=1, initial=-np.inf),
            np.where(np.abs(hi) < MAX, hi, -np.inf).max(axis=1, initial=-np.inf),
        )
        spread = np.where(high > low, high - low, np.nan)[:, None]

        def by_range(members: Ids, primary: Ids, *, by_width: bool) -> None:
            """List `members` under `primary` (0, or a value's code + 1) and their
            most selective range column among those not yet keyed, sorted by
            its bound; two-sided ranges by width class if `by_width`."""
            r_lo, r_hi = lo[:, members], hi[:, members]
            with np.errstate(all="ignore"):
                top, bottom = np.minimum(r_hi, high[:, None]), np.maximum(r_lo, low[:, None])
                passes = (top - bottom) / spread
            passes = np.where(np.isfinite(passes), passes, 1.0)
            passes = np.where(constrained[:, members] & ~keyed[:, members], passes, np.inf)
            column = np.argmin(passes, axis=0)
            c_lo, c_hi = (
                r_lo[column, np.arange(len(members))],
                r_hi[column, np.arange(len(members))],
            )
            low_only = c_hi >= MAX  # (a column merely present: low-only, at -MAX)
            high_only = (c_lo <= -MAX) & ~low_only
            with np.errstate(over="ignore"):  # (MAX - -MAX is inf: the widest class)
                width = _width_class(c_hi - c_lo) if by_width else 0
            form = np.where(low_only, 0, np.where(high_only, 1, 2 + width))
            key[members] = (
                self.range_base + (primary * columns + column) * (2 + WIDTH_CLASSES) + form
            )
            sort[members] = np.where(high_only, c_hi, c_lo)
            # the key column is settled by the list's cut, but for the high bound
            # of a two-sided range near the cut's low end (tested apart, `found`)
            keyed[column, members] = True
            two_sided = ~(low_only | high_only)
            bound_col[members[two_sided]] = column[two_sided]
            bound_hi[members[two_sided]] = c_hi[two_sided]

        if len(ranged):
            by_range(ranged, np.zeros(len(ranged), dtype=np.int64), by_width=True)
        # the members of a large value list that constrain a range as well: listed
        # under the value and that range (a profile cuts them as a range list)
        single = has_point & ~has_pair
        sizes = np.bincount(key[single], minlength=ncodes)
        split = (
            np.flatnonzero(
                single
                & (sizes[np.minimum(key, ncodes - 1)] >= VALUE_SPLIT)
                & (constrained & ~keyed).any(axis=0)
            )
            if ncodes
            else np.zeros(0, dtype=np.int64)
        )
        if len(split):
            by_range(split, key[split] + 1, by_width=False)
        # a settled member holds for every profile that reaches it (no residual
        # test, no exact test): such members get lists of their own (even keys)
        settled = ~(constrained & ~keyed).any(axis=0) & ~forest.exact[nodes]
        key = 2 * key + ~settled
        order = np.lexsort((sort, key))
        self.node = nodes[order].astype(np.int64)
        self.key, self.sort = key[order], sort[order]
        self.alive = np.ones(n, dtype=bool)
        self.pos_of[self.node] = np.arange(n)
        self.exact = forest.exact[self.node]
        self.bound_col, self.bound_hi = bound_col[order], bound_hi[order]
        # the members' entry values (subscription slots), each member's a run
        counts, self.entry_value = forest.entries.gather_counts(self.node, values=True)
        self.entry_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.entry_alive = np.ones(len(self.entry_value), dtype=bool)
        # residual tests: the constrained columns a key does not settle
        residual = (constrained & ~keyed)[:, order]
        member, col = np.nonzero(residual.T)
        tests = np.bincount(member, minlength=n)
        self.tests = tests
        depth = int(tests.max()) if n else 0
        slot = np.arange(len(member)) - np.repeat(np.cumsum(tests) - tests, tests)
        self.res_col = np.full((depth, n), columns, dtype=np.int64)
        self.res_lo = np.full((depth, n), -np.inf)
        self.res_hi = np.full((depth, n), np.inf)
        self.res_col[slot, member] = col
        self.res_lo[slot, member] = lo[:, order][col, member]
        self.res_hi[slot, member] = hi[:, order][col, member]
        # the lists: distinct keys, their runs of members
        self.list_key, self.list_start, counts = np.unique(
            self.key, return_index=True, return_counts=True
        )
        self.list_end = self.list_start + counts
        # a settled list: its members hold for every profile that reaches them
        # (no residual test, no exact test, no column but the key's)
        self.list_settled = self.list_key % 2 == 0
        # range lists (the last lists): their column, form, primary (0: every
        # profile's; else a value's code + 1), and their members' widest and
        # narrowest two-sided range
        nlists = len(self.list_key)
        ranges = np.flatnonzero(self.list_key // 2 >= self.range_base)
        relative = self.list_key[ranges] // 2 - self.range_base
        self.list_form = np.zeros(nlists, dtype=np.int64)
        self.list_column = np.zeros(nlists, dtype=np.int64)
        self.list_form[ranges] = relative % (2 + WIDTH_CLASSES)
        self.list_column[ranges] = relative // (2 + WIDTH_CLASSES) % max(columns, 1)
        primary = relative // (2 + WIDTH_CLASSES) // max(columns, 1)
        self.range_lists = ranges[primary == 0]
        # (the lists under each value: value_lists[value_first[code]:value_first[code + 1]])
        self.value_lists = ranges[primary > 0]
        self.value_first = np.searchsorted(primary[primary > 0], np.arange(ncodes + 1) + 1)
        self.list_widest, self.list_narrowest = np.zeros(nlists), np.zeros(nlists)
        if len(ranges):
            first = int(self.list_start[ranges[0]])
            width = np.where(self.bound_col < columns, self.bound_hi - self.sort, 0.0)[first:]
            at = self.list_start[ranges] - first
            with np.errstate(all="ignore"):
                self.list_widest[ranges] = np.maximum.reduceat(width, at)
                self.list_narrowest[ranges] = np.minimum.reduceat(width, at)

    def __len__(self) -> int:
        return len(self.node)

    @property
    def nbytes(self) -> int:
        arrays = (self.node, self.key, self.sort, self.alive, self.exact, self.tests)
        arrays += (self.bound_col, self.bound_hi, self.entry_value, self.entry_start)
        arrays += (self.list_form, self.list_column, self.list_widest, self.list_narrowest)
        arrays += (self.entry_alive,)
        tests = (self.res_col, self.res_lo, self.res_hi)
        return sum(a.nbytes for a in arrays + tests) + self.pos_of.nbytes

    def kill(self, node: int) -> None:
        """Mark a node's member dead, and its entries, if it has one. O(its entries)."""
        if node < len(self.pos_of) and self.pos_of[node] >= 0:
            position = self.pos_of[node]
            self.alive[position] = False
            self.entry_alive[self.entry_start[position] : self.entry_start[position + 1]] = False
            self.pos_of[node] = -1
            self.dead += 1

    def live_nodes(self) -> Ids:
        return self.node[self.alive]

    def found(self, values: Bounds, present: Mask, exact: ExactTest) -> _Found:
        """The members of this part that hold for the point profiles
        (`EqualityIndex.match`): runs of members that need no test, and the
        tested ones that passed; dead members left in the runs."""
        columns = self.columns
        n_queries = values.shape[1]
        values, present = values[:columns], present[:columns]
        starts, stops, owners, lists = [], [], [], []
        # value keys: each present value's code, and each pair's
        code = np.full((columns, n_queries), -1, dtype=np.int64)
        for c in range(columns):
            found = self.values[c]
            if not len(found):
                continue
            at = np.searchsorted(found, values[c])
            ok = present[c] & (at < len(found))
            ok[ok] = found[at[ok]] == values[c, ok]
            code[c, ok] = self.base[c] + at[ok]
        keys, owner = [], []
        for c in range(columns):
            has = np.flatnonzero(code[c] >= 0)
            keys.append(code[c, has])
            owner.append(has)
        ncodes = self.codes
        for a, b in self.pair_columns.T.tolist():
            has = np.flatnonzero((code[a] >= 0) & (code[b] >= 0))
            keys.append(ncodes + code[a, has] * ncodes + code[b, has])
            owner.append(has)
        keys.append(np.full(n_queries, self.always_key, dtype=np.int64))
        owner.append(np.arange(n_queries))
        keys_at, owner_at = np.concatenate(keys), np.concatenate(owner)
        keys_at = np.concatenate([2 * keys_at, 2 * keys_at + 1])  # (settled, and not)
        owner_at = np.concatenate([owner_at, owner_at])
        at = np.searchsorted(self.list_key, keys_at)
        ok = at < len(self.list_key)
        ok[ok] = self.list_key[at[ok]] == keys_at[ok]
        starts.append(self.list_start[at[ok]])
        stops.append(self.list_end[at[ok]])
        owners.append(owner_at[ok])
        lists.append(at[ok])
        # range lists: every profile's lists of its present columns, and the lists
        # under each of its values of their present columns
        flat = np.concatenate([values, np.zeros((1, n_queries))]).ravel()
        uncertain = []
        for which, asking in self._range_lists(keys[:columns], owner[:columns], present):
            sure_from, last, doubt = self._cut(which, asking, values)
            starts.append(sure_from)
            stops.append(last)
            owners.append(asking)
            lists.append(which)
            uncertain.append(doubt)
        start, stop, owner = map(np.concatenate, (starts, stops, owners))
        length = np.maximum(stop - start, 0)
        settled = self.list_settled[np.concatenate(lists)]
        sure = (start[settled], length[settled], owner[settled])
        positions, queries = self._runs(start[~settled], length[~settled], owner[~settled])
        u_start, u_length, u_owner, u_list, u_value = (
            np.concatenate([u[i] for u in uncertain]) if uncertain else _NO_DOUBT[i]
            for i in range(5)
        )
        if len(u_start):
            u_positions, u_queries = self._runs(u_start, u_length, u_owner)
            passed = self.bound_hi[u_positions] >= np.repeat(u_value, u_length)
            u_settled = np.repeat(self.list_settled[u_list], u_length)[passed]
            u_positions, u_queries = u_positions[passed], u_queries[passed]
            sure = (
                np.concatenate([sure[0], u_positions[u_settled]]),
                np.concatenate([sure[1], np.ones(int(u_settled.sum()), dtype=np.int64)]),
                np.concatenate([sure[2], u_queries[u_settled]]),
            )
            positions = np.concatenate([positions, u_positions[~u_settled]])
            queries = np.concatenate([queries, u_queries[~u_settled]])
        if self.dead:
            alive = self.alive[positions]
            positions, queries = positions[alive], queries[alive]
        # The residual bounds, a test slot at a time, on the candidates still
        # standing (`at`). A missing attribute's value is inf, above every
        # constrained high bound (at most MAX): the test of its column fails, so
        # presence needs none. A member's slots past its tests are the dummy
        # column, which every value passes: no candidate needs to leave early.
        tests = self.tests[positions]
        keep = tests == 0
        at = np.flatnonzero(~keep)
        for t in range(self.res_col.shape[0]):
            if not len(at) or t and t >= int(tests[at].max()):
                break
            p = positions[at]
            v = flat[self.res_col[t, p] * n_queries + queries[at]]
            at = at[(self.res_lo[t, p] <= v) & (v <= self.res_hi[t, p])]
        keep[at] = True
        positions, queries = positions[keep], queries[keep]
        covers = np.ones(len(positions), dtype=bool)
        inexact = np.flatnonzero(self.exact[positions])
        if len(inexact):
            keep = np.ones(len(positions), dtype=bool)
            for i in inexact.tolist():
                keep[i], covers[i] = exact(int(queries[i]), int(self.node[positions[i]]))
            positions, queries, covers = positions[keep], queries[keep], covers[keep]
        return sure, (positions, queries, covers)

    def match(
        self, forest: Forest, values: Bounds, present: Mask, exact: ExactTest
    ) -> tuple[Ids, Ids, Mask]:
        """(query, node, covers) of this part's live nodes that hold for the
        point profiles (`EqualityIndex.match`)."""
        sure, (positions, queries, covers) = self.found(values, present, exact)
        sure_positions, sure_queries = self._runs(*sure)
        if self.dead:
            alive = self.alive[sure_positions]
            sure_positions, sure_queries = sure_positions[alive], sure_queries[alive]
        return (
            np.concatenate([sure_queries, queries]),
            np.concatenate([self.node[sure_positions], self.node[positions]]),
            np.concatenate([np.ones(len(sure_positions), dtype=bool), covers]),
        )

    def entry_runs(self, values: Bounds, present: Mask, exact: ExactTest) -> tuple[Ids, Ids, Ids]:
        """The runs of `entry_value` that hold for the point profiles, as
        (query, start, length): a run of members is one run of their entries.
        Dead members' entries left in (`entry_alive` says which)."""
        (start, length, owner), (positions, queries, _) = self.found(values, present, exact)
        at = self.entry_start
        first = np.concatenate([at[start], at[positions]])
        stop = np.concatenate([at[start + length], at[positions + 1]])
        return np.concatenate([owner, queries]), first, stop - first

    def _range_lists(
        self, codes: list[Ids], owner: list[Ids], present: Mask
    ) -> list[tuple[Ids, Ids]]:
        """The range lists the point profiles read, as (list, query) arrays:
        every profile's lists of the columns it has, and the lists under each
        value it has (`codes`, `owner`: the values' codes and queries) of the
        columns it has."""
        out = []
        if len(self.range_lists):
            ranged, asking = np.nonzero(present[self.list_column[self.range_lists]])
            out.append((self.range_lists[ranged], asking))
        if len(self.value_lists):
            code, asking = np.concatenate(codes), np.concatenate(owner)
            first, last = self.value_first[code], self.value_first[code + 1]
            under = run_positions(first, last - first)
            asking = np.repeat(asking, last - first)
            which = self.value_lists[under]
            has = present[self.list_column[which], asking]
            out.append((which[has], asking[has]))
        return out

    def _cut(
        self, which: Ids, asking: Ids, values: Bounds
    ) -> tuple[Ids, Ids, tuple[Ids, Ids, Ids, Ids, np.ndarray]]:
        """Each range list's run of members whose sort bound the query's value
        passes, as [sure_from, last) of members that hold on the list's column,
        and the runs before them whose high bound is in doubt (the members of a
        two-sided form whose low bound is farther below the value than the
        list's narrowest width): (start, length, query, list, value)."""
        value = values[self.list_column[which], asking]
        form = self.list_form[which]
        low = np.where(form == 1, value, value - self.list_widest[which])
        low = np.where(form == 0, -np.inf, low)
        high = np.where(form == 1, np.inf, value)
        begin, end = self.list_start[which], self.list_end[which]
        first = segments.search(self.sort, begin, end, low, right=False)
        last = segments.search(self.sort, first, end, high, right=True)
        two = np.flatnonzero(form >= 2)
        if not len(two):
            return first, last, _NO_DOUBT
        sure_from = first.copy()
        sure_from[two] = segments.search(
            self.sort,
            first[two],
            last[two],
            _sure_low(value[two], self.list_narrowest[which[two]]),
            right=False,
        )
        doubt = (first[two], sure_from[two] - first[two], asking[two], which[two], value[two])
        return sure_from, last, doubt

    @staticmethod
    def _runs(start: Ids, length: Ids, owner: Ids) -> tuple[Ids, Ids]:
        """The positions of runs of members and the query each belongs to."""
        return run_positions(start, length), np.repeat(owner, length)
