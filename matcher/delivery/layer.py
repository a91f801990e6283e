"""`Delivery`: one state key's delivery policies over the engine's pair changes
(docs/DELIVERY.md §2-§6).

The engine hands over every pair change of a subscription with delivery
fields (its *raw* changes: the pair begins or stops holding by the relation)
together with the step that caused them (`Cause`); `step` turns them into
the records the subscribers get: the margin (§3), each pair's sustained state
(§4, `sustain`), the chosen sets of groups (§5, `choice`) and the diff of what
each subscriber holds (§6). `fire` runs the timers due at one time.

State: the pairs (`sustain.Pair`) that hold or are delivered, the chosen
members per profile and group, how often each member was served; indexed by
profile, and by subscription lazily (a first version's pairs join that index
when a subscription's step next needs it: most profiles end before one does);
the timers, as a heap of due times and the pairs due at each (a profile's
pairs share one due time: one heap entry for them all). Two kinds of pairs in
the index keep no `Pair` of their own:
- *settled*: on and told, holding by the relation, told in its subscription's
  group (if any), its last record telling the versions held (`_settled`); most
  pairs of a group's chosen members and of sustained matches past their dwell;
- *waiting*: pending since its profile's first version, untouched since, of a
  subscription in no group (`_waiting`: per profile and due time, each member's
  reason; one timer for them all). A step that touches one gives it a `Pair`.
Each step logs the items it changed (`drain_changes`: `(item key, JSON
or None)`), so that a state store keeps it with the held records' changes and
`restore` sets it back.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from matcher.delivery import sustain
from matcher.delivery.choice import ranked
from matcher.delivery.margin import holds_within_margin
from matcher.delivery.options import Options
from matcher.delivery.sustain import DELIVERED, LEAVING, OFF, ON, PENDING, Pair
from matcher.held import Held

Key = tuple[str, str]  # (subscription id, profile id)
# The records of a step's `(event, reason, sub, prof)` at `ts`, in order (made at once:
# a profile's records share what they tell of it).
Emit = Callable[[list[tuple[str, str, Held, Held]], int], list[Any]]
_SEP = "\x1f"
_FIRST = itemgetter(0)
_TIMED = (PENDING, LEAVING)
_NONE: dict[str, Any] = {}  # (never changed)


@dataclass(slots=True)
class Cause:
    """A step (§2): a record's, an expiry's (`gone`), or the timers' (`kind` "timer")."""

    kind: str  # "subscription" | "profile" | "timer"
    ident: str | None
    old: Held | None  # the version the step replaced or removed
    reason: str
    ts: int
    gone: bool = False


@dataclass(slots=True)
class Changed:
    """What a `Delivery` changed since drained: pairs, chosen sets `(group, profile)`,
    served counts `(group, member)`; each profile whose first version it made, with
    the chosen set it made per group (so every pair, chosen set and count of those),
    and each profile with the subscriptions of its waiting pairs that a timer made on
    (expanded when drained: a first version or a timer logs one item, not one a
    pair)."""

    pairs: set[Key] = field(default_factory=set)
    chosen: set[tuple[str, str]] = field(default_factory=set)
    served: set[tuple[str, str]] = field(default_factory=set)
    firsts: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)
    waited: list[tuple[str, list[str]]] = field(default_factory=list)


