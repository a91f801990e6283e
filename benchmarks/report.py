"""The matcher benchmark's outputs: a text table, JSON, PNG plots, README.md.

Ratios are against the brute-force scan at the same workload and size, the
baseline that PLATFORM.md times. The product (`double-forest`) answers from
its preloaded cells where it can; `forest-no-cells` is the same forest
without them.
"""

from __future__ import annotations

import json
import math
import os
from itertools import groupby
from pathlib import Path

# Where `tsm bench` writes its results: a git-ignored folder, or, when asked
# (`--write-docs`), the committed results of the README.
RESULTS_DIR = Path("bench-results")
DOCS_DIR = Path("docs/bench")
BASELINE = "brute-force"
PANELS = (
    ("match_profile_per_s", "profiles matched / s"),
    ("match_filter_per_s", "filters matched against profiles / s"),
    ("insert_per_s", "subscription inserts / s"),
    ("delete_per_s", "subscription deletes / s"),
)


def _groups(rows: list[dict]):
    key = lambda r: (r["workload"], r["size"])  # noqa: E731
    return groupby(rows, key)


def _ratio(row: dict, base: dict | None, metric: str) -> str:
    if metric not in row or not base or not base.get(metric):
        return ""
    return f"{row[metric] / base[metric]:.2f}x"


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _share(row: dict) -> str:
    share = row.get("from_cells")
    return "" if share is None else f"{100 * share:.0f}%"


def table(rows: list[dict]) -> str:
    """One block per (workload, size), one line per contender."""
    head = (
        f"{'contender':<16}{'insert/s':>11}{'delete/s':>11}{'profiles/s':>12}{'(vs bf)':>9}"
        f"{'filters/s':>11}{'(vs bf)':>9}{'B/entry':>9}{'cells':>7}{'cells B/e':>10}"
    )
    out = []
    for (kind, size), group in _groups(rows):
        group = list(group)
        base = next((r for r in group if r["contender"] == BASELINE), None)
        out.append(f"\n{kind}, {size:,} subscriptions ({group[0]['entries']:,} conjunctions)")
        out.append(head)
        for r in group:
            if "skipped" in r:
                out.append(f"{r['contender']:<16}skipped: {r['skipped']}")
                continue
            out.append(
                f"{r['contender']:<16}{_num(r.get('insert_per_s')):>11}"
                f"{_num(r.get('delete_per_s')):>11}{_num(r.get('match_profile_per_s')):>12}"
                f"{_ratio(r, base, 'match_profile_per_s'):>9}"
                f"{_num(r.get('match_filter_per_s')):>11}"
                f"{_ratio(r, base, 'match_filter_per_s'):>9}"
                f"{_num(r.get('bytes_per_entry')):>9}{_share(r):>7}"
                f"{_num(r.get('cells_bytes_per_entry')):>10}"
            )
            if "partial" in r:
                out.append(f"{'':<16}({r['partial']})")
    return "\n".join(out)


def merged(results: list[dict]) -> dict:
    """Several runs' results as one (their rows in order, their commands a line
    each): workloads run apart, in parallel, on a machine too small for one."""
    first = results[0]
    return {
        **first,
        "command": "\n".join(r["command"] for r in results),
        "seconds": round(sum(r["seconds"] for r in results), 1),
        "rows": [row for r in results for row in r["rows"]],
    }


def write(result: dict, json_path: Path) -> None:
    """JSON at `json_path`; plots and README.md next to it."""
    out_dir = json_path.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    clean = json.loads(json.dumps(result, default=str), parse_constant=lambda _: None)
    json_path.write_text(json.dumps(clean, indent=1) + "\n", encoding="utf-8")
    plots = _plots(result["rows"], out_dir, json_path.stem)
    plots += constant_time_plot(result["rows"], out_dir, json_path.stem)
    update_section(out_dir / "README.md", "matcher", _readme(result, json_path, plots))


