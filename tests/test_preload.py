"""Preloaded cells (matcher.preload) against the spec's oracle and the forest.

The cells answer profiles inside them from precomputed groups; these tests
drive them through churn (subscriptions added, replaced, removed, expiring
between batches), small budgets (cells evicted and filled again) and every
group a cell has (sure, edges, corners, residual values, mixed, both
relations), and check each answer against `tests/oracle.py`, the forest
without cells, and the cells' own invariants.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher.constraints import Atom, Conjunction, predicate_of
from matcher.double_forest import DoubleForest
from matcher.engine import Engine
from matcher.preload import grid as preload_grid
from matcher.preload import path_costs, preloader
from matcher.preload.grid import Grid
from matcher.preload.path_costs import PathCosts
from matcher.profiles import Profile
from matcher.where import parse_where
from tests import layouts, oracle
from tests.test_engine_properties import (
    PROPS,
    SPACE_MATCHER_CASES,
    _space_matcher_against_oracle,
    oracle_output,
    run_engine,
    split,
    workloads,
)

OPEN = math.inf
KINDS = ("bus", "tram", "car")


@st.composite
def filters(draw) -> list[list[Atom]]:
    """A predicate of one or two conjunctions over x and y boxes, sometimes with
    a kind (equal, one of two, or not equal), a z range, a one-sided bound or
    an `exists`: every group a cell sorts entries into."""
    conjunctions = []
    for _ in range(draw(st.integers(1, 2))):
        atoms = []
        for attr in ("x", "y"):
            lo = draw(st.integers(0, 20))
            choice = draw(st.integers(0, 6))
            if choice == 0:
                atoms.append(Atom(attr, ">", lo))
            elif choice == 1:
                atoms.append(Atom(attr, "<=", lo))
            elif choice != 2:  # (2: unconstrained)
                atoms.append(Atom(attr, "between", (lo, lo + draw(st.integers(0, 12)))))
        extra = draw(st.integers(0, 7))
        if extra == 0:
            atoms.append(Atom("kind", "=", draw(st.sampled_from(KINDS))))
        elif extra == 1:
            atoms.append(Atom("kind", "in", tuple(draw(st.permutations(KINDS))[:2])))
        elif extra == 2:
            atoms.append(Atom("kind", "!=", draw(st.sampled_from(KINDS))))
        elif extra == 3:
            atoms.append(Atom("z", "between", (draw(st.integers(0, 5)), 6)))
        elif extra == 4:
            atoms.append(Atom("kind", "exists", None))
        conjunctions.append(atoms)
    return conjunctions


@st.composite
def profile_attrs(draw) -> dict:
    """Points and small boxes in x and y (sometimes without one), a kind, a z."""
    attrs = {}
    for attr in ("x", "y"):
        if draw(st.integers(0, 9)):
            lo = draw(st.integers(-2, 24))
            attrs[attr] = lo if draw(st.booleans()) else [lo, lo + draw(st.integers(0, 3))]
    if draw(st.integers(0, 4)):
        attrs["kind"] = draw(st.sampled_from(KINDS))
    if draw(st.booleans()):
        attrs["z"] = draw(st.integers(0, 8))
    return attrs


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("subscribe"), st.integers(0, 30), filters(), st.booleans()),
        st.tuples(st.just("unsubscribe"), st.integers(0, 30)),
        st.tuples(st.just("probe"), st.lists(profile_attrs(), min_size=1, max_size=12)),
        st.tuples(st.just("publish"), st.integers(0, 20), profile_attrs()),
        st.tuples(st.just("retract"), st.integers(0, 20)),
        st.tuples(
            st.just("ask"), st.lists(st.tuples(filters(), st.booleans()), min_size=1, max_size=8)
        ),
    ),
    min_size=1,
    max_size=40,
)


def _holds(dnf: list[list[Atom]], covers: bool, attrs: dict) -> bool:
    sub = oracle.Held({"relation": "covers" if covers else "overlaps"}, "subscription", 0, OPEN)
    sub.dnf = dnf
    profile = oracle.hold("profile", {"ts": 0, "valid_to": None, "attrs": attrs})
    return oracle.pair_holds(sub, profile)


@settings(max_examples=120, deadline=None, print_blob=True)
@given(STEPS, st.sampled_from((1 << 30, 6_000)), st.booleans())
def test_cells_answer_like_the_oracle_under_churn(steps, budget, tiny):
    """Subscriptions come, change and go between probes; each probe batch is
    answered (cells where they hold, the forest for the rest) as the oracle
    says, grouped and paired alike; the cells' invariants hold throughout."""
    with layouts.preload(True, budget_bytes=budget), layouts.lists(tiny):
        df, held, slots = DoubleForest(), {}, {}
        profiles, profile_slots = {}, {}
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
            elif step[0] == "publish":
                _, ident, attrs = step
                if ident in profile_slots:
                    df.remove_profile(profile_slots.pop(ident))
                profile_slots[ident] = df.add_profile(ident, _profile(attrs), 0, OPEN)
                profiles[ident] = attrs
            elif step[0] == "retract" and step[1] in profile_slots:
                df.remove_profile(profile_slots.pop(step[1]))
                del profiles[step[1]]
            elif step[0] == "ask":
                _ask(df, profiles, step[1])
        df.check_invariants()


