"""The covering forests of the DoubleForest (SEMANTICS §7): structure after
random insert/delete sequences, shared nodes, splicing."""

from __future__ import annotations

from functools import partial
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher.constraints import conjunction_of
from matcher.double_forest import DoubleForest
from matcher.forest import ROOT, Forest, box_kernels, tuning
from matcher.forest.block_bits import BlockBits
from matcher.forest.point_columns import PointColumns
from matcher.profiles import Profile
from matcher.where import parse_where
from tests import layouts, oracle

OPEN = float("inf")


def conj(text: str):
    (atoms,) = parse_where(text)
    return conjunction_of(atoms)


def structure(forest: Forest, covers) -> None:
    """Every invariant of §7, checked by walking the forest from its roots.

    `covers(a, b)` is the oracle's covering on the keys.
    """
    live = {node: key for node, key in enumerate(forest.keys) if key is not None}
    assert len(forest.by_key) == len(live) == len(set(live.values())), "a key has two nodes"
    seen, parent_of = set(), {}
    frontier = [(ROOT, int(r)) for r in forest.roots()]
    while frontier:
        parent, node = frontier.pop()
        assert node not in seen, f"node {node} is reached twice"
        seen.add(node)
        parent_of[node] = parent
        frontier += [(node, int(k)) for k in forest.kids(node)]
    assert seen == set(live), "some node is not reachable from the roots"
    for node, parent in parent_of.items():
        assert forest.entries.size(node) > 0, f"node {node} has no entries"
        if parent != ROOT:
            assert covers(live[parent], live[node]), f"parent {parent} does not cover {node}"
        else:
            assert not any(
                covers(key, live[node]) for other, key in live.items() if other != node
            ), f"root {node} is covered by another node"


# Keys of the filter forest mapped back to atoms, so that the oracle decides covering.
# The generated filters use numbers and booleans only, where Conjunction's covering
# is claimed complete, so that the root set must be exactly the minimal cover set.
@settings(max_examples=60, deadline=None, print_blob=True)
@given(
    st.lists(
        st.tuples(
            st.booleans(),  # add (True) or remove an existing one
            st.lists(
                oracle.conjunctions(types=("num", "bool"), max_size=2), min_size=1, max_size=2
            ),
            oracle.profile_attrs(types=("num", "bool")),
            st.integers(0, 1000),
        ),
        min_size=1,
        max_size=30,
    ),
    st.booleans(),
)
def test_random_inserts_and_deletes_keep_the_forests_ordered(steps, tiny):
    with layouts.lists(tiny):
        _inserts_and_deletes(steps)


def _inserts_and_deletes(steps):
    """(The subtree bounds are checked, and so flushed, after some steps only, so
    that removals pile up stale nodes between two flushes.)"""
    df = DoubleForest()
    atoms_of, attrs_of = {}, {}
    subs, profiles = {}, {}  # slot -> conjunctions / Profile
    for add, dnf, attrs, pick in steps:
        if add:
            conjs = {}
            for atoms in dnf:
                c = conjunction_of(atoms)
                if c is not None:
                    atoms_of.setdefault(c, atoms)
                    conjs[c] = None
            subs[df.add_subscription(pick, list(conjs), False, 0, OPEN)] = list(conjs)
            p = Profile(attrs)
            attrs_of[p] = {n: oracle.profile_value(v) for n, v in attrs.items()}
            profiles[df.add_profile(pick, p, 0, OPEN)] = p
        else:
            if subs:
                slot = sorted(subs)[pick % len(subs)]
                df.remove_subscription(slot)
                del subs[slot]
            if profiles:
                slot = sorted(profiles)[pick % len(profiles)]
                df.remove_profile(slot)
                del profiles[slot]
        if pick % 4 == 0:
            df.check_invariants()
        structure(df.sub_forest, lambda a, b: oracle.filter_covers(atoms_of[a], atoms_of[b]))
        structure(df.profile_forest, lambda a, b: oracle.profile_covers(attrs_of[a], attrs_of[b]))
        # entries: each held disjunct sits on the node of its filter
        held = sorted(c for conjs in subs.values() for c in map(repr, conjs))
        nodes = [
            df.sub_forest.keys[df.sub_forest.node_of(e)] for s in subs for e in df.sub_entries[s]
        ]
        assert sorted(map(repr, nodes)) == held
        assert sorted(map(repr, profiles.values())) == sorted(
            repr(df.profile_forest.keys[df.profile_forest.node_of(s)]) for s in profiles
        )
    df.check_invariants()


