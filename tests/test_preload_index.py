"""The equality index (matcher.preload.equality_index) against the spec's oracle
and the forest.

The index answers point profiles where a space has no grid: these tests turn
the grid off, so that every batch of points takes the index, and drive it
through churn (subscriptions added, replaced, removed, expiring between
batches; nodes waiting, merged and rebuilt at tiny thresholds) with filters of
every kind its lists hold (values, pairs of values, one-sided and two-sided
ranges, `!=`, `IN`, `exists`, nothing), checking each answer against
`tests/oracle.py`, the forest without the index, and the index's invariants.
"""

from __future__ import annotations

import math
import pickle
from contextlib import ExitStack
from unittest.mock import patch

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher.constraints import Atom, predicate_of
from matcher.double_forest import DoubleForest
from matcher.preload import equality_index, preloader
from matcher.preload import grid as preload_grid
from matcher.profiles import Profile
from tests import layouts
from tests.test_preload import CHURN, _holds, _Twins

OPEN = math.inf
SYMBOLS = ("a", "b", "c")
NUMBERS = ("x", "y", "z")


def index_only(budget: int = 1 << 30) -> ExitStack:
    """Preloading on for any size, unmeasured, without a grid (the index's turn
    for every batch of points), and thresholds small enough that nodes wait,
    merge and are rebuilt within a few steps, and that values of a few members
    list them by range too."""
    stack = ExitStack()
    stack.enter_context(layouts.preload(True, budget_bytes=budget))
    stack.enter_context(patch.object(preload_grid, "choose", return_value=None))
    stack.enter_context(
        patch.multiple(equality_index, MIN_ADDED=3, REBUILD_SHARE=2, DEAD_SHARE=2, VALUE_SPLIT=2)
    )
    return stack


@st.composite
def filters(draw) -> list[list[Atom]]:
    """One to three conjunctions over a few of six attributes: strings equal to
    a value (or one of two, or not one), numbers equal, below, above, between,
    not equal, or merely present; sometimes no constraint at all."""
    conjunctions = []
    for _ in range(draw(st.integers(1, 3))):
        atoms = []
        for attr in draw(st.lists(st.sampled_from(SYMBOLS + NUMBERS), max_size=4, unique=True)):
            choice = draw(st.integers(0, 9))
            if attr in SYMBOLS:
                if choice < 7:
                    atoms.append(Atom(attr, "=", draw(st.sampled_from(("p", "q", "r")))))
                elif choice == 7:
                    atoms.append(Atom(attr, "in", ("p", "q")))
                elif choice == 8:
                    atoms.append(Atom(attr, "!=", "p"))
                else:
                    atoms.append(Atom(attr, "exists", None))
                continue
            v = draw(st.integers(0, 12))
            if choice < 2:
                atoms.append(Atom(attr, "=", v))
            elif choice < 4:
                atoms.append(Atom(attr, "<", v))
            elif choice < 6:
                atoms.append(Atom(attr, ">=", v))
            elif choice < 8:
                atoms.append(Atom(attr, "between", (v, v + draw(st.integers(0, 9)))))
            elif choice == 8:
                atoms.append(Atom(attr, "!=", v))
            else:
                atoms.append(Atom(attr, "exists", None))
        conjunctions.append(atoms)
    return conjunctions


@st.composite
def profile_attrs(draw) -> dict:
    """A point on some of the six attributes (now and then an interval, which
    the forest answers); a number where a string is expected, at times."""
    attrs = {}
    for attr in draw(st.lists(st.sampled_from(SYMBOLS + NUMBERS), max_size=6, unique=True)):
        if attr in SYMBOLS:
            attrs[attr] = draw(st.sampled_from(("p", "q", "r", 3)))
        else:
            v = draw(st.integers(-1, 14))
            attrs[attr] = [v, v + draw(st.integers(0, 2))] if draw(st.integers(0, 7)) == 0 else v
    return attrs


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("subscribe"), st.integers(0, 40), filters(), st.booleans()),
        st.tuples(st.just("unsubscribe"), st.integers(0, 40)),
        st.tuples(st.just("probe"), st.lists(profile_attrs(), min_size=1, max_size=12)),
    ),
    min_size=1,
    max_size=50,
)


def _profile(attrs: dict) -> Profile:
    return Profile({k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()})