class Delivery:
    """The delivery state of one state key. Costs per step: O(pairs of the changed
    record + the raw changes) plus, per touched (profile, group), O(m log m) for
    its m eligible members; a subscription's step first O(pairs) of the first
    versions since the last one (`_index_by_sub`)."""

    def __init__(self) -> None:
        self.pairs: dict[Key, Pair] = {}
        # Every pair in the index, by profile; by subscription, all but those of the
        # first versions in `_unindexed` (profile ids, in order; `_index_by_sub`).
        self.by_prof: dict[str, set[str]] = {}
        self.by_sub: dict[str, set[str]] = {}
        self._unindexed: list[str] = []
        # profile -> group -> its chosen members (none empty; a collection never changed
        # in place: a new one replaces it)
        self.chosen: dict[str, dict[str, Collection[str]]] = {}
        self.served: dict[tuple[str, str], int] = {}  # (group, member) -> times chosen
        # Timers: a heap of distinct due times, and the pairs due at each. A pair's
        # timer is live while it is pending or leaving with that `due`; the others
        # (cancelled or moved) are dropped when met. A key `(None, profile id)` is the
        # timer of the profile's waiting pairs due then.
        self._timers: list[int] = []
        self._due: dict[int, list[Key | tuple[None, str]]] = {}
        # The waiting pairs: profile id -> due time -> subscription id -> reason.
        self._waiting: dict[str, dict[int, dict[str, str]]] = {}
        self._changed = Changed()

    # -- state -------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_changed": Changed()}

    def next_due(self) -> int | None:
        """The earliest live timer's due time, dropping the dead ones met on the way.
        O(log t) amortized for t due times."""
        timers, due_at, pairs, waiting = self._timers, self._due, self.pairs, self._waiting
        while timers:
            due = timers[0]
            keys = due_at[due]
            while keys:
                sid, pid = keys[-1]
                if sid is None:
                    if due in waiting.get(pid, ()):
                        return due
                else:
                    pair = pairs.get((sid, pid))
                    if pair is not None and pair.due == due and pair.phase in _TIMED:
                        return due
                keys.pop()
            del due_at[due]
            heapq.heappop(timers)
        return None

    def _set_timer(self, due: int, key: Key | tuple[None, str]) -> None:
        """A timer for the pair `key` at `due` (its `due`), or for a profile's waiting
        pairs due then (`(None, profile id)`). O(1), or O(log t) for a due time not
        held yet."""
        keys = self._due.get(due)
        if keys is None:
            self._due[due] = [key]
            heapq.heappush(self._timers, due)
        else:
            keys.append(key)

    def drain_changes(
        self, subs: Mapping[str, Held], profiles: Mapping[str, Held]
    ) -> list[tuple[str, str | None]]:
        """The items changed since the last drain: `(key, JSON or None)`; `subs` and
        `profiles` those held (a settled pair's versions)."""
        changed, self._changed = self._changed, Changed()
        for pid, sids in changed.waited:
            changed.pairs.update((sid, pid) for sid in sids)
        for pid, made in changed.firsts:
            changed.pairs.update((sid, pid) for sid in self.by_prof.get(pid, ()))
            for group, members in made.items():
                changed.chosen.add((group, pid))
                changed.served.update((group, sid) for sid in members)
        out = []
        for a, b in sorted(changed.chosen):
            chosen = self.chosen.get(b, _NONE).get(a)
            out.append((_SEP.join(("c", a, b)), None if not chosen else json.dumps(sorted(chosen))))
        for a, b in sorted(changed.served):
            count = self.served.get((a, b))
            out.append((_SEP.join(("n", a, b)), None if not count else str(count)))
        for a, b in sorted(changed.pairs):
            pair = self.pair_state((a, b), subs, profiles)
            text = None if pair is None else json.dumps(pair.to_json())
            out.append((_SEP.join(("p", a, b)), text))
        return out

    def pair_state(
        self, key: Key, subs: Mapping[str, Held], profiles: Mapping[str, Held]
    ) -> Pair | None:
        """The state of the pair `key` (its `Pair`, or the one a waiting or settled pair
        stands for), None where none is held; `subs` and `profiles` those held. O(d)
        for d due times of the profile's waiting pairs."""
        pair = self.pairs.get(key)
        sid, pid = key
        if pair is not None or sid not in self.by_prof.get(pid, ()):
            return pair
        for due, members in self._waiting.get(pid, {}).items():
            if sid in members:
                return Pair(PENDING, due, members[sid], True, True)
        return _settled(subs[sid], profiles[pid])

    def forget_changes(self) -> None:
        """Drop the changed items since the last drain (an owner with no change log)."""
        self._changed = Changed()

    def restore(self, key: str, text: str | None) -> None:
        """Set one item as a logged change says (a state store rebuilding). O(log n)."""
        kind, a, b = key.split(_SEP)
        if kind == "p":
            if a in self.by_prof.get(b, ()):
                self._remove((a, b))
            if text is not None:
                pair = Pair.from_json(json.loads(text))
                self._add((a, b), pair)
                if pair.due is not None:
                    self._set_timer(pair.due, (a, b))
        elif kind == "c":
            self._set_chosen(a, b, None if text is None else set(json.loads(text)))
        elif text is None:
            self.served.pop((a, b), None)
        else:
            self.served[a, b] = int(text)

    def _unwait(self, key: Key) -> Pair | None:
        """The `Pair` a waiting pair stands for, no longer waiting (its timer is the
        caller's to set), or None if `key` is not waiting. O(d) for d due times of
        the profile's waiting pairs."""
        sid, pid = key
        blocks = self._waiting.get(pid)
        if blocks is None:
            return None
        for due, members in blocks.items():
            if sid in members:
                reason = members.pop(sid)
                if not members:
                    del blocks[due]
                    if not blocks:
                        del self._waiting[pid]
                return Pair(PENDING, due, reason, True, True)
        return None

    def _held_pair(self, cause: Cause, key: Key, sub: Held | None, prof: Held | None) -> Pair:
        """The `Pair` of a pair in the index, made and kept from now on where it has
        none (waiting: pending with its timer; settled: `_unsettled`). O(1) plus
        `_unwait`'s."""
        pair = self.pairs.get(key)
        if pair is None:
            pair = self._unwait(key)
            if pair is None:
                return self._unsettled(cause, key, sub, prof)
            self.pairs[key] = pair
            self._set_timer(pair.due, key)
        return pair

    def _set_chosen(self, group: str, pid: str, members: set[str] | None) -> None:
        """Set the chosen members of (group, profile) (None: none). O(1)."""
        per = self.chosen.get(pid)
        if members:
            if per is None:
                self.chosen[pid] = {group: members}
            else:
                per[group] = members
        elif per is not None:
            per.pop(group, None)
            if not per:
                del self.chosen[pid]

    def _add(self, key: Key, pair: Pair) -> None:
        self.pairs[key] = pair
        self.by_sub.setdefault(key[0], set()).add(key[1])
        self.by_prof.setdefault(key[1], set()).add(key[0])

    def _remove(self, key: Key) -> None:
        if self.pairs.pop(key, None) is None:  # (a settled or waiting pair has none)
            self._unwait(key)
        for index, a, b in ((self.by_sub, *key), (self.by_prof, key[1], key[0])):
            others = index.get(a)  # (None: a first version's pair not indexed by sub)
            if others is not None:
                others.discard(b)
                if not others:
                    del index[a]

    def _index_by_sub(self) -> None:
        """Index by subscription the pairs of the first versions not indexed so far
        (those still held: `by_prof` has them). O(their pairs)."""
        by_sub, by_prof = self.by_sub, self.by_prof
        for pid in self._unindexed:
            for sid in by_prof.get(pid, ()):
                others = by_sub.get(sid)
                if others is None:
                    by_sub[sid] = {pid}
                else:
                    others.add(pid)
        self._unindexed = []

    # -- steps -------------------------------------------------------------------

    def step(
        self,
        cause: Cause,
        raw: list[tuple[str, str, Held, Held]],
        subs: Mapping[str, Held],
        profiles: Mapping[str, Held],
        emit: Emit,
    ) -> list[Any]:
        """One step of a record or an expiry: `raw` its pair changes `(event, reason,
        sub, prof)` for subscriptions with delivery fields. Returns the records."""
        if cause.kind == "profile" and cause.old is None and cause.ident not in self.by_prof:
            return self._first_version(cause, raw, subs, profiles, emit)
        raw_now: dict[Key, bool] = {}
        reasons: dict[Key, str] = {}
        for event, reason, sub, prof in raw:
            key = (sub.record.id, prof.record.id)
            raw_now[key] = event != "unmatch"  # (a handover's unmatch, then match: holds)
            if event != "unmatch" or key not in reasons:
                reasons[key] = reason
        touched = set(raw_now)
        cid = cause.ident
        if cause.kind == "subscription":
            if self._unindexed:
                self._index_by_sub()
            touched.update((cid, pid) for pid in self.by_sub.get(cid, ()))
        elif cause.kind == "profile":
            touched.update((sid, cid) for sid in self.by_prof.get(cid, ()))
        old_group = None
        if cause.kind == "subscription" and cause.old is not None:
            options = cause.old.record.options
            old_group = options.group if options is not None else None
            new = subs.get(cid)
            new_options = new.record.options if new is not None else None
            new_group = new_options.group if new_options is not None else None
            if old_group is not None and old_group != new_group:
                self._count(old_group, cid, None)  # (left the group: served counts restart)
        if not touched:
            return []
        handed_over = _handed_over(cause, subs)
        groups: set[tuple[str, str]] = set()
        for key in touched:
            sid, pid = key
            sub, prof = subs.get(sid), profiles.get(pid)
            pair = self.pairs.get(key)
            if pair is None:
                if sid in self.by_prof.get(pid, ()):
                    pair = self._held_pair(cause, key, sub, prof)
                else:
                    pair = Pair()
                    self._add(key, pair)
            gone = sub is None or prof is None
            if gone:
                pair.raw = holds = False
            else:
                pair.raw = raw_now.get(key, pair.raw)
                holds = pair.raw or (
                    pair.holds
                    and sub.record.options.margin is not None
                    and holds_within_margin(sub.record, prof.record)
                )
            options = (sub if sub is not None else cause.old).record.options
            if sid == handed_over and pair.phase == LEAVING:
                pair.phase, pair.due, pair.reason = OFF, None, "changed"  # (not handed over)
            dwell, exit_dwell = options.dwell_ms, options.exit_dwell_ms
            reason = reasons.get(key, cause.reason)
            if sustain.step(pair, holds, gone, cause.ts, reason, dwell, exit_dwell):
                self._set_timer(pair.due, key)
            pair.holds = holds
            group = sub.record.options.group if sub is not None else None
            for g in (group, pair.group, old_group if sid == cid else None):
                if g is not None:
                    groups.add((pid, g))
        return self._settle(cause, touched, groups, subs, profiles, emit, reasons)

    def _first_version(
        self,
        cause: Cause,
        raw: list[tuple[str, str, Held, Held]],
        subs: Mapping[str, Held],
        profiles: Mapping[str, Held],
        emit: Emit,
    ) -> list[Any]:
        """`step` for a profile's first version, which has no pairs yet: each of its
        pairs begins to hold (`raw` its `match`es), so §4 makes it pending or on, and
        §5 fills each group's empty chosen set from its members that are on. The
        records, in subscription id order. O(pairs) plus O(m log m) for a group of m
        members that are on, beyond its k."""
        pid, ts = cause.ident, cause.ts
        pairs = self.pairs
        told = 0  # (how many pairs are delivered now)
        sids: list[str] = []
        groups: dict[str, list[str]] = {}  # group -> its members on (then: chosen)
        waiting: dict[int, dict[str, str]] = {}  # due -> the waiting pairs' reasons
        untold: list[str] = []  # (members pending, or on and not chosen: with a Pair)
        for _, reason, sub, _ in raw:
            record = sub.record
            sid, options = record.id, record.options
            sids.append(sid)
            dwell, group = options.dwell_ms, options.group
            if dwell:
                due = ts + dwell
                if group is None:
                    reasons = waiting.get(due)
                    if reasons is None:
                        reasons = waiting[due] = {}
                        self._set_timer(due, (None, pid))
                    reasons[sid] = reason
                else:
                    pairs[sid, pid] = Pair(PENDING, due, reason, True, True)
                    self._set_timer(due, (sid, pid))
                    untold.append(sid)
            elif group is None:
                told += 1  # (settled: no Pair)
            else:  # (a Pair below if its group does not choose it: else settled)
                members = groups.get(group)
                if members is None:
                    groups[group] = [sid]
                else:
                    members.append(sid)
        if waiting:
            self._waiting[pid] = waiting
        if raw:
            self.by_prof[pid] = set(sids)
            self._unindexed.append(pid)  # (by subscription when a step needs it)
            self._changed.firsts.append((pid, groups))  # (all it changes: `drain_changes`)
        served = self.served
        place: dict[str, int] | None = None  # (each sid's place in `raw`: at the first cut)
        for group, members in groups.items():
            policy = subs[members[0]].record.options
            if len(members) > 1 and len(members) > policy.k:
                order = self._ranked(policy, group, pid, members, subs, profiles)
                chosen = sorted(order[: policy.k])
                left = set(members).difference(chosen)
                if place is None:
                    place = {sid: at for at, sid in enumerate(sids)}
                for sid in left:  # (on, not told: each keeps a `Pair`)
                    pairs[sid, pid] = Pair(ON, None, raw[place[sid]][1], True, True)
                untold += left
                members = groups[group] = chosen
            told += len(members)  # (settled: no Pair)
            for sid in members:
                key = group, sid
                served[key] = served.get(key, 0) + 1
        if groups:  # (a copy: `firsts` keeps `groups` as it is now)
            per = self.chosen.get(pid)
            if per is None:
                self.chosen[pid] = dict(groups)
            else:
                per.update(groups)
        if told == len(raw):
            items = raw  # (their `match`es as they came)
        elif not told:
            items = []
        else:  # (not those pending, nor those their group did not choose)
            skip = set(untold).union(*waiting.values())
            items = [item for item, sid in zip(raw, sids, strict=True) if sid not in skip]
        if sids != sorted(sids):
            items = sorted(items, key=lambda item: item[2].record.id)
        return emit(items, ts)

    def _ranked(
        self,
        policy: Options,
        group: str,
        pid: str,
        candidates: Collection[str],
        subs: Mapping[str, Held],
        profiles: Mapping[str, Held],
    ) -> list[str]:
        """The group's `candidates` for the profile, best first by its `policy` (§5).
        O(m log m)."""
        served = self.served
        return ranked(
            policy,
            candidates,
            profiles[pid].record.profile,
            lambda sid: subs[sid].record.options,
            {sid: served.get((group, sid), 0) for sid in candidates},
        )

    def fire(
        self, until: int, subs: Mapping[str, Held], profiles: Mapping[str, Held], emit: Emit
    ) -> list[Any]:
        """The timers due at the earliest due time (which must be below `until`): one
        step at that time. Returns the records."""
        t = self.next_due()
        heapq.heappop(self._timers)
        pairs, waiting = self.pairs, self._waiting
        fired: list[tuple[Key, Pair]] = []
        ready: list[tuple[str, dict[str, str]]] = []  # the waiting pairs due now, by profile
        grouped = False
        for key in self._due.pop(t):
            sid, pid = key
            if sid is None:
                blocks = waiting.get(pid)
                members = blocks.pop(t, None) if blocks is not None else None
                if members is not None:  # (else: a dead timer, or fired already)
                    if not blocks:
                        del waiting[pid]
                    ready.append((pid, members))
                continue
            pair = pairs.get(key)
            if pair is None or pair.due != t or pair.phase not in _TIMED:
                continue  # (a dead timer, or a key set twice: fired already)
            sustain.fire(pair)
            fired.append((key, pair))
            grouped = (
                grouped or pair.group is not None or subs[key[0]].record.options.group is not None
            )
        if not grouped:
            return self._fired_alone(t, fired, ready, subs, profiles, emit)
        for pid, members in ready:  # (on now: §5 sees them through their `Pair`s)
            for sid, reason in members.items():
                pair = pairs[sid, pid] = Pair(ON, None, reason, True, True)
                fired.append(((sid, pid), pair))
        groups = set()
        for (sid, pid), _ in fired:
            for g in (subs[sid].record.options.group, pairs[sid, pid].group):
                if g is not None:
                    groups.add((pid, g))
        cause = Cause("timer", None, None, "", t)
        return self._settle(cause, {key for key, _ in fired}, groups, subs, profiles, emit)

    def _fired_alone(
        self,
        t: int,
        fired: list[tuple[Key, Pair]],
        ready: list[tuple[str, dict[str, str]]],
        subs: Mapping[str, Held],
        profiles: Mapping[str, Held],
        emit: Emit,
    ) -> list[Any]:
        """`_settle` for a timer step whose pairs (`fired`: each key and pair; `ready`:
        per profile, its waiting pairs' subscriptions and reasons) are in no group: a
        pair that became on is sent `match`, one that went off `unmatch`, each with the
        reason its timer kept (§4, §6); a waiting pair is on and settled now. O(p log p)
        for p pairs."""
        out = []
        logged = self._changed.pairs
        for pid, members in ready:
            self._changed.waited.append((pid, list(members)))
        if len(ready) == 1 and not fired:  # (one profile's waiting pairs: the common case)
            pid, members = ready[0]
            prof = profiles[pid]
            return emit([("match", members[s], subs[s], prof) for s in sorted(members)], t)
        items: list[tuple[Key, Pair | str]] = fired + [
            ((sid, pid), reason) for pid, members in ready for sid, reason in members.items()
        ]
        items.sort(key=_FIRST)
        for key, pair in items:
            sid, pid = key
            sub, prof = subs[sid], profiles[pid]
            if type(pair) is str:  # (a waiting pair: on now, settled)
                out.append(("match", pair, sub, prof))
                continue
            if pair.phase == ON:
                if not pair.told:
                    out.append(("match", pair.reason, sub, prof))
                    if pair.raw:  # (settled)
                        del self.pairs[key]
                        logged.add(key)
                        continue
                    pair.told, pair.sent = True, _sent(sub, prof)
            elif pair.told:
                out.append(("unmatch", pair.reason, sub, prof))
                pair.told, pair.sent = False, None
            logged.add(key)
            if pair.phase == OFF and not pair.told and not pair.holds:
                self._remove(key)
        return emit(out, t)

    # -- what the subscribers get --------------------------------------------------

    def _settle(
        self,
        cause: Cause,
        touched: set[Key],
        groups: set[tuple[str, str]],
        subs: Mapping[str, Held],
        profiles: Mapping[str, Held],
        emit: Emit,
        reasons: Mapping[Key, str] = _NONE,
    ) -> list[Any]:
        """Choose (§5), then send the change of the delivered pairs (§6): a pair
        delivered now and not before gets the step's reason (`reasons`, the raw
        changes' own; else the cause's), or at a timer the reason its pair kept."""
        target: dict[Key, bool] = {}
        for key in touched:  # (a grouped member's: as its group chooses, below)
            sub = subs.get(key[0])
            ungrouped = sub is not None and sub.record.options.group is None
            target[key] = ungrouped and self.pairs[key].phase in DELIVERED
        replaced: set[Key] = set()
        eligible: dict[str, dict[str, set[str]]] = {}  # profile -> group -> eligible members
        for pid, group in sorted(groups):
            if pid not in eligible:
                eligible[pid] = self._eligible(pid, subs)
            members = eligible[pid].get(group, set())
            self._choose(group, pid, members, subs, profiles, target, replaced)
        handed_over = _handed_over(cause, subs)
        out = []
        for key in sorted(target):
            sid, pid = key
            sub, prof = subs.get(sid), profiles.get(pid)
            pair, now = self.pairs.get(key), target[key]
            if pair is None:
                pair = self._held_pair(cause, key, sub, prof)
            group = sub.record.options.group if sub is not None else None
            retold = False
            if pair.told and (not now or sid == handed_over or pair.group != group):
                before_sub, before_prof = _before(cause, sid, pid, sub, prof)
                reason = "changed" if now or pair.phase in DELIVERED else pair.reason
                out.append(("unmatch", reason, before_sub, before_prof))
                pair.told, pair.group, pair.sent, retold = False, None, None, now
            if now and not pair.told:
                if key in replaced or retold:
                    reason = "replaced" if key in replaced else "changed"
                elif cause.kind == "timer":
                    reason = pair.reason
                else:
                    reason = reasons.get(key, cause.reason)
                out.append(("match", reason, sub, prof))
                pair.told, pair.group, pair.sent = True, group, _sent(sub, prof)
            elif now and pair.holds and self._updates(cause, pair, sub, prof):
                out.append(("update", cause.reason, sub, prof))
                pair.sent = _sent(sub, prof)
            self._changed.pairs.add(key)
            if pair.phase == OFF and not pair.told and not pair.holds:
                self._remove(key)
            elif is_settled(pair, sub, prof):
                del self.pairs[key]
        return emit(out, cause.ts)

    def _unsettled(self, cause: Cause, key: Key, sub: Held | None, prof: Held | None) -> Pair:
        """A settled pair's `Pair`, kept from now on; `sub` and `prof` those held after
        the step (the step's own changed one stands for its version before). O(1)."""
        pair = self.pairs[key] = _settled(*_before(cause, *key, sub, prof))
        return pair

    @staticmethod
    def _updates(cause: Cause, pair: Pair, sub: Held, prof: Held) -> bool:
        """Whether a pair delivered before and after the step gets `update` (§6)."""
        if cause.kind == "profile":
            return cause.ident == prof.record.id and not cause.gone
        if cause.kind == "subscription":
            return cause.ident == sub.record.id and pair.sent != _sent(sub, prof)
        return False

    def _eligible(self, pid: str, subs: Mapping[str, Held]) -> dict[str, set[str]]:
        """Per group, the members whose pair with the profile is delivered (§4).
        O(pairs of the profile)."""
        out: dict[str, set[str]] = {}
        pairs = self.pairs
        for sid in self.by_prof.get(pid, ()):
            sub = subs.get(sid)
            pair = pairs.get((sid, pid))  # (None: settled, on; or waiting, in no group)
            if sub is not None and (pair is None or pair.phase in DELIVERED):
                group = sub.record.options.group
                if group is not None:
                    out.setdefault(group, set()).add(sid)
        return out

    def _choose(
        self,
        group: str,
        pid: str,
        eligible: set[str],
        subs: Mapping[str, Held],
        profiles: Mapping[str, Held],
        target: dict[Key, bool],
        replaced: set[Key],
    ) -> None:
        """§5 for one (profile, group) and its `eligible` members: drop the chosen
        that are no longer eligible, fill up to k by the policy; `target` gets each
        member's delivered state."""
        chosen = set(self.chosen.get(pid, _NONE).get(group, ()))
        left = chosen - eligible
        kept = chosen & eligible
        taken: list[str] = []
        if eligible:
            policy = subs[min(eligible)].record.options
            waiting = eligible - kept
            if not left and len(waiting) <= policy.k - len(kept):
                taken = sorted(waiting)  # (all of them: no order to find, no one replaced)
            elif len(kept) < policy.k:
                order = self._ranked(policy, group, pid, waiting, subs, profiles)
                taken = order[: policy.k - len(kept)]
        for sid in left:
            sub = subs.get(sid)
            if sub is None or sub.record.options.group == group:
                target[sid, pid] = False
        for sid in eligible:
            target[sid, pid] = sid in kept
        for sid in taken:
            target[sid, pid] = True
            self._count(group, sid, self.served.get((group, sid), 0) + 1)
        replaced.update((sid, pid) for sid in taken[: len(left)])
        now = kept | set(taken)
        if now != chosen:
            self._set_chosen(group, pid, now)
            self._changed.chosen.add((group, pid))

    def _count(self, group: str, sid: str, count: int | None) -> None:
        if count is None:
            if self.served.pop((group, sid), None) is None:
                return
        else:
            self.served[group, sid] = count
        self._changed.served.add((group, sid))


