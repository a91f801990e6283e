"""Mobility (ROUTING §5): a subscriber or a profile moves from one site to another.

The records, published at the site a client moves to (B):

    {"op": "move", "subscriber": "alice", "from": "A", "ts": T}          # subscriptions topic
    {"op": "move", "id": "ferry-1", "space": "boats", "from": "A", "ts": T}  # profiles topic

From event time T on the client lives at B: the subscriber's subscriptions
(every one A holds for her just before T, in every space) and her match
records are made there; the profile's later changes come from B, and its
pairs hold on. A move happens at its key `(T, MOVES, position)`
(`order.MOVES`): after the expiries at T, before any record at T. So a
client's records with a ts before T belong at A and those from T on at B,
and A's match records for a subscriber all have a ts before T, B's from T.

The protocol, every step at the move's key, so that the result does not
depend on when anything arrives (as everything in a site, `site`):

1. **Ask.** B sends an `Ask` toward A (plane `ask`, relayed over the path of
   the tree). The plane carries watermarks from every site's own input, so a
   site knows when no more asks below a ts can come.
2. **Hand over.** A answers when it has handled its own records up to the
   key and knows every ask up to its ts (`LocalStage`): it takes the client's
   live subscriptions (or the live profile) out of its state, writes the
   subscriber's last record `moved` (`Marker`), withdraws the filters from
   its interest (their removal keyed just after the key, so that at a site
   where the subscriber's old and new interest meet, the add comes first and
   nothing changes beyond it), and sends a `Handover` with the records as it
   holds them (`records.to_state`: same version, same `match_id`s) toward B.
   Or it refuses, with a reason: nothing to move, or a second move of the
   client at one ts.
3. **Take over.** B waits, at the key, for the handover (its own later
   records wait behind it), then holds the records as its own: the
   subscriptions enter its matcher as they were, with no `match` (their
   pairs already hold), and their filters become B's interest at the key,
   so its neighbours send, just before the key (catch-up), the valid
   profiles the subscriber must meet at B. A refused move is a dead letter
   of B's, with A's reason.

A moved profile keeps its version. Every site on the path from A to B
holds it after the move (`ProfileMoved`, delivered there by the handover as
it passes), and each site's profile ports turn with it: a port toward A's
side knows its neighbour holds it, a port toward B's side forgets it (its
versions now come from there); the matchers there hold it silently (a site
that did not hold it had no pair with it). Nothing else changes: pairs hold
on at every site, and the next version, published at B, reaches every site
that holds this one as a change.

No waits on each other: an answer at a key needs only what the old site
did before it, and handovers go between sites in key order, so the move
with the smallest key can always be answered (`LocalStage` takes its items
in key order, and stops only at a move whose handover is not there yet).
The matcher and the profile ports of the sites between A and B wait for a
profile's handover at its ts, which needs nothing they make.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field
from typing import Any

from matcher.errors import RecordError
from matcher.records import Publish, Source, Subscribe, as_name, from_state, record_ts
from matcher.routing.order import MOVES, Key

NEVER = -math.inf
_CONTENT = ("attrs", "payload", "valid_from", "valid_to", "where", "filter", "relation")


@dataclass(frozen=True, slots=True)
class Move:
    """A `move` record: `kind` is the topic it came on ("subscription": a subscriber
    moves; "profile": one profile moves), `client` the subscriber or profile id,
    `space` the profile's space ("" for a subscriber), `origin` the site it leaves."""

    kind: str
    client: str
    space: str
    origin: str
    ts: int
    source: Source = field(default_factory=Source)
    op = "move"

    @property
    def who(self) -> str:
        if self.kind == "subscription":
            return f"subscriber {self.client!r}"
        return f"profile {self.client!r} in space {self.space!r}"

    @property
    def client_key(self) -> tuple[str, str, str]:
        return (self.kind, self.space, self.client)


def decode_move(kind: str, obj: dict[str, Any], source: Source, fallback_ts: int | None) -> Move:
    """A move record of the `kind` topic (already parsed JSON), validated; RecordError
    with the reason."""
    origin = obj.get("from")
    if not isinstance(origin, str) or not origin:
        raise RecordError("a move needs 'from': the name of the site the client leaves")
    ts = record_ts(obj, fallback_ts)
    if kind == "subscription":
        subscriber = as_name(obj.get("subscriber"))
        if subscriber is None:
            raise RecordError(
                "a move on the subscriptions topic needs 'subscriber': the name whose "
                "subscriptions move"
            )
        return Move(kind, subscriber, "", origin, ts, source)
    ident, space = as_name(obj.get("id")), as_name(obj.get("space"))
    if ident is None or space is None:
        raise RecordError("a move on the profiles topic needs the 'id' and 'space' of the profile")
    extra = [name for name in _CONTENT if name in obj]
    if extra:
        raise RecordError(
            f"a move takes the profile as its old site holds it, so it has no {extra[0]!r}: "
            "publish at the new site after the move to change it"
        )
    return Move(kind, ident, space, origin, ts, source)


