"""Delivery policies in a network (docs/DELIVERY.md §9): every subscription with
delivery fields lives at its space's selecting site.

A group's choice (k of m, faircast's counts, bestcast's ranks) needs every
member in one state, and one matcher carries a pair's sustained state across
an upsert that changes a subscription's group or its dwell. So every
subscription with delivery fields of a space is held, matched and delivered
by one site, the space's **selecting site** (`Network.selecting_site`: a
hash of the space's name over the sorted site names). The site where its
subscriber publishes it, its **home**, relays it there; the selecting site
makes its records, and sends those of a member whose home is another site
back to it, which writes them. Two more planes, relayed over the tree as asks
and handovers are:

- `member` (home → selecting site): a subscribe or unsubscribe of such a
  subscription; `leave`, the id became plain at home (the selecting site
  ends its version, `changed`); `rehome`, its subscriber moved (ROUTING §5:
  its records go to the new home from the move on). Its watermark is the
  smallest, over every site, of the progress of its own input stage
  (`moves.LocalStage.wm`, which relays them in key order): below it, every
  member record of every site has arrived.
- `delivered` (selecting site → home): the match records made for a member
  at another home, and the dead letter of a member refused there (its group
  disagrees); with the selecting site's progress as watermark.

`Hosted` is the selecting site's side: the member records in key order, held
in a `local.LocalSource` of their own (their filters, widened by a margin,
become the site's interest; their lifetimes end there), refused where their
group disagrees, each id's home over time. `MemberDesk` relays both planes.
"""

from __future__ import annotations

import bisect
import heapq
import json
import math
from dataclasses import dataclass
from typing import Any

from matcher.delivery.histograms import Histograms
from matcher.delivery.options import disagreement
from matcher.records import Subscribe, Unsubscribe, from_state
from matcher.routing.order import Key

NEVER = -math.inf
# A `Leave` is keyed just before its record (seq -1), so that in a matcher that holds
# both halves of the step the old version ends before the new one is held.
LEAVE = -1


@dataclass(frozen=True, slots=True)
class Member:
    """Plane `member`: a change of a subscription with delivery fields, from its home
    to its space's selecting site (`target`). `op`: `subscribe` (`record`, its
    `to_state` text; `replaces`: the home ended a plain version of the id in the
    same step, so its pairs begin `changed`; `handle`, the home's for a dead
    letter), `unsubscribe`, `leave` (the id became plain at home) or `rehome`
    (`ids` now belong to the subscriber's new home `home`)."""

    op: str
    space: str
    ids: tuple[str, ...]
    home: str
    target: str
    key: Key
    record: str | None = None
    replaces: bool = False
    handle: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "member",
            "op": self.op,
            "space": self.space,
            "ids": list(self.ids),
            "home": self.home,
            "to": self.target,
            "ts": self.key.ts,
            "key": self.key.to_json(),
            "record": None if self.record is None else json.loads(self.record),
            "replaces": self.replaces,
            "handle": self.handle,
        }


@dataclass(frozen=True, slots=True)
class Delivered:
    """Plane `delivered`: a record the selecting site made for a member whose home is
    `home`: a match record (`event`), or a refusal (`handle` and `reason`)."""

    home: str
    event: dict[str, Any] | None = None
    handle: Any = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "delivered",
            "home": self.home,
            "event": self.event,
            "handle": self.handle,
            "reason": self.reason,
        }


def message_of(obj: dict[str, Any]) -> Member | Delivered:
    """Back from `to_json` (`wire.decode` calls it for these two types)."""
    if obj["type"] == "delivered":
        return Delivered(obj["home"], obj["event"], obj["handle"], obj["reason"])
    record = obj["record"]
    text = None if record is None else json.dumps(record, separators=(",", ":"), ensure_ascii=False)
    return Member(
        obj["op"],
        obj["space"],
        tuple(obj["ids"]),
        obj["home"],
        obj["to"],
        Key.from_json(obj["key"]),
        text,
        obj["replaces"],
        obj["handle"],
    )