def _profile(attrs: dict) -> Profile:
    return Profile({k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()})


def _ask(df: DoubleForest, profiles: dict, filters_: list) -> None:
    """Subscriptions' queries against the held profiles, as the oracle says."""
    queries = [(predicate_of(dnf), covers, 0, OPEN) for dnf, covers in filters_]
    qi, slots = df.match_subscriptions(queries)
    got = {(int(q), df.profiles.handles[s]) for q, s in zip(qi, slots, strict=True)}
    want = {
        (q, ident)
        for q, (dnf, covers) in enumerate(filters_)
        for ident, attrs in profiles.items()
        if _holds(dnf, covers, attrs)
    }
    assert got == want
    assert len(qi) == len(want), "a pair twice"
    assert (np.diff(qi) >= 0).all(), "pairs not grouped by query"


def _probe(df: DoubleForest, held: dict, batch: list[dict]) -> None:
    profiles = [
        Profile({k: tuple(v) if isinstance(v, list) else v for k, v in a.items()}) for a in batch
    ]
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


def _tracking_like(
    n: int, seed: int = 0, profiles: int = 300
) -> tuple[DoubleForest, list, list[Profile]]:
    """Areas watched on a 100 × 100 map (some by kind, a fifth `covers`), and
    small moving objects: the workload the cells are for."""
    rng = np.random.default_rng(seed)
    df, subs = DoubleForest(), []
    for i in range(n):
        x, y = rng.uniform(0, 90, 2).round(2)
        w, h = rng.uniform(2, 20, 2).round(2)
        dnf = [[Atom("x", "between", (x, x + w)), Atom("y", "between", (y, y + h))]]
        if rng.random() < 0.3:
            dnf[0].append(Atom("kind", "=", KINDS[rng.integers(3)]))
        covers = bool(rng.random() < 0.2)
        subs.append((dnf, covers))
        df.add_subscription(i, predicate_of(dnf), covers, 0, OPEN)
    batch = []
    for _ in range(profiles):
        x, y = rng.uniform(0, 100, 2).round(2)
        r = rng.uniform(0, 1)
        attrs = {"x": (x - r, x + r), "y": (y - r, y + r), "kind": KINDS[rng.integers(3)]}
        batch.append(Profile(attrs))
    return df, subs, batch


def test_cells_answer_most_profiles_of_a_tracking_workload():
    """Held profiles mark the hot regions, `settle` fills their cells, and the
    cells answer nearly every profile there, exactly as the forest does."""
    with layouts.preload(False):
        plain, _, profiles = _tracking_like(3000)
        want = plain.match_profiles_grouped(profiles, [(0, OPEN)] * len(profiles))
    with layouts.preload(True):
        df, _, _ = _tracking_like(3000)
        for i, profile in enumerate(profiles):
            df.add_profile(i, profile, 0, OPEN)
        df.settle()
        counts = df.preload_counts()
        assert counts["cells"] > 0 and counts["cells_bytes"] > 0
        got = df.match_profiles_grouped(profiles, [(0, OPEN)] * len(profiles))
        counts = df.preload_counts()
        df.check_invariants()
    assert [sorted(g.tolist()) for g in got] == [sorted(w.tolist()) for w in want]
    assert counts["profiles"] == len(profiles)
    assert counts["profiles_from_cells"] > 0.9 * len(profiles)