def _handed_over(cause: Cause, subs: Mapping[str, Held]) -> str | None:
    """The id of the subscription whose subscriber the step changed, if any."""
    if cause.kind != "subscription" or cause.old is None or cause.gone:
        return None
    new = subs.get(cause.ident)
    if new is None or new.record.subscriber == cause.old.record.subscriber:
        return None
    return cause.ident


def _sent(sub: Held, prof: Held) -> tuple[str, float]:
    """What a record of the pair tells: the profile version and the pair's valid_to."""
    return prof.version, min(sub.record.valid_to, prof.record.valid_to)


def _before(
    cause: Cause, sid: str, pid: str, sub: Held | None, prof: Held | None
) -> tuple[Held | None, Held | None]:
    """The versions of a pair's subscription and profile held before the step (the
    step's own record's replaced version, where it replaced one)."""
    if cause.old is not None and sid == cause.ident and cause.kind == "subscription":
        sub = cause.old
    elif cause.old is not None and pid == cause.ident and cause.kind == "profile":
        prof = cause.old
    return sub, prof


def _settled(sub: Held, prof: Held) -> Pair:
    """The state a settled pair of `sub` and `prof` (the versions held) stands for: on,
    told in the subscription's group, its last record telling those versions."""
    group = sub.record.options.group
    return Pair(ON, None, "", True, True, True, group, _sent(sub, prof))


def is_settled(pair: Pair, sub: Held | None, prof: Held | None) -> bool:
    """Whether `pair` is in the state `_settled` gives for the versions held (its
    `reason` aside: a pair on and told reads it again only once a step sets it)."""
    return (
        sub is not None
        and prof is not None
        and pair.told
        and pair.phase == ON
        and pair.raw
        and pair.holds
        and pair.group == sub.record.options.group
        and pair.sent == _sent(sub, prof)
    )
