"""One site of a network: its matcher and, per neighbour, what goes over the link.

A site is a handful of event-time stages, each a merge of its inputs that
handles every item below the smallest watermark among them, in key order
(`order.Key`), as a stream join waits for its slowest input:

- the **matcher** (`SpaceMatcher` per space): the site's own subscriptions
  and every profile that reaches it, its own and forwarded; it alone makes
  match records, for the site's own subscribers;
- per neighbour N, three **ports**, each a plane of the link to N:
  - *adverts*: the site's advertisements and those of its other neighbours,
    each distinct filter once;
  - *interest*: the filters of the site's subscriptions and the interest of
    its other neighbours, reduced by the routing strategy (and, with
    advertisements, only where N's side advertised);
  - *profiles*: the site's admitted profiles and those of its other
    neighbours, forwarded as N's interest asks (`forwarding.Forwarder`).

A port's output on a link depends only on what comes from the other sides
and, for profiles, on N's interest, never on what N sends on the same plane,
so no two sites wait for each other: the adverts plane waits only for
adverts, interest for interest and N's adverts, profiles for profiles and N's
interest. Every stage's state and every item it passes is a plain record: a
streaming site keeps the same stages, one Kafka topic per link and plane.

Moves (`moves`) add two planes, `ask` and `handover`, kept by a `MoveDesk`;
the site's own records reach its stages through a `LocalStage`, which takes
them in key order together with the asks it answers and the moves it waits
for. The matcher and the profile ports also read the profile handovers
passing through (`moves.ProfileMoved`).
"""

from __future__ import annotations

import bisect
import math
from typing import Any

from matcher.engine import SpaceMatcher
from matcher.records import Publish, Retract
from matcher.routing.cover_set import Boxes
from matcher.routing.forwarding import Forwarder
from matcher.routing.interest import Eligible, Identity, Strategy, strategy
from matcher.routing.local import LocalSource
from matcher.routing.members import Arrive, Hosted, Leave, MemberDesk, Rehome
from matcher.routing.moves import (
    Ask,
    LocalStage,
    Marker,
    Move,
    MoveDesk,
    ProfileMoved,
    SubsMoved,
    moved_item,
)
from matcher.routing.network import Network
from matcher.routing.order import Key
from matcher.routing.wire import FilterChange, Message, ProfileForward

NEVER = -math.inf


class Inbox:
    """One input of a stage: items in key order and the watermark below which all
    have arrived (every later item has a ts of at least `wm`)."""

    __slots__ = ("items", "wm", "rank")

    def __init__(self, rank: int) -> None:
        self.items: list[tuple[Key, Any]] = []
        self.wm = NEVER
        self.rank = rank  # ties between inboxes at one key go by rank

    def take(self, bound: float) -> list[tuple[Key, Any]]:
        items = self.items
        n = 0
        while n < len(items) and items[n][0].ts < bound:
            n += 1
        out = items[:n]
        del items[:n]
        return out


class Stage:
    """An event-time merge of inboxes (see the module docstring)."""

    def __init__(self) -> None:
        self.inboxes: list[Inbox] = []
        self.done = NEVER  # every item below this ts is handled

    def inbox(self) -> Inbox:
        box = Inbox(len(self.inboxes))
        self.inboxes.append(box)
        return box

    def run(self) -> bool:
        """Handle what every input has passed; whether the watermark moved. Costs
        O(n log n) in the n items taken (merged by key) besides their handling;
        invariant: items are handled in key order, each once, and only below the
        smallest watermark of the inputs."""
        bound = min(box.wm for box in self.inboxes)
        if bound <= self.done:
            return False
        parts = [(box.rank, box.take(bound)) for box in self.inboxes]
        parts = [(r, items) for r, items in parts if items]
        if len(parts) == 1:
            items = parts[0][1]
        else:
            tagged = [(k, r, i, item) for r, part in parts for i, (k, item) in enumerate(part)]
            tagged.sort(key=lambda t: (t[0], t[1], t[2]))
            items = [(k, item) for k, _, _, item in tagged]
        if items:
            self.handle(items)
        self.done = bound
        return True

    def handle(self, items: list[tuple[Key, Any]]) -> None:
        raise NotImplementedError


