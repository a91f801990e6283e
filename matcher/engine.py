"""The engine: records in, match records out (SEMANTICS §3–§5).

`SpaceMatcher` is one state key (a space, or a cell of a sharded space): the
held subscriptions and profiles, their DoubleForest, and the collection
synchronization of §4. Which pairs held before a change is not stored: it is
asked of the forest with the old version, so state is just the held records.
`Engine` holds every key, admits each batch (`matcher.admission`: decode,
dead letters, lateness, state keys, order) and moves the watermark; the Spark
job drives `SpaceMatcher` directly from its stateful operator, `tsm replay`
drives `Engine`.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import pickle
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from matcher.admission import Input, dead_letter, decode_input, in_order, late_letter, state_keys
from matcher.delivery.histograms import Histograms
from matcher.delivery.layer import Cause, Delivery
from matcher.delivery.options import disagreement
from matcher.double_forest import DoubleForest
from matcher.errors import SettingError
from matcher.events import event_dict, event_dicts
from matcher.held import Held
from matcher.records import (
    OPEN,
    Publish,
    Record,
    Subscribe,
    Unsubscribe,
    to_state,
    version_of,
)
from matcher.sharding import Sharding, ShardSpec, span_of
from matcher.times import MAX_LATENESS_MS
from matcher.watermark import EventClock, event_time

# An event keyed by the id of the pair's other side (the profile of a
# subscription's events, and the reverse; with a subscribe's, which of a pair's two
# events it is): its rank among one record's events.
Keyed = tuple[str | tuple[str, int], Any]
# A pair change of a subscription with delivery fields, held back for `Delivery`.
_HELD_BACK = object()
# The events `Delivery` makes of a step rank after the step's own: by keys past any id
# (`matcher.routing.replay` reads them so).
DELIVERY_RANK = "\U0010ffff"
_LAST = DELIVERY_RANK


def _due(heap: list[tuple[float, int, str, str]], until: float) -> list[tuple]:
    """The items of a heap before `until`, unordered, visiting only those (and their
    children): what a run of records will evict, without popping it yet."""
    out, stack = [], [0] if heap and heap[0][0] < until else []
    while stack:
        i = stack.pop()
        out.append(heap[i])
        stack += [c for c in (2 * i + 1, 2 * i + 2) if c < len(heap) and heap[c][0] < until]
    return out


def _runs(records: list[Record]) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of consecutive records of one kind."""
    start = 0
    while start < len(records):
        end = start + 1
        while end < len(records) and records[end].kind == records[start].kind:
            end += 1
        yield start, end
        start = end


def holds(sub: Subscribe, pub: Publish) -> bool:
    """The pair relation of §2 and §3, tested directly (no forest)."""
    if max(sub.valid_from, pub.valid_from) > min(sub.valid_to, pub.valid_to):
        return False
    if sub.relation == "covers":
        return any(c.covers(pub.profile) for c in sub.predicate)
    return any(c.overlaps(pub.profile) for c in sub.predicate)