EQUIVALENT = [
    ("x > 4 AND x <= 9", "x <= 9 AND x > 4"),
    ("x IN (1)", "x = 1"),
    ("x BETWEEN 3 AND 3", "x = 3"),
    ("x >= 5 AND x >= 3", "x >= 5"),
    ("x >= 1 AND x <= 1", "x = 1"),
    ("b != TRUE", "b = FALSE"),
    ("b IN (TRUE, FALSE) AND b != FALSE", "b = TRUE"),
    ("x != 7 AND x < 5", "x < 5"),
    ("s LIKE 'ab%' AND s LIKE 'a%'", "s LIKE 'ab%'"),
    ("x = 1 AND y = 2", "y = 2 AND x = 1"),
]


@pytest.mark.parametrize(("a", "b"), EQUIVALENT)
def test_equivalent_filters_share_a_node(a, b):
    assert conj(a) == conj(b)
    df = DoubleForest()
    s1 = df.add_subscription("s1", [conj(a)], False, 0, OPEN)
    s2 = df.add_subscription("s2", [conj(b)], True, 0, OPEN)
    assert len(df.sub_forest) == 1
    (node,) = df.sub_forest.roots()
    assert df.sub_forest.entries.size(int(node)) == 2
    df.remove_subscription(s1)
    assert len(df.sub_forest) == 1
    df.remove_subscription(s2)
    assert len(df.sub_forest) == 0
    df.check_invariants()


@pytest.mark.parametrize(
    ("a", "b"), [("x >= 0 AND x != 3", "x >= 0"), ("x < 5", "x <= 5"), ("x = 1", "x IN (1, 2)")]
)
def test_different_filters_get_different_nodes(a, b):
    assert conj(a) != conj(b)
    df, _ = _forest(a, b)
    assert len(df.sub_forest) == 2
    assert parent(df, a) == repr(conj(b))  # the narrower one below the wider one


def test_equal_profiles_share_a_node():
    df = DoubleForest()
    df.add_profile("p1", Profile({"x": 5, "s": "a"}), 0, OPEN)
    df.add_profile("p2", Profile({"x": [5, 5.0], "s": "a"}), 0, OPEN)
    assert len(df.profile_forest) == 1


def _forest(*texts: str) -> tuple[DoubleForest, dict[str, int]]:
    df = DoubleForest()
    slots = {t: df.add_subscription(t, [conj(t)], False, 0, OPEN) for t in texts}
    return df, slots


def parent(df: DoubleForest, text: str) -> str | None:
    f = df.sub_forest
    p = f.children.owner_of(f.by_key[conj(text)])
    return None if p == ROOT else repr(f.keys[p])


R1, R2 = "x BETWEEN 0 AND 10", "x BETWEEN 5 AND 20"
C, D = "x BETWEEN 6 AND 9", "x BETWEEN 1 AND 2"  # C under both roots, D under R1 only


def test_splice_at_root_level_places_children_among_the_other_roots():
    df, slots = _forest(R1, R2, C, D)
    assert parent(df, D) == repr(conj(R1))
    assert parent(df, C) in (repr(conj(R1)), repr(conj(R2)))
    first = R1 if parent(df, C) == repr(conj(R1)) else R2
    df.remove_subscription(slots[first])
    df.check_invariants()
    other = R2 if first == R1 else R1
    assert parent(df, C) == repr(conj(other))  # covered by the other root: not a root
    if first == R1:
        assert parent(df, D) is None  # covered by no root any more
    assert {repr(df.sub_forest.keys[int(r)]) for r in df.sub_forest.roots()} >= {repr(conj(other))}


def test_splice_inside_a_tree_gives_the_children_to_the_parent():
    df, slots = _forest("x < 100", "x < 50", "x < 10", "x BETWEEN 20 AND 30")
    assert parent(df, "x < 10") == repr(conj("x < 50"))
    df.remove_subscription(slots["x < 50"])
    df.check_invariants()
    assert parent(df, "x < 10") == repr(conj("x < 100"))
    assert parent(df, "x BETWEEN 20 AND 30") == repr(conj("x < 100"))


