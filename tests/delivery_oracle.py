"""A brute-force reference for docs/DELIVERY.md, written from its text.

Nothing here uses `matcher.delivery` or the engine: every step recomputes, for
every held pair, whether it holds by the relation (`tests.oracle.pair_holds`),
then applies §3 (margin), §4 (off / pending / on / leaving), §5 (chosen sets,
over every profile and group) and §6 (the diff of what each subscriber was
told). A subscription without delivery fields is the same machine with no
dwell, exit dwell, margin or group, which is SEMANTICS §4.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from tests import oracle

OFF, PENDING, ON, LEAVING = "off", "pending", "on", "leaving"
DELIVERED = (ON, LEAVING)
FIELDS = ("delivery", "dwell_ms", "exit_dwell_ms", "margin")


def has_fields(record: dict[str, Any]) -> bool:
    """Whether a subscribe record has any delivery field (a 0 or a null is none)."""
    r = record
    return bool(r.get("delivery") or r.get("dwell_ms") or r.get("exit_dwell_ms")) or (
        r.get("margin") is not None
    )


def group_of(sub: oracle.Held) -> str | None:
    return (sub.record.get("delivery") or {}).get("group")


def policy_of(record: dict[str, Any]) -> tuple:
    d = record["delivery"]
    return (d["mode"], d.get("k", 1), tuple(sorted(d.get("near", {}))))


def margin_of(record: dict[str, Any], attr: str) -> float:
    m = record.get("margin")
    if m is None:
        return 0.0
    if isinstance(m, dict):
        return float(m.get(attr, 0.0))
    return float(m)


def within_margin(sub: oracle.Held, prof: oracle.Held) -> bool:
    """§3: the intervals intersect, and the filter overlaps the widened profile."""
    wide = {
        name: (v[0] - margin_of(sub.record, name), v[1] + margin_of(sub.record, name))
        if isinstance(v, tuple)
        else v
        for name, v in prof.attrs.items()
    }
    widened = oracle.Held(prof.record, prof.kind, prof.valid_from, prof.valid_to, attrs=wide)
    return oracle.pair_holds(sub, widened)


def distance(near: dict[str, float], prof: oracle.Held) -> float:
    """§5 bestcast: squared gaps summed in the order of the attribute names."""
    total = 0.0
    for name in sorted(near):
        value = prof.attrs.get(name)
        if not isinstance(value, tuple):
            return math.inf
        x = float(near[name])
        gap = value[0] - x if x < value[0] else x - value[1] if x > value[1] else 0.0
        total += gap * gap
    return total


def version(held: oracle.Held) -> str:
    """A profile version: its content, times normalized."""
    r = held.record
    content = [held.attrs, held.valid_from, held.valid_to, oracle.to_ms(r["ts"]), r.get("payload")]
    return json.dumps(content, sort_keys=True, default=str)


@dataclass
class Pair:
    phase: str = OFF
    due: int | None = None
    reason: str = ""
    holds: bool = False
    told: bool = False
    group: str | None = None
    sent: tuple | None = None


class Space:
    """One space under docs/DELIVERY.md."""

    def __init__(self) -> None:
        self.subs: dict[str, oracle.Held] = {}
        self.profiles: dict[str, oracle.Held] = {}
        self.pairs: dict[tuple[str, str], Pair] = {}
        self.chosen: dict[tuple[str, str], set[str]] = {}
        self.served: dict[tuple[str, str], int] = {}
        self.out: list[dict[str, Any]] = []

    # -- steps (§2) ----------------------------------------------------------------

    def run_due(self, until: float) -> None:
        """Timers and expiries before `until`, in time order, timers first at a time."""
        while True:
            dues = [p.due for p in self.pairs.values() if p.phase in (PENDING, LEAVING)]
            timer = min(dues) if dues else None
            expiring = [
                (h.valid_to, 0 if h.kind == "subscription" else 1, h.id, h)
                for table in (self.subs, self.profiles)
                for h in table.values()
                if h.valid_to < until
            ]
            first = min(expiring, key=lambda e: e[:3]) if expiring else None
            if timer is not None and timer < until and (first is None or timer <= first[0]):
                for pair in self.pairs.values():
                    if pair.phase in (PENDING, LEAVING) and pair.due == timer:
                        pair.phase = ON if pair.phase == PENDING else OFF
                        pair.due = None
                self.settle(("timer", None, None, ""), timer)
            elif first is not None:
                valid_to, _, ident, held = first
                table = self.subs if held.kind == "subscription" else self.profiles
                del table[ident]
                self.step((held.kind, ident, held, "expired"), int(valid_to), gone=True)
            else:
                return

    def apply(self, kind: str, record: dict[str, Any]) -> str | None:
        """One record (after what falls due before it); returns a refusal's reason."""
        ts = oracle.to_ms(record["ts"])
        self.run_due(ts)
        ident, op = str(record["id"]), record["op"]
        table = self.subs if kind == "subscription" else self.profiles
        old = table.get(ident)
        if op in ("unsubscribe", "retract"):
            if old is not None:
                del table[ident]
                self.step((kind, ident, old, op), ts, gone=True)
            return None
        new = oracle.hold(kind, record)
        if kind == "subscription":
            group = group_of(new)
            for member in sorted(self.subs):
                if member != ident and group is not None and group_of(self.subs[member]) == group:
                    if policy_of(self.subs[member].record) != policy_of(record):
                        return "disagrees"
            if old is not None and has_fields(old.record) != has_fields(record):
                del table[ident]  # ended, and made again (§6)
                self.step((kind, ident, old, "changed"), ts, gone=True)
                old = None
                table[ident] = new
                self.step((kind, ident, None, "changed"), ts)
                return None
        table[ident] = new
        reason = "changed" if old is not None else f"new-{kind}"
        self.step((kind, ident, old, reason), ts)
        return None

    def step(self, cause: tuple, ts: int, gone: bool = False) -> None:
        """§3 and §4 for every pair, then §5 and §6."""
        kind, ident, old, reason = cause
        handover = (
            kind == "subscription"
            and old is not None
            and ident in self.subs
            and self.subs[ident].record["subscriber"] != old.record["subscriber"]
        )
        keys = set(self.pairs) | {(s, p) for s in self.subs for p in self.profiles}
        if kind == "subscription" and old is not None and group_of(old) is not None:
            now = self.subs.get(ident)
            if now is None or group_of(now) != group_of(old):
                self.served.pop((group_of(old), ident), None)
        for key in sorted(keys):
            sid, pid = key
            pair = self.pairs.setdefault(key, Pair())
            sub, prof = self.subs.get(sid), self.profiles.get(pid)
            ended = sub is None or prof is None
            if ended:
                holds = False
            else:
                holds = oracle.pair_holds(sub, prof) or (
                    pair.holds and sub.record.get("margin") is not None and within_margin(sub, prof)
                )
            record = (sub or old).record
            if handover and sid == ident and pair.phase == LEAVING:
                pair.phase, pair.due, pair.reason = OFF, None, "changed"
            dwell, exit_dwell = record.get("dwell_ms") or 0, record.get("exit_dwell_ms") or 0
            if ended:
                if pair.phase != OFF:
                    pair.phase, pair.due, pair.reason = OFF, None, reason
            elif pair.phase == OFF and holds:
                if dwell:
                    pair.phase, pair.due, pair.reason = PENDING, ts + dwell, reason
                else:
                    pair.phase, pair.reason = ON, reason
            elif pair.phase == PENDING and not holds:
                pair.phase, pair.due, pair.reason = OFF, None, reason
            elif pair.phase == ON and not holds:
                if exit_dwell:
                    pair.phase, pair.due, pair.reason = LEAVING, ts + exit_dwell, reason
                else:
                    pair.phase, pair.reason = OFF, reason
            elif pair.phase == LEAVING and holds:
                pair.phase, pair.due, pair.reason = ON, None, reason
            pair.holds = holds
        self.settle((kind, ident, old, reason), ts, handover=handover, gone=gone)

    # -- §5 and §6 -----------------------------------------------------------------

    def settle(self, cause: tuple, ts: int, handover: bool = False, gone: bool = False) -> None:
        kind, ident, old, reason = cause
        target: dict[tuple[str, str], bool] = {}
        for (sid, pid), pair in self.pairs.items():
            sub = self.subs.get(sid)
            target[sid, pid] = sub is not None and group_of(sub) is None and pair.phase in DELIVERED
        groups = {group_of(s) for s in self.subs.values()} | {g for g, _ in self.chosen}
        replaced = set()
        for pid, group in sorted((p, g) for p in self.profiles for g in groups if g is not None):
            eligible = {
                sid
                for sid, sub in self.subs.items()
                if group_of(sub) == group
                and (sid, pid) in self.pairs
                and self.pairs[sid, pid].phase in DELIVERED
            }
            chosen = self.chosen.get((group, pid), set())
            left = chosen - eligible
            kept = chosen & eligible
            taken: list[str] = []
            if eligible:
                d = self.subs[min(eligible)].record["delivery"]
                k, mode = d.get("k", 1), d["mode"]
                waiting = sorted(eligible - kept)
                if mode == "faircast":
                    waiting.sort(key=lambda s: self.served.get((group, s), 0))
                elif mode == "bestcast":
                    prof = self.profiles[pid]
                    waiting.sort(
                        key=lambda s: distance(self.subs[s].record["delivery"]["near"], prof)
                    )
                taken = waiting[: max(0, k - len(kept))]
            for sid in eligible:
                target[sid, pid] = sid in kept or sid in taken
            for sid in taken:
                self.served[group, sid] = self.served.get((group, sid), 0) + 1
            replaced |= {(sid, pid) for sid in taken[: len(left)]}
            now = kept | set(taken)
            if now:
                self.chosen[group, pid] = now
            else:
                self.chosen.pop((group, pid), None)
        for pid_group in [k for k in self.chosen if k[1] not in self.profiles]:
            del self.chosen[pid_group]  # (a profile gone: its chosen sets went empty above)
        for key in sorted(self.pairs):
            sid, pid = key
            pair, now = self.pairs[key], target.get(key, False)
            sub, prof = self.subs.get(sid), self.profiles.get(pid)
            group = group_of(sub) if sub is not None else None
            retold = False
            if pair.told and (not now or (handover and sid == ident) or pair.group != group):
                before_sub = old if kind == "subscription" and sid == ident else sub
                before_prof = old if kind == "profile" and pid == ident else prof
                why = "changed" if now or pair.phase in DELIVERED else pair.reason
                self.out.append(oracle.event("unmatch", why, before_sub, before_prof, ts))
                pair.told, pair.group, pair.sent, retold = False, None, None, now
            if now and not pair.told:
                if key in replaced or retold:
                    why = "replaced" if key in replaced else "changed"
                else:  # (§6: the step's reason; at a timer, the one §4 remembered)
                    why = pair.reason if kind == "timer" else reason
                self.out.append(oracle.event("match", why, sub, prof, ts))
                pair.told, pair.group, pair.sent = True, group, self._sent(sub, prof)
            elif now and pair.holds:
                changed_profile = kind == "profile" and pid == ident and not gone
                changed_sub = (
                    kind == "subscription" and sid == ident and pair.sent != self._sent(sub, prof)
                )
                if changed_profile or changed_sub:
                    self.out.append(oracle.event("update", reason, sub, prof, ts))
                    pair.sent = self._sent(sub, prof)
            if pair.phase == OFF and not pair.told and not pair.holds:
                del self.pairs[key]

    @staticmethod
    def _sent(sub: oracle.Held, prof: oracle.Held) -> tuple:
        return version(prof), oracle.pair_end(sub, prof)


