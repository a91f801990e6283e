"""Advertisements (ROUTING §3, Siena): what a site's publishers declare they publish.

An advertisement arrives on the profiles topic:

    {"op": "advertise", "id": "a1", "space": "vehicles",
     "where": "kind = 'bus'", "ts": 1700000000000}
    {"op": "unadvertise", "id": "a1", "space": "vehicles", "ts": 1700000900000}

Its id names it within its space at its site; an advertise with an id that is
held replaces it. With `advertisements = true`, a site admits a publish only
if an advertisement of its own in force covers the profile (every point of it
satisfies one of the advertisement's filters); any other publish goes to the
dead letters. Interest then goes toward a neighbour only for filters that
overlap an advertisement from that neighbour's side (`interest.Eligible`).

An advertisement that is withdrawn (or replaced) stays in force for routing
until the last profile it admitted ends (retracted, replaced or expired):
otherwise a subscriber arriving later would not get a profile that is still
valid, and the network would no longer equal one matcher.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from matcher.constraints import Conjunction, predicate_of
from matcher.errors import RecordError
from matcher.filter_json import parse_filter
from matcher.records import OPEN, Publish, Source, Subscribe, decode

OPS = ("advertise", "unadvertise")


@dataclass(slots=True)
class Advertise:
    space: str
    id: str
    ts: int
    filters: list[Conjunction]
    source: Source = field(default_factory=Source)
    kind = "profile"
    op = "advertise"


@dataclass(slots=True)
class Unadvertise:
    space: str
    id: str
    ts: int
    source: Source = field(default_factory=Source)
    kind = "profile"
    op = "unadvertise"


def decode_advert(obj: dict[str, Any], source: Source, fallback_ts: int | None = None):
    """An advertise or unadvertise record (already parsed JSON), validated as a
    subscription's fields are; raises RecordError with the reason."""
    op = obj.get("op")
    as_sub = {k: v for k, v in obj.items() if k in ("id", "space", "ts", "where", "filter")}
    if op == "unadvertise":
        raw = json.dumps({**as_sub, "op": "unsubscribe"})
        rec = decode("subscription", raw, source, fallback_ts)
        return Unadvertise(rec.space, rec.id, rec.ts, source)
    if ("where" in obj) == ("filter" in obj):
        raise RecordError("an advertisement needs exactly one of 'where' and 'filter'")
    raw = json.dumps({**as_sub, "op": "subscribe", "subscriber": "-"}, allow_nan=True)
    rec = decode("subscription", raw, source, fallback_ts)
    assert isinstance(rec, Subscribe)
    if not rec.predicate:
        raise RecordError("the advertisement's filter can never hold: it advertises nothing")
    return Advertise(rec.space, rec.id, rec.ts, list(rec.predicate), source)


@dataclass(slots=True)
class _Ad:
    filters: list[Conjunction]
    withdrawn: bool = False
    live: int = 0  # profiles it admitted that are held


class LocalAdverts:
    """One site's own advertisements in one space, and the profiles each admitted.

    `in_force` is the multiset of filters the site advertises to its
    neighbours. Each method returns the changes to it, `(op, filter)`. Costs:
    admitting a profile is O(advertisements) covering tests."""

    def __init__(self) -> None:
        self._ads: dict[tuple[str, int], _Ad] = {}  # (id, version) -> ad
        self._current: dict[str, int] = {}  # id -> its current version
        self._version = 0
        self._admitted: dict[str, list[tuple[str, int]]] = {}  # profile id -> the ads it counts in
        self.in_force: Counter[Conjunction] = Counter()

    def advertise(self, ad: Advertise) -> list[tuple[str, Conjunction]]:
        out = self._withdraw(ad.id)
        self._version += 1
        self._current[ad.id] = self._version
        self._ads[ad.id, self._version] = _Ad(list(ad.filters))
        return out + self._count(ad.filters, +1)

    def unadvertise(self, ad: Unadvertise) -> list[tuple[str, Conjunction]]:
        return self._withdraw(ad.id)

    def admitting(self, pub: Publish) -> list[tuple[str, int]]:
        """The advertisements in force (not withdrawn) that cover the profile: it is
        admitted if there is one."""
        return [
            key
            for key, ad in self._ads.items()
            if not ad.withdrawn and any(f.covers(pub.profile) for f in ad.filters)
        ]

    def hold(self, profile_id: str, under: list[tuple[str, int]]) -> None:
        """An admitted profile counts as live under `under` until `end` of its id."""
        for key in under:
            self._ads[key].live += 1
        self._admitted[profile_id] = under

    def end(self, profile_id: str) -> list[tuple[str, Conjunction]]:
        """A held profile ended (retracted, replaced or expired): withdrawn ads it kept
        in force may leave."""
        out: list[tuple[str, Conjunction]] = []
        for key in self._admitted.pop(profile_id, []):
            ad = self._ads[key]
            ad.live -= 1
            if ad.withdrawn and not ad.live:
                del self._ads[key]
                out += self._count(ad.filters, -1)
        return out

    def carry(self, pub: Publish) -> tuple[list[tuple[str, int]], list[tuple[str, Conjunction]]]:
        """A profile that moved here and that no advertisement of this site covers is
        held under one of its own: its box, in force until the profile ends (its
        publisher's advertisement moves with it, as far as it goes). The key to
        `hold` it under, and the change to what is in force."""
        self._version += 1
        key = ("", self._version)  # (no advertisement's id is empty)
        box = box_filter(pub)
        self._ads[key] = _Ad([box], withdrawn=True)
        return [key], self._count([box], +1)

    def _withdraw(self, ident: str) -> list[tuple[str, Conjunction]]:
        version = self._current.pop(ident, None)
        if version is None:
            return []
        ad = self._ads[ident, version]
        ad.withdrawn = True
        if ad.live:
            return []  # in force until its last profile ends
        del self._ads[ident, version]
        return self._count(ad.filters, -1)

    def _count(self, filters: list[Conjunction], sign: int) -> list[tuple[str, Conjunction]]:
        out = []
        for f in filters:
            self.in_force[f] += sign
            if not self.in_force[f]:
                del self.in_force[f]
            out.append(("add" if sign > 0 else "remove", f))
        return out


def profile_end(pub: Publish) -> float:
    """The ts from which a profile is no longer held: after its valid_to."""
    return OPEN if pub.valid_to == OPEN else pub.valid_to + 1


def box_filter(pub: Publish) -> Conjunction:
    """The filter that allows exactly a profile's box: each attribute its value (a
    number's interval)."""
    atoms = []
    for name, value in pub.profile.attrs.items():
        if isinstance(value, tuple):
            atoms.append({"attr": name, "op": "between", "value": list(value)})
        else:
            atoms.append({"attr": name, "op": "=", "value": value})
    return predicate_of(parse_filter([atoms]))[0]