def test_removals_leave_narrower_cores_until_one_pass_before_the_next_query():
    """A removal leaves its parent's core stale: narrower than the true one (the
    subtree lost boxes), so a query could still trust it; it is made exact in one
    pass, deepest first, as far up as cores change, before any query reads it."""
    df, slots = _forest("x BETWEEN 0 AND 100", "x BETWEEN 10 AND 90", "x BETWEEN 20 AND 80")
    f = df.sub_forest
    top, middle = f.by_key[conj("x BETWEEN 0 AND 100")], f.by_key[conj("x BETWEEN 10 AND 90")]
    x = next(iter(df.dims.filter_box(conj("x BETWEEN 0 AND 100"))[0]))
    df.remove_subscription(slots["x BETWEEN 20 AND 80"])
    assert f._stale == {middle}
    assert (f.core_lo[x, top], f.core_hi[x, top]) == (20, 80)  # narrower than [10, 90]
    df.match_profiles([Profile({"x": 5})], [(0, OPEN)])  # a query: flushed first
    assert f._stale == set()
    assert (f.core_lo[x, top], f.core_hi[x, top]) == (10, 90)
    df, slots = _forest("x BETWEEN 0 AND 100", "x BETWEEN 10 AND 90", "x BETWEEN 20 AND 80")
    f = df.sub_forest
    top = f.by_key[conj("x BETWEEN 0 AND 100")]
    df.remove_subscription(slots["x BETWEEN 20 AND 80"])
    df.remove_subscription(slots["x BETWEEN 10 AND 90"])  # (stale itself)
    assert f._stale == {top}
    df.check_invariants()
    assert (f.core_lo[x, top], f.core_hi[x, top]) == (0, 100)


def test_a_new_node_adopts_the_siblings_it_covers():
    df, _ = _forest("x BETWEEN 1 AND 2", "x BETWEEN 3 AND 4", "y = 1", "x < 10")
    assert parent(df, "x BETWEEN 1 AND 2") == repr(conj("x < 10"))
    assert parent(df, "x BETWEEN 3 AND 4") == repr(conj("x < 10"))
    assert parent(df, "y = 1") is None
    assert len(df.sub_forest.roots()) == 2
    df.check_invariants()


def test_profiles_with_different_attribute_sets_never_share_a_tree():
    df = DoubleForest()
    df.add_profile("a", Profile({"x": [0, 10]}), 0, OPEN)
    df.add_profile("b", Profile({"x": [1, 2], "y": 1}), 0, OPEN)
    df.add_profile("c", Profile({"x": [1, 2]}), 0, OPEN)
    f = df.profile_forest
    assert len(f.roots()) == 2
    assert (
        f.children.owner_of(f.by_key[Profile({"x": [1, 2]})]) == f.by_key[Profile({"x": [0, 10]})]
    )


def _box_filter(box) -> str:
    (x0, x1), (y0, y1) = box
    return f"x BETWEEN {x0} AND {x1} AND y BETWEEN {y0} AND {y1}"


BOXES = st.tuples(
    *[st.tuples(st.integers(0, 12), st.integers(0, 6)).map(lambda t: (t[0], t[0] + t[1]))] * 2
)


# Point profiles (the siena workload's shape) with some intervals among them, under
# the tiny layout: a point is placed among a list of points without a scan
# (`point_order`) only while no interval is in the list, so intervals come and go
# (and cover points), and the forest must stay the oracle's.
# (two attribute sets and few values, so that profiles meet: covering needs the same set)
POINTS_AND_INTERVALS = st.tuples(
    st.sampled_from(["x", "xy"]),
    st.lists(st.sampled_from([0, 1, 2, "u", True, [0, 2], [1, 2]]), min_size=2, max_size=2),
).map(lambda t: dict(zip(t[0], t[1], strict=False)))


@settings(max_examples=60, deadline=None, print_blob=True)
@given(
    st.lists(
        st.tuples(
            st.sampled_from("aaar"),  # add (mostly) or remove
            POINTS_AND_INTERVALS,
            st.integers(0, 1000),
        ),
        min_size=5,
        max_size=60,
    )
)
def test_points_among_points_are_placed_without_a_scan(steps):
    with layouts.lists(True):
        df, profiles, attrs_of = DoubleForest(), {}, {}
        for op, attrs, pick in steps:
            if op == "a" or not profiles:
                p = Profile(attrs)
                attrs_of[p] = {n: oracle.profile_value(v) for n, v in attrs.items()}
                profiles[df.add_profile(pick, p, 0, OPEN)] = p
            else:
                slot = sorted(profiles)[pick % len(profiles)]
                df.remove_profile(slot)
                del profiles[slot]
            df.check_invariants()
            structure(df.profile_forest, partial(_profile_covers, attrs_of))


