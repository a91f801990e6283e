"""`tsm gen` and `tsm bench`: workload files and the benchmarks.

Heavy imports (numpy, rtree, matplotlib, the matcher) happen inside the
handlers so that `tsm --help` stays fast. A benchmark writes its results
(JSON, plots, a README section) to `bench-results/` (git-ignored), to
`--json FILE`'s folder, or, with `--write-docs`, to the committed `docs/bench/`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from pathlib import Path

from benchmarks.report import DOCS_DIR, RESULTS_DIR
from benchmarks.workloads import KINDS, PATTERN_KINDS
from tsm_cli.args import CliError, add_command, seconds
from tsm_cli.progress import Bar

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    gen = add_command(
        subparsers,
        "gen",
        help="write a seeded workload (subscriptions.jsonl, profiles.jsonl)",
        description="Write a seeded workload as topic records (SEMANTICS §6): "
        "uniform boxes, nested regions with Zipf-popular filters, Siena's random "
        "predicates, tracked moving objects with expiring subscriptions, MQTT topic "
        "filters (topics), NaradaBrokering's regular expressions (regex), XPaths "
        "over XML documents (xpath); `noisy`: tracks with GPS noise crossing zone edges, "
        "the zones in groups with delivery policies (docs/DELIVERY.md) unless --plain.",
    )
    gen.add_argument("kind", choices=(*KINDS, *PATTERN_KINDS, "noisy"))
    gen.add_argument("--plain", action="store_true", help="noisy: zones without delivery fields")
    gen.add_argument(
        "--group-size", type=int, default=4, metavar="N", help="noisy: zones a group (default 4)"
    )
    gen.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gen.add_argument("--subscriptions", type=int, default=1000, metavar="N")
    gen.add_argument("--profiles", type=int, default=1000, metavar="N")
    gen.add_argument("--out-dir", type=Path, required=True, metavar="DIR")
    gen.set_defaults(handler=_gen)

    bench = add_command(
        subparsers,
        "bench",
        help="benchmark the matcher against baselines, the pipeline, or routing strategies",
        description="`matcher`: the DoubleForest against a numpy brute-force scan, "
        "Siena's filters poset and an R-tree on the same workloads; checks that "
        "all of them return the same matches, prints a table, writes JSON and plots. "
        "The string workloads (topics, regex, xpath) run against a loop over compiled "
        "patterns (and a plain topic trie) instead. "
        "`pipeline`: the job against no-op pipelines and Spark's stream-stream join. "
        "`routing`, `mobility`: the network's strategies and moves, simulated. "
        "`soak`: the job on a local cluster for an hour. `hops`: produce-to-match "
        "latency across the links of a live three-site network against one site's. "
        f"Results go to {RESULTS_DIR}/ unless --json or --write-docs say otherwise.",
    )
    bench.add_argument(
        "target", choices=("matcher", "pipeline", "routing", "mobility", "soak", "hops")
    )
    bench.add_argument("--quick", action="store_true", help="small sizes, < 2 minutes")
    where = bench.add_mutually_exclusive_group()
    where.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help=f"results file; plots and README.md go next to it (default {RESULTS_DIR}/TARGET.json)",
    )
    where.add_argument(
        "--write-docs",
        action="store_true",
        help=f"write the committed results: {DOCS_DIR}/TARGET.json, its plots and README.md",
    )
    bench.add_argument(
        "--sizes", type=_sizes, metavar="N,N,…", help="live sizes instead of the plan's"
    )
    bench.add_argument(
        "--workloads", type=_workloads, metavar="KIND,…", help="workloads instead of the plan's"
    )
    bench.add_argument(
        "--contenders",
        type=_contenders,
        metavar="NAME,…",
        help="matcher: contenders instead of all of them (brute-force is always one: "
        "every answer is checked against it)",
    )
    bench.add_argument(
        "--budget",
        type=seconds,
        metavar="SECONDS",
        help="matcher: time a contender may take per size and phase (default 150; "
        "past it, its rates are over what it did, or it is skipped)",
    )
    bench.add_argument(
        "--results",
        type=Path,
        metavar="DIR",
        help="routing, mobility: the results folder (default bench-results/TARGET)",
    )
    bench.add_argument(
        "--only",
        type=_rows,
        metavar="TOPOLOGY:N,…",
        help="mobility: run only these rows (e.g. star-8:10000) and merge them into "
        "the results folder's (and, with --write-docs, the committed ones)",
    )
    soak = bench.add_argument_group("soak (the job on a local 2-worker cluster, in real time)")
    soak.add_argument("--minutes", type=seconds, default=60.0, help="how long to stream (60)")
    soak.add_argument(
        "--subscriptions", type=int, default=100_000, metavar="N", help="live (100000)"
    )
    soak.add_argument("--rate", type=seconds, default=50.0, help="profiles a second (50)")
    soak.add_argument(
        "--lifetime",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="of a subscription, replaced as it expires (half the run, 60 to 600)",
    )
    bench.set_defaults(handler=_bench)


def _gen_noisy(args: argparse.Namespace, total: int) -> int:
    from benchmarks.noisy_tracks import generate
    from benchmarks.workloads import write

    if args.group_size < 1:
        raise CliError("--group-size must be at least 1")
    subs, profiles = generate(
        args.seed,
        args.subscriptions,
        args.profiles,
        policies=not args.plain,
        group_size=args.group_size,
    )
    try:
        with Bar("written", unit="records", total=total) as bar:
            write(args.out_dir, subs, profiles, progress=bar.add)
    except OSError as exc:
        raise CliError(f"cannot write to {args.out_dir}: {exc.strerror}") from exc
    log.info("wrote %d zones and %d reports to %s", len(subs), len(profiles), args.out_dir)
    return 0


def _gen(args: argparse.Namespace) -> int:
    from benchmarks.workloads import build, profile_record, subscription_record, write

    if args.subscriptions < 0 or args.profiles < 0:
        raise CliError("--subscriptions and --profiles must not be negative")
    total = args.subscriptions + args.profiles
    if args.kind == "noisy":
        return _gen_noisy(args, total)
    log.info(
        "building the %s workload: %d subscriptions, %d profiles",
        args.kind,
        args.subscriptions,
        args.profiles,
    )
    w = build(args.kind, args.seed, args.subscriptions, args.profiles)
    subs = (subscription_record(w.space, s) for s in w.subscriptions)
    profiles = (profile_record(w.space, p) for p in w.profiles)
    try:
        with Bar("written", unit="records", total=total) as bar:
            write(args.out_dir, subs, profiles, progress=bar.add)
    except OSError as exc:
        raise CliError(f"cannot write to {args.out_dir}: {exc.strerror}") from exc
    log.info(
        "wrote %d subscription and %d profile records to %s",
        len(w.subscriptions),
        len(w.profiles),
        args.out_dir,
    )
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.budget is not None and args.target != "matcher":
        raise CliError("--budget is for `tsm bench matcher` (the pipeline has its plan's budgets)")
    if args.contenders is not None and args.target != "matcher":
        raise CliError("--contenders is for `tsm bench matcher`")
    if args.only is not None and args.target != "mobility":
        raise CliError("--only is for `tsm bench mobility`")
    try:
        module = importlib.import_module(f"benchmarks.bench_{args.target}")
    except ModuleNotFoundError as exc:
        if exc.name != f"benchmarks.bench_{args.target}":
            raise CliError(f"missing dependency for the benchmark: {exc.name}") from exc
        raise CliError(f"`tsm bench {args.target}` is not available in this build") from exc
    json_path = args.json
    if args.write_docs:
        json_path = DOCS_DIR / f"{args.target}.json"
    command = "tsm bench " + " ".join(sys.argv[2:] if len(sys.argv) > 2 else [args.target])
    if args.target == "soak":
        return module.main(
            minutes=args.minutes,
            subscriptions=args.subscriptions,
            rate=args.rate,
            lifetime_s=args.lifetime,
            json_path=json_path,
            command=command,
        )
    if args.target == "hops":
        return module.main(quick=args.quick, json_path=json_path, command=command)
    if args.target == "pipeline":
        return module.main(quick=args.quick, json_path=json_path, sizes=args.sizes)
    if args.target == "mobility":
        if args.only is not None and args.quick:
            raise CliError("--only names the rows to run: leave out --quick")
        return module.main(args.quick, args.results, args.write_docs, command, args.only)
    if args.target == "routing":
        if args.sizes is not None and len(args.sizes) != 1:
            raise CliError("--sizes takes one size for the routing benchmark (its subscriptions)")
        size = args.sizes[0] if args.sizes else None
        return module.main(args.quick, args.results, args.write_docs, args.workloads, size, command)
    return module.main(
        args.quick, json_path, args.sizes, args.workloads, args.budget, args.contenders
    )


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 1000,10000, got {text!r}") from None
    if any(n < 10 for n in sizes):
        raise argparse.ArgumentTypeError("every size must be at least 10")
    return tuple(sorted(set(sizes)))


def _rows(text: str) -> list[tuple[str, int]]:
    from benchmarks.placement import TOPOLOGIES

    rows = []
    for part in text.split(","):
        topo, _, n = part.partition(":")
        if topo not in TOPOLOGIES:
            raise argparse.ArgumentTypeError(
                f"unknown topology {topo!r} in {part!r}: choose from {', '.join(TOPOLOGIES)}"
            )
        if not n.isdigit() or int(n) < 1:
            raise argparse.ArgumentTypeError(
                f"expected TOPOLOGY:CLIENTS like star-8:10000, got {part!r}"
            )
        rows.append((topo, int(n)))
    return list(dict.fromkeys(rows))


def _contenders(text: str) -> tuple[str, ...]:
    from benchmarks.contenders import CONTENDERS

    names = tuple(dict.fromkeys(["brute-force", *text.split(",")]))
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown contender {unknown[0]!r}: choose from {', '.join(CONTENDERS)}"
        )
    return names


def _workloads(text: str) -> tuple[str, ...]:
    kinds = tuple(text.split(","))
    unknown = [k for k in kinds if k not in KINDS + PATTERN_KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown workload {unknown[0]!r}: choose from {KINDS + PATTERN_KINDS}"
        )
    return kinds