class Matcher(Stage):
    """The site's matcher: a SpaceMatcher per space; events with what caused them.

    It feeds nothing else in the site, so `match` may apply what it has decided
    all at once (the offline network does, at the end: one batch is faster than
    many small ones, and gives the same events); `decided` keeps when each
    record's place in event time was reached (its latency)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.spaces: dict[str, SpaceMatcher] = {}
        self.decided: dict[Key, float] = {}
        self._pending: list[tuple[Key, Any]] = []
        self._last_made: dict[tuple[str, int, str], Key] = {}  # (space, kind, id) -> key
        # (space, the key of the record that caused it or None at the end, rank, event)
        self.events: list[tuple[str, Key | None, tuple, dict]] = []
        self.markers: list[tuple[Key, dict]] = []  # `moved` records, at their move's key

    def handle(self, items: list[tuple[Key, Any]]) -> None:
        self._pending += items
        now = self.now
        for key, _ in items:
            self.decided.setdefault(key, now)

    def match(self) -> None:
        """Apply what is decided, in order. An expiry's rank gets the key of the record
        that made the version expiring (one matcher meets the expiry at its first
        record after that one with a larger ts than its `valid_to`)."""
        per_space: dict[str, list[tuple[Key, Any]]] = {}
        markers = []
        for key, item in self._pending:
            moved = moved_item(item)
            if isinstance(moved, Marker):
                self.markers.append((key, moved.event()))
                markers.append((key, moved))
                continue
            record = moved or (item.record if isinstance(item, ProfileForward) else item[1])
            per_space.setdefault(record.space, []).append((key, record))
        self._pending = []
        if markers:  # (a subscriber leaves: every space evicts what expired before)
            for space in self.spaces.keys() | per_space.keys():
                keyed = per_space.setdefault(space, [])
                keyed += markers
                keyed.sort(key=lambda pair: pair[0])
        for space, keyed in per_space.items():
            matcher = self.spaces.get(space)
            if matcher is None:
                matcher = self.spaces[space] = SpaceMatcher(space)
            run: list[tuple[Key, Any]] = []
            for key, record in keyed:
                if isinstance(record, SubsMoved | ProfileMoved | Marker | Rehome):
                    self._apply(space, matcher, run)
                    run = []
                    self._move(space, matcher, key, record)
                elif isinstance(record, Leave | Arrive):
                    self._apply(space, matcher, run)
                    run = []
                    self._hand(space, matcher, key, record)
                else:
                    run.append((key, record))
            self._apply(space, matcher, run)
            matcher.forget_changes()  # (a site keeps no change log)

    def _move(self, space: str, matcher: SpaceMatcher, key: Key, item: Any) -> None:
        """A move at `key`: evict what expired before its ts (those pairs end where
        they were, before a `moved` record), then hold or drop the moved records
        with no match records."""
        self._expired(space, key, matcher.expire_ranked(key.ts))
        if isinstance(item, Marker | Rehome):
            return
        if isinstance(item, ProfileMoved):
            matcher.restore("profile", item.record.id, item.record)
            self._last_made[space, 1, item.record.id] = key
            return
        for ident in item.ids:
            matcher.restore("subscription", ident, None)
        for rec in item.records:
            matcher.restore("subscription", rec.id, rec)
            self._last_made[space, 0, rec.id] = key

    def _expired(self, space: str, cause: Key | None, ranked: list[tuple[tuple, Any]]) -> None:
        """Events of expiries and timers, each rank with the key of the record that made
        the version expiring (a timer's: None)."""
        for rank, event in ranked:
            made = None if rank[2] == -1 else self._last_made[space, rank[2], rank[3]]
            self.events.append((space, cause, (*rank, made), event))

    def _hand(self, space: str, matcher: SpaceMatcher, key: Key, item: Leave | Arrive) -> None:
        """A subscription whose version moves between this site and its space's
        selecting site in a step (`members`): this half of the step."""
        if isinstance(item, Leave):
            ranked = matcher.leave_ranked(item.id, item.ts)
        else:
            ranked = matcher.arrive_ranked(item.record)
        self._expired(space, key, [(r, e) for r, e in ranked if r[0] == 0])
        self.events += [(space, key, r, e) for r, e in ranked if r[0] != 0]
        if isinstance(item, Arrive):
            self._last_made[space, 0, item.record.id] = key

    def _apply(self, space: str, matcher: SpaceMatcher, keyed: list[tuple[Key, Any]]) -> None:
        """Apply a run of records of one space (no move among them), in order."""
        upserts: dict[tuple[int, str], list[tuple[int, Key]]] = {}
        for i, (key, record) in enumerate(keyed):
            if record.op in ("subscribe", "publish"):
                code = 0 if record.kind == "subscription" else 1
                upserts.setdefault((code, record.id), []).append((i, key))
        ranked = matcher.apply_batch_ranked([r for _, r in keyed])
        events = self.events
        for r, event in ranked:  # r: (index, *rank)
            if r[1]:
                rank = r[1:]
            else:
                made = None if r[3] == -1 else self._made(space, upserts, r[0], r[3], r[4])
                rank = (*r[1:], made)
            events.append((space, keyed[r[0]][0], rank, event))
        for (code, ident), made in upserts.items():
            self._last_made[space, code, ident] = made[-1][1]

    def _made(self, space: str, upserts: dict, index: int, code: int, ident: str) -> Key:
        """The key of the last upsert of (kind, id) before record `index` of a run."""
        made = upserts.get((code, ident), [])
        at = bisect.bisect_left(made, (index,)) - 1
        return made[at][1] if at >= 0 else self._last_made[space, code, ident]

    def finish(self, watermark: float) -> None:
        """Apply what is left, then evict what expired before the end's watermark, as
        one matcher does."""
        self.match()
        for space, matcher in self.spaces.items():
            self._expired(space, None, matcher.expire_ranked(watermark))


class Port(Stage):
    """A stage whose output goes over the link to one neighbour, on one plane."""

    plane = ""

    def __init__(self, neighbour: str) -> None:
        super().__init__()
        self.neighbour = neighbour
        self.outbox: list[Message] = []


class AdvertPort(Port):
    """Advertisements toward a neighbour: each distinct filter once."""

    plane = "advert"

    def __init__(self, neighbour: str) -> None:
        super().__init__(neighbour)
        self.spaces: dict[str, Identity] = {}

    def handle(self, items: list[tuple[Key, Any]]) -> None:
        for key, item in items:
            op, space, conj = _filter_change(item)
            sent = self.spaces.setdefault(space, Identity())
            changes = sent.add(conj) if op == "add" else sent.remove(conj)
            self.outbox += [FilterChange("advert", o, space, c, key) for o, c in changes]


class InterestPort(Port):
    """Interest toward a neighbour, by the routing strategy (ROUTING §3)."""

    plane = "interest"

    def __init__(self, neighbour: str, net: Network, boxes: dict[str, Boxes] | None = None) -> None:
        super().__init__(neighbour)
        self.net = net
        self.boxes = {} if boxes is None else boxes  # per space, shared by the site's ports
        self.spaces: dict[str, Strategy | Eligible] = {}
        self.entries = 0  # the neighbour's table from this port, all spaces
        self.peak = 0

    def _space(self, space: str) -> Strategy | Eligible:
        s = self.spaces.get(space)
        if s is None:
            net = self.net
            shared = self.boxes.setdefault(space, Boxes())
            s = strategy(net.routing, net.merge, net.merge_budget, boxes=shared)
            if net.advertisements:
                s = Eligible(s)
            self.spaces[space] = s
        return s

    def handle(self, items: list[tuple[Key, Any]]) -> None:
        for key, item in items:
            if isinstance(item, FilterChange) and item.type == "advert":
                eligible = self._space(item.space)
                assert isinstance(eligible, Eligible)
                op = eligible.advertise if item.op == "add" else eligible.unadvertise
                changes = op(item.filter)
                space = item.space
            else:
                op_name, space, conj = _filter_change(item)
                s = self._space(space)
                changes = s.add(conj) if op_name == "add" else s.remove(conj)
            self.outbox += [FilterChange("interest", o, space, c, key) for o, c in changes]
        self.entries = sum(s.entries for s in self.spaces.values())
        self.peak = max(self.peak, self.entries)


class ProfilePort(Port):
    """Profiles toward a neighbour (`forwarding.Forwarder` per space)."""

    plane = "profile"

    def __init__(
        self,
        neighbour: str,
        *,
        flooding: bool,
        behind: set[str] | None = None,
        boxes: dict[str, Boxes] | None = None,
    ) -> None:
        super().__init__(neighbour)
        self.flooding = flooding
        self.behind = behind or set()  # the sites behind the link
        self.boxes = {} if boxes is None else boxes  # per space, shared by the site's ports
        self.spaces: dict[str, Forwarder] = {}
        self.catch_ups = 0

    def _space(self, space: str) -> Forwarder:
        f = self.spaces.get(space)
        if f is None:
            shared = self.boxes.setdefault(space, Boxes())
            f = self.spaces[space] = Forwarder(flooding=self.flooding, boxes=shared)
        return f

    def handle(self, items: list[tuple[Key, Any]]) -> None:
        run: list[tuple[Key, Publish | Retract]] = []
        for key, item in items:
            moved = moved_item(item)
            if moved is not None:
                self._flush(run)
                run = []
                self._space(moved.space).moved(moved.record, self._toward(moved))
            elif isinstance(item, FilterChange):
                self._flush(run)
                run = []
                caught = self._space(item.space).interest(item.op, item.filter, key)
                self.catch_ups += len(caught)
                self.outbox += [ProfileForward(pub, at) for pub, at in caught]
            else:
                record = item.record if isinstance(item, ProfileForward) else item[1]
                if run and run[-1][1].space != record.space:
                    self._flush(run)
                    run = []
                run.append((key, record))
        self._flush(run)

    def _toward(self, moved: ProfileMoved) -> str:
        """Which end of a profile's move lies behind the link alone: "old", "new" or ""."""
        old, new = moved.origin in self.behind, moved.target in self.behind
        return "old" if old and not new else "new" if new and not old else ""

    def _flush(self, run: list[tuple[Key, Publish | Retract]]) -> None:
        if run:
            sent = self._space(run[0][1].space).profiles(run)
            self.outbox += [ProfileForward(rec, key) for rec, key in sent]


def _filter_change(item: Any) -> tuple[str, str, Any]:
    if isinstance(item, FilterChange):
        return item.op, item.space, item.filter
    _, op, space, conj = item
    return op, space, conj


class Site:
    """A site's stages, wired to its own input and to each neighbour's planes."""

    def __init__(self, name: str, net: Network, boxes: dict[str, Boxes] | None = None) -> None:
        """`boxes`: the filters' and profiles' boxes per space, made once for every
        port (and, given, for other sites in the same process)."""
        self.name = name
        self.net = net
        self.boxes = {} if boxes is None else boxes
        self.neighbours = net.neighbours(name)
        self.local = LocalSource(
            name, advertisements=net.advertisements, selecting=net.selecting_site
        )
        self.stage = LocalStage(name, self.local)
        self.desk = MoveDesk(name, net)
        # the subscriptions with delivery fields of the spaces this site selects for
        self.hosted = Hosted(LocalSource(name, advertisements=False))
        self.members = MemberDesk(name, net)
        self.delivered_wm = NEVER  # this site's own on plane `delivered` (its owner sets it)
        self.moved_at: dict[Key, float] = {}  # processing time each move here was taken
        self.matcher = Matcher()
        flooding = net.routing == "flooding"
        self.ports: dict[str, list[Port]] = {}
        # where each input goes: ("local", item kind) or (neighbour, plane) -> inboxes
        self.routes: dict[tuple[str, str], list[Inbox]] = {}
        self._route(("local", "sub"), self.matcher.inbox())
        self._route(("local", "pub"), self.matcher.inboxes[0])
        if not net.is_producer(name):  # (a producer matches nothing: it takes no profiles)
            for n in self.neighbours:
                self._route((n, "profile"), self.matcher.inbox())
        self._route(("hosted", "sub"), self.matcher.inbox())
        for n in self.neighbours:
            ports: list[Port] = []
            # (a quenching producer has no subscribers: it is sent no profiles)
            producer = net.is_producer(n)
            if not flooding:
                interest = InterestPort(n, net, self.boxes)
                self._route(("local", "interest"), interest.inbox())
                self._route(("hosted", "interest"), interest.inbox())
                if net.advertisements:
                    self._route((n, "advert"), interest.inbox())
                    adverts = AdvertPort(n)
                    self._route(("local", "advert"), adverts.inbox())
                    ports.append(adverts)
                ports.append(interest)
            if not producer:
                data = ProfilePort(
                    n, flooding=flooding, behind=net.behind(name, n), boxes=self.boxes
                )
                self._route(("local", "pub"), data.inbox())
                if not flooding:
                    self._route((n, "interest"), data.inbox())
                ports.append(data)
            for other in self.neighbours:
                if other != n:
                    for port in ports:
                        self._route((other, port.plane), port.inbox())
            self.ports[n] = ports
        self._route(("moves", "profile"), self.matcher.inbox())
        for ports in self.ports.values():
            for port in ports:
                if isinstance(port, ProfilePort):
                    self._route(("moves", "profile"), port.inbox())
        self.stages: list[Stage] = [self.matcher] + [p for ps in self.ports.values() for p in ps]

    def add_port(self, port: Port, sources: list[tuple[str, str]]) -> None:
        """One more port, fed by `sources` (`("local", item kind)` or `(neighbour,
        plane)`), run after the others: e.g. the interest a streaming site publishes
        for its quenching producers, who are not in the network file."""
        for source in sources:
            self._route(source, port.inbox())
        self.stages.append(port)

    def _route(self, source: tuple[str, str], inbox: Inbox) -> None:
        boxes = self.routes.setdefault(source, [])
        if inbox not in boxes:
            boxes.append(inbox)

    # -- input ------------------------------------------------------------------

    def read(self, records: list[tuple[Key, Any, Any]], watermark: float) -> None:
        """The site's own records that arrived (in key order, with a handle for the
        dead letters each), and the watermark of its input now."""
        for key, record, handle in records:
            if isinstance(record, Move):
                self._own_move(key, record, handle)
            else:
                self.stage.own(key, record, handle)
        self.desk.own_wm = max(self.desk.own_wm, watermark)

    def _own_move(self, key: Key, move: Move, handle: Any) -> None:
        """A client moves here: ask its old site, and wait for the answer at the key."""
        if move.origin not in self.net.names:
            names = ", ".join(self.net.names)
            reason = f"unknown site {move.origin!r} in 'from': the network file names {names}"
            self.local.refuse(handle, reason)
        elif self.net.is_producer(move.origin) or self.net.is_producer(self.name):
            producer = move.origin if self.net.is_producer(move.origin) else self.name
            self.local.refuse(
                handle,
                f"{producer!r} is a quenching producer: its profiles do not move (publish "
                "them at a site with a move of their own)",
            )
        elif move.origin == self.name:
            self.local.refuse(
                handle,
                f"{move.who} moves from site {self.name!r} to itself: publish the move at "
                "the site the client moves to",
            )
        else:
            self.desk.send(Ask(move.kind, move.client, move.space, move.origin, self.name, key))
            self.stage.own(key, move, handle)

    def deliver(self, neighbour: str, plane: str, items: list[Message], watermark: float) -> None:
        """Records of one plane from a neighbour, then that plane's watermark."""
        if plane in ("member", "delivered"):
            self.members.deliver(neighbour, plane, items, watermark)
            return
        if plane in ("ask", "handover"):
            for m in self.desk.deliver(neighbour, plane, items, watermark):
                if isinstance(m, Ask):
                    self.stage.ask(m)
                else:
                    self.stage.arrive(m)
            return
        for box in self.routes.get((neighbour, plane), ()):
            for m in items:
                box.items.append((m.key, m))
            box.wm = max(box.wm, watermark)

    # -- work -------------------------------------------------------------------

    def run(self, now: float = 0.0) -> dict[tuple[str, str], tuple[list[Message], float]]:
        """Every stage handles what it can (at processing time `now`); what goes out,
        per (neighbour, plane): its records and the plane's watermark."""
        self.matcher.now = now
        self._run_local()
        for key in self.stage.taken:
            self.moved_at[key] = now
        self.stage.taken.clear()
        out: dict[tuple[str, str], tuple[list[Message], float]] = {}
        for stage in self.stages:
            if stage.run() and isinstance(stage, Port):
                out[stage.neighbour, stage.plane] = (stage.outbox, stage.done)
                stage.outbox = []
        out.update(self.desk.out())
        out.update(self.member_planes_out())
        return out

    def member_planes_out(self) -> dict[tuple[str, str], tuple[list[Message], float]]:
        """What goes out on the planes `member` and `delivered` now: the records relayed
        and made so far, and each plane's watermark (see `MemberDesk.out`)."""
        return self.members.out({"member": self.stage.wm, "delivered": self.delivered_wm})

    def _run_local(self) -> None:
        """The site's own records, asks and moves as far as they may go; the items they
        make to the stages' inboxes; the answers to the desk."""
        stage, desk = self.stage, self.desk
        stage.run(min(desk.own_wm, desk.ask_bound()))
        for handover in stage.answers:
            desk.send(handover)
        stage.answers.clear()
        for key, item in self.local.out:
            for box in self.routes.get(("local", item[0]), ()):
                box.items.append((key, item))
        self.local.out.clear()
        for source, boxes in self.routes.items():
            if source[0] == "local":
                for box in boxes:
                    box.wm = stage.wm
        self._run_hosted()
        for key, moved in desk.arrived:
            for box in self.routes[("moves", "profile")]:
                # (handovers of several moves come back in any order: keep key order)
                bisect.insort(box.items, (key, moved), key=lambda pair: pair[0])
        desk.arrived.clear()
        bound = desk.passing_bound()
        for box in self.routes[("moves", "profile")]:
            box.wm = max(box.wm, bound)

    def _run_hosted(self) -> None:
        """The member records relayed (this site's own to the desk, those for it to its
        `Hosted`), taken as far as every site's have come; the items they make to the
        stages' inboxes."""
        members, hosted = self.members, self.hosted
        for m in self.local.relayed:
            members.send(m)
        self.local.relayed.clear()
        for m in members.mine:
            hosted.take(m)
        members.mine.clear()
        hosted.run(members.member_bound(self.stage.wm))
        source = hosted.source
        for key, item in source.out:
            for box in self.routes.get(("hosted", item[0]), ()):
                box.items.append((key, item))
        source.out.clear()
        for source_name, boxes in self.routes.items():
            if source_name[0] == "hosted":
                for box in boxes:
                    box.wm = hosted.wm

    def shipped(self) -> list[tuple[str, str, Key | None, tuple, Any]]:
        """Take out of the matcher's events those made for a member whose home is another
        site: `(home, space, cause, rank, event)` each."""
        if not self.hosted.homes:
            return []
        kept, out = [], []
        for space, cause, rank, event in self.matcher.events:
            home = self.hosted.home_of(space, event["subscription_id"], cause)
            if home is None or home == self.name:
                kept.append((space, cause, rank, event))
            else:
                out.append((home, space, cause, rank, event))
        self.matcher.events = kept
        return out

    def table_entries(self) -> dict[str, tuple[int, int]]:
        """Per neighbour: the entries of the table it keeps from this site's interest,
        now and at most."""
        out = {}
        for n, ports in self.ports.items():
            for p in ports:
                if isinstance(p, InterestPort):
                    out[n] = (p.entries, p.peak)
        return out