def _profile_covers(attrs_of: dict, a: Profile, b: Profile) -> bool:
    return oracle.profile_covers(attrs_of[a], attrs_of[b])


# Many numeric boxes under the tiny layout: the root sets grow past BLOCKED,
# are sorted into blocks (by queries, and into runs by inserts), lose entries
# from inside blocks and gain a tail, and both queries, in both relations,
# and the forests' invariants are checked between the changes.
@settings(max_examples=40, deadline=None, print_blob=True)
@given(
    st.lists(
        st.tuples(st.sampled_from("sprP"), BOXES, st.integers(0, 1000)), min_size=30, max_size=120
    ),
    st.lists(st.tuples(BOXES, st.booleans()), min_size=1, max_size=6),
)
def test_long_root_lists_match_like_brute_force(steps, probes):
    with layouts.lists(True):
        df, subs, profiles = DoubleForest(), {}, {}
        for i, (op, box, pick) in enumerate(steps):
            if op == "s":
                c = conj(_box_filter(box))
                subs[df.add_subscription(i, [c], False, 0, OPEN)] = c
            elif op == "p":
                p = Profile({"x": list(box[0]), "y": list(box[1])})
                profiles[df.add_profile(i, p, 0, OPEN)] = p
            elif op == "r" and subs:
                slot = sorted(subs)[pick % len(subs)]
                df.remove_subscription(slot)
                del subs[slot]
            elif op == "P" and profiles:
                slot = sorted(profiles)[pick % len(profiles)]
                df.remove_profile(slot)
                del profiles[slot]
            if i % 10 == 9 or i == len(steps) - 1:
                _probe(df, subs, profiles, probes)
                df.check_invariants()  # (inserts and removals through the blocks too)


def _probe(df, subs, profiles, probes) -> None:
    queries = [Profile({"x": list(b[0]), "y": list(b[1])}) for b, _ in probes]
    qi, slots = df.match_profiles(queries, [(0, OPEN)] * len(queries))
    want = {(q, s) for q, p in enumerate(queries) for s, c in subs.items() if c.overlaps(p)}
    assert set(zip(qi.tolist(), slots.tolist(), strict=True)) == want
    grouped = df.match_profiles_grouped(queries, [(0, OPEN)] * len(queries))
    assert {(q, s) for q, found in enumerate(grouped) for s in found.tolist()} == want
    assert sum(map(len, grouped)) == len(want)
    _probe_filters(df, profiles, [(conj(_box_filter(b)), covers) for b, covers in probes])


def _probe_filters(df, profiles, filters) -> None:
    """`match_subscriptions` of (conjunction, covers?) against held profiles, as brute force."""
    qi, slots = df.match_subscriptions([([c], cov, 0, OPEN) for c, cov in filters])
    want = {
        (q, s)
        for q, (c, cov) in enumerate(filters)
        for s, p in profiles.items()
        if (c.covers(p) if cov else c.overlaps(p))
    }
    assert set(zip(qi.tolist(), slots.tolist(), strict=True)) == want


# Regions inside regions under the tiny layout: each region's child list is
# broadcast (and cut into blocks once long enough), and only some profiles
# of a batch reach it (the others fall in other regions), so a list is
# tested against a subset of the batch.
@settings(max_examples=60, deadline=None, print_blob=True)
@given(
    st.lists(st.tuples(st.integers(0, 3), BOXES), min_size=4, max_size=40),
    st.lists(st.tuples(st.integers(0, 66), st.integers(0, 20)), min_size=2, max_size=16),
)
def test_region_child_lists_match_like_brute_force(children, points):
    with layouts.lists(True):
        df, subs = DoubleForest(), {}
        boxes = [(p, ((0, 18), (0, 18))) for p in range(4)] + children
        for i, (region, ((x0, x1), y)) in enumerate(boxes):
            c = conj(_box_filter(((x0 + 16 * region, x1 + 16 * region), y)))
            subs[df.add_subscription(i, [c], False, 0, OPEN)] = c
        df.check_invariants()
        _probe(df, subs, {}, [(((x, x), (y, y)), False) for x, y in points])