class SpaceMatcher:
    """One state key's DoubleForest and the change events of its pairs.

    An event is a dict of `matcher.events.MATCH_FIELDS`, or whatever the
    writer given to `writing` makes of the pair (the job: the output record's
    bytes); the engine never reads an event back."""

    _writer: Callable[..., Any] | None = None
    # Delivery policies (docs/DELIVERY.md): the key's `Delivery` once it holds a
    # subscription with delivery fields (in a sharded space, only the first cell
    # has one); each group's held members; whether this first cell indexes every
    # profile (it does once it holds such a subscription). Class defaults: a
    # snapshot from before them has none.
    delivery: Delivery | None = None
    groups: dict[str, set[str]] | None = None
    _whole = False

    def __init__(
        self, space: str, key: str | None = None, shard: tuple[ShardSpec, int] | None = None
    ):
        self.space = space
        self.key = key or space
        self.shard = shard
        self.forest = DoubleForest()
        self.subs: dict[str, Held] = {}
        self.profiles: dict[str, Held] = {}
        self._expiry: list[tuple[float, int, str, str]] = []
        # held-set changes since drained: (kind, id, the record's `to_state` or None)
        self._changes: list[tuple[str, str, str | None]] = []
        # id(record) -> (record, the other side's held items it holds with, that
        # side's `_drops` then), asked of the forest for many records at once
        self._prefetched: dict[int, tuple[Record, dict[str, Held], int]] = {}
        # held (subscriptions, profiles) dropped so far: a prefetched answer (items
        # of one side) is current while that side's count stays
        self._drops = [0, 0]

    # -- state --------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.subs) + len(self.profiles)

    def drain_changes(self) -> list[tuple[str, str, str | None]]:
        """The held-set changes since the last drain, then the delivery state's
        (kind "delivery": its item key and JSON, `Delivery.drain_changes`)."""
        changes, self._changes = self._changes, []
        if self.delivery is not None:
            drained = self.delivery.drain_changes(self.subs, self.profiles)
            changes += [("delivery", key, text) for key, text in drained]
        return changes

    def dump(self) -> bytes:
        """A compact snapshot of everything held, forests included."""
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def load(blob: bytes) -> SpaceMatcher:
        return pickle.loads(blob)

    def __getstate__(self):
        state = {**self.__dict__, "_changes": [], "_prefetched": {}, "_drops": [0, 0]}
        for transient in ("_writer", "_raw", "_refused", "_histograms"):
            state.pop(transient, None)
        return state

    def histograms(self) -> Histograms:
        """The live subscriptions' histograms (docs/DELIVERY.md §7): made from the
        held subscriptions on the first call (O(held)), kept current after."""
        made = self.__dict__.get("_histograms")
        if made is None:
            made = self._histograms = Histograms()
            for held in self.subs.values():
                made.add(held.record.id, held.record.predicate)
        return made

    def forget_changes(self) -> None:
        """Drop the held-set changes since the last drain, the delivery state's too: for
        an owner that keeps no change log (`Engine`, a network site), which would
        otherwise hold every change of its whole input. O(1)."""
        self._changes = []
        if self.delivery is not None:
            self.delivery.forget_changes()

    def drain_refused(self) -> list[tuple[Record, str]]:
        """The subscribes refused since the last drain, each with its reason (a
        group's members disagree: docs/DELIVERY.md §1): dead letters for the caller."""
        return self.__dict__.pop("_refused", [])

    @contextlib.contextmanager
    def writing(self, writer: Callable[[str, str, Held, Held, int], Any]) -> Iterator[None]:
        """Within, events are `writer(event, reason, sub, prof, ts)` instead of
        dicts (`matcher.events.MatchWriter`: the output records themselves)."""
        self._writer = writer
        try:
            yield
        finally:
            del self._writer

    def next_expiry(self) -> float | None:
        """The earliest valid_to held or delivery timer (for an event-time timer), or None."""
        while self._expiry and not self._current(self._expiry[0]):
            heapq.heappop(self._expiry)
        due = self.delivery.next_due() if self.delivery is not None else None
        if not self._expiry:
            return due
        return self._expiry[0][0] if due is None else min(due, self._expiry[0][0])

    def _due_before(self, ts: float) -> bool:
        """Whether an expiry or a delivery timer falls before `ts`."""
        if self._expiry and self._expiry[0][0] < ts:
            return True
        due = self.delivery.next_due() if self.delivery is not None else None
        return due is not None and due < ts

    def _current(self, item: tuple[float, int, str, str]) -> bool:
        _, kind, ident, version = item
        held = (self.subs if kind == 0 else self.profiles).get(ident)
        return held is not None and held.version == version

    # -- changes ------------------------------------------------------------

    def apply(self, record: Record) -> list[Any]:
        """Evict what expired before the record's ts, then apply it."""
        return self.expire(record.ts) + [e for _, e in self._events(record)]

    def expire(self, until: float) -> list[Any]:
        """Evict everything whose valid_to is before `until`; `unmatch`/`expired`."""
        return [event for _, event in self.expire_ranked(until)]

    def restore(self, kind: str, ident: str, record: Subscribe | Publish | None) -> None:
        """Set one held record as a state store's change log says, without
        matching or emitting anything (the store is rebuilding this state)."""
        table = self.subs if kind == "subscription" else self.profiles
        held = table.get(ident)
        if held is not None:
            self._drop(table, kind, held)
        if record is not None:
            self._keep(table, kind, record)

    def restore_delivery(self, key: str, text: str | None) -> None:
        """Set one item of the delivery state as a change log says (`drain_changes`)."""
        if self.delivery is None:
            self.delivery = Delivery()
        self.delivery.restore(key, text)

    def apply_batch(self, records: list[Record]) -> list[Any]:
        """Apply records in order, matching each run of consecutive records
        of one kind as one batch against the forest (the other side does not
        change within such a run, except for expiries, which are honoured).

        `apply_batch_ranked` without the ranks."""
        return [event for events in self.iter_batch(records) for event in events]

    def iter_batch(self, records: list[Record]) -> Iterator[list[Any]]:
        """`apply_batch`, as each record's events (its expiries first) are made:
        the job's path, which sends them on while it matches the rest (a batch
        of profiles makes tens of events per profile, none of them ranked)."""
        for start, end in _runs(records):
            self._prefetch(records[start:end])
            for record in records[start:end]:
                out = []
                if self._due_before(record.ts):
                    out = self.expire(record.ts)
                out += [e for _, e in self._events(record)]
                yield out
            self._prefetched.clear()

    def apply_batch_ranked(self, records: list[Record]) -> list[tuple[tuple, dict[str, Any]]]:
        """`apply_batch`, each event ranked by (record index, rank in `apply_ranked`)."""
        out: list[tuple[tuple, dict[str, Any]]] = []
        for start, end in _runs(records):
            self._prefetch(records[start:end])
            for index in range(start, end):
                out += [((index, *r), e) for r, e in self.apply_ranked(records[index])]
            self._prefetched.clear()
        return out

    def _prefetch(self, run: list[Record]) -> None:
        """Match every upsert of a run, the version each one replaces, and what
        of its kind expires before its last record, in one forest query. (The
        other side does not change within the run, but for drops.)"""
        queries: list[Subscribe | Publish] = []
        latest: dict[str, Subscribe | Publish] = {}
        for record in run:
            if isinstance(record, Subscribe | Publish):
                table = self.subs if record.kind == "subscription" else self.profiles
                old = latest.get(record.id)
                if old is None and record.id in table:
                    old = table[record.id].record
                if old is not None:
                    queries.append(old)
                queries.append(record)
                latest[record.id] = record
        if not queries:
            return
        code = 0 if queries[0].kind == "subscription" else 1
        until = max(record.ts for record in run)
        queries += self._held_due(_due(self._expiry, until), code)
        self._prefetch_queries(queries)

    def _held_due(self, items: list[tuple[float, int, str, str]], code: int) -> list[Record]:
        """The indexed held records of the expiry `items` of kind `code` (0: subscriptions)
        that are current and not prefetched yet."""
        table = self.subs if code == 0 else self.profiles
        out = []
        for item in items:
            if item[1] == code and self._current(item):
                held = table[item[2]]
                if held.slot is not None and id(held.record) not in self._prefetched:
                    out.append(held.record)
        return out

    def _prefetch_queries(self, queries: list[Subscribe | Publish]) -> list[int]:
        """Ask the forest what each query (all of one kind) holds with, in one query;
        the keys it added to `_prefetched`."""
        if len(queries) < 2:
            return []
        if queries[0].kind == "subscription":
            qi, slots = self.forest.match_subscriptions(
                [(r.predicate, r.relation == "covers", r.valid_from, r.valid_to) for r in queries]
            )
            table, handles = self.profiles, self.forest.profiles.handles
        else:
            qi, slots = self.forest.match_profiles(
                [r.profile for r in queries], [(r.valid_from, r.valid_to) for r in queries]
            )
            table, handles = self.subs, self.forest.subs.handles
        # (pairs come grouped by query: each query's dict is made from its slice)
        ids = list(map(handles.__getitem__, slots.tolist()))
        helds = list(map(table.__getitem__, ids))
        cut = np.searchsorted(qi, np.arange(len(queries) + 1)).tolist()
        drops = self._drops[table is self.profiles]
        for q, record in enumerate(queries):
            a, b = cut[q], cut[q + 1]
            found = dict(zip(ids[a:b], helds[a:b], strict=True))
            self._prefetched[id(record)] = (record, found, drops)
        return list(map(id, queries))

    def _prefetched_for(self, record: Record, table: dict[str, Held]) -> dict[str, Held] | None:
        """The prefetched answer for a record, less what has expired since."""
        hit = self._prefetched.get(id(record))
        if hit is None or hit[0] is not record:
            return None
        if hit[2] == self._drops[table is self.profiles]:  # none of that side dropped since
            return hit[1]
        return {k: h for k, h in hit[1].items() if table.get(k) is h}

    def apply_ranked(self, record: Record) -> list[tuple[tuple, dict[str, Any]]]:
        """`apply`, each event with its rank: the position it has in an
        unsharded run's output for this record, so that the cells of a
        sharded space can be merged back into exactly that order."""
        return self.expire_ranked(record.ts) + [((1, o), e) for o, e in self._events(record)]

    def _events(self, record: Record) -> list[Keyed]:
        """Apply one record (what expired before it already evicted): its events."""
        if isinstance(record, Subscribe):
            return self._subscribe(record)
        if isinstance(record, Publish):
            old = self.profiles.get(record.id)
            events = self._publish(record)
            reason = "changed" if old else "new-profile"
            return self._deliver(Cause("profile", record.id, old, reason, record.ts), events)
        if isinstance(record, Unsubscribe):
            held = self.subs.get(record.id)
            if held is None:
                return []
            events = self._end_sub(held, "unsubscribe", record.ts)
            cause = Cause("subscription", record.id, held, "unsubscribe", record.ts, gone=True)
            return self._deliver(cause, events)
        held = self.profiles.get(record.id)
        if held is None:
            return []
        events = self._end_profile(held, "retract", record.ts)
        cause = Cause("profile", record.id, held, "retract", record.ts, gone=True)
        return self._deliver(cause, events)

    # -- delivery policies (docs/DELIVERY.md) ---------------------------------

    def _deliver(
        self, cause: Cause, events: list[Keyed], *, tuple_keys: bool = False, first: bool = False
    ) -> list[Keyed]:
        """A step's events, the pair changes held back for `Delivery` replaced by
        what it makes of them (ranked after the step's own events; `first`: before
        every event of the record, keyed by profile id)."""
        if self.delivery is None:
            return events
        raw = self.__dict__.pop("_raw", [])
        if raw:
            events = [keyed for keyed in events if keyed[1] is not _HELD_BACK]
        made = self.delivery.step(cause, raw, self.subs, self.profiles, self._make)
        mark = "" if first else _LAST
        if tuple_keys:
            return events + [((mark, n), e) for n, e in enumerate(made)]
        return events + list(zip(_ranks(mark, len(made)), made, strict=True))

    def _make(self, items: list[tuple[str, str, Held, Held]], ts: int) -> list[Any]:
        """The delivery layer's events `(event, reason, sub, prof)` at `ts` as the writer
        (or `event_dicts`) makes them, never held back, in order."""
        return _written_by_profile(items, lambda e, r, subs, p: self._made(e, r, subs, p, ts))

    def _disagreement(self, rec: Subscribe) -> str | None:
        """Why a subscribe's `delivery` is refused (a held member of its group other
        than the one it replaces has another policy), or None."""
        options = rec.options
        if options is None or options.group is None or not self.groups:
            return None
        # (the held members agree with each other: any one of them speaks for all)
        for member in self.groups.get(options.group, ()):
            if member == rec.id:
                continue
            return disagreement(options, self.subs[member].record.options)
        return None

    def _first_cell(self) -> bool:
        return self.shard is None or self.shard[1] == 0

    def expire_ranked(self, until: float) -> list[tuple[tuple, dict[str, Any]]]:
        out: list[tuple[tuple, dict[str, Any]]] = []
        due = []
        while self._expiry and self._expiry[0][0] < until:
            due.append(heapq.heappop(self._expiry))
        # What each evicted record held with, asked of the forest at once per kind
        # (eviction only drops: a prefetched answer less the drops is current).
        added = self._prefetch_queries(self._held_due(due, 0))
        added += self._prefetch_queries(self._held_due(due, 1))
        at = 0
        while True:
            # (delivery timers due at a time come before the expiries at that time)
            timer = self.delivery.next_due() if self.delivery is not None else None
            if timer is not None and timer < until and (at == len(due) or timer <= due[at][0]):
                made = self.delivery.fire(until, self.subs, self.profiles, self._make)
                out += [((0, timer, -1, "", n), e) for n, e in enumerate(made)]
                continue
            if at == len(due):
                break
            item = due[at]
            at += 1
            if not self._current(item):
                continue
            valid_to, kind, ident, _ = item
            if kind == 0:
                held = self.subs[ident]
                events = self._end_sub(held, "expired", int(valid_to))
            else:
                held = self.profiles[ident]
                events = self._end_profile(held, "expired", int(valid_to))
            name = "subscription" if kind == 0 else "profile"
            cause = Cause(name, ident, held, "expired", int(valid_to), gone=True)
            events = self._deliver(cause, events)
            out += [((0, valid_to, kind, ident, o), e) for o, e in events]
        for key in added:
            self._prefetched.pop(key, None)  # (a record due twice was asked twice)
        return out

    def _keep(self, table: dict[str, Held], kind: str, record: Subscribe | Publish) -> Held:
        """Hold `record` (indexed in the forest if this cell owns it), log the change."""
        state = to_state(record)
        held = Held(record, version_of(state), None)
        owned = True
        if self.shard is not None:
            spec, cell = self.shard
            held.span = span_of(spec.attribute, record)
            owned = cell in spec.cells_of(held.span)
        options = record.options if kind == "subscription" else None
        if kind == "subscription" and "_histograms" in self.__dict__:
            self._histograms.add(record.id, record.predicate)
        if options is not None:
            self._join(record.id, options)
            # (a sharded space's pairs of such a subscription are its first cell's)
            owned = self._first_cell()
        elif self._whole and kind == "profile":
            owned = True
        if owned:
            r = record
            if isinstance(r, Subscribe):
                covers = r.relation == "covers"
                held.slot = self.forest.add_subscription(
                    r.id, r.predicate, covers, r.valid_from, r.valid_to
                )
            else:
                held.slot = self.forest.add_profile(r.id, r.profile, r.valid_from, r.valid_to)
        table[record.id] = held
        self._changes.append((kind, record.id, state))
        if record.valid_to != OPEN:
            code = 0 if kind == "subscription" else 1
            heapq.heappush(self._expiry, (record.valid_to, code, record.id, held.version))
        return held

    def _join(self, ident: str, options: Any) -> None:
        """Set up delivery for a held subscription with delivery fields: its group's
        index, and in the delivering cell the `Delivery` (a first cell of a sharded
        space indexes every profile from now on, so that it sees all their pairs)."""
        if options.group is not None:
            if self.groups is None:
                self.groups = {}
            self.groups.setdefault(options.group, set()).add(ident)
        if not self._first_cell():
            return
        if self.delivery is None:
            self.delivery = Delivery()
        if self.shard is not None and not self._whole:
            self._whole = True
            for held in self.profiles.values():
                if held.slot is None:
                    r = held.record
                    held.slot = self.forest.add_profile(r.id, r.profile, r.valid_from, r.valid_to)
            self._prefetched.clear()  # (answers asked before these profiles were indexed)

    def _drop(self, table: dict[str, Held], kind: str, held: Held) -> None:
        options = held.record.options if kind == "subscription" else None
        if kind == "subscription" and "_histograms" in self.__dict__:
            self._histograms.remove(held.record.id)
        if options is not None and options.group is not None:
            members = self.groups[options.group]
            members.discard(held.record.id)
            if not members:
                del self.groups[options.group]
        del table[held.record.id]
        self._drops[table is self.profiles] += 1
        self._changes.append((kind, held.record.id, None))
        if held.slot is not None:
            if kind == "subscription":
                self.forest.remove_subscription(held.slot)
            else:
                self.forest.remove_profile(held.slot)

    def _profiles_of(self, sub: Subscribe, held: Held | None) -> dict[str, Held]:
        """Indexed profiles the subscription holds with (forest query)."""
        if held is not None and held.slot is None:
            return {}
        prefetched = self._prefetched_for(sub, self.profiles)
        if prefetched is not None:
            return prefetched
        query = (sub.predicate, sub.relation == "covers", sub.valid_from, sub.valid_to)
        _, slots = self.forest.match_subscriptions([query])
        handles = self.forest.profiles.handles
        return {handles[s]: self.profiles[handles[s]] for s in slots.tolist()}

    def _subs_of(self, pub: Publish, held: Held | None) -> dict[str, Held]:
        if held is not None and held.slot is None:
            return {}
        prefetched = self._prefetched_for(pub, self.subs)
        if prefetched is not None:
            return prefetched
        _, slots = self.forest.match_profiles([pub.profile], [(pub.valid_from, pub.valid_to)])
        handles = self.forest.subs.handles
        return {handles[s]: self.subs[handles[s]] for s in slots.tolist()}

    def _owns(self, sub: Held, prof: Held) -> bool:
        if self.shard is None:
            return True
        if sub.record.options is not None:
            return self.shard[1] == 0
        spec, cell = self.shard
        return spec.cell(max(sub.span[0], prof.span[0])) == cell

    def _subscribe(self, rec: Subscribe) -> list[Keyed]:
        """A subscribe's events (`_upsert_sub`), with its delivery policies: refused
        where its group disagrees; a subscription that gains or loses delivery
        fields is ended (`unmatch`, `changed`) and made again (docs/DELIVERY.md §6)."""
        problem = self._disagreement(rec)
        if problem is not None:
            self.__dict__.setdefault("_refused", []).append((rec, problem))
            return []
        old = self.subs.get(rec.id)
        if old is not None and (old.record.options is None) != (rec.options is None):
            return self._end_as_changed(old, rec.ts) + self._begin_as_changed(rec)
        events = self._upsert_sub(rec, old, "changed" if old else "new-subscription")
        cause = Cause("subscription", rec.id, old, "changed" if old else "new-subscription", rec.ts)
        return self._deliver(cause, events, tuple_keys=True)

    def _end_as_changed(self, old: Held, ts: int) -> list[Keyed]:
        """The first half of a subscribe whose version gains or loses delivery fields:
        the old version ends, `unmatch` (`changed`) for each pair it had delivered
        (its delivery records ranked before the record's own)."""
        ended = [((pid, 0), e) for pid, e in self._end_sub(old, "changed", ts)]
        cause = Cause("subscription", old.record.id, old, "changed", ts, gone=True)
        return self._deliver(cause, ended, tuple_keys=True, first=True)

    def _begin_as_changed(self, rec: Subscribe) -> list[Keyed]:
        """The second half: the new version's pairs begin as a new subscription's
        would, reason `changed`."""
        events = self._upsert_sub(rec, None, "changed")
        cause = Cause("subscription", rec.id, None, "changed", rec.ts)
        return self._deliver(cause, events, tuple_keys=True)

    def leave_ranked(self, ident: str, ts: int) -> list[tuple[tuple, dict[str, Any]]]:
        """A network's half of such a subscribe where the new version is held at another
        site (`matcher.routing`, docs/DELIVERY.md §9): evict what expired before `ts`,
        then end the held version as `_end_as_changed` does; ranked as `apply_ranked`.
        Nothing if `ident` is not held. O(its pairs)."""
        out = self.expire_ranked(ts)
        held = self.subs.get(ident)
        if held is not None:
            out += [((1, o), e) for o, e in self._end_as_changed(held, ts)]
        return out

    def arrive_ranked(self, rec: Subscribe) -> list[tuple[tuple, dict[str, Any]]]:
        """The other half, where the old version was held at another site: evict what
        expired before its ts, then hold `rec` as `_begin_as_changed` does (a version
        of the id held here is replaced silently). Ranked as `apply_ranked`."""
        out = self.expire_ranked(rec.ts)
        held = self.subs.get(rec.id)
        if held is not None:
            self._drop(self.subs, "subscription", held)
        return out + [((1, o), e) for o, e in self._begin_as_changed(rec)]

    def _upsert_sub(self, rec: Subscribe, old: Held | None, reason: str) -> list[Keyed]:
        """§4 for a subscribe: `match` where a pair begins to hold, `unmatch` where one
        ends, `update` where one holds on and its `valid_to` moves; a new subscriber
        is sent every pair (`match`) and the old one told of each it held
        (`unmatch`). A subscription sent again unchanged makes nothing. Each event is
        keyed (profile id, 0 for the old subscriber's / 1 for the new one's)."""
        before = self._profiles_of(old.record, old) if old else {}
        if old:
            self._drop(self.subs, "subscription", old)
        new = self._keep(self.subs, "subscription", rec)
        after = self._profiles_of(rec, new)
        handed_over = old is not None and old.record.subscriber != rec.subscriber
        out = []
        for pid in sorted(after.keys() | before.keys()):
            prof = before.get(pid)
            if prof is not None and self._owns(old, prof):
                # (the forest found every pair of the new version if it is indexed here)
                now = pid in after if new.slot is not None else holds(rec, prof.record)
                if handed_over or not now:
                    out.append(((pid, 0), self._event("unmatch", reason, old, prof, rec.ts)))
            prof = after.get(pid)
            if prof is None or not self._owns(new, prof):
                continue
            was = (
                pid in before
                if old and old.slot is not None
                else old is not None and holds(old.record, prof.record)
            )
            if handed_over or not was:
                out.append(((pid, 1), self._event("match", reason, new, prof, rec.ts)))
            elif min(old.record.valid_to, prof.record.valid_to) != min(
                rec.valid_to, prof.record.valid_to
            ):
                out.append(((pid, 1), self._event("update", reason, new, prof, rec.ts)))
        return out

    def _publish(self, rec: Publish) -> list[Keyed]:
        old = self.profiles.get(rec.id)
        before = self._subs_of(old.record, old) if old else {}
        if old:
            self._drop(self.profiles, "profile", old)
        new = self._keep(self.profiles, "profile", rec)
        after = self._subs_of(rec, new)
        if old is None:  # (most records of a stream: tens of events each)
            return self._profile_events("match", "new-profile", after, new, rec.ts)
        pairs = []  # (subscription id, event, sub, the profile's version it is of)
        for sid in sorted(after.keys() | before.keys()):
            if sid in after:
                sub = after[sid]
                if not self._owns(sub, new):
                    continue
                was = sid in before if old.slot is not None else holds(sub.record, old.record)
                pairs.append((sid, "update" if was else "match", sub, new))
            else:
                sub = before[sid]
                if self._owns(sub, old) and not self._still(new, sub.record, rec):
                    pairs.append((sid, "unmatch", sub, old))
        return self._grouped(pairs, "changed", rec.ts)

    def _still(self, new: Held, sub: Subscribe, pub: Publish) -> bool:
        """Whether a pair that the forest did not find for the `new` version holds: it
        does not if that version is indexed here (the forest found all it holds with)."""
        return new.slot is None and holds(sub, pub)

    def _end_sub(self, held: Held, reason: str, ts: int) -> list[Keyed]:
        pairs = self._profiles_of(held.record, held)
        self._drop(self.subs, "subscription", held)
        return [
            (pid, self._event("unmatch", reason, held, prof, ts))
            for pid, prof in sorted(pairs.items())
            if self._owns(held, prof)
        ]

    def _end_profile(self, held: Held, reason: str, ts: int) -> list[Keyed]:
        pairs = self._subs_of(held.record, held)
        self._drop(self.profiles, "profile", held)
        return self._profile_events("unmatch", reason, pairs, held, ts)

    def _event(self, event: str, reason: str, sub: Held, prof: Held, ts: int) -> Any:
        if self.delivery is not None and sub.record.options is not None:
            self.__dict__.setdefault("_raw", []).append((event, reason, sub, prof))
            return _HELD_BACK
        if self._writer is not None:
            return self._writer(event, reason, sub, prof, ts)
        return event_dict(self.space, event, reason, sub, prof, ts)

    def _grouped(self, pairs: list[tuple[str, str, Held, Held]], reason: str, ts: int) -> list:
        """`(id, event, sub, prof)` as `(id, event record)`, in order, the records of each
        (event, profile) written at once (`_write`: an upserted profile's updates are the
        tracking workload's most records)."""
        records = _written_by_profile(
            [(event, reason, sub, prof) for _, event, sub, prof in pairs],
            lambda e, r, subs, p: self._write(e, r, subs, p, ts),
        )
        return [(pair[0], record) for pair, record in zip(pairs, records, strict=True)]

    def _profile_events(
        self, event: str, reason: str, subs: dict[str, Held], prof: Held, ts: int
    ) -> list[Keyed]:
        """`_event` of `prof` with each of `subs` (by id) whose pair this key owns, in id
        order, written at once (`_write`: a profile's tens of records)."""
        sids = sorted(subs)
        if self.shard is not None:
            sids = [sid for sid in sids if self._owns(subs[sid], prof)]
        held = list(map(subs.__getitem__, sids))
        return list(zip(sids, self._write(event, reason, held, prof, ts), strict=True))

    def _write(self, event: str, reason: str, subs: list[Held], prof: Held, ts: int) -> list:
        """`_event` of `prof` with each of `subs`, by the writer's `many` if it has one
        (the pair changes of subscriptions with delivery fields held back)."""
        if self.delivery is None:
            return self._made(event, reason, subs, prof, ts)
        held_back = [(event, reason, sub, prof) for sub in subs if sub.record.options is not None]
        if held_back:
            if len(held_back) == len(subs):
                self.__dict__.setdefault("_raw", []).extend(held_back)
                return [_HELD_BACK] * len(subs)
            return [self._event(event, reason, sub, prof, ts) for sub in subs]
        return self._made(event, reason, subs, prof, ts)

    def _made(self, event: str, reason: str, subs: list[Held], prof: Held, ts: int) -> list:
        """The records of `prof` with each of `subs`, by the writer's `many` if it has one,
        never held back."""
        if self._writer is None:
            return event_dicts(self.space, event, reason, subs, prof, ts)
        many = getattr(self._writer, "many", None)
        if many is not None:
            return many(event, reason, subs, prof, ts)
        return [self._writer(event, reason, sub, prof, ts) for sub in subs]