class Engine:
    """The batches and the watermark of `tests.oracle.OracleEngine`, over `Space`s.
    Returns (match records without match_id, positions refused: late or disagreeing)."""

    def __init__(self, lateness_ms: int = 0) -> None:
        self.lateness_ms = lateness_ms
        self.largest: dict[str, int] = {}
        self.mark = -math.inf
        self.spaces: dict[str, Space] = {}

    def process_batch(self, items) -> tuple[list[dict[str, Any]], list[Any]]:
        watermark = self.mark - self.lateness_ms
        accepted, refused = [], []
        for kind, record, position in items:
            ts = oracle.to_ms(record["ts"])
            self.largest[kind] = max(self.largest.get(kind, ts), ts)
            if ts < watermark:
                refused.append(position)
                continue
            order = (ts, 0 if kind == "subscription" else 1, position)
            accepted.append((record["space"], order, kind, record, position))
        out = []
        for space, _, kind, record, position in sorted(accepted, key=lambda a: a[:2]):
            s = self.spaces.setdefault(space, Space())
            if s.apply(kind, record) is not None:
                refused.append(position)
            out += s.out
            s.out = []
        if self.largest:
            self.mark = max(self.mark, max(self.largest.values()))
        for space in sorted(self.spaces):
            s = self.spaces[space]
            s.run_due(self.mark - self.lateness_ms)
            out += s.out
            s.out = []
        return out, sorted(refused)