def test_cells_keep_up_with_changes_between_batches():
    """Subscriptions removed, replaced and added after the cells were filled:
    each cell reads the change log when next asked, re-sorts when its unsorted
    additions grow, and answers as the forest does."""
    rng = np.random.default_rng(1)
    with layouts.preload(True):
        df, subs, profiles = _tracking_like(600, profiles=80)
        intervals = [(0, OPEN)] * len(profiles)
        df.match_profiles(profiles, intervals)  # (fills the cells these visit)
        for round_ in range(4):
            for i in rng.choice(len(subs), 100, replace=False).tolist():
                slot = next(s for s, h in enumerate(df.subs.handles) if h == i)
                df.remove_subscription(slot)
                x, y = rng.uniform(0, 90, 2).round(2)
                dnf = [[Atom("x", "between", (x, x + 5)), Atom("y", "between", (y, y + 5))]]
                subs[i] = (dnf, bool(round_ % 2))
                df.add_subscription(i, predicate_of(dnf), subs[i][1], 0, OPEN)
            qi, slots = df.match_profiles(profiles, intervals)
            got = {(int(q), df.subs.handles[s]) for q, s in zip(qi, slots, strict=True)}
            want = {
                (q, i)
                for q, p in enumerate(profiles)
                for i, (dnf, covers) in enumerate(subs)
                if any((c.covers(p) if covers else c.overlaps(p)) for c in predicate_of(dnf))
            }
            assert got == want
            df.check_invariants()
        assert df.preload_counts()["profiles_from_cells"] > 0


def test_intervals_are_tested_on_the_cells_answers():
    """Lifetimes that do not all meet the query's window are tested pair by
    pair: the cells answer as the forest does for every window."""

    def build() -> tuple[DoubleForest, list[Profile]]:
        df, subs, profiles = _tracking_like(1500)
        for i in range(0, 1500, 3):
            slot = next(s for s, h in enumerate(df.subs.handles) if h == i)
            df.remove_subscription(slot)
            df.add_subscription(i, predicate_of(subs[i][0]), subs[i][1], 100, 200)
        return df, profiles

    with layouts.preload(False):
        plain, profiles = build()
    with layouts.preload(True):
        df, _ = build()
        for window in ((0, 50), (150, 160), (0, OPEN)):
            intervals = [window] * len(profiles)
            with layouts.preload(False):
                want = plain.match_profiles(profiles, intervals)
            got = df.match_profiles(profiles, intervals)
            assert (got[0] == want[0]).all()  # (grouped by query alike)
            pairs = [sorted(zip(q.tolist(), s.tolist(), strict=True)) for q, s in (got, want)]
            assert pairs[0] == pairs[1]
        assert df.preload_counts()["profiles_from_cells"] > 0


def test_cells_are_not_pickled_and_rebuild_after_load():
    """The cells live beside the DoubleForest, not in it: a pickle is the size it
    is without them, and a loaded forest starts without cells and fills them
    again as profiles visit, answering the same."""
    with layouts.preload(True):
        df, _, profiles = _tracking_like(2000)
        intervals = [(0, OPEN)] * len(profiles)
        before = df.match_profiles_grouped(profiles, intervals)
        assert preloader.peek(df).cells is not None and len(preloader.peek(df).cells)
        blob = pickle.dumps(df)
        assert b"preload" not in blob
        loaded = pickle.loads(blob)
        assert preloader.peek(loaded) is None
        after = loaded.match_profiles_grouped(profiles, intervals)
        assert [sorted(a.tolist()) for a in after] == [sorted(b.tolist()) for b in before]
        assert len(preloader.peek(loaded).cells)


def test_the_budget_bounds_the_cells():
    """Cells past the memory budget are dropped, the coldest first."""
    with layouts.preload(True, budget_bytes=40_000):
        df, _, profiles = _tracking_like(3000)
        for _ in range(3):
            df.match_profiles(profiles, [(0, OPEN)] * len(profiles))
            assert preloader.peek(df).cells.nbytes <= 40_000
        df.check_invariants()


