"""Delivery policies against plain matching (docs/DELIVERY.md), in process.

    python -m benchmarks.bench_delivery [--quick] [--json FILE]

Throughput: the uniform workload's subscriptions (100k and two rounds; 10k
and one round with --quick), plain and with delivery fields, side by side in
one run: in groups of 10, 100, 1,000 and 10,000 members (modes in turn per group: anycast, manycast
k=3, faircast k=3, bestcast k=3 near the box's centre), and without groups
but sustained (dwell 1 s, exit dwell 1 s, margin 5). Each engine is loaded
with the subscriptions, then takes the same profiles in batches of 1,000
(`Engine.process_batch`, as `tsm replay --batch-lines` does) with the
cyclic GC off, as the job's operator matches, every engine taking each batch
in turn; the rate is profiles over the time of its batches, best of the
rounds, by the wall clock and by the process's CPU time (which a busy
machine's other processes do not lengthen).

Flaps: `tsm gen noisy` tracks (GPS noise 3) through zones, plain and with
dwell, exit dwell and margins: entries, exits and flaps (`flap_counts`).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

from benchmarks import noisy_tracks
from benchmarks.workloads import generate
from matcher.admission import Input
from matcher.engine import Engine
from matcher.records import Source

MODES = (("anycast", 1), ("manycast", 3), ("faircast", 3), ("bestcast", 3))
BATCH = 1000


def with_groups(sub: dict, index: int, size: int) -> dict:
    group = index // size
    mode, k = MODES[group % len(MODES)]
    delivery = {"group": f"g{group}", "mode": mode, "k": k}
    if mode == "bestcast":
        delivery["near"] = {"x": 500.0, "y": 500.0}
    return sub | {"delivery": delivery}


def sustained(sub: dict, index: int, size: int) -> dict:
    return sub | {"dwell_ms": 1000, "exit_dwell_ms": 1000, "margin": 5.0}


def loaded(subs: list[dict]) -> Engine:
    engine = Engine()
    engine.process_batch(
        Input("subscription", json.dumps(r), Source(file="s", line=n + 1))
        for n, r in enumerate(subs)
    )
    return engine


def rates(
    variants: dict[str, list[dict]], profiles: list[dict], rounds: int
) -> dict[str, tuple[float, float, int]]:
    """Per variant (its subscriptions), profiles per second through a loaded engine
    (best round) by the wall clock and by CPU time, and its records. The variants
    take each batch in turn, so that a change of the machine's load falls on all of
    them alike."""
    items = [
        Input("profile", json.dumps(r), Source(file="p", line=n + 1))
        for n, r in enumerate(profiles)
    ]
    best = dict.fromkeys(variants, 0.0)
    best_cpu = dict.fromkeys(variants, 0.0)
    records = dict.fromkeys(variants, 0)
    for _ in range(rounds):
        engines = {name: loaded(subs) for name, subs in variants.items()}
        spent = dict.fromkeys(variants, 0.0)
        spent_cpu = dict.fromkeys(variants, 0.0)
        records = dict.fromkeys(variants, 0)
        # (the job's operator freezes what its cached matchers hold out of the cyclic
        # GC's sight and matches with the GC off: `streaming.processor`)
        gc.collect()
        gc.freeze()
        gc.disable()
        for at in range(0, len(items), BATCH):
            batch = items[at : at + BATCH]
            for name, engine in engines.items():
                started, started_cpu = time.perf_counter(), time.process_time()
                records[name] += len(engine.process_batch(batch))
                spent[name] += time.perf_counter() - started
                spent_cpu[name] += time.process_time() - started_cpu
        for name in variants:
            best[name] = max(best[name], len(items) / spent[name])
            best_cpu[name] = max(best_cpu[name], len(items) / spent_cpu[name])
        gc.enable()
        gc.unfreeze()
        del engines
    return {name: (best[name], best_cpu[name], records[name]) for name in variants}


def throughput(n_subs: int, n_profiles: int, sizes: tuple[int, ...], rounds: int) -> list[dict]:
    subs, profiles = generate("uniform", 1, n_subs, n_profiles)
    cases = [("plain", None, None)] + [("groups", size, with_groups) for size in sizes]
    cases.append(("sustained", None, sustained))
    variants = {
        (name, size): subs
        if change is None
        else [change(s, n, size or 1) for n, s in enumerate(subs)]
        for name, size, change in cases
    }
    measured = rates(variants, profiles, rounds)
    plain, plain_cpu, _ = measured["plain", None]
    out = []
    for (name, size), (got, got_cpu, records) in measured.items():
        row = {
            "variant": name,
            "group_size": size,
            "profiles_per_s": round(got),
            "profiles_per_cpu_s": round(got_cpu),
            "records": records,
        }
        if name != "plain":
            row["of_plain"] = round(got / plain, 2)
            row["of_plain_cpu"] = round(got_cpu / plain_cpu, 2)
        out.append(row)
        print(
            f"{name} {size or ''}: {got:,.0f} profiles/s ({got / plain:.2f} of plain), "
            f"by CPU time {got_cpu:,.0f} ({got_cpu / plain_cpu:.2f}), {records} records",
            flush=True,
        )
    return out


def flaps(n_zones: int, n_reports: int) -> list[dict]:
    out = []
    cases = {
        "plain": {"policies": False},
        "margin 10": {"dwell_ms": (0,), "exit_dwell_ms": (0,), "margins": (10.0,)},
        "dwell 3 s": {"dwell_ms": (3000,), "exit_dwell_ms": (0,), "margins": (0.0,)},
        "exit dwell 3 s": {"dwell_ms": (0,), "exit_dwell_ms": (3000,), "margins": (0.0,)},
        "dwell + exit dwell + margin": {
            "dwell_ms": (2000,),
            "exit_dwell_ms": (2000,),
            "margins": (10.0,),
        },
    }
    for name, settings in cases.items():
        subs, profiles = noisy_tracks.generate(7, n_zones, n_reports, group_size=10**9, **settings)
        for s in subs:
            s.pop("delivery", None)  # (flaps of single pairs: no groups)
        items = [
            Input("subscription", json.dumps(r), Source(file="s", line=n + 1))
            for n, r in enumerate(subs)
        ]
        items += [
            Input("profile", json.dumps(r), Source(file="p", line=n + 1))
            for n, r in enumerate(profiles)
        ]
        matches = [o.value for o in Engine().process_batch(items) if o.topic == "matches"]
        row = {"case": name, **noisy_tracks.flap_counts(matches), "records": len(matches)}
        print(row, flush=True)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--sizes", type=lambda t: tuple(map(int, t.split(","))), help="group sizes, e.g. 10,100"
    )
    args = parser.parse_args(argv)
    if args.quick:
        result = {"throughput": throughput(10_000, 2_000, args.sizes or (10, 100, 1000), 1)}
        result["flaps"] = flaps(100, 3_000)
    else:
        sizes = args.sizes or (10, 100, 1000, 10_000)
        result = {"throughput": throughput(100_000, 5_000, sizes, 2)}
        result["flaps"] = flaps(400, 30_000)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