@pytest.mark.parametrize("seed", range(4))
def test_inserts_sort_long_root_lists_into_runs(seed):
    """Inserts keep a long root list's tail short by sorting it into runs
    of blocks (merged with the shorter runs before) and search the list
    through the blocks; removals refill holes from the tail. The forest
    must stay ordered and match like brute force throughout."""
    import random

    rng = random.Random(seed)
    with layouts.lists(True):
        df, subs, profiles, merged = DoubleForest(), {}, {}, False
        for i in range(300):
            x, y = rng.randint(0, 12), rng.randint(0, 12)
            box = ((x, x + rng.randint(0, 6)), (y, y + rng.randint(0, 6)))
            c = conj(_box_filter(box))
            subs[df.add_subscription(i, [c], False, 0, OPEN)] = c
            if rng.random() < 0.3:
                slot = rng.choice(sorted(subs))
                df.remove_subscription(slot)
                del subs[slot]
            wide = df.sub_forest.wide_lists.get(ROOT)
            merged = merged or bool(wide and len(wide.runs) > 2)
            if i % 50 == 49:
                df.check_invariants()
                _probe(df, subs, profiles, [(box, False)])
        assert merged, "the root list was never kept in several runs"


def test_grouped_answers_of_popular_nodes() -> None:
    """Nodes holding many equal subscriptions (the nested workload's popular
    regions): grouped answers copy each pair's run of its node's slots, in
    query order, mapped through the caller's slot map."""
    df = DoubleForest()
    for i in range(400):
        lo = i % 5
        df.add_subscription(i, [conj(_box_filter(((lo, lo + 4), (lo, 9 - lo))))], False, 0, OPEN)
    queries = [Profile({"x": [x, x], "y": [y, y]}) for x in range(10) for y in range(10)]
    qi, slots = df.match_profiles(queries, [(0, OPEN)] * len(queries))
    keys = np.arange(400, dtype=np.int64) * 3 + 7
    grouped = df.match_profiles_grouped(queries, [(0, OPEN)] * len(queries), keys)
    want = [sorted(keys[slots[qi == q]].tolist()) for q in range(len(queries))]
    assert [sorted(g.tolist()) for g in grouped] == want
    assert any(want) and not all(want)


