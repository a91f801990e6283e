"""What a site tells one neighbour it wants, per space: the strategies of ROUTING §3.

Each strategy is fed the filters of what lies behind a link (this site's own
subscriptions, and the interest its other neighbours sent), one add or
remove at a time, and answers with the interest changes to send over the
link: `("add" | "remove", filter)`. `entries` is the size of the table the
neighbour keeps from them (its routing-table entries for this link).

- `simple`: every filter of every subscription, duplicates too;
- `identity`: a filter once, however many subscriptions have it;
- `covering`: only a filter that no filter already sent covers; when a sent
  one leaves, the filters behind the link that it alone covered are sent
  (the widest of them: those no other uncovered one covers). A sent filter
  that a wider one comes to cover stays sent: taking it back would cost a
  message now and another when the wider one leaves, so covering never sends
  more than identity;
- `merging`: the root set of what lies behind the link (the filters no other
  one there covers), kept exact, and merged by `merging.Merger`.

Flooding sends no interest at all (`flooding` has no strategy here).
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from matcher.constraints import Conjunction
from matcher.routing.cover_set import Boxes, CoverSet
from matcher.routing.merging import Change, Merger


class Strategy(Protocol):
    def add(self, conj: Conjunction) -> list[Change]: ...
    def remove(self, conj: Conjunction) -> list[Change]: ...
    @property
    def entries(self) -> int: ...


class Simple:
    """Every filter, as often as it is subscribed. O(1) an operation."""

    def __init__(self) -> None:
        self.entries = 0

    def add(self, conj: Conjunction) -> list[Change]:
        self.entries += 1
        return [("add", conj)]

    def remove(self, conj: Conjunction) -> list[Change]:
        self.entries -= 1
        return [("remove", conj)]


class Identity:
    """Each distinct filter once. O(1) an operation; invariant: a filter is sent
    exactly while its count behind the link is positive."""

    def __init__(self) -> None:
        self.counts: Counter[Conjunction] = Counter()

    @property
    def entries(self) -> int:
        return len(self.counts)

    def add(self, conj: Conjunction) -> list[Change]:
        self.counts[conj] += 1
        return [("add", conj)] if self.counts[conj] == 1 else []

    def remove(self, conj: Conjunction) -> list[Change]:
        self.counts[conj] -= 1
        if self.counts[conj]:
            return []
        del self.counts[conj]
        return [("remove", conj)]


class Covering:
    """Only filters no sent filter covers (see the module docstring).

    Invariant: every filter behind the link is covered by (or is) a sent one,
    and every sent one is behind the link. An add costs one covering query on
    the sent set; a remove of a sent filter a query on what is behind and one
    per filter it covered."""

    def __init__(self, boxes: Boxes | None = None) -> None:
        boxes = boxes or Boxes()
        self.behind = CoverSet(boxes)
        self.sent = CoverSet(boxes)

    @property
    def entries(self) -> int:
        return len(self.sent)

    def add(self, conj: Conjunction) -> list[Change]:
        if not self.behind.add(conj) or conj in self.sent or self.sent.is_covered(conj):
            return []
        self.sent.add(conj)
        return [("add", conj)]

    def remove(self, conj: Conjunction) -> list[Change]:
        if not self.behind.discard(conj) or conj not in self.sent:
            return []
        self.sent.discard(conj)
        out: list[Change] = []
        for below in self.behind.widest_first(self.behind.covered_by(conj)):
            if below not in self.sent and not self.sent.is_covered(below):
                self.sent.add(below)
                out.append(("add", below))
        return out + [("remove", conj)]


class Merging:
    """The exact root set of what lies behind the link, merged.

    Invariant: `roots` holds exactly the filters behind the link that no other
    one there covers (of two equal in meaning, the older), and the merger's
    groups partition them."""

    def __init__(self, *, imperfect: bool, budget: float, boxes: Boxes | None = None) -> None:
        boxes = boxes or Boxes()
        self.behind = CoverSet(boxes)
        self.roots = CoverSet(boxes)
        self.merger = Merger(imperfect=imperfect, budget=budget)

    @property
    def entries(self) -> int:
        return len(self.merger)

    def add(self, conj: Conjunction) -> list[Change]:
        if not self.behind.add(conj):
            return []
        return self._promote(conj)

    def remove(self, conj: Conjunction) -> list[Change]:
        if not self.behind.discard(conj) or conj not in self.roots:
            return []
        self.roots.discard(conj)
        out = self.merger.remove_root(conj)
        for below in self.behind.widest_first(self.behind.covered_by(conj)):
            if below not in self.roots:
                out += self._promote(below)
        return _net(out)

    def _promote(self, conj: Conjunction) -> list[Change]:
        """Make `conj` a root unless a root covers it; the roots it covers stop being roots."""
        if self.roots.is_covered(conj):
            return []
        out: list[Change] = []
        for lower in self.roots.covered_by(conj):
            self.roots.discard(lower)
            out += self.merger.remove_root(lower)
        self.roots.add(conj)
        return _net(out + self.merger.add_root(conj))


def _net(changes: list[Change]) -> list[Change]:
    """Changes with an add and a remove of the same filter cancelled, adds first."""
    net: dict[Conjunction, int] = {}
    for op, conj in changes:
        net[conj] = net.get(conj, 0) + (1 if op == "add" else -1)
    adds = [("add", c) for c, n in net.items() for _ in range(n)]
    removes = [("remove", c) for c, n in net.items() for _ in range(-n)]
    return adds + removes


def strategy(routing: str, merge: str, budget: float, *, boxes: Boxes | None = None) -> Strategy:
    """The strategy object of a network file's `routing` setting (not flooding);
    `boxes` may be shared with other users of the space's filters."""
    if routing == "simple":
        return Simple()
    if routing == "identity":
        return Identity()
    if routing == "covering":
        return Covering(boxes)
    if routing == "merging":
        return Merging(imperfect=merge == "imperfect", budget=budget, boxes=boxes)
    raise ValueError(f"no interest strategy for routing {routing!r}")


