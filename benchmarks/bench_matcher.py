"""`tsm bench matcher`: the DoubleForest against the baselines, side by side.

For each workload and live size every contender gets the same entries (one
per conjunction of a subscription's predicate) and the same profiles, and is
timed on: inserting them, matching query profiles against the subscriptions,
matching query filters against the profiles, and deleting some. Every answer
is checked against the brute-force scan (before and after the deletions), so
a table with a wrong contender is never printed. A contender is skipped at a
size where it would take longer than the budget, and the table says so.

Answers are timed in each contender's own form (a numpy array of keys for
the scan and the forest, a set for the poset and the R-tree) and compared as
sets afterwards: turning 2,000 matches into a Python set costs more than a
forest query, and it is no part of matching (the engine reads the arrays).

Times are this process's CPU time: every contender runs single-threaded in
it. That does not make a shared machine fair (its slow spells slow this
process's CPU too: 25% between two runs of the same build here), so the
contenders take their matching passes in turn, all of them built at once.
"""

from __future__ import annotations

import gc
import logging
import math
import platform
import random
import time
import tracemalloc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.baselines import Contender, Keys, key_set
from benchmarks.contenders import CONTENDERS
from benchmarks.report import BASELINE, DOCS_DIR, RESULTS_DIR
from benchmarks.workloads import KINDS, PATTERN_KINDS, build
from matcher.boxes import Dims
from matcher.constraints import Atom, Conjunction, predicate_of
from matcher.preload import settings as preload_settings
from matcher.profiles import Profile

log = logging.getLogger(__name__)

SEED = 0
DEFAULT_JSON = RESULTS_DIR / "matcher.json"
DOCS_JSON = DOCS_DIR / "matcher.json"
RECHECK = 20  # queries re-checked after the deletions
PASSES = 3  # timed passes over the queries, the quickest counting ...
REPEAT_S = 10.0  # ... while they take under this in all
WARM_SINGLE = 16  # warm-up queries for a contender that answers one at a time
MEMORY_BUILD_S = 20.0  # a traced rebuild for memory only where the timed one was quicker
GROWTH = {"siena-poset": 2.0}  # how a contender's build time grows with size (default 1)
# Up to this size a contender is tried whatever its projected build time, and
# one too slow to build whole still gets insert and delete rates over what it
# built in the budget (the thesis compares updates at 10k).
PARTIAL_UPTO = 10_000


@dataclass(frozen=True)
class Plan:
    workloads: tuple[str, ...]
    sizes: tuple[int, ...]
    queries: int  # query profiles and query filters per size
    deletes: int  # at most this many deletions per side (and at most a tenth)
    budget_s: float  # per contender and phase
    memory_upto: int  # sizes up to this one also get a traced build for memory
    contenders: tuple[str, ...] = tuple(CONTENDERS)


FULL = Plan(KINDS, (1_000, 10_000, 100_000, 1_000_000), 1000, 1000, 150.0, 100_000)
QUICK = Plan(("uniform", "nested"), (1_000, 10_000), 100, 100, 12.0, 1_000)


class Mismatch(AssertionError):
    """Two contenders disagree: a bug in one of them, never a benchmark result."""


class OverBudget(Exception):
    def __init__(self, message: str, done: int = 0, seconds: float = 0.0) -> None:
        super().__init__(message)
        self.done, self.seconds = done, seconds


class BuildOverBudget(OverBudget):
    """The subscription inserts ran out of budget: `done` of them in `seconds`."""


@dataclass
class Data:
    """One workload at the largest size; each size is a prefix of it."""

    kind: str
    dims: Dims
    entries: list[tuple[int, Conjunction]]  # key = subscription index * 8 + disjunct
    profiles: list[Profile]
    query_profiles: list[Profile]
    query_filters: list[Conjunction]
    warm_profiles: list[Profile]  # other queries, answered untimed first (warm-up)
    warm_filters: list[Conjunction]
    entries_of: dict[int, int] = field(default_factory=dict)  # size -> number of entries