def update_section(readme: Path, name: str, section: str) -> None:
    """Replace one benchmark's section of a shared README (between
    `<!-- name -->` and `<!-- /name -->`), keeping the others' sections."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    block = f"{begin}\n{section.strip()}\n{end}\n\n"
    if begin in text and end in text:
        before, rest = text.split(begin, 1)
        text = before + block + rest.split(end, 1)[1].lstrip("\n")
    else:
        text = block + text
    readme.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def _plots(rows: list[dict], out_dir: Path, stem: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    for kind in dict.fromkeys(r["workload"] for r in rows):
        fig, axes = plt.subplots(2, 2, figsize=(10, 8))
        mine = [r for r in rows if r["workload"] == kind and "skipped" not in r]
        for ax, (metric, label) in zip(axes.flat, PANELS, strict=True):
            for name in dict.fromkeys(r["contender"] for r in mine):
                pts = [(r["size"], r.get(metric)) for r in mine if r["contender"] == name]
                pts = [(s, v) for s, v in pts if v and math.isfinite(v)]
                if pts:
                    ax.plot(*zip(*pts, strict=True), marker="o", label=name)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("live subscriptions (and profiles)")
            ax.set_title(label, fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
        axes.flat[0].legend(fontsize=8)
        fig.suptitle(f"tsm bench matcher: {kind} workload")
        fig.tight_layout()
        name = f"{stem}_{kind}.png"
        fig.savefig(out_dir / name, dpi=90)
        plt.close(fig)
        names.append(name)
    return names


def per_answer_us(row: dict) -> float | None:
    """Microseconds per profile per subscription in its answer: the figure that
    stays flat where a lookup's cost grows with its answer, not with the set."""
    rate, answer = row.get("match_profile_per_s"), row.get("mean_answer")
    if not rate or not answer or not math.isfinite(rate):
        return None
    return 1e6 / rate / answer


