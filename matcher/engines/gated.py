"""The subscriptions whose filters hold positive pattern tests, matched by index.

Such a filter is split into its pattern tests and the rest of it
(`Conjunction.without`). The rests live in a covering forest of their own, one
node per distinct rest, holding one entry: the rest's gate. The tests live in a
`PatternIndex`. A batch of profiles is matched against the rests first, so the
forest prunes on the other attributes; each profile that reaches a gate then
runs each engine once on its attribute's value, and an entry holds where its
gate was reached and all its tests hold. No filter's pattern is tested one by
one: the entries of the tests that hold are joined with the gates reached in a
few vector operations over the entries sorted by test.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from matcher.boxes import FILTER_FILL, Dims
from matcher.constraints import Conjunction
from matcher.engines.pattern_index import PatternIndex
from matcher.forest import Forest
from matcher.forest.arrays import Ids, Mask
from matcher.forest.list_store import grown, run_positions
from matcher.profiles import Profile

_NONE = -1
_NO_PAIRS = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))
# At most this many profiles and rests, each rest is tested on each profile
# in Python: a forest descent costs about 100 us whatever the batch, a rest's
# own test a few.
FEW = 8


class GatedFilters:
    """Subscription entries (the caller's ids: small ints) whose filters have
    pattern tests.

    Invariants: each held entry is in `held` with its gate, its test ids (in
    `index`, counted once per entry) and its relation; an entry of one test
    has `test_of[entry]` and `gate_of[entry]` (every other cell of `test_of` is
    -1), one of several tests is in `several[its first test]` (no set there is
    empty); `_sorted` is None or the entries of one test sorted by test, with
    each test id's first position and count among them; each
    gate is the forest entry (and value) of the node of its rest, `rests` and
    `gates` are inverse maps, and `gate_refs` counts the held entries per gate
    (each positive); `covers_entries` counts the entries of `covers`
    subscriptions.
    """

    def __init__(self, codes: dict[str, int]) -> None:
        self.dims = Dims(codes)
        self.forest = Forest(
            self.dims, FILTER_FILL, Conjunction.covers_filter, entry_values=True, box_order=True
        )
        self.index = PatternIndex()
        self.gates: dict[Conjunction, int] = {}  # rest -> its gate
        self.rests: dict[int, Conjunction] = {}  # gate -> its rest
        self.gate_refs: dict[int, int] = {}
        self._next_gate = 0
        self.held: dict[int, tuple[int, tuple[int, ...], bool]] = {}
        self.test_of = np.full(16, _NONE, dtype=np.int64)
        self.gate_of = np.full(16, _NONE, dtype=np.int64)
        self.several: dict[int, set[int]] = {}  # first test id -> entries of several tests
        self.covers_entries = 0
        # (where each test's entries start in the next, how many; the entries by test)
        self._sorted: tuple[Ids, Ids, Ids] | None = None

    def __len__(self) -> int:
        return len(self.held)

    def add(self, entry: int, conj: Conjunction, *, covers: bool) -> None:
        """Hold a subscription entry whose filter has pattern tests. One
        `PatternIndex.add` a test, and a `Forest.add` for a rest not held yet."""
        tests = conj.pattern_tests
        rest = conj.without(tests)
        gate = self.gates.get(rest)
        if gate is None:
            gate = self._next_gate
            self._next_gate += 1
            self.gates[rest], self.rests[gate], self.gate_refs[gate] = gate, rest, 0
            self.forest.add(rest, partial(self.dims.filter_box, rest), gate, gate)
        self.gate_refs[gate] += 1
        ids = tuple(self.index.add(test) for test in tests)
        self.held[entry] = (gate, ids, covers)
        if len(ids) == 1:
            self.test_of = grown(self.test_of, entry + 1, _NONE)
            self.gate_of = grown(self.gate_of, entry + 1, _NONE)
            self.test_of[entry], self.gate_of[entry] = ids[0], gate
            self._sorted = None
        else:
            self.several.setdefault(ids[0], set()).add(entry)
        self.covers_entries += covers

    def discard(self, entry: int) -> None:
        """Drop a held entry: the converse of `add`, at the same cost."""
        gate, ids, covers = self.held.pop(entry)
        if len(ids) == 1:
            self.test_of[entry] = self.gate_of[entry] = _NONE
            self._sorted = None
        else:
            self.several[ids[0]].discard(entry)
            if not self.several[ids[0]]:
                del self.several[ids[0]]
        for ident in ids:
            self.index.release(ident)
        self.covers_entries -= covers
        self.gate_refs[gate] -= 1
        if not self.gate_refs[gate]:
            del self.gate_refs[gate], self.gates[self.rests.pop(gate)]
            self.forest.discard(gate)

    def _by_test(self) -> tuple[Ids, Ids, Ids]:
        """The entries of one test sorted by it, and per test id (the index's
        ids so far) its first position there and its count: (first, count,
        entries). O(entries log entries + ids) after a change, else O(1)."""
        if self._sorted is None:
            entries = np.flatnonzero(self.test_of >= 0)
            tests = self.test_of[entries]
            order = np.argsort(tests, kind="stable")
            tests, entries = tests[order], entries[order]
            bounds = np.searchsorted(tests, np.arange(self.index.next_id + 1))
            self._sorted = (bounds[:-1], np.diff(bounds), entries)
        return self._sorted

    def match(self, profiles: list[Profile]) -> tuple[Ids, Ids, Mask]:
        """Every (profile index, entry) pair whose filter overlaps the profile,
        with whether its rest also covers it (a pattern test holds on a point:
        it covers where it overlaps), grouped by profile. One descent of the
        rests' forest (or, for a few profiles and rests, each rest's own
        test); for each profile that reached a gate one pass of each engine;
        then O(tests that hold + pairs) in vector operations (× log pairs
        reached where there are several rests), and a Python step per entry of
        several tests under the tests that hold."""
        if len(profiles) <= FEW and len(self.rests) <= FEW:
            queries, gates, covers = self._reached_few(profiles)
        else:
            queries, gates, covers = self._reached(profiles)
        # The tests that hold, profile by profile (each engine answers an id once).
        reaching = np.unique(queries).tolist()
        found: list[int] = []
        counts: list[int] = []
        matched = [self.index.matched(profiles[q].attrs) for q in reaching]
        for ids in matched:
            found += ids
            counts.append(len(ids))
        test_query = np.repeat(np.array(reaching, dtype=np.int64), counts)
        # Their entries of one test, then whether each one's gate was reached.
        first, count, entries = self._by_test()
        tests_found = np.array(found, dtype=np.int64)
        start, length = first[tests_found], count[tests_found]
        pair_entries = entries[run_positions(start, length)]
        pair_queries = np.repeat(test_query, length)
        width = self._next_gate + 1
        if len(self.rests) == 1:  # (every profile in `reaching` reached the one rest)
            cover = np.zeros(len(profiles), dtype=bool)
            cover[queries] = covers
            out = (pair_queries, pair_entries, cover[pair_queries])
        else:
            reached = queries.astype(np.int64) * width + gates
            order = np.argsort(reached)
            reached, reached_covers = reached[order], covers[order]
            key = pair_queries * width + self.gate_of[pair_entries]
            at = np.minimum(np.searchsorted(reached, key), len(reached) - 1)
            keep = reached[at] == key
            out = (pair_queries[keep], pair_entries[keep], reached_covers[at[keep]])
        if self.several:
            keys = (queries.astype(np.int64) * width + gates).tolist()
            by_key = dict(zip(keys, covers.tolist(), strict=True))
            out = self._with_several(out, reaching, matched, by_key)
        return out

    def _reached(self, profiles: list[Profile]) -> tuple[Ids, Ids, Mask]:
        """(profile index, gate, covers) of every rest a profile overlaps: one
        descent of the rests' forest."""
        forest = self.forest
        query_lo, query_hi = self.dims.profile_matrix(profiles)

        def exact(query: int, node: int) -> tuple[bool, bool]:
            rest = forest.keys[node]
            return rest.overlaps(profiles[query]), rest.covers(profiles[query])

        forest.need_covers = self.covers_entries > 0
        no_exact = np.zeros(len(profiles), dtype=bool)  # (a profile's box says it all)
        queries, nodes, covers = forest.descend(
            query_lo, query_hi, no_exact, exact, queries_are_filters=False
        )
        _, gates = forest.entries.gather_counts(nodes, values=True)  # (one gate a node)
        return queries, gates, covers

    def _reached_few(self, profiles: list[Profile]) -> tuple[Ids, Ids, Mask]:
        """`_reached` by each rest's own test on each profile."""
        need_covers = self.covers_entries > 0
        found = [
            (query, gate, need_covers and rest.covers(profile))
            for query, profile in enumerate(profiles)
            for gate, rest in self.rests.items()
            if rest.overlaps(profile)
        ]
        if not found:
            return _NO_PAIRS
        queries, gates, covers = zip(*found, strict=True)
        return (
            np.array(queries, dtype=np.int64),
            np.array(gates, dtype=np.int64),
            np.array(covers, dtype=bool),
        )

    def _with_several(
        self,
        pairs: tuple[Ids, Ids, Mask],
        reaching: list[int],
        matched: list[list[int]],
        reached: dict[int, bool],
    ) -> tuple[Ids, Ids, Mask]:
        """`pairs` and those of the entries of several tests, grouped by profile."""
        width = self._next_gate + 1
        more: list[tuple[int, int, bool]] = []
        for query, ids in zip(reaching, matched, strict=True):
            held = set(ids)
            for ident in ids:
                for entry in self.several.get(ident, ()):
                    gate, tests, _ = self.held[entry]
                    cover = reached.get(query * width + gate)
                    if cover is not None and held.issuperset(tests):
                        more.append((query, entry, cover))
        if not more:
            return pairs
        queries, entries, covers = (np.array(column) for column in zip(*more, strict=True))
        queries = np.concatenate([pairs[0], queries.astype(np.int64)])
        order = np.argsort(queries, kind="stable")
        entries = np.concatenate([pairs[1], entries.astype(np.int64)])
        covers = np.concatenate([pairs[2], covers.astype(bool)])
        return queries[order], entries[order], covers[order]

    def check_invariants(self) -> None:
        """The forest's, and each held entry's gate and tests. For tests."""
        self.forest.check_invariants()
        assert set(self.gate_refs) == set(self.rests) == set(self.gates.values())
        singles = 0
        for entry, (gate, ids, _) in self.held.items():
            assert gate in self.rests and all(i in self.index.tests for i in ids)
            if len(ids) == 1:
                assert (self.test_of[entry], self.gate_of[entry]) == (ids[0], gate)
                singles += 1
            else:
                assert entry in self.several[ids[0]]
        assert int((self.test_of >= 0).sum()) == singles
