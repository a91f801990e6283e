"""Networks and client placement for the routing benchmark (`tsm bench routing`).

Topologies (ROUTING §1, a tree each): a line of 7 sites, a balanced binary
tree of 15, a star of 8. Sites are named in depth-first order from the first,
so that sites next to each other in that order are near each other.

Placement gives each record of a workload its home `site`, by id (a
subscription's unsubscribe, a tracked object's every report, stay where
their id is):

- `uniform`: every id at a site drawn at random;
- `locality`: profiles where their content is (a slice per site along one
  attribute: `x` where profiles have it, otherwise the first numeric
  attribute present), and each subscriber at the site that publishes most of
  what it matches (with probability `LOCAL`; elsewhere at random): most of a
  subscriber's interest is near its site. What a subscription matches is read
  from one matcher's match records, which the benchmark makes anyway.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any

TOPOLOGIES = ("line-7", "tree-15", "star-8")
PLACEMENTS = ("uniform", "locality")
LOCAL = 0.9
SPAN = 1000.0  # the workloads' coordinate range (benchmarks.workloads.SPAN)
_NUMERIC_ORDER = ("x", "price", "volume", "change", "temp", "speed", "level")


def topology(name: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Site names (depth-first from the first) and links of a named topology."""
    if name == "line-7":
        names = [f"s{i}" for i in range(7)]
        return names, [(names[i], names[i + 1]) for i in range(6)]
    if name == "tree-15":
        links = [(f"s{(i - 1) // 2}", f"s{i}") for i in range(1, 15)]
        return _depth_first("s0", links), links
    if name == "star-8":
        links = [("s0", f"s{i}") for i in range(1, 8)]
        return [f"s{i}" for i in range(8)], links
    raise ValueError(f"unknown topology {name!r}: choose one of {', '.join(TOPOLOGIES)}")


def _depth_first(root: str, links: list[tuple[str, str]]) -> list[str]:
    kids: dict[str, list[str]] = defaultdict(list)
    for a, b in links:
        kids[a].append(b)
    out, todo = [], [root]
    while todo:
        here = todo.pop()
        out.append(here)
        todo.extend(reversed(kids[here]))
    return out


def network_toml(
    names: list[str],
    links: list[tuple[str, str]],
    routing: str,
    merge: str = "imperfect",
    budget: float = 0.05,
    idle_ms: int = 5000,
    *,
    advertisements: bool = False,
) -> str:
    """The network file of a topology and strategy (sites in the order of `names`)."""
    lines = [
        f'routing = "{routing}"',
        f'merge = "{merge}"',
        f"merge_budget = {budget}",
        f"advertisements = {'true' if advertisements else 'false'}",
        f"idle_ms = {idle_ms}",
        "links = [" + ", ".join(f'["{a}", "{b}"]' for a, b in links) + "]",
    ]
    return "\n".join(lines + [f"[sites.{n}]" for n in names]) + "\n"


def place(
    subs: list[dict],
    profiles: list[dict],
    names: list[str],
    how: str,
    matches: list[dict] | None = None,
    seed: int = 0,
) -> tuple[list[dict], list[dict]]:
    """Copies of the records with their home `site` (see the module docstring);
    `locality` needs one matcher's `matches` of the same records."""
    rng = random.Random(f"place:{how}:{seed}")
    if how == "uniform":
        home: dict[tuple[str, str], str] = {}
        for kind, records in (("s", subs), ("p", profiles)):
            for r in records:
                home.setdefault((kind, r["id"]), rng.choice(names))
        return _with_sites(subs, profiles, home)
    if how != "locality":
        raise ValueError(f"unknown placement {how!r}: choose one of {', '.join(PLACEMENTS)}")
    home = {}
    for r in profiles:
        if ("p", r["id"]) not in home and r["op"] == "publish":
            home["p", r["id"]] = names[_slice(r["attrs"], len(names))]
    for r in profiles:
        home.setdefault(("p", r["id"]), rng.choice(names))
    sources: dict[str, Counter] = defaultdict(Counter)
    for m in matches or []:
        sources[m["subscription_id"]][home["p", m["profile_id"]]] += 1
    for r in subs:
        if ("s", r["id"]) in home:
            continue
        wanted = sources.get(r["id"])
        near = rng.random() < LOCAL and wanted
        home["s", r["id"]] = (
            max(wanted, key=lambda s: (wanted[s], s)) if near else rng.choice(names)
        )
    return _with_sites(subs, profiles, home)


def _slice(attrs: dict[str, Any], n: int) -> int:
    """Which of `n` slices of the coordinate range a profile's content lies in."""
    for name in _NUMERIC_ORDER:
        value = attrs.get(name)
        if isinstance(value, list):
            value = (value[0] + value[1]) / 2
        if isinstance(value, int | float) and not isinstance(value, bool):
            return min(n - 1, max(0, int(value / SPAN * n)))
    return 0


def _with_sites(subs, profiles, home) -> tuple[list[dict], list[dict]]:
    return (
        [{**r, "site": home["s", r["id"]]} for r in subs],
        [{**r, "site": home["p", r["id"]]} for r in profiles],
    )
