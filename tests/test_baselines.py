"""The benchmark's contenders agree with a naive loop, and the quick benchmark runs."""

from __future__ import annotations

import json
import random

import pytest

from benchmarks.baselines import key_set
from benchmarks.contenders import CONTENDERS
from matcher.boxes import Dims
from matcher.constraints import Atom, Conjunction, conjunction_of
from matcher.profiles import Profile
from tsm_cli.main import main as tsm

NUMS, STRS = ("a", "b", "c"), ("s", "t")
WORDS = ("ab", "abc", "b", "ba", "c")


def _atom(rng: random.Random) -> Atom:
    """Any constraint kind, so that the inexact paths (exact re-test) run too."""
    if rng.random() < 0.6:
        attr, v = rng.choice(NUMS), rng.randint(0, 10)
        op = rng.choice(["<", "<=", ">", ">=", "=", "!=", "between", "in", "exists"])
        value = {"between": (v, v + rng.randint(0, 5)), "in": (v, v + 3), "exists": None}
        return Atom(attr, op, value.get(op, v))
    attr, w = rng.choice(STRS), rng.choice(WORDS)
    op = rng.choice(["=", "!=", "prefix", "contains", "<", "in"])
    return Atom(attr, op, (w, "c") if op == "in" else w)


def _conjunction(rng: random.Random) -> Conjunction:
    while True:
        conj = conjunction_of([_atom(rng) for _ in range(rng.randint(0, 3))])
        if conj is not None:
            return conj


def _profile(rng: random.Random) -> Profile:
    attrs: dict = {}
    for a in rng.sample(NUMS, rng.randint(0, 3)):
        lo = rng.randint(0, 10)
        attrs[a] = lo if rng.random() < 0.5 else [lo, lo + rng.randint(0, 4)]
    for s in rng.sample(STRS, rng.randint(0, 2)):
        attrs[s] = rng.choice(WORDS)
    if rng.random() < 0.1:
        attrs["a"] = "ab"  # a string where filters expect a number: never matches
    return Profile(attrs)


@pytest.mark.parametrize("seed", range(6))
def test_contenders_agree_with_a_naive_loop(seed: int) -> None:
    rng = random.Random(seed)
    # Equal filters and profiles repeat, so shared nodes and covering occur.
    pool = [_conjunction(rng) for _ in range(40)]
    filters = {k: rng.choice(pool) for k in range(150)}
    ppool = [_profile(rng) for _ in range(40)]
    profiles = {k: rng.choice(ppool) for k in range(150)}
    queries_p = [_profile(rng) for _ in range(40)]
    queries_f = [_conjunction(rng) for _ in range(40)]
    dims = Dims()
    for c in [*filters.values(), *queries_f]:
        dims.filter_box(c)
    for p in [*profiles.values(), *queries_p]:
        dims.profile_box(p)
    contenders = [make(dims) for make in CONTENDERS.values()]
    for c in contenders:
        for k, f in filters.items():
            c.insert(k, f)
        for k, p in profiles.items():
            c.insert_profile(k, p)
    for round_ in range(3):
        for c in contenders:
            for q in queries_p:
                want = {k for k, f in filters.items() if f.overlaps(q)}
                assert key_set(c.match_profile(q)) == want, (c.name, round_, q)
            assert [key_set(a) for a in c.match_profiles(queries_p)] == [
                {k for k, f in filters.items() if f.overlaps(q)} for q in queries_p
            ], c.name
            for q in queries_f:
                want = {k for k, p in profiles.items() if q.overlaps(p)}
                assert key_set(c.match_subscription(q)) == want, (c.name, round_, q)
        gone = rng.sample(sorted(filters), 40)
        gone_p = rng.sample(sorted(profiles), 40)
        for c in contenders:
            for k in gone:
                c.delete(k)
            for k in gone_p:
                c.delete_profile(k)
        for k in gone:
            del filters[k]
        for k in gone_p:
            del profiles[k]