@settings(max_examples=60, deadline=None, print_blob=True)
@given(STEPS)
def test_the_index_answers_like_the_oracle_under_churn(steps):
    """Subscriptions come, change and go between probes; each batch of points
    is answered from the index (intervals by the forest) as the oracle says,
    paired and grouped alike; the index lists exactly the live nodes."""
    with index_only():
        df, held, slots = DoubleForest(), {}, {}
        for step in steps:
            if step[0] == "subscribe":
                _, ident, dnf, covers = step
                if ident in slots:
                    df.remove_subscription(slots.pop(ident))
                slots[ident] = df.add_subscription(ident, predicate_of(dnf), covers, 0, OPEN)
                held[ident] = (dnf, covers)
            elif step[0] == "unsubscribe" and step[1] in slots:
                df.remove_subscription(slots.pop(step[1]))
                del held[step[1]]
            elif step[0] == "probe":
                _probe(df, held, step[1])
        df.check_invariants()


def _probe(df: DoubleForest, held: dict, batch: list[dict]) -> None:
    profiles = [_profile(a) for a in batch]
    want = {
        (q, ident)
        for q, attrs in enumerate(batch)
        for ident, (dnf, covers) in held.items()
        if _holds(dnf, covers, attrs)
    }
    qi, subs = df.match_profiles(profiles, [(0, OPEN)] * len(profiles))
    got = {(int(q), df.subs.handles[s]) for q, s in zip(qi, subs, strict=True)}
    assert got == want
    assert len(qi) == len(want), "a pair twice"
    assert (np.diff(qi) >= 0).all(), "pairs not grouped by query"
    grouped = df.match_profiles_grouped(profiles, [(0, OPEN)] * len(profiles))
    assert {(q, df.subs.handles[s]) for q, g in enumerate(grouped) for s in g.tolist()} == want


class _IndexTwins(_Twins):
    """`_Twins` with the index instead of the cells on the first side."""

    def cells(self):
        return index_only(self.budget)


@settings(max_examples=60, deadline=None, print_blob=True)
@given(CHURN)
def test_the_index_answers_as_the_forest_under_churn_and_expiry(steps):
    """Subscriptions (residual selectors among them, both relations) and
    profiles come, go and expire as time moves on; every probe answers with the
    index exactly as the forest without it does, windows and lifetimes tested."""
    twins = _IndexTwins(1 << 30)
    for step in steps:
        kind, args = step[0], step[1:]
        if kind == "subscribe":
            twins.subscribe(*args)
        elif kind == "unsubscribe":
            twins.unsubscribe(*args)
        elif kind == "publish":
            ident, attrs, lifetime = args
            twins.publish(ident, _profile(attrs), lifetime)
        elif kind == "retract":
            twins.retract(*args)
        elif kind == "advance":
            twins.advance(*args)
        elif kind == "probe":
            twins.probe([(_profile(attrs), w) for attrs, w in args[0]])
    with twins.cells():
        twins.with_cells.check_invariants()


def _siena_workload(n: int):
    from benchmarks.workloads import build

    return build("siena", 3, n, 200)


def _siena_like(n: int) -> tuple[DoubleForest, list[Profile]]:
    """`n` subscriptions of the siena workload and some of its points."""
    w = _siena_workload(n)
    df = DoubleForest()
    for i, s in enumerate(w.subscriptions):
        df.add_subscription(i, predicate_of([[Atom(*a) for a in c] for c in s.dnf]), False, 0, OPEN)
    return df, [Profile(p.attrs) for p in w.profiles if p.attrs is not None]


def test_points_take_the_index_and_intervals_the_forest():
    """A batch of points is answered from the index, one of intervals by the
    forest alone (the index is not even built for it); both as without it."""
    with index_only():
        df, points = _siena_like(400)
        boxes = [
            Profile(
                {k: (v[0], v[0] + 5) if isinstance(v, tuple) else v for k, v in p.attrs.items()}
            )
            for p in points
        ]
        spans = [(0, OPEN)] * len(points)
        got = df.match_profiles_grouped(boxes, spans)
        assert preloader.peek(df).index is None
        assert df.preload_counts()["profiles_from_index"] == 0
        got_points = df.match_profiles_grouped(points, spans)
        assert df.preload_counts()["profiles_from_index"] == len(points)
        assert preloader.peek(df).index is not None
    with layouts.preload(False):
        assert [sorted(g.tolist()) for g in got] == [
            sorted(g.tolist()) for g in df.match_profiles_grouped(boxes, spans)
        ]
        assert [sorted(g.tolist()) for g in got_points] == [
            sorted(g.tolist()) for g in df.match_profiles_grouped(points, spans)
        ]


