"""`tsm bench mobility`: what a move costs (ROUTING §5) against re-subscribing.

On each benchmark topology (`placement.TOPOLOGIES`), N subscribers (1 to
10,000) each hold two subscriptions (boxes in x, y) at a random home site
while tracked objects report from random sites (a profile every few ms, each
valid for 20 s, so that pairs hold across the moves); every subscriber moves
once, at a random time in the middle of the run, to another random site. The
same records run through the offline network (`tsm replay --network`,
covering) three ways:

- **stay**: nobody moves (the baseline the costs are counted from);
- **move**: the `move` protocol;
- **naive**: at the move's ts the subscriber unsubscribes at the old site and
  subscribes the same filters at the new one (and, as `naive+1s`, one second
  later: a client that reconnects).

Each is compared with one matcher that never saw a move, per subscriber, as
`--follow-moves` reads her records: `move` must equal it record for record
(`match_id` included; a difference stops the benchmark); for the naive runs
the records it **loses** (one matcher's that it lacks) and **repeats** (its
`match` records of pairs that held across the move) are counted, and the
other records one matcher lacks (its `unmatch`es at the old site) as
**spurious**; the comparison is by (event, pair, ts, payload), as the
re-subscribed filters are new versions. Per move: the link messages beyond
the baseline (interest, asks and handovers, profiles and retracts
forwarded), the records handed over, the simulated wait from the move's
arrival at the new site to its taking over, and the event-time delay until
the new site matches (0 by construction: it matches from the move's ts).

Outputs, in the results folder: `mobility.json` and `README.md`. `only` runs
some rows (`--only star-8:10000`) and merges them into the folder's results.
"""

from __future__ import annotations

import json
import platform
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_routing import _items
from benchmarks.placement import TOPOLOGIES, network_toml, topology