def constant_time_plot(rows: list[dict], out_dir: Path, stem: str) -> list[str]:
    """Time per profile per answer entry against the number of subscriptions,
    one panel per workload (the issue's constant-time target)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(dict.fromkeys(r["workload"] for r in rows))
    sizes = {r["size"] for r in rows}
    if len(sizes) < 2:
        return []
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.5 * len(kinds), 4), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        mine = [r for r in rows if r["workload"] == kind and "skipped" not in r]
        for name in (FOREST, NO_CELLS, BASELINE):
            pts = [(r["size"], per_answer_us(r)) for r in mine if r["contender"] == name]
            pts = [(s, v) for s, v in pts if v]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("live subscriptions")
        ax.set_title(f"{kind}: µs per profile per match", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    name = f"{stem}_constant_time.png"
    fig.savefig(out_dir / name, dpi=90)
    plt.close(fig)
    return [name]


FOREST = "double-forest"
NO_CELLS = "forest-no-cells"


def _preload_targets(rows: list[dict], budget: int | None) -> list[str]:
    """Issue 34's targets against this run's rows (the product with its cells)."""
    by = {(r["workload"], r["size"], r["contender"]): r for r in rows}
    kinds = list(dict.fromkeys(r["workload"] for r in rows))
    lines = ["| target (issue 34) | workload | measured | met |", "|---|---|---:|---|"]

    def ratio(kind: str, size: int, other: str, metric: str) -> float | None:
        mine, theirs = by.get((kind, size, FOREST), {}), by.get((kind, size, other), {})
        if mine.get(metric) and theirs.get(metric):
            return mine[metric] / theirs[metric]
        return None

    for size in (100_000, 1_000_000):
        for kind in kinds:
            r = ratio(kind, size, BASELINE, "match_profile_per_s")
            if r is not None:
                met = "yes" if r >= 10 else "no"
                lines.append(
                    f"| profiles/s ≥ 10× brute force at {size:,} | {kind} | {r:.2f}× | {met} |"
                )
    r = ratio("tracking", 1_000_000, NO_CELLS, "match_profile_per_s")
    if r is not None:
        met = "yes" if r >= 10 else "no"
        lines.append(
            "| profiles/s ≥ 10× the forest without cells at 1,000,000 | tracking "
            f"| {r:.2f}× | {met} |"
        )
    for kind in kinds:
        mine = sorted(
            (r["size"], per_answer_us(r))
            for r in rows
            if r["workload"] == kind and r["contender"] == FOREST and per_answer_us(r)
        )
        small = [v for s, v in mine if s == 10_000]
        if small and mine[-1][0] > 10_000:
            growth = mine[-1][1] / small[0]
            met = "yes" if growth <= 1.5 else "no"
            lines.append(
                f"| time per profile per match grows ≤ 1.5× from 10,000 to {mine[-1][0]:,} "
                f"| {kind} | {growth:.2f}× | {met} |"
            )
    worst = [
        (r[m] / other[m], r["workload"], r["size"], m)
        for r in rows
        if r["contender"] == FOREST
        for m in ("match_profile_per_s", "match_filter_per_s")
        if r.get(m) and (other := by.get((r["workload"], r["size"], NO_CELLS), {})).get(m)
    ]
    if worst:
        low, kind, size, m = min(worst)
        what = "profiles" if m == "match_profile_per_s" else "filters"
        met = "yes" if low >= 1 else "no (within noise)" if low >= 0.9 else "no"
        lines.append(
            f"| never slower than the forest without cells (lowest: {what}, {size:,}) "
            f"| {kind} | {low:.2f}× | {met} |"
        )
    held = [r for r in rows if r["contender"] == FOREST and "cells_bytes" in r]
    if held and budget:
        top = max(held, key=lambda r: r["cells_bytes"])
        met = "yes" if top["cells_bytes"] <= budget else "no"
        lines.append(
            f"| cells' memory within the budget ({budget / 2**20:,.0f} MiB a space; most: "
            f"{top['cells_bytes_per_entry']:,.0f} B per entry) | {top['workload']} "
            f"{top['size']:,} | {top['cells_bytes'] / 2**20:,.1f} MiB | {met} |"
        )
    return lines


def _targets(rows: list[dict]) -> list[str]:
    """The issue's targets against this run's rows: the forest's ratio to
    each other contender, per workload and size where both were measured."""
    # (workload None: every workload; the speed-ups over the scan and the
    # R-tree are the targets on the nested workload)
    wanted = (
        (
            "match_profile_per_s",
            BASELINE,
            100_000,
            "profiles/s vs brute force at 100k",
            10.0,
            "nested",
        ),
        ("match_profile_per_s", "r-tree", 100_000, "profiles/s vs R-tree at 100k", 2.0, "nested"),
        ("insert_per_s", "siena-poset", 10_000, "inserts/s vs Siena poset at 10k", 10.0, None),
        ("delete_per_s", "siena-poset", 10_000, "deletes/s vs Siena poset at 10k", 10.0, None),
    )
    lines = ["| target | workload | double-forest / other | met |", "|---|---|---:|---|"]
    by = {(r["workload"], r["size"], r["contender"]): r for r in rows}
    for metric, other, size, label, target, only in wanted:
        for kind in dict.fromkeys(r["workload"] for r in rows):
            if only not in (None, kind):
                continue
            mine, theirs = by.get((kind, size, FOREST), {}), by.get((kind, size, other), {})
            if mine.get(metric) and theirs.get(metric):
                ratio = mine[metric] / theirs[metric]
                met = "yes" if ratio >= target else "no"
                lines.append(f"| {label} ≥ {target:g}× | {kind} | {ratio:.2f}× | {met} |")
    worst = [
        (r[m] / base[m], r["workload"], r["size"], m)
        for r in rows
        if r["contender"] == FOREST
        for m in ("match_profile_per_s", "match_filter_per_s")
        if r.get(m) and (base := by.get((r["workload"], r["size"], BASELINE), {})).get(m)
    ]
    if worst:
        ratio, kind, size, m = min(worst)
        what = "profiles" if m == "match_profile_per_s" else "filters"
        met = "yes" if ratio >= 1 else "no"
        slower = sum(r < 1 for r, *_ in worst)
        lines.append(
            f"| never slower than brute force at matching (lowest: {what}, {size:,}; "
            f"{slower} of {len(worst)} measurements below 1×) | {kind} | {ratio:.2f}× | {met} |"
        )
    return lines


def _design(json_path: Path) -> str:
    """The link to docs/DESIGN.md from the README written next to `json_path`."""
    design = Path(__file__).resolve().parents[1] / "docs" / "DESIGN.md"
    return Path(os.path.relpath(design, json_path.resolve().parent)).as_posix()


def _name(row: dict) -> str:
    return row["contender"] + (f" (partial: {row['partial']})" if "partial" in row else "")


def _readme(result: dict, json_path: Path, plots: list[str]) -> str:
    lines = [
        "# Matcher benchmark",
        "",
        "The DoubleForest (`matcher.double_forest`) against a numpy brute-force scan,",
        "an R-tree and Siena's filters poset (the contenders a run names), on the same",
        "entries (one per conjunction of each subscription's predicate) and profiles.",
        "Throughputs are per query",
        "(the forest matches micro-batches of profiles at once, the others loop); the",
        "ratio is against brute force at the same size. Every contender's answers were",
        "checked against brute force in the same run (before and after deletions).",
        "All contenders of a size are built, then take their timed passes over the",
        "queries in turn (one pass each, then the next round; up to 3 rounds while a",
        "contender's passes take under 10 s, its quickest counting, as `timeit` does),",
        "so that a slow spell of the shared machine falls on all of them; before each",
        "pass a contender answers, untimed, a batch of other queries, so that no pass",
        "starts in caches its rivals filled. A side's insert and delete rates include the",
        "index work they deferred. Answer keys are int32 arrays for the scan and the forest alike.",
        "Memory is the Python heap that tracemalloc sees (numpy included; the R-tree's",
        "C++ nodes are not), from a separate build.",
        "",
        "`double-forest` is the product: the forest with its preloaded cells",
        "(`matcher.preload`), filled after the profile inserts for the regions the held",
        "profiles lie in, or, in a space without a grid (siena), its equality index built",
        "then (their time is `preload s`, not in the insert rates); the cells are",
        "filled further as the queries visit; `forest-no-cells` is the same forest without",
        "them. `cells` is the share of its query profiles (warm-up batches and passes)",
        "that cells answered, `cells B/e` the cells' memory per subscription entry after",
        "the queries, `first` its profiles/s in the first pass (cells still filling), and",
        "`µs/match` the time per profile divided by the mean answer (constant where a",
        "lookup costs what its answer costs).",
        "",
        "Reproduce (from the repository root; one line a run):",
        "",
        *[f"    {command}" for command in result["command"].split("\n")],
        "",
        f"Seed {result['seed']}, {result['seconds']} s, Python {result['machine']['python']}"
        f" on {result['machine']['platform']}. Raw numbers: `{json_path.name}`.",
        "",
        "| workload | subscriptions | contender | profiles/s | vs bf | filters/s | vs bf |"
        " inserts/s | deletes/s | B/entry | cells | cells B/e | preload s | first | µs/match |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (kind, size), group in _groups(result["rows"]):
        group = list(group)
        base = next((r for r in group if r["contender"] == BASELINE), None)
        for r in group:
            if "skipped" in r:
                lines.append(f"| {kind} | {size:,} | {r['contender']} | skipped: {r['skipped']} |")
                continue
            lines.append(
                f"| {kind} | {size:,} | {_name(r)} | {_num(r.get('match_profile_per_s'))}"
                f" | {_ratio(r, base, 'match_profile_per_s')}"
                f" | {_num(r.get('match_filter_per_s'))} | {_ratio(r, base, 'match_filter_per_s')}"
                f" | {_num(r.get('insert_per_s'))} | {_num(r.get('delete_per_s'))}"
                f" | {_num(r.get('bytes_per_entry'))} | {_share(r)}"
                f" | {_num(r.get('cells_bytes_per_entry'))} | {_num(r.get('preload_s'))}"
                f" | {_num(r.get('match_profile_first_per_s'))}"
                f" | {_num(per_answer_us(r))} |"
            )
    budget = (result.get("preload") or {}).get("budget_bytes")
    lines += ["", *_targets(result["rows"]), "", *_preload_targets(result["rows"], budget)]
    lines += [
        "",
        "Deletes: the forest is 10-16x faster than the poset where the poset relinks tens of",
        "edges (a node with children below a parent: siena, tracking), about as fast for leaves",
        "there, slower on a flat or sparse set (uniform, nested) and for roots with children:",
        f'[`DESIGN.md`]({_design(json_path)}) ("Deletes, against Siena\'s poset").',
    ]
    lines += ["", *[f"![{p}]({p})" for p in plots], ""]
    return "\n".join(lines)