def test_a_snapshot_carries_no_index():
    """The index lives beside the DoubleForest: a pickle names nothing of it,
    and a loaded forest builds it again on its first batch of points,
    answering the same."""
    with index_only():
        df, points = _siena_like(300)
        spans = [(0, OPEN)] * len(points)
        before = df.match_profiles_grouped(points, spans)
        assert preloader.peek(df).index is not None
        blob = pickle.dumps(df)
        assert b"preload" not in blob and b"equality" not in blob
        loaded = pickle.loads(blob)
        assert preloader.peek(loaded) is None
        after = loaded.match_profiles_grouped(points, spans)
        assert [sorted(a.tolist()) for a in after] == [sorted(b.tolist()) for b in before]
        assert preloader.peek(loaded).index is not None


def test_the_index_past_the_budget_is_not_built():
    """A space whose index would not fit the budget is answered by the forest."""
    with index_only(budget=1000):
        df, points = _siena_like(300)
        df.match_profiles_grouped(points, [(0, OPEN)] * len(points))
        assert preloader.peek(df).index is None


def test_two_sided_ranges_at_the_edges_of_their_sure_part():
    """Two-sided ranges of many close widths (one list each width class, whose
    sure part is cut at the narrowest width below the value) and points on and
    next to their bounds, in whole numbers, tenths and large magnitudes: the
    index answers as the oracle and the forest do."""
    rng = np.random.default_rng(5)
    held = {}
    for ident in range(300):
        scale = (1.0, 0.1, 1e12)[ident % 3]
        low = float(rng.integers(0, 200)) * scale
        width = float(rng.integers(40, 130)) * scale
        held[ident] = ([[Atom("x", "between", (low, low + width))]], False)
    edges = sorted({v for dnf, _ in held.values() for v in dnf[0][0].value})
    nudged = [np.nextafter(v, side) for v in edges for side in (-np.inf, np.inf)]
    points = [{"x": float(v)} for v in edges + nudged]
    with index_only():
        df = _probed(held, points, 200)
        got = df.match_profiles_grouped([_profile(a) for a in points], [(0, OPEN)] * len(points))
    with layouts.preload(False):
        want = df.match_profiles_grouped([_profile(a) for a in points], [(0, OPEN)] * len(points))
    assert [sorted(g.tolist()) for g in got] == [sorted(w.tolist()) for w in want]


SIMPLE_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("subscribe"), st.integers(0, 30), filters().map(lambda d: d[:1])),
        st.tuples(st.just("share"), st.integers(0, 30), st.integers(0, 30)),
        st.tuples(st.just("unsubscribe"), st.integers(0, 30)),
        st.tuples(st.just("probe"), st.lists(profile_attrs(), min_size=1, max_size=12)),
    ),
    min_size=1,
    max_size=50,
)


@settings(max_examples=60, deadline=None, print_blob=True)
@given(SIMPLE_STEPS)
def test_grouped_answers_from_the_index_keep_up_with_shared_nodes(steps):
    """Subscriptions of one conjunction each, `overlaps` (the grouped answers
    come from the index's entry runs), many of them on one node (a filter
    subscribed again under another id) coming and going between probes: the
    grouped answers are the oracle's, and the index holds each node's entries
    as the forest does."""
    with index_only():
        df, held, slots = DoubleForest(), {}, {}

        def subscribe(ident: int, dnf: list) -> None:
            if ident in slots:
                df.remove_subscription(slots.pop(ident))
            slots[ident] = df.add_subscription(ident, predicate_of(dnf), False, 0, OPEN)
            held[ident] = (dnf, False)

        for step in steps:
            if step[0] == "subscribe":
                subscribe(step[1], step[2])
            elif step[0] == "share" and step[2] in held:
                subscribe(step[1], held[step[2]][0])
            elif step[0] == "unsubscribe" and step[1] in slots:
                df.remove_subscription(slots.pop(step[1]))
                del held[step[1]]
            elif step[0] == "probe":
                batch = step[1]
                want = [
                    {i for i, (dnf, covers) in held.items() if _holds(dnf, covers, attrs)}
                    for attrs in batch
                ]
                profiles = [_profile(a) for a in batch]
                grouped = df.match_profiles_grouped(profiles, [(0, OPEN)] * len(profiles))
                got = [{df.subs.handles[s] for s in g.tolist()} for g in grouped]
                assert got == want
                assert sum(map(len, grouped)) == sum(map(len, want)), "an answer twice"
        df.check_invariants()


