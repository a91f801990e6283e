"""A site's own input, read in event-time order: what each part of the site takes of it.

The site's records (its subscriptions and profiles-topic records, in the order
of SEMANTICS §5) become a stream of keyed items:

- `("sub", record)`: a subscribe or unsubscribe, for the site's matcher;
- `("pub", record)`: an admitted publish, or a retract, for the matcher and
  for every link (`forwarding`);
- `("interest", op, space, filter)`: the filters of the site's own live
  subscriptions coming and going (a subscription's disjuncts each count once),
  for every link's interest (`interest`); an expired subscription's leave at
  `valid_to + 1` (class EXPIRY), before anything at that ts;
- `("advert", op, space, filter)`: the site's own advertisements in force
  (`adverts.LocalAdverts`).

With advertisements on, a publish that no advertisement of the site covers is
refused here, with a reason for the dead letters. A client's `move`
(`moves`) takes its subscriptions or profile out of one site's source
(`hand_out`) into another's (`hand_in`), with the items that says. Expiry-driven items wait in
a timer heap and come out in key order: before the first record with a
larger key, or when the watermark passes them (`release`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from matcher.delivery.margin import routing_filters
from matcher.records import OPEN, Publish, Retract, Subscribe, Unsubscribe, from_state, to_state
from matcher.routing.adverts import Advertise, LocalAdverts, Unadvertise
from matcher.routing.members import LEAVE, Arrive, Leave, Member
from matcher.routing.moves import Ask, Handover, Marker, Move, ProfileMoved, SubsMoved
from matcher.routing.order import EXPIRY, Key

Item = tuple[Any, ...]


def outside_reason(pub: Publish, site: str) -> str:
    return (
        f"profile {pub.id!r} in space {pub.space!r} lies outside every advertisement "
        f"of site {site!r}, its publisher's: advertise a filter that covers it first "
        "(with advertisements = true, a site admits only what it advertised)"
    )


def _end(valid_to: float, key: Key) -> Key:
    """Where a record held from `key` ends: before anything after its `valid_to`, and
    just after itself where that is already past (a lifetime that ends before its
    ts: one matcher evicts it before the next record)."""
    end = Key(int(valid_to) + 1, EXPIRY, key.pos)
    return end if end > key else key._replace(seq=key.seq + 1)


class LocalSource:
    """One site's own records as keyed items (see the module docstring)."""

    def __init__(
        self,
        site: str,
        *,
        advertisements: bool,
        selecting: Callable[[str], str] | None = None,
    ) -> None:
        self.site = site
        self.advertisements = advertisements
        # a space's selecting site, where subscriptions with delivery fields are relayed
        # (`members`); None: this source holds them itself (the selecting site's own)
        self.selecting = selecting
        self.relayed: list[Member] = []  # made, not yet sent
        # (space, id) -> the version relayed, and per subscriber the ids relayed
        self._relocated: dict[tuple[str, str], Subscribe] = {}
        self._relocated_by: dict[str, set[tuple[str, str]]] = {}
        self.out: list[tuple[Key, Item]] = []
        self.refused: list[tuple[Any, str]] = []  # (the record's handle, reason)
        self._timers: list[tuple[Key, int, str, str, int]] = []
        self._subs: dict[
            tuple[str, str], tuple[int, Subscribe]
        ] = {}  # (space, id) -> (version, rec)
        self._profiles: dict[tuple[str, str], tuple[int, Publish]] = {}
        self._by_subscriber: dict[str, set[tuple[str, str]]] = {}  # -> (space, id) held
        self._moved: dict[tuple[str, str, str], int] = {}  # client -> ts it last moved here or away
        self._left: dict[tuple[str, str, str], tuple[str, int]] = {}  # client -> (site, ts)
        self._adverts: dict[str, LocalAdverts] = {}
        self._version = 0
        self.accepted: list[tuple[str, Key]] = []  # (space, key) of each record let through

    def feed(self, key: Key, record: Any, handle: Any = None) -> None:
        """One record at `key` (keys strictly increasing across calls). Costs O(its
        filters) plus O(log timers) (and O(advertisements) to admit a publish);
        invariant: `out` stays in key order."""
        self.release(key)
        gone = self._gone(record)
        if gone is not None:
            self.refused.append((handle, gone))
            return
        if isinstance(record, Subscribe | Unsubscribe | Retract):
            self.accepted.append((record.space, key))
        if isinstance(record, Subscribe):
            if self.selecting is not None and record.options is not None:
                self._relay(key, record, handle)
            else:
                self._plain(key, record)
        elif isinstance(record, Unsubscribe):
            if self._unrelocate(record.space, record.id) is not None:
                self._send("unsubscribe", key, record.space, (record.id,))
            else:
                self._unsubscribe(key, record)
        elif isinstance(record, Publish):
            self._publish(key, record, handle)
        elif isinstance(record, Retract):
            self._retract(key, record)
        elif isinstance(record, Advertise):
            changes = self._ads(record.space).advertise(record)
            self._emit_adverts(key, record.space, changes)
        elif isinstance(record, Unadvertise):
            changes = self._ads(record.space).unadvertise(record)
            self._emit_adverts(key, record.space, changes)

    def release(self, until: Key | float) -> None:
        """Let out the timers before `until` (a key, or a watermark ts)."""
        bound = until if isinstance(until, Key) else Key(until, -1, ())
        while self._timers and self._timers[0][0] < bound:
            key, kind, space, ident, version = heapq.heappop(self._timers)
            if kind == 0:
                held = self._subs.get((space, ident))
                if held is not None and held[0] == version:
                    self._drop_sub(space, ident)
                    self._interest(key, "remove", held[1])
            else:
                held = self._profiles.get((space, ident))
                if held is not None and held[0] == version:
                    del self._profiles[space, ident]
                    self._emit_adverts(key, space, self._ads(space).end(ident))

    def held_subs(self) -> list[Subscribe]:
        """Every subscription held here (not relayed), by (space, id). O(n log n)."""
        return [self._subs[key][1] for key in sorted(self._subs)]

    def held_sub(self, space: str, ident: str) -> Subscribe | None:
        """The version of a subscription held here (not relayed), if any."""
        held = self._subs.get((space, ident))
        return None if held is None else held[1]

    # -- subscriptions -------------------------------------------------------

    def _plain(self, key: Key, rec: Subscribe) -> None:
        """A subscribe held here; a version of its id held at the selecting site ends
        there (`leave`), and this one's pairs begin `changed` (docs/DELIVERY.md §6)."""
        old = self._unrelocate(rec.space, rec.id)
        if old is None:
            self.subscribe(key, rec)
            return
        # (sent even if the version relayed has expired: the selecting site may hold an
        # older one, where it refused the last; it ends what it holds, if anything)
        self._send("leave", key, rec.space, (rec.id,))
        self.subscribe(key, rec, Arrive(rec) if old.valid_to >= key.ts else None)

    def _relay(self, key: Key, rec: Subscribe, handle: Any) -> None:
        """A subscribe with delivery fields: relayed to its space's selecting site; a
        version of its id held here ends, `changed` (its new one begins there so)."""
        old = self._drop_sub(rec.space, rec.id)
        if old is not None:
            self.out.append((key.next(LEAVE), ("sub", Leave(rec.space, rec.id, rec.ts))))
            self._interest(key, "remove", old)
        self._relocated[rec.space, rec.id] = rec
        self._relocated_by.setdefault(rec.subscriber, set()).add((rec.space, rec.id))
        target = self.selecting(rec.space)
        self.relayed.append(
            Member(
                "subscribe",
                rec.space,
                (rec.id,),
                self.site,
                target,
                key,
                to_state(rec),
                replaces=old is not None,
                handle=handle,
            )
        )

    def _unrelocate(self, space: str, ident: str) -> Subscribe | None:
        """Forget the version of an id last relayed; it, if there was one."""
        rec = self._relocated.pop((space, ident), None)
        if rec is None:
            return None
        mine = self._relocated_by[rec.subscriber]
        mine.discard((space, ident))
        if not mine:
            del self._relocated_by[rec.subscriber]
        return rec

    def _send(self, op: str, key: Key, space: str, ids: tuple[str, ...], home: str = "") -> None:
        target = self.selecting(space)
        self.relayed.append(Member(op, space, ids, home or self.site, target, key))

    def subscribe(self, key: Key, rec: Subscribe, item: Any = None) -> None:
        """Hold a subscription, its matcher item `item` (the record itself by default)."""
        self.out.append((key, ("sub", rec if item is None else item)))
        old = self._drop_sub(rec.space, rec.id)
        self._interest(key, "add", rec)
        if old is not None:
            self._interest(key, "remove", old)
        self._hold_sub(key, rec)

    def _hold_sub(self, key: Key, rec: Subscribe) -> None:
        self._version += 1
        self._subs[rec.space, rec.id] = (self._version, rec)
        self._by_subscriber.setdefault(rec.subscriber, set()).add((rec.space, rec.id))
        if rec.valid_to != OPEN:
            end = _end(rec.valid_to, key)
            heapq.heappush(self._timers, (end, 0, rec.space, rec.id, self._version))

    def _drop_sub(self, space: str, ident: str) -> Subscribe | None:
        old = self._subs.pop((space, ident), None)
        if old is None:
            return None
        mine = self._by_subscriber[old[1].subscriber]
        mine.discard((space, ident))
        if not mine:
            del self._by_subscriber[old[1].subscriber]
        return old[1]

    def _unsubscribe(self, key: Key, rec: Unsubscribe) -> None:
        self.unsubscribe(key, rec.space, rec.id, rec)

    def unsubscribe(self, key: Key, space: str, ident: str, item: Any) -> None:
        """Drop a subscription; `item` for the matcher (an `Unsubscribe`, or a `Leave`)."""
        self.out.append((key, ("sub", item)))
        old = self._drop_sub(space, ident)
        if old is not None:
            self._interest(key, "remove", old)

    def _interest(self, key: Key, op: str, rec: Subscribe) -> None:
        for conj in routing_filters(rec):
            self.out.append((key, ("interest", op, rec.space, conj)))

    # -- profiles ------------------------------------------------------------

    def _publish(self, key: Key, rec: Publish, handle: Any) -> None:
        if self.advertisements:
            under = self._ads(rec.space).admitting(rec)
            if not under:
                self.refused.append((handle, outside_reason(rec, self.site)))
                return
            self._end_profile(key, rec.space, rec.id)
            self._ads(rec.space).hold(rec.id, under)
        self._hold_profile(key, rec)
        self.accepted.append((rec.space, key))
        self.out.append((key, ("pub", rec)))

    def _hold_profile(self, key: Key, rec: Publish) -> None:
        """Keep the live version of an own profile (what a move hands over), until it
        is replaced, retracted, moved away or expires."""
        self._version += 1
        self._profiles[rec.space, rec.id] = (self._version, rec)
        if rec.valid_to != OPEN:
            end = _end(rec.valid_to, key)
            heapq.heappush(self._timers, (end, 1, rec.space, rec.id, self._version))

    def _retract(self, key: Key, rec: Retract) -> None:
        self.out.append((key, ("pub", rec)))
        self._end_profile(key, rec.space, rec.id)

    def _end_profile(self, key: Key, space: str, ident: str) -> None:
        if self._profiles.pop((space, ident), None) is not None:
            self._emit_adverts(key, space, self._ads(space).end(ident))

    # -- advertisements ------------------------------------------------------

    def _ads(self, space: str) -> LocalAdverts:
        ads = self._adverts.get(space)
        if ads is None:
            ads = self._adverts[space] = LocalAdverts()
        return ads

    def _emit_adverts(self, key: Key, space: str, changes: list) -> None:
        if self.advertisements:
            for op, conj in changes:
                self.out.append((key, ("advert", op, space, conj)))

    # -- moves (ROUTING §5, `moves`) ------------------------------------------

    def _gone(self, record: Any) -> str | None:
        """Why a record of a client that moved away from this site is refused, if it is
        one: from the move on, the client's records go to its new site."""
        if not self._left:
            return None
        if isinstance(record, Subscribe):
            client, who = (
                ("subscription", "", record.subscriber),
                f"subscriber {record.subscriber!r}",
            )
        elif isinstance(record, Publish | Retract):
            client = ("profile", record.space, record.id)
            who = f"profile {record.id!r} in space {record.space!r}"
        else:
            return None
        left = self._left.get(client)
        if left is None:
            return None
        return (
            f"{who} moved from site {self.site!r} to site {left[0]!r} at ts {left[1]}: "
            f"publish its records at {left[0]!r} (or move it back here first)"
        )

    def hand_out(self, key: Key, ask: Ask) -> Handover:
        """The answer to a move away from this site at `key`: the client's live records,
        taken out of this source (a subscriber's `Marker` and her filters' removal,
        just after the key, go out with them), or a refusal. O(the client's records)."""
        self.release(key)
        client = (ask.kind, ask.space, ask.client)
        if self._moved.get(client) == key.ts:
            return _refusal(
                ask,
                f"{_who(ask)} moves twice at ts {key.ts}: a client moves at "
                "most once a millisecond",
            )
        if ask.kind == "subscription":
            held = sorted(self._by_subscriber.get(ask.client, ()))
            away = [
                (space, ident)
                for space, ident in sorted(self._relocated_by.get(ask.client, ()))
                if self._relocated[space, ident].valid_to >= key.ts
            ]
            if not held and not away:
                return _refusal(
                    ask,
                    f"nothing to move: {_who(ask)} has no live subscription at "
                    f"site {self.site!r} at ts {key.ts} (a move back must come "
                    "at a later ts than the move there)",
                )
            records = [self._subs[h][1] for h in held]
            for space, ident in held:
                self._drop_sub(space, ident)
            # (all she relayed, live or not here: the selecting site knows what it holds,
            # and evicts at the move what expired before it, records for this site)
            relayed_ids = sorted(self._relocated_by.get(ask.client, ()))
            relayed = [self._unrelocate(space, ident) for space, ident in relayed_ids]
            for space in sorted({space for space, _ in relayed_ids}):
                ids = tuple(ident for s, ident in relayed_ids if s == space)
                self._send("rehome", key, space, ids, ask.target)
            for space in sorted({r.space for r in records}):
                ids = tuple(r.id for r in records if r.space == space)
                self.out.append((key, ("sub", SubsMoved(space, ids, (), key.ts))))
            self.out.append((key, ("sub", Marker(ask.client, ask.target, key.ts))))
            for rec in records:
                self._interest(key.next(1), "remove", rec)
            records += relayed
        else:
            held_pub = self._profiles.get((ask.space, ask.client))
            if held_pub is None:
                return _refusal(
                    ask,
                    f"nothing to move: {_who(ask)} is not live at site "
                    f"{self.site!r} at ts {key.ts} (never published there, "
                    "retracted, expired, or moved on)",
                )
            records = [held_pub[1]]
            self._end_profile(key, ask.space, ask.client)
            self.out.append((key, ("pub", ProfileMoved(held_pub[1], self.site, ask.target))))
        self._moved[client] = key.ts
        self._left[client] = (ask.target, key.ts)
        return Handover(
            ask.kind,
            ask.client,
            ask.space,
            ask.origin,
            ask.target,
            key,
            tuple(to_state(r) for r in records),
        )

    def hand_in(self, key: Key, move: Move, handover: Handover, handle: Any) -> None:
        """A move to this site at `key`, with the old site's answer: hold the client's
        records as this site's own, or refuse the move (a dead letter)."""
        if handover.refused is not None:
            self.refused.append((handle, handover.refused))
            return
        self._moved[move.client_key] = key.ts
        self._left.pop(move.client_key, None)
        records = [from_state(text) for text in handover.records]
        if move.kind == "subscription":
            relayed = [r for r in records if r.options is not None and self.selecting]
            records = [r for r in records if r not in relayed]
            for rec in relayed:  # (held at their space's selecting site, which knows)
                assert isinstance(rec, Subscribe)
                self._relocated[rec.space, rec.id] = rec
                self._relocated_by.setdefault(rec.subscriber, set()).add((rec.space, rec.id))
            for rec in records:
                assert isinstance(rec, Subscribe)
                old = self._drop_sub(rec.space, rec.id)
                if old is not None:
                    self._interest(key, "remove", old)
                self._interest(key, "add", rec)
                self._hold_sub(key, rec)
            for space in sorted({r.space for r in records}):
                mine = tuple(r for r in records if r.space == space)
                self.out.append((key, ("sub", SubsMoved(space, (), mine, key.ts))))
            return
        (pub,) = records
        assert isinstance(pub, Publish)
        self._end_profile(key, pub.space, pub.id)
        if self.advertisements:
            ads = self._ads(pub.space)
            under = ads.admitting(pub)
            if not under:
                under, changes = ads.carry(pub)
                self._emit_adverts(key, pub.space, changes)
            ads.hold(pub.id, under)
        self._hold_profile(key, pub)
        self.out.append((key, ("pub", ProfileMoved(pub, move.origin, self.site))))

    def refuse(self, handle: Any, reason: str) -> None:
        self.refused.append((handle, reason))


def _who(ask: Ask) -> str:
    if ask.kind == "subscription":
        return f"subscriber {ask.client!r}"
    return f"profile {ask.client!r} in space {ask.space!r}"


def _refusal(ask: Ask, reason: str) -> Handover:
    return Handover(ask.kind, ask.client, ask.space, ask.origin, ask.target, ask.key, (), reason)