def test_a_named_attribute_lays_the_grid():
    """A setting names the grid's attributes where subscriptions constrain them."""
    with layouts.preload(True):
        from matcher.preload import settings

        with settings.configured(attributes=("y",)):
            df, _, profiles = _tracking_like(500)
            df.match_profiles(profiles, [(0, OPEN)] * len(profiles))
            columns = preloader.peek(df).cells.grid.columns.tolist()
            assert columns[0] == df.dims.columns[("y", "num")]


def test_small_spaces_have_no_grid():
    """Below the settings' minimum of entries the forest answers alone."""
    df, _, profiles = _tracking_like(200)
    df.match_profiles(profiles, [(0, OPEN)] * len(profiles))
    assert df.preload_counts()["profiles_from_cells"] == 0


def test_grid_keys_and_bounds_agree():
    """A box lies inside the loose cell of the cell that holds its centre."""
    grid = Grid(np.array([0, 1]), np.array([0.0, -5.0]), np.array([2.5, 3.0]), np.array([1, 0.5]))
    rng = np.random.default_rng(2)
    lo = rng.uniform(-50, 50, (2, 500))
    hi = lo + rng.uniform(0, 1, (2, 500))
    keys, fits = grid.keys(lo, hi)
    cell_lo, cell_hi = grid.bounds(keys)
    assert fits.all()
    assert ((lo >= cell_lo) & (hi <= cell_hi)).all()
    assert not grid.keys(np.array([[np.inf], [0.0]]), np.array([[-np.inf], [1.0]]))[1].any()


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_grid_choice_prefers_narrow_constrained_columns(share):
    """Of two columns, the one subscriptions constrain narrowly is chosen; none
    where no choice narrows the entries enough."""
    from matcher.boxes import Dims

    dims = Dims()
    dims.column("wide", "num")
    dims.column("narrow", "num")
    rng = np.random.default_rng(3)
    start = rng.uniform(0, 90, (2, 400))
    width = np.array([[90.0], [5.0]])
    profile = rng.uniform(0, 100, (2, 300))
    chosen = preload_grid.choose(dims, start, start + width, np.ones(400), profile, profile, ())
    assert chosen is not None and chosen.columns.tolist()[0] == 1
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preload_grid, "MAX_CANDIDATE_SHARE", share)
        none = preload_grid.choose(dims, start, start + width, np.ones(400), profile, profile, ())
        assert (none is None) == (share == 0.0)


@PROPS
@given(workloads(spaces=("A", "B")), st.sampled_from((0, 5)))
def test_engine_with_cells_equals_oracle(workload, lateness):
    """The engine's output with cells forced on, against the oracle."""
    _, batches = workload
    with layouts.preload(True, budget_bytes=4_000):
        matches, late = split(run_engine(Engine(lateness_ms=lateness), batches))
    expected, expected_late = oracle_output(batches, lateness)
    assert late == expected_late
    assert oracle.by_pair(matches) == oracle.by_pair(expected)


@PROPS
@given(*SPACE_MATCHER_CASES)
def test_space_matcher_with_cells_queries_invariants_and_snapshots(
    workload, probe_profiles, probe_subs, window, cut
):
    """The space matcher's queries, invariants (the cells' too), snapshots and
    expiries with cells forced on, against the oracle."""
    with layouts.preload(True):
        _space_matcher_against_oracle(workload, probe_profiles, probe_subs, window, cut)


# -- the cells against the forest without them, under churn and expiry --------

# Selectors whose boxes are only necessary conditions (IS NULL, computed tests):
# a cell must never take them without their exact test.
RESIDUAL_WHERE = (
    "x BETWEEN {a} AND {b} AND kind IS NULL",
    "x + y BETWEEN {a} AND {b}",
    "x - y < {a} AND x BETWEEN {a} AND {b}",
    "y BETWEEN {a} AND {b} AND NOT (kind = 'bus')",
)


@st.composite
def selector(draw) -> list[Conjunction]:
    """A predicate of `filters()`, or one of the residual selectors."""
    if draw(st.integers(0, 3)):
        return predicate_of(draw(filters()))
    a = draw(st.integers(0, 16))
    text = draw(st.sampled_from(RESIDUAL_WHERE)).format(a=a, b=a + draw(st.integers(0, 9)))
    return predicate_of(parse_where(text))