def _ranks(mark: str, n: int) -> list[str]:
    """The ranks of `n` delivery events after `mark`: `mark` and the event's place in
    nine digits (those of the first `_RANKS_KEPT` places made once per mark). O(n)."""
    ranks = _RANKS.setdefault(mark, [])
    while len(ranks) < min(n, _RANKS_KEPT):
        ranks.append(f"{mark}{len(ranks):09d}")
    return ranks[:n] + [f"{mark}{at:09d}" for at in range(len(ranks), n)]


_RANKS: dict[str, list[str]] = {}
_RANK = itemgetter(0)  # (a ranked event's rank)
_RANKS_KEPT = 4096


def _written_by_profile(
    items: list[tuple[str, str, Held, Held]],
    write: Callable[[str, str, list[Held], Held], list],
) -> list:
    """The records of `items` (`(event, reason, sub, prof)`), in order, `write` called
    once per (event, reason, profile) with its subscriptions in order: what a profile's
    records share is made once. O(items)."""
    if not items:
        return []
    event, reason, _, prof = items[0]
    if all(e == event and r == reason and p is prof for e, r, _, p in items):
        return write(event, reason, [item[2] for item in items], prof)
    groups: dict[tuple[str, str, int], tuple[list[int], list[Held], Held]] = {}
    for at, (event, reason, sub, prof) in enumerate(items):
        group = groups.get((event, reason, id(prof)))
        if group is None:
            group = groups[event, reason, id(prof)] = ([], [], prof)
        group[0].append(at)
        group[1].append(sub)
    out: list = [None] * len(items)
    for (event, reason, _), (places, subs, prof) in groups.items():
        for at, record in zip(places, write(event, reason, subs, prof), strict=True):
            out[at] = record
    return out


