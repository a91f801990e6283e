"""The subscriptions whose filters hold positive pattern tests, matched by index.

Such a filter is split into its pattern tests and the rest of it
(`Conjunction.without`). The rests live in a covering forest of their own, one
node per distinct rest, holding one entry: the rest's gate. The tests live in a
`PatternIndex`, and each subscription entry is listed under its first test.
A batch of profiles is matched against the rests first, so the forest prunes
on the other attributes; a profile that reaches a gate then runs each engine
once on its attribute's value, and an entry holds where its gate was reached
and all its tests hold. No filter's pattern is tested one by one.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from matcher.boxes import FILTER_FILL, PROFILE_FILL, Dims
from matcher.constraints import Conjunction
from matcher.engines.pattern_index import PatternIndex
from matcher.forest import Forest
from matcher.forest.arrays import Ids, Mask
from matcher.profiles import Profile


class GatedFilters:
    """Subscription entries (the caller's ids) whose filters have pattern tests.

    Invariants: each held entry is in `held` with its gate, its test ids (in
    `index`, counted once per entry) and its relation; an entry of one test is
    in `postings[test][gate]`, one of several tests in `several[first test]`
    (no list or set there is empty); each gate is the forest
    entry (and value) of the node of its rest, `rests` and `gates` are inverse
    maps, and `gate_refs` counts the held entries per gate (each positive);
    `covers_entries` counts the held entries of `covers` subscriptions.
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
        # test id -> gate -> the entries of one test (a list: `match` copies it whole)
        self.postings: dict[int, dict[int, list[int]]] = {}
        self.several: dict[int, set[int]] = {}  # first test id -> entries of several tests
        self.covers_entries = 0

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
            self.postings.setdefault(ids[0], {}).setdefault(gate, []).append(entry)
        else:
            self.several.setdefault(ids[0], set()).add(entry)
        self.covers_entries += covers

    def discard(self, entry: int) -> None:
        """Drop a held entry: the converse of `add`, at the same cost but for
        O(entries of its test and rest) to find it in their list."""
        gate, ids, covers = self.held.pop(entry)
        if len(ids) == 1:
            by_gate = self.postings[ids[0]]
            by_gate[gate].remove(entry)
            if not by_gate[gate]:
                del by_gate[gate]
                if not by_gate:
                    del self.postings[ids[0]]
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

    def match(self, profiles: list[Profile]) -> tuple[Ids, Ids, Mask]:
        """Every (profile index, entry) pair whose filter overlaps the profile,
        with whether its rest also covers it (a pattern test holds on a point:
        it covers where it overlaps). One descent of the rests' forest, then
        for each profile that reached a gate one pass of each engine and
        O(entries under the tests that hold)."""
        forest = self.forest
        boxes = [self.dims.profile_box(p, grow=False) for p in profiles]
        query_lo, query_hi = self.dims.matrix(boxes, PROFILE_FILL)

        def exact(query: int, node: int) -> tuple[bool, bool]:
            rest = forest.keys[node]
            return rest.overlaps(profiles[query]), rest.covers(profiles[query])

        forest.need_covers = self.covers_entries > 0
        no_exact = np.zeros(len(profiles), dtype=bool)  # (a profile's box says it all)
        queries, nodes, covers = forest.descend(
            query_lo, query_hi, no_exact, exact, queries_are_filters=False
        )
        _, gates = forest.entries.gather_counts(nodes, values=True)  # (one gate a node)
        reached: dict[int, dict[int, bool]] = {}
        pairs = zip(queries.tolist(), gates.tolist(), covers.tolist(), strict=True)
        for query, gate, cover in pairs:
            reached.setdefault(query, {})[gate] = cover
        # Runs of entries, each of one (query, gate): the entries copied list by list.
        run_query: list[int] = []
        run_cover: list[bool] = []
        run_length: list[int] = []
        entries: list[int] = []
        held, postings, several = self.held, self.postings, self.several
        for query in sorted(reached):
            at_gates = reached[query]
            matched = self.index.matched(profiles[query].attrs)
            for ident in matched:
                for gate, listed in postings.get(ident, {}).items():
                    cover = at_gates.get(gate)
                    if cover is not None:
                        entries += listed
                        run_query.append(query)
                        run_cover.append(cover)
                        run_length.append(len(listed))
                for entry in several.get(ident, ()):
                    gate, ids, _ = held[entry]
                    cover = at_gates.get(gate)
                    if cover is not None and matched.issuperset(ids):
                        entries.append(entry)
                        run_query.append(query)
                        run_cover.append(cover)
                        run_length.append(1)
        return (
            np.repeat(np.array(run_query, dtype=np.int64), run_length),
            np.array(entries, dtype=np.int64),
            np.repeat(np.array(run_cover, dtype=bool), run_length),
        )

    def check_invariants(self) -> None:
        """The forest's, and each held entry's gate and tests. For tests."""
        self.forest.check_invariants()
        assert set(self.gate_refs) == set(self.rests) == set(self.gates.values())
        for entry, (gate, ids, _) in self.held.items():
            assert gate in self.rests and all(i in self.index.tests for i in ids)
            if len(ids) == 1:
                assert self.postings[ids[0]][gate].count(entry) == 1
            else:
                assert entry in self.several[ids[0]]