def prepare(kind: str, plan: Plan) -> Data:
    """Specs to the matcher's model, and every column registered up front."""
    top, q = max(plan.sizes), plan.queries
    # Profile records: the held ones, then the queries. Retracts (tracking)
    # are no profiles, so ask for some more records, and more again if short.
    need = top + 2 * q  # held, timed queries, warm-up queries
    records = need + q + need // 100
    while True:
        w = build(kind, SEED, need, records)
        publishes = [p for p in w.profiles if p.attrs is not None]
        if len(publishes) >= need:
            break
        records += 2 * (need - len(publishes))
    subs = [s for s in w.subscriptions if s.dnf is not None]
    memo: dict[tuple, list[Conjunction]] = {}

    def predicate(dnf: list[list[tuple]]) -> list[Conjunction]:
        # Popular filters repeat (nested): convert each distinct predicate once.
        key = tuple(map(tuple, dnf))
        if key not in memo:
            memo[key] = predicate_of([[Atom(*a) for a in c] for c in dnf])
        return memo[key]

    entries = [
        (i * 8 + j, conj)
        for i, s in enumerate(subs[:top])
        for j, conj in enumerate(predicate(s.dnf))
    ]
    filters = [c for s in subs[top:] for c in predicate(s.dnf)]
    data = Data(
        kind,
        Dims(),
        entries,
        [Profile(p.attrs) for p in publishes[:top]],
        [Profile(p.attrs) for p in publishes[top : top + q]],
        filters[:q],
        [Profile(p.attrs) for p in publishes[top + q : need]],
        filters[q : 2 * q],
    )
    for _, conj in entries:
        data.dims.filter_box(conj)
    for conj in data.query_filters + data.warm_filters:
        data.dims.filter_box(conj)
    for p in data.profiles + data.query_profiles + data.warm_profiles:
        data.dims.profile_box(p)
    keys = [k >> 3 for k, _ in entries]
    data.entries_of = {n: _count_below(keys, n) for n in plan.sizes}
    return data


def _count_below(sorted_keys: list[int], n: int) -> int:
    lo, hi = 0, len(sorted_keys)
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_keys[mid] < n:
            lo = mid + 1
        else:
            hi = mid
    return lo


# ---------------------------------------------------------------- timing

_clock = time.process_time


def _collected() -> float:
    """The clock, read after a full collection: the survivors a build (or
    the previous contender) left are otherwise collected in whatever timed
    step crosses the GC threshold next (0.3 s at 100k entries, 10x a
    forest's whole batch of 1000 profiles), which makes a single timed
    batch a coin toss."""
    gc.collect()
    return _clock()


def _timed(
    step: Callable[[Any], None],
    items: Sequence,
    budget_s: float,
    settle: Callable[[], None] | None = None,
) -> float:
    """Seconds to apply `step` to every item and then `settle` (the index work the
    steps deferred, so that no query pays for it untimed); OverBudget past the
    budget, or as soon as a tenth of it is spent and the items done so far say that
    all of them would take over twice the budget (no contender's steps get cheaper
    as it grows: a poset's inserts get dearer), so that a hopeless build does not
    spend it all."""
    start = _collected()
    for i, item in enumerate(items):
        step(item)
        if i & 255 == 255:
            elapsed = _clock() - start
            projected = elapsed / (i + 1) * len(items)
            if elapsed > budget_s or (elapsed > budget_s / 10 and projected > 2 * budget_s):
                message = (
                    f"stopped after {i + 1:,} of {len(items):,} in {elapsed:.0f} s "
                    f"(all would take ~{projected:.0f} s at that rate, over the "
                    f"{budget_s:.0f} s budget)"
                )
                raise OverBudget(message, i + 1, elapsed)
    if settle is not None:
        settle()
    return _clock() - start


class _Passes:
    """One contender's timed passes over one side's queries, taken in turn
    with the other contenders' (`_match_side_by_side`).

    Before every pass, untimed, a batch of other queries (a few for a
    contender that answers one at a time): the first one pays a process's
    first-touch page faults of its large arrays (60 ms of a forest's 20 ms
    batch of 1000 nested profiles at 100k here), which a running job pays
    once, not per batch; each one brings the contender's own structure back
    into the caches that the other contenders' pass (and the collection
    before this one) filled with theirs (a forest's nested 100k pass, cold,
    took 1.8x as long). Then the pass answers the queries (as many batches
    as fit in the budget, at least one), up to PASSES passes while they
    take under REPEAT_S in all, and the quickest counts (as `timeit` does:
    the slower ones are the machine's other work, not the contender's;
    ±20% between passes of a 20 ms batch here)."""

    def __init__(
        self, match: Callable[[list], list[Keys]], queries: list, warm: list, batch: int
    ) -> None:
        self.match, self.queries, self.batch = match, queries, batch
        self.warm = warm[: batch if batch > 1 else WARM_SINGLE]
        self.best, self.first, self.spent, self.done = math.inf, math.inf, 0.0, False
        self.answers: list[Keys] | None = None

    def run(self, budget_s: float) -> None:
        """One pass, unless the contender is done."""
        if self.done:
            return
        _collected()
        for i in range(0, len(self.warm), self.batch):
            self.match(self.warm[i : i + self.batch])
        got: list[Keys] = []
        start = _clock()
        for i in range(0, len(self.queries), self.batch):
            got += self.match(self.queries[i : i + self.batch])
            if _clock() - start > budget_s:
                break
        took = _clock() - start
        if self.answers is None:
            self.answers, self.first = got, took / len(got)
        self.best, self.spent = min(self.best, took / len(got)), self.spent + took
        self.done = len(got) < len(self.queries) or self.spent > REPEAT_S