LIFETIME = st.tuples(st.integers(0, 40), st.integers(0, 60)).map(lambda t: (t[0], t[0] + t[1]))
CHURN = st.lists(
    st.one_of(
        st.tuples(st.just("subscribe"), st.integers(0, 30), selector(), st.booleans(), LIFETIME),
        st.tuples(st.just("unsubscribe"), st.integers(0, 30)),
        st.tuples(st.just("publish"), st.integers(0, 20), profile_attrs(), LIFETIME),
        st.tuples(st.just("retract"), st.integers(0, 20)),
        st.tuples(st.just("advance"), st.integers(1, 15)),
        st.tuples(
            st.just("probe"),
            st.lists(st.tuples(profile_attrs(), st.integers(0, 20)), min_size=1, max_size=12),
        ),
        st.tuples(
            st.just("ask"),
            st.lists(st.tuples(selector(), st.booleans(), st.integers(0, 20)), max_size=6),
        ),
    ),
    min_size=1,
    max_size=50,
)


class _Twins:
    """The same changes applied to a DoubleForest with cells (forced on, within
    `budget`) and to one without; every query asked of both. Both take the same
    slots, so their answers compare slot for slot."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        with self.cells():
            self.with_cells = DoubleForest()
        self.plain = DoubleForest()
        self.subs: dict[int, tuple[int, float]] = {}  # id -> (slot, valid_to)
        self.profiles: dict[int, tuple[int, float]] = {}
        self.now = 0.0

    def cells(self):
        return layouts.preload(True, budget_bytes=self.budget)

    def both(self, call) -> tuple:
        with self.cells():
            mine = call(self.with_cells)
        with layouts.preload(False):
            theirs = call(self.plain)
        return mine, theirs

    def subscribe(self, ident, conjs, covers, lifetime) -> None:
        self.unsubscribe(ident)
        start, end = self.now + lifetime[0], self.now + lifetime[1]
        slots = self.both(lambda df: df.add_subscription(ident, conjs, covers, start, end))
        assert slots[0] == slots[1]
        self.subs[ident] = (slots[0], end)

    def unsubscribe(self, ident) -> None:
        if ident in self.subs:
            slot, _ = self.subs.pop(ident)
            self.both(lambda df: df.remove_subscription(slot))

    def publish(self, ident, profile, lifetime) -> None:
        self.retract(ident)
        start, end = self.now + lifetime[0], self.now + lifetime[1]
        slots = self.both(lambda df: df.add_profile(ident, profile, start, end))
        assert slots[0] == slots[1]
        self.profiles[ident] = (slots[0], end)

    def retract(self, ident) -> None:
        if ident in self.profiles:
            slot, _ = self.profiles.pop(ident)
            self.both(lambda df: df.remove_profile(slot))

    def advance(self, by: float) -> None:
        """Time moves on: what ended before now expires (SEMANTICS §3), as the
        engine evicts it."""
        self.now += by
        for ident in [i for i, (_, end) in self.subs.items() if end < self.now]:
            self.unsubscribe(ident)
        for ident in [i for i, (_, end) in self.profiles.items() if end < self.now]:
            self.retract(ident)

    def probe(self, batch: list[tuple[Profile, float]]) -> None:
        profiles = [p for p, _ in batch]
        windows = [(self.now, self.now + w) for _, w in batch]
        mine, theirs = self.both(lambda df: df.match_profiles(profiles, windows))
        assert (mine[0] == theirs[0]).all(), "pairs grouped by query otherwise"
        assert _pairs(*mine) == _pairs(*theirs)
        mine, theirs = self.both(lambda df: df.match_profiles_grouped(profiles, windows))
        assert [sorted(g.tolist()) for g in mine] == [sorted(g.tolist()) for g in theirs]
        keys = 3 * np.arange(len(self.plain.subs.handles) + 1, dtype=np.int32) + 1  # (per slot)
        mine = self.both(lambda df: df.match_profiles_grouped(profiles, windows, keys))[0]
        assert [sorted(g.tolist()) for g in mine] == [sorted(keys[g].tolist()) for g in theirs]

    def ask(self, queries: list[tuple[list[Conjunction], bool, float]]) -> None:
        asked = [(conjs, covers, self.now, self.now + w) for conjs, covers, w in queries]
        mine, theirs = self.both(lambda df: df.match_subscriptions(asked))
        assert (mine[0] == theirs[0]).all(), "pairs grouped by query otherwise"
        assert _pairs(*mine) == _pairs(*theirs)


def _pairs(queries: np.ndarray, slots: np.ndarray) -> list[tuple[int, int]]:
    return sorted(zip(queries.tolist(), slots.tolist(), strict=True))


@settings(max_examples=150, deadline=None, print_blob=True)
@given(CHURN, st.sampled_from((1 << 30, 6_000)))
def test_cells_answer_as_the_forest_under_churn_and_expiry(steps, budget):
    """Subscriptions (residual selectors among them) and profiles come, change,
    go and expire as time moves on; every probe and subscription query answers
    with cells exactly as the forest without them does, pairs grouped by query
    alike, windows and lifetimes tested; the cells' invariants hold after."""
    twins = _Twins(budget)
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
        elif args[0]:
            twins.ask(args[0])
    with twins.cells():
        twins.with_cells.check_invariants()