def move_key(ts: int, kind: str, position: tuple[int, ...]) -> Key:
    """The key a move at `position` of the `kind` topic happens at (moves on both
    topics share a class: the topic comes first in the position)."""
    return Key(ts, MOVES, (0 if kind == "subscription" else 1, *position))


# -- what crosses a link -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ask:
    """Plane `ask`: the new site `target` asks the old site `origin` for a client."""

    kind: str
    client: str
    space: str
    origin: str
    target: str
    key: Key

    def to_json(self) -> dict[str, Any]:
        return _head("ask", self)


@dataclass(frozen=True, slots=True)
class Handover:
    """Plane `handover`: the old site's answer, toward the new one: the client's
    records as it held them (`to_state` texts), or why it refused."""

    kind: str
    client: str
    space: str
    origin: str
    target: str
    key: Key
    records: tuple[str, ...] = ()
    refused: str | None = None

    def to_json(self) -> dict[str, Any]:
        records = [json.loads(r) for r in self.records]
        return {**_head("handover", self), "records": records, "refused": self.refused}


def _head(kind: str, m: Ask | Handover) -> dict[str, Any]:
    return {
        "type": kind,
        "kind": m.kind,
        "client": m.client,
        "space": m.space,
        "from": m.origin,
        "to": m.target,
        "ts": m.key.ts,
        "key": m.key.to_json(),
    }


def message_of(obj: dict[str, Any]) -> Ask | Handover:
    """Back from `to_json` (`wire.decode` calls it for these two types)."""
    head = (obj["kind"], obj["client"], obj["space"], obj["from"], obj["to"])
    key = Key.from_json(obj["key"])
    if obj["type"] == "ask":
        return Ask(*head, key)
    records = tuple(
        json.dumps(r, separators=(",", ":"), ensure_ascii=False) for r in obj["records"]
    )
    return Handover(*head, key, records, obj["refused"])


# -- what the parts of a site pass each other ----------------------------------------


@dataclass(frozen=True, slots=True)
class SubsMoved:
    """A subscriber's subscriptions of one space leave (`records` empty: `ids` go)
    or arrive (`records`) at a site's matcher, with no match records."""

    space: str
    ids: tuple[str, ...]
    records: tuple[Subscribe, ...]
    ts: int


@dataclass(frozen=True, slots=True)
class Marker:
    """The `moved` record a subscriber's old site writes last."""

    subscriber: str
    to: str
    ts: int

    def event(self) -> dict[str, Any]:
        return {"event": "moved", "subscriber": self.subscriber, "to": self.to, "ts": self.ts}


@dataclass(frozen=True, slots=True)
class ProfileMoved:
    """A profile that moved from `origin` to `target`, as its matchers and profile
    ports on the path between them take it."""

    record: Publish
    origin: str
    target: str

    @property
    def space(self) -> str:
        return self.record.space


def moved_item(item: Any) -> Any:
    """The move item inside a stage's input item (a local `(kind, item)` pair, or a
    bare item from the handover plane), or None."""
    if isinstance(item, tuple) and len(item) == 2:
        item = item[1]
    return item if isinstance(item, SubsMoved | Marker | ProfileMoved) else None


# -- a site's own input, with the moves that it answers and waits for ------------------