def input_partition(item: Input) -> Hashable:
    """The input partition an input comes from: its Kafka topic-partition, or its
    kind and file (each file of `tsm replay` is one)."""
    source = item.source
    if source.file is not None:
        return (item.kind, source.file)
    return (source.topic, source.partition)


@dataclass(frozen=True, slots=True)
class Output:
    topic: str  # "matches" | "deadletter"
    key: str | None
    value: dict[str, Any]


@dataclass
class Engine:
    """Every key's SpaceMatcher, fed batch by batch in the order of §5
    (`sharding` None: no space is sharded)."""

    lateness_ms: int = 0
    sharding: Sharding | None = None
    matchers: dict[str, SpaceMatcher] = field(default_factory=dict)
    # the largest time seen per input partition, and the watermark (`matcher.watermark`)
    clock: EventClock = field(default_factory=EventClock)

    def __post_init__(self) -> None:
        if self.sharding is None:
            self.sharding = Sharding()
        if not 0 <= self.lateness_ms <= MAX_LATENESS_MS:
            raise SettingError(
                f"lateness must be from 0 to {MAX_LATENESS_MS} ms, not {self.lateness_ms}"
            )

    @property
    def watermark(self) -> float:
        """SEMANTICS §3's watermark, lateness included (-inf before any time is seen)."""
        at = self.clock.watermark
        return -math.inf if at is None else at - self.lateness_ms

    def matcher(self, key: str, space: str) -> SpaceMatcher:
        m = self.matchers.get(key)
        if m is None:
            m = self.matchers[key] = SpaceMatcher(space, key, self.sharding.cell_of(key))
        return m

    def process_batch(
        self, items: Iterable[Input], pending: Mapping[Hashable, int | None] | Collection = ()
    ) -> list[Output]:
        """One micro-batch. `pending`: the input partitions (`input_partition`) that
        still have records to read after it, with the time of each one's next record
        where known (a mapping); they hold the watermark back (`matcher.watermark`).
        By default none does: the watermark becomes the largest time seen less the
        lateness."""
        out: list[Output] = []
        per_key: dict[str, list[Record]] = {}
        raws: dict[int, Any] = {}  # id(record) -> its raw value (for a refusal's dead letter)
        watermark = self.watermark
        for item in items:
            self.clock.observe(input_partition(item), event_time(item.raw, item.timestamp))
            record = decode_input(item)
            if isinstance(record, dict):
                out.append(Output("deadletter", None, record))
                continue
            letter = late_letter(record.ts, watermark, self.lateness_ms, item.raw, item.source)
            if letter is not None:
                out.append(Output("deadletter", None, letter))
                continue
            raws[id(record)] = item.raw
            for key in state_keys(record, self.sharding):
                per_key.setdefault(key, []).append(record)
        for space, keys in _by_space({k: recs[0].space for k, recs in per_key.items()}):
            ranked = []
            for key in keys:
                records = in_order(per_key[key])
                matcher = self.matcher(key, space)
                ranked += matcher.apply_batch_ranked(records)
                refused = matcher.drain_refused()
                if self.sharding.is_first(key):  # (every cell refuses the same records)
                    out += [
                        Output("deadletter", None, dead_letter(why, raws[id(r)], r.source))
                        for r, why in refused
                    ]
            out += _merged(ranked)
        self.clock.close_batch(pending)
        out += self.advance(self.watermark)
        for matcher in self.matchers.values():
            matcher.forget_changes()  # (no state store reads them here)
        return out

    def advance(self, watermark: float) -> list[Output]:
        """Evict everywhere what expired before the watermark (idle spaces too)."""
        out = []
        for _, keys in _by_space({k: m.space for k, m in self.matchers.items()}):
            out += _merged(
                [
                    (rank, e)
                    for key in keys
                    for rank, e in self.matchers[key].expire_ranked(watermark)
                ]
            )
        return out


def _by_space(spaces: dict[str, str]) -> list[tuple[str, list[str]]]:
    """State keys grouped by their space, in a stable order."""
    groups: dict[str, list[str]] = {}
    for key, space in spaces.items():
        groups.setdefault(space, []).append(key)
    return [(space, sorted(groups[space])) for space in sorted(groups)]


def _merged(ranked: list[tuple[tuple, dict[str, Any]]]) -> list[Output]:
    """The events of a space's cells in the order an unsharded run emits them."""
    ranked.sort(key=_RANK)
    return [Output("matches", e["subscriber"], e) for _, e in ranked]