DEFAULT_RESULTS = Path("bench-results/mobility")
DOCS = Path("docs/bench/mobility")
BASE = 1_795_334_400_000  # 2026-11-22T08:00Z
RUN_MS = 60_000
LIFE_MS = 20_000
FULL = [(t, n) for t in TOPOLOGIES for n in (1, 10, 100, 1000, 10_000)]
QUICK = [(t, n) for t in TOPOLOGIES for n in (1, 10, 100)]
PROFILES = 2000
OBJECTS = 400
SEED = 0
MOVES_S = (RUN_MS * 5 // 6 - RUN_MS // 6) / 1000  # the seconds in which the moves fall
QUEUED = 10  # a move wait this many times a record's with nobody moving: moves queue
MESSAGES = ("interest_messages", "move_messages", "profiles_forwarded", "retracts_forwarded")


class Mismatch(AssertionError):
    """The move protocol's records differ from one matcher's: a bug, not a result."""


def workload(n: int, names: list[str], seed: int = SEED) -> tuple[list, list, list]:
    """Subscriptions, profiles and moves (records with `site`; see the module docstring)."""
    rng = random.Random(f"mobility:{n}:{len(names)}:{seed}")
    subs, moves = [], []
    for c in range(n):
        home = rng.choice(names)
        for k in range(2):
            x, y, w = rng.uniform(0, 900), rng.uniform(0, 900), rng.uniform(30, 150)
            where = f"x BETWEEN {x:.1f} AND {x + w:.1f} AND y BETWEEN {y:.1f} AND {y + w:.1f}"
            subs.append(
                {
                    "op": "subscribe",
                    "id": f"c{c}-{k}",
                    "space": "city",
                    "subscriber": f"c{c}",
                    "where": where,
                    "ts": BASE,
                    "site": home,
                }
            )
        to = rng.choice([s for s in names if s != home])
        at = BASE + rng.randrange(RUN_MS // 6, RUN_MS * 5 // 6)
        moves.append({"op": "move", "subscriber": f"c{c}", "from": home, "ts": at, "site": to})
    profiles = []
    homes = [rng.choice(names) for _ in range(OBJECTS)]
    for i in range(PROFILES):
        ts = BASE + 1 + i * (RUN_MS // PROFILES)
        obj = rng.randrange(OBJECTS)
        profiles.append(
            {
                "op": "publish",
                "id": f"o{obj}",
                "space": "city",
                "attrs": {"x": round(rng.uniform(0, 1000), 1), "y": round(rng.uniform(0, 1000), 1)},
                "ts": ts,
                "valid_to": ts + LIFE_MS,
                "payload": {"n": i},
                "site": homes[obj],
            }
        )
    return subs, profiles, moves


def naive(subs: list[dict], moves: list[dict], gap: int) -> list[dict]:
    """The subscriptions with each move done by hand: unsubscribe at the old site at
    the move's ts, subscribe the same filters at the new one `gap` ms later."""
    held: dict[str, list[dict]] = {}
    for s in subs:
        held.setdefault(s["subscriber"], []).append(s)
    out = list(subs)
    for m in moves:
        for s in held[m["subscriber"]]:
            out.append(
                {"op": "unsubscribe", "id": s["id"], "space": s["space"]}
                | {"ts": m["ts"], "site": m["from"]}
            )
            out.append(s | {"ts": m["ts"] + gap, "site": m["site"]})
    return out


def one_matcher(subs: list[dict], profiles: list[dict], until: int) -> list[dict]:
    from matcher.engine import Engine

    engine = Engine()
    out = engine.process_batch(_items(subs, profiles))
    out += engine.advance(until)
    return [o.value for o in out if o.topic == "matches"]


def _run(names, links, subs, profiles) -> tuple[Any, float]:
    from matcher.routing.network import parse_network
    from matcher.routing.offline import Delays
    from matcher.routing.replay import replay_network

    net = parse_network(network_toml(names, links, "covering"))
    start = time.perf_counter()
    out = replay_network(net, _items(subs, profiles), Delays(seed=SEED))
    return out, time.perf_counter() - start


def _semantic(r: dict) -> tuple:
    """A record as a subscriber reads it, whatever the version of her filter."""
    sid = r["subscription_id"].split("@")[0]
    return (r["event"], sid, r["profile_id"], r["ts"], json.dumps(r["payload"]))


def _by_subscriber(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        if r["event"] != "moved":
            out.setdefault(r["subscriber"], []).append(r)
    return out


def compare_naive(reference: list[dict], got: list[dict]) -> dict[str, int]:
    """Records the naive run loses, repeats (`match` again) and adds otherwise."""
    lost = repeated = spurious = 0
    ref, mine = _by_subscriber(reference), _by_subscriber(got)
    for who in ref.keys() | mine.keys():
        want = Counter(map(_semantic, ref.get(who, [])))
        have = Counter(map(_semantic, mine.get(who, [])))
        lost += sum((want - have).values())
        for key, count in (have - want).items():
            if key[0] == "match":
                repeated += count
            else:
                spurious += count
    return {"lost": lost, "repeated": repeated, "spurious": spurious}


def check_move(reference: list[dict], out: Any, homes: dict[str, str]) -> None:
    """The move protocol: each subscriber read across sites equals one matcher's.
    Each subscriber is read from her own records of every site (in the site's
    order, `moved` included): `follow_moves` skips the others' records, so it
    reads the same, in O(her records) rather than O(every site's)."""
    from connectors.follow_moves import ListReader, follow_moves
    from matcher.routing.replay import site_streams

    own: dict[str, dict[str, list[dict]]] = {}
    for site, records in site_streams(out.result).items():
        for r in records:
            own.setdefault(r.get("subscriber"), {}).setdefault(site, []).append(r)
    ref = _by_subscriber(reference)
    for who, home in homes.items():
        reader = ListReader(own.get(who, {}))
        read = sorted(json.dumps(r, sort_keys=True) for r in follow_moves(who, home, reader))
        want = sorted(json.dumps(r, sort_keys=True) for r in ref.get(who, []))
        if read != want:
            raise Mismatch(f"subscriber {who}: {len(read)} records read, one matcher {len(want)}")


def _messages(out: Any) -> int:
    total = out.stats()["total"]
    return sum(total[k] for k in MESSAGES)


def run_size(topo: str, n: int, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """One row: `n` moving clients on `topo`; `say` hears each step's time as it ends."""
    names, links = topology(topo)
    subs, profiles, moves = workload(n, names)
    until = max(m["ts"] for m in moves)
    step = _Steps(f"{topo} {n:,} clients", say)
    reference = one_matcher(subs, profiles, until)
    step.done(f"one matcher: {len(reference):,} match records")
    homes = {s["subscriber"]: s["site"] for s in subs}
    stay, stay_s = _run(names, links, subs, profiles)
    step.done("the network, nobody moving")
    moved, move_s = _run(names, links, subs + moves, profiles)
    step.done("the network, moves")
    check_move(reference, moved, homes)
    step.done("each subscriber read across sites: equal to one matcher")
    base = _messages(stay)
    stats = moved.stats()
    row: dict[str, Any] = {
        "topology": topo,
        "clients": n,
        "match_records": len(reference),
        "stay_messages": base,
        "move_messages": _messages(moved),
        "move_extra_per_move": (_messages(moved) - base) / n,
        "move_link_records": stats["total"]["move_messages"],
        "handed_over_per_move": stats["total"]["handover_records"] / n,
        "move_wait_ms": stats["move_wait_ms"],
        "match_latency_ms": stats["latency_ms"],
        "stay_match_latency_ms": stay.stats()["latency_ms"],
        "move_lost": 0,
        "move_repeated": 0,
        "move_seconds": round(move_s, 2),
        "stay_seconds": round(stay_s, 2),
    }
    for label, gap in (("naive", 0), ("naive+1s", 1000)):
        out, _ = _run(names, links, naive(subs, moves, gap), profiles)
        got = [m for m in out.matches if m["event"] != "moved"]
        row[label] = compare_naive(reference, got) | {
            "messages": _messages(out),
            "extra_per_move": (_messages(out) - base) / n,
        }
        step.done(f"the network, {label}")
    naive_extra = row["naive"]["extra_per_move"]
    row["move_vs_naive"] = row["move_extra_per_move"] / naive_extra if naive_extra else None
    row["seconds"] = round(step.total(), 1)
    return row


class _Steps:
    """The steps of a long row, each said with its time as it ends."""

    def __init__(self, label: str, say: Callable[[str], None] | None) -> None:
        self.label, self.say = label, say
        self.started = self.last = time.perf_counter()

    def done(self, what: str) -> None:
        now = time.perf_counter()
        if self.say is not None:
            self.say(f"  {self.label}: {what} ({now - self.last:.0f} s)")
        self.last = now

    def total(self) -> float:
        return time.perf_counter() - self.started


def main(
    quick: bool = False,
    results: Path | None = None,
    docs: bool = False,
    command: str = "",
    only: list[tuple[str, int]] | None = None,
) -> int:
    """Run the plan's rows (or `only` these, merged into each folder's results),
    writing the results after each row: a long run that stops keeps what it finished."""
    plan = only or (QUICK if quick else FULL)
    folders = [results or DEFAULT_RESULTS] + ([DOCS] if docs else [])
    kept = {folder: _earlier(folder) if only else ([], {"runs": []}) for folder in folders}
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for topo, n in plan:
        row = run_size(topo, n, say=_say)
        rows.append(row)
        print(_progress(row), flush=True)
        run = {
            "command": command or "tsm bench mobility",
            "seconds": round(time.perf_counter() - started, 1),
            "rows": [_label(r) for r in rows],
        }
        for folder in folders:
            write(folder, *_merged(*kept[folder], rows, run))
    return 0


def _say(line: str) -> None:
    print(line, flush=True)


def _label(row: dict[str, Any]) -> str:
    return f"{row['topology']}:{row['clients']}"


def _earlier(folder: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of a folder's results and the runs that made them (none: none)."""
    path = folder / "mobility.json"
    if not path.exists():
        return [], {"runs": []}
    old = json.loads(path.read_text())
    meta = old["meta"]
    if "runs" not in meta:  # (one run made them all)
        meta["runs"] = [
            {"command": meta["command"], "seconds": meta["seconds"]}
            | {"rows": [_label(r) for r in old["rows"]]}
        ]
    return old["rows"], meta


def _merged(
    earlier_rows: list[dict[str, Any]],
    earlier: dict[str, Any],
    rows: list[dict[str, Any]],
    run: dict[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Earlier rows that these do not replace, and these, in the plan's order; the
    runs that made them (a run whose rows were all replaced is dropped), and the
    bounds measured for rows not run (`bounds`, written by hand) that still lack one."""
    new = {_label(r) for r in rows}
    kept = [r for r in earlier_rows if _label(r) not in new] + rows
    order = {f"{t}:{n}": i for i, (t, n) in enumerate(FULL)}
    kept.sort(key=lambda r: (order.get(_label(r), len(order)), r["topology"], r["clients"]))
    runs = []
    for old in earlier["runs"]:
        left = [label for label in old["rows"] if label not in new]
        if left:
            runs.append(old | {"rows": left})
    meta = {
        "runs": runs + [run],
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {_cores()} cores",
        "profiles": PROFILES,
        "objects": OBJECTS,
    }
    bounds = {k: v for k, v in earlier.get("bounds", {}).items() if k not in new}
    if bounds:
        meta["bounds"] = bounds
    return kept, meta


def _cores() -> int:
    import os

    return os.cpu_count() or 0


def _progress(r: dict[str, Any]) -> str:
    n = r["naive"]
    ratio = r["move_vs_naive"]
    return (
        f"  {r['topology']:<8} {r['clients']:>6,} clients: move {r['move_extra_per_move']:6.1f}"
        f" msgs/move (naive {n['extra_per_move']:6.1f}, x{ratio or 0:.2f}),"
        f" handed over {r['handed_over_per_move']:.1f}/move; naive lost {n['lost']:,}"
        f" repeated {n['repeated']:,} spurious {n['spurious']:,};"
        f" naive+1s lost {r['naive+1s']['lost']:,} repeated {r['naive+1s']['repeated']:,};"
        f" {r['move_seconds']:.1f} s"
    )


def write(folder: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mobility.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (folder / "README.md").write_text(readme(rows, meta))


def readme(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    head = (
        "| topology | moving clients | match records | move: messages/move | naive | ratio "
        "| link records handed over/move | move wait p50 / p99 ms | move lost / repeated "
        "| naive lost / repeated / spurious | naive+1s lost / repeated / spurious |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in rows:
        n, g = r["naive"], r["naive+1s"]
        wait = r["move_wait_ms"]
        ratio = "–" if r["move_vs_naive"] is None else f"{r['move_vs_naive']:.2f}"
        lines.append(
            f"| {r['topology']} | {r['clients']:,} | {r['match_records']:,} "
            f"| {r['move_extra_per_move']:.1f} | {n['extra_per_move']:.1f} | {ratio} "
            f"| {r['handed_over_per_move']:.1f} | {wait['p50']:.0f} / {wait['p99']:.0f} "
            f"| 0 / 0 | {n['lost']:,} / {n['repeated']:,} / {n['spurious']:,} "
            f"| {g['lost']:,} / {g['repeated']:,} / {g['spurious']:,} |"
        )
    return (
        "# Mobility: what a move costs (`tsm bench mobility`)\n\n"
        f"Made by {_runs(meta)} (Python {meta['python']}, "
        f"{meta['machine']}); {meta['profiles']:,} reports of {meta['objects']} tracked "
        "objects over a minute, every client moving once, covering routing, the offline "
        "network (`benchmarks/bench_mobility.py` says how)." + _not_run(rows, meta) + "\n\n"
        "Messages per move are link records (interest, asks and handovers, profiles and "
        "retracts forwarded) beyond the same run with nobody moving; `ratio` is the move "
        "protocol's over the naive one's (unsubscribe at the old site, subscribe at the "
        "new one at the same ts); a record handed over counts on every link it crosses. "
        "The move protocol's records equal one matcher's for "
        "every subscriber, read across sites (checked: a difference stops the run); the "
        "naive protocol's are counted against them by (event, pair, ts, payload). The "
        "new site matches from the move's ts (an event-time delay of 0); the move wait "
        "is the simulated time from the move's arrival at the new site until it takes "
        "over (the old site answers once every site's input has passed the move's ts)."
        + _queued(rows)
        + "\n\n"
        + head
        + "\n".join(lines)
        + "\n\n"
        + summary(rows)
    )


def _queued(rows: list[dict[str, Any]]) -> str:
    """The rows whose moves came faster than the network hands them over (a move
    waits many times what a record waits with nobody moving), and why."""
    queued = [
        r
        for r in rows
        if r["move_wait_ms"]["p50"] > QUEUED * max(r["stay_match_latency_ms"]["p50"], 1.0)
    ]
    if not queued:
        return ""
    said = [
        f"on {r['topology']} at {r['clients']:,} clients, {r['clients'] / MOVES_S:.0f} moves "
        f"a second, a move waits {r['move_wait_ms']['p50'] / 1000:.0f} s (p50) and a match "
        f"record {r['match_latency_ms']['p50'] / 1000:.0f} s, against "
        f"{r['stay_match_latency_ms']['p50'] / 1000:.1f} s with nobody moving"
        for r in queued
    ]
    return (
        " Where clients move faster than the network hands them over, the handovers "
        f"queue: {'; '.join(said)}. A site takes its own records and the asks it "
        "answers in event-time order, and stops at each move to it until that move's "
        "handover is there: the handovers it owes for later moves wait behind it."
    )


def _runs(meta: dict[str, Any]) -> str:
    """The commands that made the rows, with their times (and rows, if several)."""
    runs = meta["runs"]
    most = max(runs, key=lambda run: len(run["rows"]))
    said = []
    for run in runs:
        text = f"`{run['command']}` in {run['seconds']:.0f} s"
        if len(runs) > 1:
            rows = ", ".join(_row_name(label) for label in run["rows"])
            text += " (the other rows)" if run is most else f" ({rows})"
        said.append(text)
    return " and ".join([", ".join(said[:-1]), said[-1]] if len(said) > 2 else said)


def _row_name(label: str) -> str:
    topo, n = label.split(":")
    return f"{topo} {int(n):,}"


def _not_run(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The full plan's rows missing here, each with the bound measured for it, if any."""
    have = {_label(r) for r in rows}
    if not have & {f"{t}:{n}" for t, n in FULL if n > 100}:
        return ""  # (a quick run)
    bounds = meta.get("bounds", {})
    missing = [f"{t}:{n}" for t, n in FULL if f"{t}:{n}" not in have]
    if not missing:
        return ""
    text = " Not run: " + ", ".join(_row_name(label) for label in missing) + "."
    return text + "".join(f" {_row_name(k)}: {bounds[k]}" for k in missing if k in bounds)


def summary(rows: list[dict[str, Any]]) -> str:
    """The target of issue 35, with the figures measured."""
    ratios = [(r["move_vs_naive"], r) for r in rows if r["move_vs_naive"] is not None]
    worst, at = max(ratios, key=lambda pair: pair[0]) if ratios else (None, None)
    repeated = sum(r["naive"]["repeated"] for r in rows)
    lost = sum(r["naive+1s"]["lost"] for r in rows)
    met = worst is not None and worst <= 2 and (repeated or lost)
    where = f" ({at['topology']}, {at['clients']:,} clients)" if at else ""
    return (
        "**Target** (issue 35): zero lost and zero repeated records where the naive "
        "protocol loses or repeats some, at no more than 2x its link messages. The move "
        "protocol lost and repeated none in every row; the naive one matched "
        f"{repeated:,} pairs again (and, reconnecting a second later, lost {lost:,} "
        "records); the move protocol's link messages per move were at most "
        f"{worst if worst is None else round(worst, 2)}x the naive one's{where}: "
        f"{'met' if met else 'not met'}.\n"
    )