# -- what the selecting site's parts pass each other ---------------------------------


@dataclass(frozen=True, slots=True)
class Leave:
    """A matcher item: the id's version ends here, `changed`, as its new version is
    held at another site (`SpaceMatcher.leave_ranked`)."""

    space: str
    id: str
    ts: int


@dataclass(frozen=True, slots=True)
class Arrive:
    """A matcher item: hold `record`, whose old version ended at another site in the
    same step: its pairs begin `changed` (`SpaceMatcher.arrive_ranked`)."""

    record: Subscribe

    @property
    def space(self) -> str:
        return self.record.space


@dataclass(frozen=True, slots=True)
class Rehome:
    """A matcher item: the subscriber of hosted `ids` moved at `ts`; what expired before
    it is evicted first (its records belong to the old home)."""

    space: str
    ids: tuple[str, ...]
    ts: int


class Hosted:
    """A selecting site's members (see the module docstring). `run` takes the member
    records below its bound in key order: O(log n) each besides its handling."""

    def __init__(self, source: Any) -> None:
        self.source = source  # a `local.LocalSource` of the hosted subscriptions
        self._heap: list[tuple[Key, int, Member]] = []
        self._n = 0
        self.wm = NEVER
        # (space, id) -> [(key from which, home, or None: not hosted)], in key order
        self.homes: dict[tuple[str, str], list[tuple[Key, str | None]]] = {}
        self.groups: dict[tuple[str, str], set[str]] = {}  # (space, group) -> ids
        self.refused: list[tuple[str, Any, str]] = []  # (home, handle, reason)

    def take(self, member: Member) -> None:
        heapq.heappush(self._heap, (member.key, self._n, member))
        self._n += 1

    def run(self, bound: float) -> bool:
        """Take what lies below `bound`; whether the watermark moved."""
        heap, source = self._heap, self.source
        while heap and heap[0][0].ts < bound:
            key, _, m = heapq.heappop(heap)
            source.release(key)
            if m.op == "subscribe":
                self._subscribe(key, m)
            elif m.op in ("unsubscribe", "leave"):
                if m.op == "unsubscribe":
                    item: Any = Unsubscribe(m.space, m.ids[0], key.ts)
                    source.unsubscribe(key, m.space, m.ids[0], item)
                    after = key.next(key.seq + 1)
                else:  # (the hosted version ends before the record; its plain one is held
                    # from the record on, here too where this site is its home)
                    item = Leave(m.space, m.ids[0], key.ts)
                    source.unsubscribe(key.next(LEAVE), m.space, m.ids[0], item)
                    after = key
                homes = self.homes.get((m.space, m.ids[0]))
                if homes:  # (hosted no more: a version of the id held here later is not)
                    homes.append((after, None))
            else:
                live = tuple(i for i in m.ids if source.held_sub(m.space, i) is not None)
                after = key.next(key.seq + 1)  # (what the move evicts stays the old home's)
                for ident in live:
                    self.homes.setdefault((m.space, ident), []).append((after, m.home))
                source.out.append((key, ("sub", Rehome(m.space, live, key.ts))))
        source.release(bound)
        moved = bound > self.wm
        self.wm = max(self.wm, bound)
        return moved

    def _subscribe(self, key: Key, m: Member) -> None:
        rec = from_state(m.record)
        assert isinstance(rec, Subscribe)
        options = rec.options
        if options.group is not None:
            members = self.groups.setdefault((rec.space, options.group), set())
            for other in sorted(members):
                held = self.source.held_sub(rec.space, other)
                if held is None or held.options is None or held.options.group != options.group:
                    members.discard(other)  # (ended, or left the group since)
                    continue
                if other == rec.id:
                    continue
                problem = disagreement(options, held.options)
                if problem is not None:
                    self.refused.append((m.home, m.handle, problem))
                    return
                break  # (the held members agree with each other: one speaks for all)
            members.add(rec.id)
        homes = self.homes.setdefault((rec.space, rec.id), [])
        if not homes or homes[-1][1] != m.home:
            homes.append((key, m.home))
        self.source.subscribe(key, rec, Arrive(rec) if m.replaces else rec)

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per space this site selects for: its members held now, and their equi-depth
        histograms per numeric attribute (docs/DELIVERY.md §7: what each range of
        values can be supplied from, for planning; never used to route). O(n log n)."""
        per_space: dict[str, Histograms] = {}
        counts: dict[str, int] = {}
        for rec in self.source.held_subs():
            per_space.setdefault(rec.space, Histograms()).add(rec.id, rec.predicate)
            counts[rec.space] = counts.get(rec.space, 0) + 1
        return {
            space: {"members": counts[space], "histograms": h.summary()}
            for space, h in sorted(per_space.items())
        }

    def home_of(self, space: str, ident: str, cause: Key | None) -> str | None:
        """The home of a hosted id for a record caused at `cause` (None: the end), or
        None where the id is not hosted then (a plain version of it may be held here)."""
        homes = self.homes.get((space, ident))
        if not homes:
            return None
        if cause is None:
            return homes[-1][1]
        at = bisect.bisect_right(homes, cause, key=lambda entry: entry[0]) - 1
        return homes[max(at, 0)][1]


class MemberDesk:
    """A site's planes `member` and `delivered`: each message relayed toward the site
    it is for, the watermarks of both planes.

    Invariant: `member_bound()` is a ts below which every member record of every site
    has reached this site (or passed it); the `delivered` watermark from a
    neighbour likewise for the records of every selecting site behind it."""

    def __init__(self, site: str, net: Any) -> None:
        self.site = site
        self.neighbours = net.neighbours(site)
        self.toward = {s: n for n in self.neighbours for s in net.behind(site, n)}
        self.wm_from = {p: dict.fromkeys(self.neighbours, NEVER) for p in PLANES}
        self.sent_wm = {p: dict.fromkeys(self.neighbours, NEVER) for p in PLANES}
        self.outbox: dict[tuple[str, str], list[Member | Delivered]] = {}
        self.mine: list[Member] = []  # member records for this site's `Hosted`
        self.arrived: list[Delivered] = []  # records for this site's subscribers

    def member_bound(self, own: float) -> float:
        return min([own, *self.wm_from["member"].values()])

    def delivered_bound(self) -> float:
        return min(self.wm_from["delivered"].values(), default=math.inf)

    @property
    def idle(self) -> bool:
        """Nothing waits to be sent."""
        return not any(self.outbox.values())

    def send(self, message: Member | Delivered) -> None:
        """Relay toward the site the message is for (or keep it, if it is this one)."""
        to = message.target if isinstance(message, Member) else message.home
        if to == self.site:
            (self.mine if isinstance(message, Member) else self.arrived).append(message)
            return
        plane = "member" if isinstance(message, Member) else "delivered"
        self.outbox.setdefault((self.toward[to], plane), []).append(message)

    def deliver(self, neighbour: str, plane: str, items: list[Any], watermark: float) -> None:
        for m in items:
            self.send(m)
        marks = self.wm_from[plane]
        marks[neighbour] = max(marks[neighbour], watermark)

    def out(self, own: dict[str, float]) -> dict[tuple[str, str], tuple[list[Any], float]]:
        """What goes to each neighbour now, per plane, with its watermark: the smallest
        of this site's own (`own`, per plane) and the other neighbours'."""
        out: dict[tuple[str, str], tuple[list[Any], float]] = {}
        for plane in PLANES:
            marks, sent = self.wm_from[plane], self.sent_wm[plane]
            for n in self.neighbours:
                wm = min([own[plane], *(w for m, w in marks.items() if m != n)])
                records = self.outbox.pop((n, plane), [])
                if records or wm > sent[n]:
                    sent[n] = max(sent[n], wm)
                    out[n, plane] = (records, sent[n])
        return out


PLANES = ("member", "delivered")