def _batch(contender: Contender) -> int:
    """Queries per call for a batched contender: a micro-batch of 1024 (the
    streaming job's are larger). On the nested workload at 100k, 1024 gave
    1.3× the rate of 256 in both directions and 2048 under 10% more: the
    per-list and per-block costs of a batch are shared by more queries,
    while the (query × child) matrices stay cache-sized chunks."""
    return 1024 if contender.batched else 1


def _check(name: str, got: list[Keys], want: list[Keys], what: str) -> None:
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        try:
            g, w = key_set(g), key_set(w)
        except ValueError as exc:
            raise Mismatch(f"{name} on {what}, query {i}: {exc}") from None
        if g != w:
            missing, extra = sorted(w - g)[:5], sorted(g - w)[:5]
            raise Mismatch(
                f"{name} disagrees with brute-force on {what}, query {i}: {len(g)} matches "
                f"instead of {len(w)} (missing keys {missing}, extra keys {extra})"
            )


def _memory(factory: Callable[[], Contender], entries: Iterable[tuple[int, Conjunction]]) -> int:
    """Bytes a contender keeps for the subscription entries (Python heap, numpy included)."""
    gc.collect()
    tracemalloc.start()
    try:
        contender = factory()
        for key, conj in entries:
            contender.insert(key, conj)
        contender.settle_subscriptions()
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del contender
    return size


# ---------------------------------------------------------------- one size


@dataclass
class Run:
    plan: Plan
    log: Callable[[str], None]
    rows: list[dict] = field(default_factory=list)
    last_build: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)


