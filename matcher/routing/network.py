"""The network file (ROUTING §1, §7): sites, the links between them, the routing settings.

A network is a tree: every site reaches every other by exactly one path, so a
record never meets itself and the sites behind a link are well defined. A file
that is not one (a cycle, a link to a site the file does not name, a site no
link reaches, a name given twice) is refused with one line naming the fault.
Parsing is pure: the caller reads the file and gives its text.
"""

from __future__ import annotations

import math
import re
import tomllib
import zlib
from dataclasses import dataclass, field, replace
from typing import Any

STRATEGIES = ("flooding", "simple", "identity", "covering", "merging")
MERGES = ("perfect", "imperfect")
DEFAULTS: dict[str, Any] = {
    "routing": "covering",
    "merge": "imperfect",
    "merge_budget": 0.05,
    "advertisements": False,
    "idle_ms": 5000,
}
SITE_KEYS = ("bootstrap", "prefix")
PRODUCER_KEYS = ("site",)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


class NetworkError(ValueError):
    """A network file that cannot be used; the message names the fault in one line."""


@dataclass(frozen=True)
class Site:
    name: str
    bootstrap: str | None = None
    prefix: str = ""


@dataclass(frozen=True)
class Network:
    """The sites (in file order: the first is where unmarked input enters), the
    links of the tree and the routing settings."""

    sites: tuple[Site, ...]
    links: tuple[tuple[str, str], ...] = ()
    routing: str = DEFAULTS["routing"]
    merge: str = DEFAULTS["merge"]
    merge_budget: float = DEFAULTS["merge_budget"]
    advertisements: bool = DEFAULTS["advertisements"]
    idle_ms: int = DEFAULTS["idle_ms"]
    producers: tuple[tuple[str, str], ...] = ()  # (producer, its site), file order
    _neighbours: dict[str, tuple[str, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        _check(self)
        around: dict[str, list[str]] = {s.name: [] for s in self.sites}
        for a, b in self.links:
            around[a].append(b)
            around[b].append(a)
        self._neighbours.update({name: tuple(sorted(n)) for name, n in around.items()})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sites)

    @property
    def first(self) -> str:
        return self.sites[0].name

    def neighbours(self, site: str) -> tuple[str, ...]:
        """The sites linked to `site`, by name."""
        return self._neighbours[site]

    def behind(self, site: str, neighbour: str) -> set[str]:
        """The sites reached from `site` through the link to `neighbour` (itself among
        them): what lies behind that link. O(sites)."""
        seen, todo = {site, neighbour}, [neighbour]
        while todo:
            here = todo.pop()
            for n in self._neighbours[here]:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen - {site}

    def selecting_site(self, space: str) -> str:
        """The site that holds every subscription with delivery fields of `space` and
        runs its delivery policies (docs/DELIVERY.md §9): a pure function of the
        space's name and the sites' names (never a quenching producer's), the same at
        every site. O(sites)."""
        names = sorted(n for n in self.names if not self.is_producer(n))
        return names[zlib.crc32(space.encode("utf-8", "surrogatepass")) % len(names)]

    def path(self, start: str, end: str) -> list[str]:
        """The sites from `start` to `end` along the tree, both ends included. O(sites)."""
        back = {start: start}
        todo = [start]
        while todo:
            here = todo.pop()
            for n in self._neighbours[here]:
                if n not in back:
                    back[n] = here
                    todo.append(n)
        out = [end]
        while out[-1] != start:
            out.append(back[out[-1]])
        return out[::-1]

    def is_producer(self, name: str) -> bool:
        """Whether `name` is a quenching producer's (a leaf with no subscribers)."""
        return any(p == name for p, _ in self.producers)

    def with_producers(self) -> Network:
        """The network with each quenching producer as a leaf site linked to its site
        alone, on its site's cluster, after the sites in file order (itself where
        it names no producer, or already has them as sites). O(sites)."""
        names = set(self.names)
        added = [(p, s) for p, s in self.producers if p not in names]
        if not added:
            return self
        hosts = {s.name: s for s in self.sites}
        leaves = tuple(Site(p, hosts[s].bootstrap, f"{hosts[s].prefix}{p}.") for p, s in added)
        return replace(
            self, sites=self.sites + leaves, links=self.links + tuple((s, p) for p, s in added)
        )

    def directed_links(self) -> list[tuple[str, str]]:
        """Every link in both directions, sorted."""
        return sorted([(a, b) for a, b in self.links] + [(b, a) for a, b in self.links])


def parse_network(text: str, name: str = "network file") -> Network:
    """A network from the text of its TOML file; NetworkError names the fault."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        if "twice" in message or "overwrite" in message:
            raise NetworkError(f"{name}: a name is given twice: {message}") from None
        raise NetworkError(f"{name}: not valid TOML: {message}") from None
    try:
        return network_of(doc)
    except NetworkError as exc:
        raise NetworkError(f"{name}: {exc}") from None


def network_of(doc: dict[str, Any]) -> Network:
    """A network from the parsed TOML tables."""
    unknown = sorted(set(doc) - set(DEFAULTS) - {"links", "sites", "producers"})
    if unknown:
        known = ", ".join([*DEFAULTS, "links", "sites", "producers"])
        raise NetworkError(f"unknown setting {unknown[0]!r} (the settings are {known})")
    sites_table = doc.get("sites")
    if not isinstance(sites_table, dict) or not sites_table:
        raise NetworkError("no sites: give each one a table, e.g. [sites.harbour]")
    sites = tuple(_site(n, v) for n, v in sites_table.items())
    links = _links(doc.get("links", []))
    settings = {key: doc.get(key, default) for key, default in DEFAULTS.items()}
    _check_settings(settings)
    producers = _producers(doc.get("producers", {}), {s.name for s in sites})
    return Network(sites, links, **settings, producers=producers)


def _site(name: str, table: Any) -> Site:
    if not _NAME.match(name):
        raise NetworkError(
            f"site name {name!r}: use letters, digits, '.', '_' and '-' (it prefixes topics)"
        )
    if not isinstance(table, dict):
        raise NetworkError(f"sites.{name} must be a table, e.g. [sites.{name}]")
    unknown = sorted(set(table) - set(SITE_KEYS))
    if unknown:
        raise NetworkError(
            f"sites.{name}: unknown setting {unknown[0]!r} (a site has {', '.join(SITE_KEYS)})"
        )
    for key in SITE_KEYS:
        if key in table and not isinstance(table[key], str):
            raise NetworkError(f"sites.{name}.{key} must be a string, got {table[key]!r}")
    return Site(name, table.get("bootstrap"), table.get("prefix", ""))


def _producers(table: Any, sites: set[str]) -> tuple[tuple[str, str], ...]:
    if not isinstance(table, dict):
        raise NetworkError('producers must be tables, e.g. [producers.buses] site = "harbour"')
    out = []
    for name, entry in table.items():
        if not _NAME.match(name):
            raise NetworkError(
                f"producer name {name!r}: use letters, digits, '.', '_' and '-' "
                "(it prefixes topics)"
            )
        if name in sites:
            raise NetworkError(f"producer {name!r} has the name of a site: give it another")
        if not isinstance(entry, dict) or set(entry) - set(PRODUCER_KEYS):
            raise NetworkError(
                f'producers.{name} must be a table with only site = "SITE", e.g. '
                f'[producers.{name}] site = "{min(sites)}"'
            )
        site = entry.get("site")
        if site not in sites:
            raise NetworkError(
                f"producers.{name}.site {site!r} names no site of the file "
                f"({', '.join(sorted(sites))})"
            )
        out.append((name, site))
    return tuple(out)


def _links(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list):
        raise NetworkError('links must be a list of site pairs, e.g. [["harbour", "centre"]]')
    out = []
    for i, link in enumerate(value, start=1):
        pair = isinstance(link, list) and len(link) == 2
        if not (pair and all(isinstance(s, str) for s in link)):
            raise NetworkError(f"link {i} must be a pair of site names, got {link!r}")
        out.append((link[0], link[1]))
    return tuple(out)


def _check_settings(settings: dict[str, Any]) -> None:
    if settings["routing"] not in STRATEGIES:
        raise NetworkError(
            f"routing {settings['routing']!r} is unknown: choose one of {', '.join(STRATEGIES)}"
        )
    if settings["merge"] not in MERGES:
        raise NetworkError(f"merge {settings['merge']!r} is unknown: choose perfect or imperfect")
    budget = settings["merge_budget"]
    if isinstance(budget, bool) or not isinstance(budget, int | float):
        raise NetworkError(f"merge_budget must be a number from 0 to 1, got {budget!r}")
    if not (math.isfinite(budget) and 0 <= budget <= 1):
        raise NetworkError(f"merge_budget must be a number from 0 to 1, got {budget!r}")
    settings["merge_budget"] = float(budget)
    if not isinstance(settings["advertisements"], bool):
        raise NetworkError(
            f"advertisements must be true or false, got {settings['advertisements']!r}"
        )
    idle = settings["idle_ms"]
    if isinstance(idle, bool) or not isinstance(idle, int) or idle < 0:
        raise NetworkError(f"idle_ms must be a whole number of milliseconds >= 0, got {idle!r}")


def _check(net: Network) -> None:
    """The tree conditions of ROUTING §1, each fault named."""
    names = [s.name for s in net.sites]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise NetworkError(f"site {twice!r} is named twice")
    known = set(names)
    seen: set[frozenset[str]] = set()
    # union-find: a link between two sites already joined closes a cycle
    parent = {n: n for n in names}

    def root(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for i, (a, b) in enumerate(net.links, start=1):
        for s in (a, b):
            if s not in known:
                raise NetworkError(
                    f"link {i} [{a!r}, {b!r}] names site {s!r}, which no [sites.{s}] table defines"
                )
        if a == b:
            raise NetworkError(f"link {i} joins site {a!r} to itself")
        pair = frozenset((a, b))
        if pair in seen:
            raise NetworkError(f"link {i} [{a!r}, {b!r}] is given twice")
        seen.add(pair)
        ra, rb = root(a), root(b)
        if ra == rb:
            raise NetworkError(
                f"link {i} [{a!r}, {b!r}] closes a cycle ({_path(net.links[: i - 1], b, a)}): "
                "the links must form a tree"
            )
        parent[ra] = rb
    for n in names[1:]:
        if root(n) != root(names[0]):
            raise NetworkError(
                f"site {n!r} is not connected to {names[0]!r}: a link is missing "
                f"({len(names)} sites need {len(names) - 1} links forming a tree)"
            )


def _path(links: tuple[tuple[str, str], ...], start: str, end: str) -> str:
    """The sites on the path from `start` to `end` over `links` (a forest), as text."""
    around: dict[str, list[str]] = {}
    for a, b in links:
        around.setdefault(a, []).append(b)
        around.setdefault(b, []).append(a)
    back = {start: start}
    todo = [start]
    while todo:
        here = todo.pop()
        for n in around.get(here, []):
            if n not in back:
                back[n] = here
                todo.append(n)
    path = [end]
    while path[-1] != start:
        path.append(back[path[-1]])
    return " – ".join([*path, end])
