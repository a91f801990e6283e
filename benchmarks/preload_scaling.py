"""How the preloaded cells scale: profiles in preloaded regions, 10k to 1M.

`python -m benchmarks.preload_scaling [--sizes 10000,100000,1000000] [--json FILE]`

A lean companion of `tsm bench matcher` for the sizes that a shared machine
cannot run it at: one workload (tracking: areas watched on a map, small moving
objects), the subscriptions only (no held profiles, no filters side, no
deletes), and three contenders on the same entries and query profiles: the
brute-force scan, the forest without cells and the forest with them. One
DoubleForest serves both forest contenders (the cells on or off for its
queries; the cells live beside it, so the forest is the same). The query
profiles are first asked, untimed, until the cells of their regions are
filled (the issue's "profiles in preloaded regions"); then each contender
takes its timed passes in turn, the quickest counting, as `bench_matcher`
does, and every answer is checked against the scan's.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import time
from pathlib import Path

import numpy as np

from benchmarks import report
from benchmarks.baselines import BruteForce, key_set
from benchmarks.contenders import Forest
from benchmarks.report import DOCS_DIR
from benchmarks.workloads import build
from matcher.boxes import Dims
from matcher.constraints import Atom, predicate_of
from matcher.preload import settings
from matcher.profiles import Profile

SEED = 0
QUERIES = 1024  # query profiles: one micro-batch
WARM_ROUNDS = 4  # untimed rounds that fill the query profiles' cells
PASSES = 3
CONTENDERS = ("brute-force", "forest-no-cells", "double-forest")


def prepare(top: int) -> tuple[Dims, list, list[Profile]]:
    """The tracking workload's first `top` subscriptions as entries (key =
    subscription index × 8 + disjunct) and QUERIES of its profiles."""
    w = build("tracking", SEED, top, QUERIES + QUERIES // 4)
    subs = [s for s in w.subscriptions if s.dnf is not None][:top]
    entries = [
        (i * 8 + j, conj)
        for i, s in enumerate(subs)
        for j, conj in enumerate(predicate_of([[Atom(*a) for a in c] for c in s.dnf]))
    ]
    profiles = [Profile(p.attrs) for p in w.profiles if p.attrs is not None][:QUERIES]
    dims = Dims()
    for _, conj in entries:
        dims.filter_box(conj)
    for p in profiles:
        dims.profile_box(p)
    return dims, entries, profiles


def measure(dims: Dims, entries: list, profiles: list[Profile]) -> list[dict]:
    """The three contenders' rows at one size."""
    scan, forest = BruteForce(dims), Forest()
    for key, conj in entries:
        scan.insert(key, conj)
        forest.insert(key, conj)
    scan.settle_subscriptions()
    forest.settle_subscriptions()
    started = time.process_time()
    for _ in range(WARM_ROUNDS):
        forest.match_profiles(profiles)
    fill_s = time.process_time() - started

    def cells(on: bool):
        def match(batch: list[Profile]) -> list:
            with settings.configured(enabled=on):
                return forest.df.match_profiles_grouped(
                    batch, [(-np.inf, np.inf)] * len(batch), forest.sub_keys
                )

        return match

    contenders = {
        "brute-force": lambda batch: [scan.match_profile(p) for p in batch],
        "forest-no-cells": cells(False),
        "double-forest": cells(True),
    }
    best = dict.fromkeys(contenders, np.inf)
    answers: dict[str, list] = {}
    asked = from_cells = 0
    for _ in range(PASSES):
        for name, match in contenders.items():
            gc.collect()
            forest.preload_stats()
            start = time.process_time()
            got = match(profiles)
            best[name] = min(best[name], (time.process_time() - start) / len(profiles))
            answers.setdefault(name, got)
            if name == "double-forest":
                stats = forest.preload_stats()
                asked += stats["profiles"]
                from_cells += stats["profiles_from_cells"]
    want = [key_set(a) for a in answers["brute-force"]]
    for name, got in answers.items():
        if [key_set(a) for a in got] != want:
            raise AssertionError(f"{name} disagrees with the scan at {len(entries):,} entries")
    mean_answer = sum(map(len, want)) / len(want)
    rows = []
    for name in CONTENDERS:
        row = {
            "workload": "tracking",
            "size": len(entries),
            "entries": len(entries),
            "contender": name,
            "match_profile_per_s": round(1 / best[name], 1),
            "mean_answer": round(mean_answer, 1),
        }
        if name == "double-forest":
            row["from_cells"] = round(from_cells / max(1, asked), 4)
            row["cells"] = stats["cells"]
            row["cells_bytes"] = stats["cells_bytes"]
            row["cells_bytes_per_entry"] = round(stats["cells_bytes"] / len(entries), 1)
            row["fill_s"] = round(fill_s, 2)
        rows.append(row)
    return rows


def main(sizes: tuple[int, ...], json_path: Path) -> None:
    started = time.time()
    dims, entries, profiles = prepare(max(sizes))
    rows = []
    for n in sizes:
        rows += measure(dims, entries[:n], profiles)
        for row in rows[-3:]:
            print(json.dumps(row), flush=True)
        gc.collect()
    result = {
        "command": "python -m benchmarks.preload_scaling --sizes "
        + ",".join(map(str, sizes))
        + f" --json {json_path}",
        "seed": SEED,
        "budget_bytes": settings.current().budget_bytes,
        "seconds": round(time.time() - started, 1),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "rows": rows,
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    report.constant_time_plot(rows, json_path.parent, json_path.stem)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--json", type=Path, default=DOCS_DIR / "preload_scaling.json")
    args = parser.parse_args()
    main(tuple(int(s) for s in args.sizes.split(",")), args.json)