def run_size(run: Run, data: Data, n: int) -> None:
    plan = run.plan
    entries = data.entries[: data.entries_of[n]]
    profiles = list(enumerate(data.profiles[:n]))
    rng = random.Random(f"{data.kind}:{n}")
    n_del = min(plan.deletes, len(entries) // 10, n // 10)
    del_entries = [k for k, _ in rng.sample(entries, n_del)]
    del_profiles = [k for k, _ in rng.sample(profiles, n_del)]
    what = f"{data.kind} n={n}"
    built: dict[str, tuple[dict, Contender]] = {}
    for name in plan.contenders:
        make = CONTENDERS[name]
        row: dict[str, Any] = {
            "workload": data.kind,
            "size": n,
            "entries": len(entries),
            "contender": name,
        }
        run.rows.append(row)
        projected = _projected(run, name, data.kind, n)
        if projected > plan.budget_s and n > PARTIAL_UPTO:
            row["skipped"] = (
                f"its inserts would take ~{projected:.0f} s (budget {plan.budget_s:.0f} s a side), "
                "projected from the previous size"
            )
            run.log(f"  {name}: skipped, {row['skipped']}")
            continue
        contender = make(data.dims)
        try:
            _build(run, row, contender, data, entries, profiles)
        except BuildOverBudget as exc:
            _partial_updates(run, row, contender, entries, exc, rng)
            run.log(f"  {name}: {row['partial']}: " + _metrics(row))
            continue
        except OverBudget as exc:
            _skip(run, row, exc)
            continue
        built[name] = (row, contender)
        run.log(f"  {name}: built in {row['build_s']:.1f} s")
    _match_side_by_side(run, built, data)
    reference: dict[str, list[Keys]] = {}
    for name, (row, contender) in built.items():
        try:
            _deletions(run, row, contender, data, del_entries, del_profiles)
        except OverBudget as exc:
            _skip(run, row, exc)
            continue
        for side in ("profiles", "filters", "profiles-after-delete", "filters-after-delete"):
            if name == "brute-force":
                reference[side] = row.pop(f"_{side}")
            else:
                _check(name, row.pop(f"_{side}"), reference[side], f"{what} ({side})")
        if reference.get("profiles"):
            answers = reference["profiles"]
            row["mean_answer"] = round(sum(map(len, answers)) / len(answers), 1)
        if n <= plan.memory_upto and entries and row["build_s"] < MEMORY_BUILD_S:
            make = CONTENDERS[name]
            row["bytes_per_entry"] = round(
                _memory(lambda m=make: m(data.dims), entries) / len(entries)
            )
        run.log(f"  {name}: " + _metrics(row))
    built.clear()
    gc.collect()


def _skip(run: Run, row: dict, exc: OverBudget) -> None:
    for key in [k for k in row if k.startswith("_")]:
        del row[key]
    row["skipped"] = str(exc)
    run.log(f"  {row['contender']}: skipped, {row['skipped']}")


def _metrics(row: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in row.items() if k in METRICS)


def _partial_updates(
    run: Run, row: dict, c: Contender, entries: list, stop: BuildOverBudget, rng: random.Random
) -> None:
    """Insert and delete rates of a contender too slow to build whole: over
    the inserts that fit in the budget, then deletes among those. Both
    flatter it: its first inserts are its cheapest (a poset's insert slows
    as it grows) and it deletes from a smaller structure."""
    row["insert_per_s"] = _rate(stop.done, stop.seconds)
    held = entries[: stop.done]
    dels = [k for k, _ in rng.sample(held, min(run.plan.deletes, len(held) // 10))]
    t = _timed(c.delete, dels, run.plan.budget_s, c.settle_subscriptions)
    row["delete_per_s"] = _rate(len(dels), t)
    row["partial"] = f"inserts {stop}; insert and delete rates over those, no matching"


def _projected(run: Run, name: str, kind: str, n: int) -> float:
    prev = run.last_build.get((name, kind))
    if prev is None:
        return 0.0
    prev_n, seconds = prev
    return seconds * (n / prev_n) ** GROWTH.get(name, 1.0)


def _build(run: Run, row: dict, c: Contender, data: Data, entries: list, profiles: list) -> None:
    budget = run.plan.budget_s
    # A side's insert time includes the index work its inserts deferred
    # (`settle_*`), so that no query pays for the bulk load before it.
    try:
        t_sub = _timed(lambda e: c.insert(*e), entries, budget, c.settle_subscriptions)
    except OverBudget as exc:
        raise BuildOverBudget(str(exc), exc.done, exc.seconds) from None
    t_prof = _timed(lambda p: c.insert_profile(*p), profiles, budget, c.settle_profiles)
    # (each side's inserts have their own budget: the longer one decides)
    run.last_build[(c.name, data.kind)] = (row["size"], max(t_sub, t_prof))
    row["build_s"] = round(t_sub + t_prof, 3)
    row["insert_per_s"] = _rate(len(entries), t_sub)
    row["insert_profile_per_s"] = _rate(len(profiles), t_prof)
    preload = getattr(c, "preload", None)
    if preload is not None:  # (the cells of the held profiles' regions, timed apart)
        start = _collected()
        preload()
        row["preload_s"] = round(_clock() - start, 3)


def _match_side_by_side(run: Run, built: dict[str, tuple[dict, Contender]], data: Data) -> None:
    """Each side's passes taken in turn by every contender (one pass each,
    then the next round), so that a slow spell of the machine (25% between
    two processes of the same build here) falls on all of them, not on
    whichever ran then: the ratios are what the table is for."""
    sides = (
        ("profiles", "match_profiles", data.query_profiles, data.warm_profiles),
        ("filters", "match_subscriptions", data.query_filters, data.warm_filters),
    )
    for side, method, queries, warm in sides:
        passes = {
            name: _Passes(getattr(c, method), queries, warm, _batch(c))
            for name, (_, c) in built.items()
        }
        stats = {name: c.preload_stats for name, (_, c) in built.items() if _preloads(c)}
        for take in stats.values():
            take()  # (counts from here on)
        for _ in range(PASSES):
            for timed in passes.values():
                timed.run(run.plan.budget_s)
        for name, timed in passes.items():
            row = built[name][0]
            row[f"match_{side[:-1]}_per_s"] = _rate(1, timed.best)
            if name in stats:  # (the first pass, while cells still fill: for the record)
                row[f"match_{side[:-1]}_first_per_s"] = _rate(1, timed.first)
            row[f"_{side}"] = timed.answers
        for name, take in stats.items():
            _note_cells(built[name][0], take(), side)


def _preloads(contender: Contender) -> bool:
    return hasattr(contender, "preload_stats")


def _note_cells(row: dict, stats: dict[str, int], side: str) -> None:
    """The share of a side's queries (its warm-up ones and passes) that cells
    answered, and the equality index, and the cells' memory after them, per
    entry held."""
    if side == "profiles" and stats["profiles"]:
        row["from_cells"] = round(stats["profiles_from_cells"] / stats["profiles"], 4)
        row["from_index"] = round(stats["profiles_from_index"] / stats["profiles"], 4)
    row["cells"] = stats["cells"]
    row["cells_bytes"] = stats["cells_bytes"]
    row["cells_bytes_per_entry"] = round(stats["cells_bytes"] / max(1, row["entries"]), 1)


def _deletions(
    run: Run, row: dict, c: Contender, data: Data, del_entries: list, del_profiles: list
) -> None:
    budget = run.plan.budget_s
    if del_entries:
        t = _timed(c.delete, del_entries, budget, c.settle_subscriptions)
        row["delete_per_s"] = _rate(len(del_entries), t)
        t = _timed(c.delete_profile, del_profiles, budget, c.settle_profiles)
        row["delete_profile_per_s"] = _rate(len(del_profiles), t)
    row["_profiles-after-delete"] = c.match_profiles(data.query_profiles[:RECHECK])
    row["_filters-after-delete"] = c.match_subscriptions(data.query_filters[:RECHECK])


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else math.inf


METRICS = (
    "from_cells",
    "from_index",
    "cells_bytes_per_entry",
    "preload_s",
    "insert_per_s",
    "delete_per_s",
    "match_profile_per_s",
    "match_filter_per_s",
    "insert_profile_per_s",
    "delete_profile_per_s",
    "bytes_per_entry",
)


# ---------------------------------------------------------------- entry point


def main(
    quick: bool = False,
    json_path: Path | None = None,
    sizes: tuple[int, ...] | None = None,
    workloads: tuple[str, ...] | None = None,
    budget_s: float | None = None,
    contenders: tuple[str, ...] | None = None,
) -> int:
    from benchmarks import report

    plan = QUICK if quick else FULL
    if contenders:  # (every answer is checked against the scan's)
        contenders = tuple(dict.fromkeys([BASELINE, *contenders]))
    plan = replace(
        plan,
        sizes=sizes or plan.sizes,
        workloads=workloads or plan.workloads,
        budget_s=budget_s or plan.budget_s,
        contenders=contenders or plan.contenders,
    )
    json_path = json_path or DEFAULT_JSON
    command = "tsm bench matcher" + (" --quick" if quick else "")
    if sizes:
        command += " --sizes " + ",".join(map(str, sizes))
    if workloads:
        command += " --workloads " + ",".join(workloads)
    if budget_s:
        command += f" --budget {budget_s:g}"
    if contenders:
        command += " --contenders " + ",".join(contenders[1:])
    if json_path == DOCS_JSON:
        command += " --write-docs"
    elif json_path != DEFAULT_JSON:
        command += f" --json {json_path}"
    patterns = tuple(k for k in plan.workloads if k in PATTERN_KINDS)
    if patterns:
        from benchmarks import bench_patterns

        out = json_path.with_name("patterns.json") if json_path != DEFAULT_JSON else None
        bench_patterns.main(quick, out, sizes, patterns, command)
        plan = replace(plan, workloads=tuple(k for k in plan.workloads if k not in patterns))
        if not plan.workloads:
            return 0
    run = Run(plan, log.info)
    started = time.time()
    for kind in plan.workloads:
        run.log(f"{kind}: generating {max(plan.sizes)} subscriptions and profiles")
        data = prepare(kind, plan)
        for n in plan.sizes:
            run.log(f"{kind}: {n} subscriptions ({data.entries_of[n]} conjunctions), {n} profiles")
            try:
                run_size(run, data, n)
            except Mismatch as exc:
                log.error("MISMATCH: %s", exc)
                return 1
    result = {
        "command": command,
        "seed": SEED,
        "plan": plan.__dict__,
        "preload": {"budget_bytes": preload_settings.current().budget_bytes},
        "seconds": round(time.time() - started, 1),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "rows": run.rows,
    }
    print(report.table(run.rows))
    report.write(result, json_path)
    run.log(f"wrote {json_path} and its plots and README.md in {json_path.parent}")
    return 0