class LocalStage:
    """A site's own records, the asks it must answer and the moves it waits for,
    taken in key order by its `local.LocalSource` (which keeps the state a
    handover is made from).

    Invariant: an item is taken only when its ts is below both the site's input
    watermark and the watermark of asks from every site (`run`'s bound), and a
    move of a client to this site only once its handover is here; every item
    before it is taken first. Costs O(log n) an item besides its handling."""

    def __init__(self, site: str, local: Any) -> None:
        self.site = site
        self.local = local
        self._heap: list[tuple[Key, int, str, Any, Any]] = []
        self._n = 0
        self._handovers: dict[Key, Handover] = {}
        self.answers: list[Handover] = []  # made, not yet sent
        self.wm = NEVER  # every item with a ts below it is taken
        self.waiting: Key | None = None  # the move it stops at
        self.taken: list[Key] = []  # the moves to this site taken, for the caller to time
        self._seen: set[Key] = set()  # asks had, moves taken (a message read twice, after a
        # restart, is the same message: it is answered and taken once)

    def own(self, key: Key, record: Any, handle: Any) -> None:
        self._push(key, "own", record, handle)

    def ask(self, ask: Ask) -> None:
        if ask.key not in self._seen:
            self._seen.add(ask.key)
            self._push(ask.key, "ask", ask, None)

    def arrive(self, handover: Handover) -> None:
        if handover.key not in self._seen:
            self._handovers[handover.key] = handover

    @property
    def pending(self) -> int:
        """Items not taken yet (none once every input has ended)."""
        return len(self._heap)

    def _push(self, key: Key, what: str, item: Any, handle: Any) -> None:
        heapq.heappush(self._heap, (key, self._n, what, item, handle))
        self._n += 1

    def run(self, bound: float) -> bool:
        """Take what the bound and the handovers allow; whether `wm` moved."""
        heap, local = self._heap, self.local
        self.waiting = None
        while heap and heap[0][0].ts < bound:
            key, _, what, item, handle = heap[0]
            if what == "ask":
                heapq.heappop(heap)
                self.answers.append(local.hand_out(key, item))
            elif isinstance(item, Move):
                handover = self._handovers.pop(key, None)
                if handover is None:
                    self.waiting = key
                    break
                heapq.heappop(heap)
                local.hand_in(key, item, handover, handle)
                self._seen.add(key)
                self.taken.append(key)
            else:
                heapq.heappop(heap)
                local.feed(key, item, handle)
        if self.waiting is not None:
            local.release(self.waiting)
            wm = self.waiting.ts
        else:
            local.release(bound)
            wm = bound
        moved = wm > self.wm
        self.wm = max(self.wm, wm)
        return moved


class MoveDesk:
    """A site's planes `ask` and `handover`: asks and answers relayed over the tree,
    the watermark of asks, and the profile handovers passing through, which the
    site's matcher and profile ports take at their keys.

    Invariant: `ask_bound()` is a ts below which every ask of every site has
    reached this site (or passed it); `passing_bound()` is also at most the ts
    of every profile handover that passes this site and is not here yet."""

    def __init__(self, site: str, net: Any) -> None:
        self.site = site
        self.neighbours = net.neighbours(site)
        self.toward = {s: n for n in self.neighbours for s in net.behind(site, n)}
        self.own_wm = NEVER
        self.wm_from = {n: NEVER for n in self.neighbours}
        self.sent_wm = {n: NEVER for n in self.neighbours}
        self.outbox: dict[tuple[str, str], list[Any]] = {}
        self.passing: dict[Key, Ask] = {}  # profile asks relayed, handover not yet here
        self.arrived: list[tuple[Key, ProfileMoved]] = []  # profile handovers passing

    def ask_bound(self) -> float:
        return min([self.own_wm, *self.wm_from.values()])

    def passing_bound(self) -> float:
        waiting = min((k.ts for k in self.passing), default=math.inf)
        return min(self.ask_bound(), waiting)

    def send(self, message: Ask | Handover) -> None:
        """Relay toward the site the message is for."""
        to = message.origin if isinstance(message, Ask) else message.target
        plane = "ask" if isinstance(message, Ask) else "handover"
        self.outbox.setdefault((self.toward[to], plane), []).append(message)

    def deliver(self, neighbour: str, plane: str, items: list[Any], watermark: float) -> list[Any]:
        """Messages from a neighbour; those that are for this site."""
        mine = []
        for m in items:
            if isinstance(m, Ask):
                if m.origin == self.site:
                    mine.append(m)
                    continue
                if m.kind == "profile":
                    self.passing[m.key] = m
                self.send(m)
            elif m.target == self.site:
                mine.append(m)
            else:
                if m.kind == "profile" and self.passing.pop(m.key, None) and m.refused is None:
                    record = from_state(m.records[0])
                    self.arrived.append((m.key, ProfileMoved(record, m.origin, m.target)))
                self.send(m)
        if plane == "ask":
            self.wm_from[neighbour] = max(self.wm_from[neighbour], watermark)
        return mine

    def out(self) -> dict[tuple[str, str], tuple[list[Any], float]]:
        """What goes to each neighbour now, per plane, with the plane's watermark."""
        out: dict[tuple[str, str], tuple[list[Any], float]] = {}
        for n in self.neighbours:
            wm = min([self.own_wm, *(w for m, w in self.wm_from.items() if m != n)])
            asks = self.outbox.pop((n, "ask"), [])
            if asks or wm > self.sent_wm[n]:
                self.sent_wm[n] = max(self.sent_wm[n], wm)
                out[n, "ask"] = (asks, self.sent_wm[n])
            handovers = self.outbox.pop((n, "handover"), [])
            if handovers:
                out[n, "handover"] = (handovers, NEVER)
        return out