@pytest.mark.slow
def test_quick_bench_runs_and_agrees(tmp_path, capsys) -> None:
    out = tmp_path / "matcher.json"
    # (one workload: the quick plan's others run the same code, at twice the time)
    assert tsm(["bench", "matcher", "--quick", "--workloads", "uniform", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert {r["workload"] for r in rows} == {"uniform"}
    assert {r["size"] for r in rows} == {1000, 10000}
    measured = [r for r in rows if "skipped" not in r and "partial" not in r]
    assert {r["contender"] for r in measured} >= {"brute-force", "double-forest", "r-tree"}
    assert all(r["match_profile_per_s"] > 0 for r in measured)
    # the poset, too slow to build whole at 10k in the quick budget, still
    # gets update rates over what it built
    partial = [r for r in rows if "partial" in r]
    assert partial and all(r["insert_per_s"] > 0 and r["delete_per_s"] > 0 for r in partial)
    readme = (tmp_path / "README.md").read_text()
    assert "| target |" in readme and list(tmp_path.glob("*.png"))
    assert "MISMATCH" not in capsys.readouterr().err


@pytest.mark.slow
def test_bench_budget_flag_sets_the_plan_and_is_in_the_command(tmp_path, capsys) -> None:
    out = tmp_path / "matcher.json"
    args = ["--quick", "--sizes", "1000", "--workloads", "uniform", "--budget", "3.5"]
    assert tsm(["bench", "matcher", *args, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["plan"]["budget_s"] == 3.5 and "--budget 3.5" in result["command"]
    with pytest.raises(SystemExit):  # (argparse: usage and the reason on stderr)
        tsm(["bench", "matcher", "--budget", "0"])
    assert tsm(["bench", "pipeline", "--budget", "5"]) == 2
    assert "--budget is for `tsm bench matcher`" in capsys.readouterr().err


def test_a_hopeless_timed_step_stops_at_a_tenth_of_its_budget() -> None:
    from benchmarks.bench_matcher import OverBudget, _timed

    def burn(_: int) -> None:  # tens of µs of CPU: 20,000 of them take about a second
        sum(range(2000))

    with pytest.raises(OverBudget, match="would take") as stop:
        _timed(burn, range(20_000), budget_s=0.1)
    assert 256 <= stop.value.done < 20_000 and stop.value.seconds < 0.05
    assert _timed(burn, range(300), budget_s=10.0) < 1.0  # (what fits is timed whole)


def test_matching_passes_alternate_between_contenders() -> None:
    """Every contender's timed passes are taken in turn with the others', so a
    slow spell of the machine falls on all of them alike."""
    from types import SimpleNamespace

    from benchmarks.bench_matcher import FULL, PASSES, Run, _match_side_by_side

    calls: list[tuple[str, str]] = []

    class Fake:
        batched = True

        def __init__(self, name: str) -> None:
            self.name = name

        def match_profiles(self, queries: list) -> list:
            calls.append((self.name, "profiles"))
            return [()] * len(queries)

        def match_subscriptions(self, queries: list) -> list:
            calls.append((self.name, "filters"))
            return [()] * len(queries)

    data = SimpleNamespace(
        query_profiles=[1, 2], warm_profiles=[3], query_filters=[4], warm_filters=[5]
    )
    built = {name: ({"contender": name}, Fake(name)) for name in ("a", "b")}
    _match_side_by_side(Run(FULL, print), built, data)
    # each pass after its own warm-up batch, a then b, round after round
    rounds = [[(name, side)] * 2 for side in ("profiles", "filters") for name in ("a", "b")]
    profiles, filters = rounds[0] + rounds[1], rounds[2] + rounds[3]
    assert calls == profiles * PASSES + filters * PASSES
    assert built["a"][0]["match_profile_per_s"] > 0
    assert built["b"][0]["_filters"] == [()]