def _drawn_filters(data, max_boxes: int):
    """A random generator, a box count, and filter queries over 1-5 columns:
    (q_lo, q_hi, which bounds are open, the queries asked)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    columns, n, m = (
        data.draw(st.integers(1, 5)),
        data.draw(st.integers(1, max_boxes)),
        data.draw(st.integers(1, 30)),
    )
    q_lo = rng.integers(0, 10, (columns, m)).astype(float)
    q_hi = q_lo + rng.integers(0, 4, (columns, m))
    open_ = rng.random((columns, m)) < data.draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    q_lo[open_], q_hi[open_] = -np.inf, np.inf
    return rng, n, (q_lo, q_hi, open_, rng.permutation(m)[: data.draw(st.integers(1, m))])


@settings(max_examples=200, deadline=None, print_blob=True)
@given(st.data())
def test_filter_queries_meet_every_box_they_meet_whatever_the_chunks(data):
    """`meeting_pairs` with a column plan (filter queries, each leaving some columns open)
    against a list of boxes, for every chunk size and both list paths: the pairs
    of a brute-force test, each once. Chunks of the long path pack whole sets
    of same-column queries, their columns united."""
    rng, n, (q_lo, q_hi, open_, qs) = _drawn_filters(data, 40)
    lo = rng.integers(0, 10, (q_lo.shape[0], n)).astype(float)
    hi = lo + rng.integers(0, 4, (q_lo.shape[0], n))
    shrunk = {"CHUNK": data.draw(st.integers(1, 80)), "BLOCKED": data.draw(st.integers(1, 50))}
    with patch.multiple(tuning, **shrunk):
        plan = box_kernels.column_plan(q_lo, q_hi)
        r, k = box_kernels.meeting_pairs(lo, hi, qs, q_lo, q_hi, plan)
    got = list(zip(qs[r].tolist(), k.tolist(), strict=True))
    meet = (q_lo[:, :, None] <= hi[:, None, :]) & (lo[:, None, :] <= q_hi[:, :, None])
    expected = {(int(q), b) for q in qs for b in range(n) if meet[:, q, b].all()}
    assert len(got) == len(set(got)) and set(got) == expected


def _met_in_asked_blocks(qs, asked, meet, size: int) -> set[tuple[int, int]]:
    """Brute force: each (row, box) whose query `qs[row]` meets the box on every
    column of `meet` (column x query x box), within the blocks of `size` boxes
    its row asks (`asked`: row x block)."""
    return {
        (row, box)
        for row, q in enumerate(qs.tolist())
        for box in range(meet.shape[2])
        if asked[row, box // size] and meet[:, q, box].all()
    }


@settings(max_examples=200, deadline=None, print_blob=True)
@given(st.data())
def test_blocks_tested_together_meet_like_brute_force(data):
    """`meeting_in_blocks`: (query, block) pairs, blocks with different query
    counts padded together in tensors of any chunk size, some columns left
    to the pair-by-pair test: within the pairs' blocks, the (query, box)
    pairs of a brute-force test, each once."""
    rng, _, (q_lo, q_hi, _, qs) = _drawn_filters(data, 1)
    size, blocks = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 8))
    lo = rng.integers(0, 10, (q_lo.shape[0], size * blocks)).astype(float)
    hi = lo + rng.integers(0, 4, lo.shape)
    asked = rng.random((len(qs), blocks)) < data.draw(st.sampled_from([0.2, 0.6, 1.0]))
    rows, hit_blocks = np.nonzero(asked)
    order = np.argsort(hit_blocks, kind="stable")
    tested = rng.permutation(q_lo.shape[0]).tolist()
    shrunk = {"CHUNK": data.draw(st.integers(1, 120)), "SPARSE": data.draw(st.integers(1, 40))}
    with patch.multiple(tuning, **shrunk):
        r, k = box_kernels.meeting_in_blocks(
            lo, hi, size, qs, rows[order], hit_blocks[order], q_lo, q_hi, tested
        )
    got = list(zip(r.tolist(), k.tolist(), strict=True))
    meet = (q_lo[:, :, None] <= hi[:, None, :]) & (lo[:, None, :] <= q_hi[:, :, None])
    expected = _met_in_asked_blocks(qs, asked, meet, size)
    assert len(got) == len(set(got)) and set(got) == expected


@settings(max_examples=200, deadline=None, print_blob=True)
@given(st.data())
def test_boxes_of_met_blocks_found_through_their_bits_meet_like_brute_force(data):
    """`BlockBits.meeting`: (query, block) pairs, blocks of any size (a word of
    64 bits or several), any number of bit rows, some boxes open or missing on
    a column, some moved in after the rows were made (`widen`), some columns
    left untested, dense pairs left to the tensors: within the pairs' blocks,
    the (query, box) pairs of a brute-force test on the tested columns, each
    once."""
    rng, _, (q_lo, q_hi, _, qs) = _drawn_filters(data, 1)
    size = data.draw(st.sampled_from([1, 2, 5, 64, 70, 130]))
    blocks = data.draw(st.integers(1, 4))
    lo = rng.integers(0, 10, (q_lo.shape[0], size * blocks)).astype(float)
    hi = lo + rng.integers(0, 4, lo.shape)
    odd = rng.random(lo.shape) < data.draw(st.sampled_from([0.0, 0.2]))
    missing = odd & (rng.random(lo.shape) < 0.5)
    lo[missing], hi[missing] = np.inf, -np.inf
    lo[odd & ~missing], hi[odd & ~missing] = -np.inf, np.inf
    absent = rng.random(q_lo.shape) < data.draw(st.sampled_from([0.0, 0.2]))  # (profiles')
    q_lo, q_hi = np.where(absent, np.inf, q_lo), np.where(absent, -np.inf, q_hi)
    with patch.multiple(tuning, BIT_ROWS=data.draw(st.integers(2, 9))):
        bits = BlockBits(lo, hi, size)
    bits.rebuild_from(0, lo, hi)
    moved = rng.random(lo.shape[1]) < data.draw(st.sampled_from([0.0, 0.3]))
    lo[:, moved] = rng.integers(0, 12, (lo.shape[0], int(moved.sum())))
    hi[:, moved] = lo[:, moved] + rng.integers(0, 4, (lo.shape[0], int(moved.sum())))
    bits.widen(np.flatnonzero(moved), lo[:, moved], hi[:, moved])
    bits.check(lo, hi, blocks, "drawn")
    asked = rng.random((len(qs), blocks)) < data.draw(st.sampled_from([0.2, 0.6, 1.0]))
    rows, hit_blocks = np.nonzero(asked)
    tested = rng.permutation(q_lo.shape[0])[: data.draw(st.integers(0, q_lo.shape[0]))]
    shrunk = {
        "BIT_DENSE": data.draw(st.sampled_from([1, 4, 1 << 20])),
        "BIT_SAMPLE": data.draw(st.integers(1, 5)),
        "BIT_DENSE_SAMPLE": data.draw(st.sampled_from([1, 4, 1 << 20])),
        "CHUNK": 50,
    }
    with patch.multiple(tuning, **shrunk):
        r, k = bits.meeting(lo, hi, qs, rows, hit_blocks, q_lo, q_hi, tested.tolist())
    got = list(zip(r.tolist(), k.tolist(), strict=True))
    meet = (q_lo[tested, :, None] <= hi[tested, None, :]) & (
        lo[tested, None, :] <= q_hi[tested, :, None]
    )
    expected = _met_in_asked_blocks(qs, asked, meet, size)
    assert len(got) == len(set(got)) and set(got) == expected


@given(st.lists(st.integers(1, 9), max_size=12), st.integers(1, 10))
def test_chunks_hold_whole_sets_where_they_fit(sizes, step):
    cuts = np.cumsum(sizes).tolist()
    n = cuts.pop() if cuts else 0
    chunks = list(box_kernels.packed_chunks(cuts, n, step))
    assert [a for a, _ in chunks] == [0, *[b for _, b in chunks]][: len(chunks)]
    assert (chunks[-1][1] if chunks else 0) == n
    assert all(0 < b - a <= step for a, b in chunks)
    for start, end in zip([0, *cuts], [*cuts, n], strict=True):
        if 0 < end - start <= step:  # a set that fits a chunk is not cut
            assert any(a <= start and end <= b for a, b in chunks)


@settings(max_examples=200, deadline=None, print_blob=True)
@given(st.data())
def test_point_lists_give_filters_the_pairs_a_scan_gives(data):
    """`PointColumns.hits` on a list of point boxes, some columns missing ([inf, -inf]):
    the pairs of the filters it takes (their narrowest column run, tested on
    their other columns) plus a brute-force test of the ones it leaves are the
    pairs of a brute-force test of all, each once."""
    rng, n, (q_lo, q_hi, open_, qs) = _drawn_filters(data, 60)
    lo = rng.integers(0, 10, (q_lo.shape[0], n)).astype(float)
    hi = lo.copy()
    missing = rng.random(lo.shape) < data.draw(st.sampled_from([0.0, 0.5, 0.9]))
    lo[missing], hi[missing] = np.inf, -np.inf
    q_hi[(rng.random(q_hi.shape) < 0.2) & ~open_] = np.inf  # (x > a: open above)
    share = data.draw(st.sampled_from([1, 2, 8, 10**6]))
    with patch.multiple(tuning, POINT_SHARE=share):
        r, k, rest = PointColumns(lo).hits(lo, qs, q_lo, q_hi, (q_lo > -np.inf) | (q_hi < np.inf))
    meet = (q_lo[:, :, None] <= hi[:, None, :]) & (lo[:, None, :] <= q_hi[:, :, None])
    got = list(zip(qs[r].tolist(), k.tolist(), strict=True))
    taken = set(qs.tolist()) - set(qs[rest].tolist())
    expected = {(int(q), b) for q in taken for b in range(n) if meet[:, q, b].all()}
    assert len(got) == len(set(got)) and set(got) == expected
    assert len(set(rest.tolist())) == len(rest) and set(qs[rest].tolist()) | taken == set(
        qs.tolist()
    )


POINT = st.dictionaries(st.sampled_from("xyz"), st.integers(0, 12), min_size=1)
RANGES = st.dictionaries(
    st.sampled_from("xyz"),
    st.tuples(st.integers(0, 12), st.integers(0, 6)).map(lambda t: (t[0], t[0] + t[1])),
    min_size=1,
)


# Point profiles that lack some attributes, under the tiny layout with no
# column sortable into blocks: filters take their candidates from the root
# list's sorted columns, which inserts and removals between the probes change.
@settings(max_examples=40, deadline=None, print_blob=True)
@given(
    st.lists(
        st.tuples(st.sampled_from("ppP"), POINT, st.integers(0, 1000)), min_size=30, max_size=120
    ),
    st.lists(st.tuples(RANGES, st.booleans()), min_size=1, max_size=6),
    st.sampled_from([1, 2, 10**6]),
)
def test_point_profiles_match_filters_like_brute_force(steps, probes, share):
    with layouts.lists(True), patch.multiple(tuning, FINITE_SHARE=1.1, POINT_SHARE=share):
        df, profiles = DoubleForest(), {}
        for i, (op, point, pick) in enumerate(steps):
            if op == "p":
                p = Profile({a: [v, v] for a, v in point.items()})
                profiles[df.add_profile(i, p, 0, OPEN)] = p
            elif profiles:
                slot = sorted(profiles)[pick % len(profiles)]
                df.remove_profile(slot)
                del profiles[slot]
            if i % 10 == 9 or i == len(steps) - 1:
                filters = [
                    (conj(" AND ".join(f"{a} BETWEEN {x} AND {y}" for a, (x, y) in r.items())), c)
                    for r, c in probes
                ]
                _probe_filters(df, profiles, filters)
                df.check_invariants()


@pytest.mark.parametrize(
    ("n", "buffer"), [(1, 256), (40, 256), (512, 512), (1000, 512), (100_000, 8192)]
)
def test_matrix_tests_leave_numpy_buffer_size_as_they_found_it(n, buffer):
    """`RowBuffer` changes numpy's (context-wide) ufunc buffer size only while a
    matrix test runs, even when the test fails."""
    lo, hi = np.zeros((2, n)), np.ones((2, n))
    q_lo, q_hi = np.full((2, 3), 0.5), np.full((2, 3), 0.7)
    before = np.getbufsize()
    cells = box_kernels.meeting_cells(lo, hi, np.arange(3), q_lo, q_hi, [0, 1])
    assert len(cells) == 3 * n and np.getbufsize() == before
    with pytest.raises(IndexError), box_kernels.RowBuffer(n):
        assert np.getbufsize() == buffer
        raise IndexError
    assert np.getbufsize() == before


def test_profiles_are_indexed_when_a_subscription_asks():
    """Profiles wait outside the profile forest until a query of its needs them;
    one replaced or removed before that is never inserted."""
    df = DoubleForest()
    p1 = df.add_profile("p1", Profile({"x": 5}), 0, OPEN)
    p2 = df.add_profile("p2", Profile({"x": [1, 9]}), 0, OPEN)
    df.remove_profile(p2)
    df.add_profile("p3", Profile({"x": 7}), 0, OPEN)
    assert len(df._profile_forest) == 0  # nothing asked yet
    qi, slots = df.match_subscriptions([([conj("x BETWEEN 4 AND 6")], False, 0, OPEN)])
    assert (qi.tolist(), slots.tolist()) == ([0], [p1])
    assert len(df._profile_forest) == 2 and not df._unindexed
    df.remove_profile(p1)  # (now from the forest itself)
    assert len(df.profile_forest) == 1


def test_each_forest_has_the_columns_of_its_own_side():
    """Profiles that each bring an attribute of their own (a sensor's id as its name)
    add no columns to the subscription forest, so profile queries never test them;
    a filter on an attribute no held profile has holds for none of them."""
    df, _ = _forest("x > 0", "kind = 'bus'")
    held = [df.add_profile(i, Profile({"x": 1, f"sensor_{i}": 2}), 0, OPEN) for i in range(50)]
    qi, subs = df.match_profiles([Profile({"x": 1, "sensor_7": 2, "kind": "bus"})], [(0, OPEN)])
    assert sorted(subs.tolist()) == [0, 1]
    assert len(df.dims) == 2  # x and kind: the filters'
    queries = [
        ([conj("sensor_9 = 2")], False, 0, OPEN),
        ([conj("nowhere > 1")], False, 0, OPEN),  # no held profile has it
        ([conj("nowhere > 1"), conj("sensor_3 >= 2")], False, 0, OPEN),
        ([conj("kind = 'bus'")], False, 0, OPEN),  # nor this: only the query above had kind
    ]
    qi, slots = df.match_subscriptions(queries)
    assert list(zip(qi.tolist(), slots.tolist(), strict=True)) == [(0, held[9]), (2, held[3])]
    assert len(df.profile_dims) == 51 and len(df.dims) == 2