class Eligible:
    """With advertisements: interest toward a neighbour only for the filters that
    overlap an advertisement from its side (Siena); the others wait behind the
    link until one does. Wraps the strategy; an advertisement change costs a
    pass over the distinct filters behind the link, a filter change a pass over
    the advertisements."""

    def __init__(self, inner: Strategy) -> None:
        self.inner = inner
        self.behind: Counter[Conjunction] = Counter()
        self.ads: Counter[Conjunction] = Counter()
        self.eligible: dict[Conjunction, None] = {}

    @property
    def entries(self) -> int:
        return self.inner.entries

    def add(self, conj: Conjunction) -> list[Change]:
        self.behind[conj] += 1
        if conj not in self.eligible:
            if self.behind[conj] > 1 or not self._advertised(conj):
                return []
            self.eligible[conj] = None
        return self.inner.add(conj)

    def remove(self, conj: Conjunction) -> list[Change]:
        self.behind[conj] -= 1
        if not self.behind[conj]:
            del self.behind[conj]
        if conj not in self.eligible:
            return []
        if conj not in self.behind:
            del self.eligible[conj]
        return self.inner.remove(conj)

    def advertise(self, ad: Conjunction) -> list[Change]:
        self.ads[ad] += 1
        if self.ads[ad] > 1:
            return []
        out: list[Change] = []
        for conj, n in self.behind.items():
            if conj not in self.eligible and conj.intersects(ad):
                self.eligible[conj] = None
                for _ in range(n):
                    out += self.inner.add(conj)
        return out

    def unadvertise(self, ad: Conjunction) -> list[Change]:
        self.ads[ad] -= 1
        if self.ads[ad]:
            return []
        del self.ads[ad]
        out: list[Change] = []
        for conj in [c for c in self.eligible if c.intersects(ad) and not self._advertised(c)]:
            del self.eligible[conj]
            for _ in range(self.behind[conj]):
                out += self.inner.remove(conj)
        return out

    def _advertised(self, conj: Conjunction) -> bool:
        return any(conj.intersects(ad) for ad in self.ads)