# -- settings and reports -----------------------------------------------------


def test_the_preload_table_of_tsm_toml_sets_the_budget_and_attributes(tmp_path):
    """`[preload]` names the grid's attributes and bounds the cells' memory; a
    wrong key or kind is refused with the setting named."""
    from matcher.preload import settings as preload_settings
    from streaming.config import ConfigError, load_config

    path = tmp_path / "tsm.toml"
    path.write_text('[preload]\nbudget_mib = 64\nattributes = ["lat", "lon"]\n')
    config = load_config(path)
    assert config.preload == {"budget_bytes": 64 << 20, "attributes": ("lat", "lon")}
    with preload_settings.configured(**config.preload) as now:
        assert now.budget_bytes == 64 << 20 and now.attributes == ("lat", "lon")
    for text, named in (
        ("[preload]\nbudget = 64\n", "budget"),
        ("[preload]\nbudget_mib = 0\n", "budget_mib"),
        ('[preload]\nattributes = "lat"\n', "attributes"),
    ):
        path.write_text(text)
        with pytest.raises(ConfigError, match=rf"\[preload\].*{named}"):
            load_config(path)


def test_the_processor_counts_profiles_answered_from_cells():
    """Each batch's counters carry the profiles asked, those the cells answered
    and the cells' memory after it (the progress log's share and bytes)."""
    from tests.test_streaming_state import _halves, _processor, _Timer

    rng = np.random.default_rng(4)
    subs = []
    for i in range(300):
        x, y = rng.uniform(0, 90, 2).round(1)
        subs.append(
            {
                "op": "subscribe",
                "id": f"s{i}",
                "space": "city",
                "subscriber": "u",
                "where": f"x BETWEEN {x} AND {x + 10} AND y BETWEEN {y} AND {y + 10}",
                "ts": 1,
            }
        )
    profiles = [
        {"op": "publish", "id": f"p{i}", "space": "city", "ts": 2, "attrs": {"x": x, "y": y}}
        for i, (x, y) in enumerate(rng.uniform(0, 100, (200, 2)).round(2).tolist())
    ]
    with layouts.preload(True):
        processor, _, metrics = _processor(10_000)
        for kind, rows in (("subscription", subs), ("profile", profiles), ("profile", profiles)):
            list(processor.handleInputRows(("city",), iter(_halves(kind, rows)), _Timer(0)))
    last = metrics.seen[-1]
    asked = last["profiles_asked"]
    assert asked >= len(profiles) and last["profiles_from_cells"] > asked // 2
    assert last["cells_bytes"] > 0
    from streaming.listener import batch_summary

    line = batch_summary({}, last, {})
    assert line["from_cells_share"] == round(last["profiles_from_cells"] / asked, 3)


