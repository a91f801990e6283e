"""Event time over input partitions (SEMANTICS §3): the batch cut and the watermark.

An input partition is a Kafka topic-partition in the job and an input file in
`tsm replay`. Both plan their batches with this module, so that they cannot
drift apart:

- `event_time(raw, fallback_ts)`: a record's event time, read from its `ts`
  alone, as `matcher.records.decode` reads it;
- `cut(pending, limit)`: how many of each partition's next records a batch
  takes: those up to a common time, at most `limit` in all;
- `next_watermark(previous, seen, holding)`: the watermark after a batch, from
  the largest time seen in each partition and the partitions that hold it back;
- `Idleness`: when a partition with nothing to read stops holding it back;
- `EventClock`: the largest times seen and the watermark, kept in memory (the
  engine's); the job keeps the same facts in its source offsets instead.

Times here are before the allowed lateness: the watermark a record is judged
by is `next_watermark(...) - lateness`. A record with no time (one whose `ts`
cannot be read and that has no Kafka timestamp: a dead letter) moves nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import numpy as np

from matcher.errors import RecordError
from matcher.records import record_ts
from matcher.times import MAX_MS, MIN_MS

P = TypeVar("P", bound=Hashable)
# A record without a time in a sequence of times (`cut`): before every time.
NO_TIME = np.iinfo(np.int64).min


class _TsOnly(msgspec.Struct):
    ts: Any = None


_TS_ONLY = msgspec.json.Decoder(_TsOnly)


def event_time(raw: bytes | str | None, fallback_ts: int | None = None) -> int | None:
    """The event time of a raw record: its `ts` (epoch ms or ISO-8601) or, where it has
    none, `fallback_ts` (the Kafka timestamp), by `matcher.records.record_ts`'s rule;
    None where there is none or the record is not a JSON object. Cost: the record is
    scanned once and only `ts` is built (msgspec), about 30x less than `json.loads`.

    It reads only `ts`, so a record refused for another reason (an unknown op, a bad
    `where`) still has its time; the job and the replay both count it the same way."""
    if raw is None:
        return None
    try:
        ts = _TS_ONLY.decode(raw).ts
        if type(ts) is int and MIN_MS <= ts <= MAX_MS:  # (the common case, record_ts's answer)
            return ts
        return record_ts({"ts": ts}, fallback_ts)
    except (msgspec.DecodeError, RecordError, ValueError, OverflowError, RecursionError):
        return None


def as_times(times: Sequence[int | None]) -> np.ndarray:
    """`times` (None: no time) as the int64 array `cut` reads (`NO_TIME` for None)."""
    return np.array([NO_TIME if t is None else t for t in times], dtype=np.int64)


def cut(pending: Mapping[P, Sequence[int] | np.ndarray], limit: int | None) -> dict[P, int]:
    """How many of each partition's next records one batch takes.

    `pending` gives each partition's next records' times in offset order (`NO_TIME`
    for none; only the first `limit` matter), its partitions in the order that breaks
    ties (the job: subscriptions first, then by partition number: SEMANTICS §5's).
    A partition is read in offset order, so a record is placed in time at the largest
    time up to it in its partition (its own, or an earlier, later one's). The batch
    is the first `limit` records in the order (place, partition, offset): every record
    placed before some common time T, and of those placed at T as many as fill the
    limit; without a limit, or with fewer records, all of them. It holds at least one
    record when there is one.

    Cost: O(n) for the n = sum of min(limit, len) times given (numpy)."""
    if limit is not None and limit < 1:
        raise ValueError(f"a batch's limit must be at least 1, not {limit}")
    places = {}
    for partition, times in pending.items():
        times = np.asarray(times, dtype=np.int64)
        if limit is not None:
            times = times[:limit]
        places[partition] = np.maximum.accumulate(times) if len(times) else times
    total = sum(len(p) for p in places.values())
    if limit is None or total <= limit:
        return {partition: len(p) for partition, p in places.items()}
    everything = np.concatenate(list(places.values()))
    common = np.partition(everything, limit - 1)[limit - 1]
    taken = {p: int(np.searchsorted(pl, common, "left")) for p, pl in places.items()}
    room = limit - sum(taken.values())
    for partition, pl in places.items():  # (in tie order) those placed at T
        at_common = int(np.searchsorted(pl, common, "right")) - taken[partition]
        more = min(at_common, room)
        taken[partition] += more
        room -= more
    return taken


def largest_time(times: Sequence[int] | np.ndarray) -> int | None:
    """The largest of `times` (`NO_TIME` ignored), or None."""
    times = np.asarray(times, dtype=np.int64)
    if not len(times):
        return None
    top = int(times.max())
    return None if top == NO_TIME else top


def first_time(times: Sequence[int] | np.ndarray) -> int | None:
    """The first of `times` that is a time, or None."""
    times = np.asarray(times, dtype=np.int64)
    found = np.flatnonzero(times != NO_TIME)
    return int(times[found[0]]) if len(found) else None


def next_watermark(
    previous: int | None, seen: Mapping[P, int], holding: Mapping[P, int | None]
) -> int | None:
    """The watermark (before the allowed lateness) after a batch.

    `seen`: the largest time read so far in each partition. `holding`: the
    partitions that hold the watermark back (records left to read, or not idle
    long enough, `Idleness`), each with the time of its next record to read
    (None if unknown or none). The watermark is the smallest, over the holding
    partitions, of the largest time seen in each; one that has seen none holds
    it at its next record's time, or where it is when that is unknown. When no
    partition holds it back, it is the largest time seen anywhere. It never
    goes down: never below `previous`. Cost: O(partitions)."""
    if holding:
        bounds = [seen.get(p, upcoming) for p, upcoming in holding.items()]
        if any(b is None for b in bounds):
            return previous
        bound = min(bounds)
    elif seen:
        bound = max(seen.values())
    else:
        return previous
    return bound if previous is None else max(previous, bound)


@dataclass
class Idleness:
    """When a partition that has nothing to read stops holding the watermark back:
    `idle_ms` after it was first found so (on the caller's clock, milliseconds).

    A partition that has seen no record never holds it back (an empty one); one
    with records to read always does. (One that has nothing left to read for good,
    at the end offset of a Trigger.AvailableNow run, is not asked: it never holds
    it back.) Kept in memory only: after a restart, each drained partition holds
    the watermark back for up to `idle_ms` again."""

    idle_ms: float
    since: dict[Any, float] = field(default_factory=dict)

    def holds(self, partition: Any, *, waiting: bool, seen: bool, now: float) -> bool:
        """Whether `partition` holds the watermark back; `waiting`: it has records left
        to read; `seen`: it has given a record with a time. Cost: O(1)."""
        if waiting:
            self.since.pop(partition, None)
            return True
        if not seen:
            return False
        since = self.since.setdefault(partition, now)
        return now - since < self.idle_ms


@dataclass
class EventClock:
    """The largest time seen in each partition and the watermark (before lateness),
    in memory: the engine's (`tsm replay`, tests)."""

    seen: dict[Any, int] = field(default_factory=dict)
    watermark: int | None = None

    def observe(self, partition: Hashable, time: int | None) -> None:
        """Count one record read from `partition`. Cost: O(1)."""
        if time is not None and time > self.seen.get(partition, time - 1):
            self.seen[partition] = time

    def close_batch(self, pending: Mapping[Hashable, int | None] | Collection = ()) -> int | None:
        """Move the watermark at a batch's end: `pending` gives the partitions with
        records left to read (with their next record's time, if a mapping). Returns
        the new watermark (`next_watermark`)."""
        if not isinstance(pending, Mapping):
            pending = dict.fromkeys(pending)
        self.watermark = next_watermark(self.watermark, self.seen, pending)
        return self.watermark
