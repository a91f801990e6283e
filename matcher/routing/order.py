"""Event time across sites: the key every input of a site is merged by.

A site decides a record at its place in event time, SEMANTICS §5's order
extended to what links carry: `(ts, class, position, seq)`.

- class `EXPIRY` (0): what an expiry causes at `valid_to + 1` (the interest of
  an expired subscription, an advertisement whose last profile ended), before
  anything at that ts, as the matcher evicts before it applies;
- class `MOVES` (1): a client's `move` (ROUTING §5, `moves`): what leaves the
  old site and arrives at the new one, after the expiries at that ts and
  before the client's own records at it;
- class `SUBSCRIPTIONS` (2): subscription records and the interest they cause;
- class `PROFILES` (3): profiles-topic records (publish, retract, advertise,
  unadvertise) and the forwards and advertisements they cause.

`position` is the record's place in its input (in `tsm replay`, its line:
both kinds come from their own file, so (class, line) never repeats) and
`seq` orders the several changes one record causes. A profile forwarded
because interest grew is keyed `CATCH_UP` (-1) at that interest's own key,
so that the receiver holds it just before the subscription that wants it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

EXPIRY, MOVES, SUBSCRIPTIONS, PROFILES = 0, 1, 2, 3
CATCH_UP = -1


class Key(NamedTuple):
    ts: int
    cls: int
    pos: tuple[int, ...]
    seq: int = 0

    def to_json(self) -> list[Any]:
        return [self.ts, self.cls, list(self.pos), self.seq]

    @staticmethod
    def from_json(value: list[Any]) -> Key:
        ts, cls, pos, seq = value
        return Key(ts, cls, tuple(pos), seq)

    def next(self, seq: int) -> Key:
        return self._replace(seq=seq)


def record_key(ts: int, kind: str, position: tuple[int, ...]) -> Key:
    """The key of an input record: its ts, its topic's class, its position."""
    return Key(ts, SUBSCRIPTIONS if kind == "subscription" else PROFILES, position)