def test_every_bound_met_exactly():
    """Filters of one to three numbers, each bounded (inclusive or strict, one
    side or both) or equal at small whole values, and points on a grid of those
    values (some attributes missing): every bound is met exactly by some point,
    on key columns and tested ones alike; the index answers as the oracle."""
    rng = np.random.default_rng(11)
    ops = ("=", "<", "<=", ">", ">=", "between")
    held = {}
    for ident in range(400):
        atoms = []
        for attr in rng.choice(NUMBERS, size=int(rng.integers(1, 4)), replace=False).tolist():
            op, v = ops[int(rng.integers(0, len(ops)))], int(rng.integers(0, 5))
            atoms.append(Atom(attr, op, (v, v + int(rng.integers(0, 3))) if op == "between" else v))
        held[ident] = ([atoms], False)
    grid = [
        {a: v for a, v in zip(NUMBERS, (x, y, z), strict=True) if v is not None}
        for x in (None, 0, 1, 2, 3, 4, 5)
        for y in (None, 0, 1, 2, 3, 4, 5)
        for z in (None, 0, 2, 4)
    ]
    with index_only():
        df = _probed(held, grid, 50)
        assert df.preload_counts()["profiles_from_index"] >= len(grid)


def _probed(held: dict, points: list[dict], batch: int) -> DoubleForest:
    """A DoubleForest holding `held`, probed with `points` a batch at a time (`_probe`)."""
    df = DoubleForest()
    for ident, (dnf, covers) in held.items():
        df.add_subscription(ident, predicate_of(dnf), covers, 0, OPEN)
    for at in range(0, len(points), batch):
        _probe(df, held, points[at : at + batch])
    return df


def test_value_and_range_lists_answer_as_the_forest():
    """Siena's filters of a symbol and a price (say) in a value list long
    enough to be listed by range too: the index has such lists, and a batch of
    points answers with them as the forest does."""
    with index_only(), patch.object(equality_index, "VALUE_SPLIT", 16):
        df, points = _siena_like(1500)
        spans = [(0, OPEN)] * len(points)
        got = df.match_profiles_grouped(points, spans)
        index = preloader.peek(df).index
        assert len(index.main.value_lists) > 10
        assert df.preload_counts()["profiles_from_index"] == len(points)
    with layouts.preload(False):
        want = df.match_profiles_grouped(points, spans)
    assert [sorted(g.tolist()) for g in got] == [sorted(w.tolist()) for w in want]


def test_settle_builds_the_index_which_answers_first_as_the_oracle():
    """Where a space has no grid, `settle` builds the index (held points), and
    under the measured rule the ready index takes the first batches of points,
    the forest the next ones; every batch answers as the oracle and the forest."""
    from matcher.preload import settings as preload_settings
    from tests.test_preload import _holds

    with (
        preload_settings.configured(enabled=True, min_entries=1, measured=True),
        patch.object(preload_grid, "choose", return_value=None),
    ):
        df, points = _siena_like(300)
        held = points[:40]
        for i, p in enumerate(held):
            df.add_profile(i, p, 0, OPEN)
        df.settle()
        index = preloader.peek(df).index
        assert index is not None
        assert index.nbytes <= equality_index.estimated_bytes(df.sub_forest) < 1.5 * index.nbytes
        dnfs = {
            i: [[Atom(*a) for a in c] for c in s.dnf]
            for i, s in enumerate(_siena_workload(300).subscriptions)
        }
        taken = []
        for start in range(40, 120, 20):
            batch = points[start : start + 20]
            got = df.match_profiles_grouped(batch, [(0, OPEN)] * len(batch))
            taken.append(df.preload_counts()["profiles_from_index"])
            for profile, answer in zip(batch, got, strict=True):
                want = {i for i, dnf in dnfs.items() if _holds(dnf, False, profile.attrs)}
                assert {df.subs.handles[s] for s in answer.tolist()} == want
        assert taken == [20, 20, 0, 0]
        # (what the caller keeps per slot, read per entry of the index where the
        # answers outnumber them, as here, else per answer)
        keys = 5 * np.arange(len(df.subs.handles), dtype=np.int32) + 2
        with preload_settings.configured(measured=False):
            mapped = df.match_profiles_grouped(points, [(0, OPEN)] * len(points), keys)
            plain = df.match_profiles_grouped(points, [(0, OPEN)] * len(points))
            assert sum(map(len, plain)) > df.n_entries
            assert [sorted(m.tolist()) for m in mapped] == [sorted(keys[p].tolist()) for p in plain]
            mapped = df.match_profiles_grouped(points[:5], [(0, OPEN)] * 5, keys)
            assert [sorted(m.tolist()) for m in mapped] == [
                sorted(keys[p].tolist()) for p in plain[:5]
            ]