def test_a_snapshot_carries_no_cells():
    """The codec's snapshot of a matcher whose cells are filled names nothing of
    `matcher.preload`; the loaded matcher starts without cells and answers the
    same, filling them again."""
    import pickletools

    import zstandard

    from matcher.engine import SpaceMatcher
    from streaming.state.codec import MAGIC, dump_snapshot, load_snapshot

    with layouts.preload(True):
        space = SpaceMatcher("city")
        space.forest, _, profiles = _tracking_like(1500)
        intervals = [(0, OPEN)] * len(profiles)
        before = space.forest.match_profiles_grouped(profiles, intervals)
        assert len(preloader.peek(space.forest).cells)
        blob = dump_snapshot(space)
        raw = zstandard.ZstdDecompressor().decompress(blob[len(MAGIC) + 2 :])
        names = {arg for _, arg, _ in pickletools.genops(raw) if isinstance(arg, str)}
        assert "matcher.double_forest" in names and not any("preload" in n for n in names)
        loaded = load_snapshot(blob).forest
        assert preloader.peek(loaded) is None
        after = loaded.match_profiles_grouped(profiles, intervals)
        assert [sorted(a.tolist()) for a in after] == [sorted(b.tolist()) for b in before]
        assert len(preloader.peek(loaded).cells)


def test_cells_widen_until_every_region_fits_the_budget():
    """With a budget too small for every cell at the chosen width, the grid's
    cells widen until all of them, filled, fit it: the held profiles' regions
    are then all filled within the budget, and answer nearly every profile."""
    from matcher.preload import settings as preload_settings

    with layouts.preload(True, budget_bytes=300_000):
        df, _, profiles = _tracking_like(3000)
        for i, profile in enumerate(profiles):
            df.add_profile(i, profile, 0, OPEN)
        df.settle()
        cells = preloader.peek(df).cells
        assert cells.nbytes <= preload_settings.current().budget_bytes
        df.match_profiles(profiles, [(0, OPEN)] * len(profiles))
        assert df.preload_counts()["profiles_from_cells"] > 0.9 * len(profiles)
    with layouts.preload(True):
        wide = preloader.peek(_settled(_tracking_like(3000), profiles)).cells.grid.width
    assert (cells.grid.width > wide).all()


def _settled(built: tuple, profiles: list[Profile]) -> DoubleForest:
    df = built[0]
    for i, profile in enumerate(profiles):
        df.add_profile(i, profile, 0, OPEN)
    df.settle()
    return df


def _paths(costs: PathCosts, seconds: dict[str, float], batches: int, *, ready: bool) -> str:
    """The path each of `batches` batches of 1,024 takes under `costs` (the
    challenger's first letter, or "f"), each noted at `seconds[path]` a query."""
    taken = []
    for _ in range(batches):
        path = costs.challenger if costs.challenger_turn(ready=ready) else "forest"
        costs.note(path, seconds[path] * 1024, 1024)
        taken.append(path[0])
    return "".join(taken)


def test_the_cheaper_path_takes_the_batches_and_the_forest_is_remeasured_seldom():
    """A ready challenger is measured before the forest, one still to be built
    after it; the cheaper path then takes the batches, the forest once in
    REMEASURE times its cost over the challenger's (at most MAX_REMEASURE); a
    dearer challenger sits out a pause that doubles each time it loses."""
    cheap = {"index": 2.0**-16, "forest": 2.0**-12}  # (the forest 16x dearer)
    every = 16 * path_costs.REMEASURE
    got = _paths(PathCosts("index"), cheap, 4 + 2 * every, ready=True)
    assert got == "iiff" + ("i" * (every - 1) + "f") * 2
    assert _paths(PathCosts("index"), cheap, 6, ready=False) == "ffiiii"
    dear = {"index": 2.0**-16, "forest": 2.0**-2}
    got = _paths(PathCosts("index"), dear, 4 + path_costs.MAX_REMEASURE, ready=True)
    assert got == "iiff" + "i" * (path_costs.MAX_REMEASURE - 1) + "f"
    losing = {"cells": 2.0**-10, "forest": 2.0**-12}
    pause = path_costs.PAUSE
    got = _paths(PathCosts("cells"), losing, 4 + 3 * pause + 4, ready=True)
    assert got == "ccff" + "f" * (pause + 1) + "cc" + "f" * (2 * pause + 1)
