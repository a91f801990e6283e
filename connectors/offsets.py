"""Offset arithmetic of the Kafka source, free of Spark and of any client.

An offset is `{"topic": {"partition": next offset to read}}`, the JSON form
of Spark's own Kafka source, kept in one canonical order (topics by name,
partitions by number): Spark compares offsets as JSON text to decide whether
a batch has new data, so an equal offset written in another order would run
an empty batch.
"""

from __future__ import annotations

import json
from array import array
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from matcher.watermark import cut, first_time, largest_time, next_watermark

Offsets = dict[str, dict[str, int]]
# (topic, partition) → (low watermark, high watermark)
Watermarks = Mapping[tuple[str, int], tuple[int, int]]

# Spark's special values in a JSON `startingOffsets`.
EARLIEST, LATEST = -2, -1


def canonical(offsets: Mapping[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def flatten(offsets: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, int], int]:
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in offsets.items()
        for partition, offset in partitions.items()
    }


def starting_offsets(spec: str, marks: Watermarks) -> Offsets:
    """Resolve `earliest`, `latest` or Spark's JSON form against the current watermarks.

    Like Spark, the JSON form must name every partition of the subscribed
    topics; -2 means earliest and -1 latest.
    """
    spec = spec.strip()
    if spec in ("earliest", "latest"):
        pick = 0 if spec == "earliest" else 1
        return canonical({tp: lo_hi[pick] for tp, lo_hi in marks.items()})
    try:
        given = flatten(json.loads(spec))
    except (ValueError, TypeError, AttributeError):
        raise ValueError(
            f"startingOffsets must be earliest, latest or JSON like "
            f'{{"topic":{{"0":23,"1":-2}}}}, got {spec!r}'
        ) from None
    if set(given) != set(marks):
        missing = sorted(set(marks) - set(given))
        unknown = sorted(set(given) - set(marks))
        raise ValueError(
            f"startingOffsets must give every partition of the subscribed topics: "
            f"missing {missing}, not subscribed or not existing {unknown}"
        )
    resolved = {}
    for tp, offset in given.items():
        lo, hi = marks[tp]
        resolved[tp] = lo if offset == EARLIEST else hi if offset == LATEST else offset
    return canonical(resolved)


def next_end(
    start: Mapping[str, Mapping[str, int]],
    marks: Watermarks,
    max_rows: int | None,
) -> Offsets:
    """The end offset of the next batch: everything up to the watermarks, or `max_rows` of it.

    A partition that appeared since `start` (a topic grew, or was created) is
    read from its low watermark in this very batch, as Spark's source reads a
    new partition from the earliest: a batch later, its records could already
    be late. One that disappeared keeps its offset. With a limit, each
    partition gets a share proportional to its backlog (largest remainders
    first, ties by name), so the batch holds exactly `min(max_rows, backlog)`
    offsets and no partition starves.
    """
    begin = flatten(start)
    end = dict(begin)
    backlog = {}
    for tp, (lo, hi) in marks.items():
        if tp not in begin:
            end[tp] = lo
            if hi > lo:
                backlog[tp] = hi - lo
        elif hi < begin[tp]:
            raise ValueError(
                f"{tp[0]}-{tp[1]}: latest offset {hi} is below the offset already read "
                f"{begin[tp]}; was the topic deleted and re-created?"
            )
        elif hi > begin[tp]:
            backlog[tp] = hi - begin[tp]
    total = sum(backlog.values())
    if max_rows is not None and total > max_rows:
        shares = {tp: max_rows * lag // total for tp, lag in backlog.items()}
        by_remainder = sorted(backlog, key=lambda tp: (-(max_rows * backlog[tp] % total), tp))
        for tp in by_remainder[: max_rows - sum(shares.values())]:
            shares[tp] += 1
        backlog = shares
    for tp, rows in backlog.items():
        end[tp] += rows
    return canonical(end)


def cap(marks: Watermarks, target: Mapping[tuple[str, int], int]) -> Watermarks:
    """Watermarks as if nothing arrived after `target` (Trigger.AvailableNow):
    high watermarks lowered to it, partitions it does not know left out."""
    return {tp: (lo, min(hi, target[tp])) for tp, (lo, hi) in marks.items() if tp in target}


# --- event time (SEMANTICS §3): batches cut at a common time -----------------------------


@dataclass(frozen=True)
class Mark:
    """A source offset that plans by event time: where each partition's next read
    starts, the largest event time read from each so far, and the watermark (before
    the allowed lateness) that the batch ending here gives its rows.

    Its JSON form, `{"offsets": {...}, "maxTs": {...}, "watermark": ms or null}`, is
    what Spark writes to the checkpoint before the batch runs, so a batch re-run
    after a crash gets the same ranges and the same watermark, and the next batch
    is planned from the times that this one read."""

    positions: dict[tuple[str, int], int]
    largest: dict[tuple[str, int], int] = field(default_factory=dict)
    watermark: int | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "offsets": canonical(self.positions),
            "maxTs": canonical(self.largest),
            "watermark": self.watermark,
        }


def read_mark(offset: Mapping[str, object]) -> Mark:
    """A source offset of either form: `Mark.to_json`'s, or Spark's plain one (a
    checkpoint written by a source that did not plan by event time: no times yet)."""
    ranges = offset.get("offsets")
    if isinstance(ranges, Mapping) and all(isinstance(v, Mapping) for v in ranges.values()):
        watermark = offset.get("watermark")
        return Mark(
            flatten(ranges),
            flatten(offset.get("maxTs") or {}),
            None if watermark is None else int(watermark),
        )
    return Mark(flatten(offset))


def positions(offset: Mapping[str, object]) -> Offsets:
    """The `{"topic": {"partition": offset}}` of a source offset of either form."""
    return canonical(read_mark(offset).positions)


@dataclass
class ReadAhead:
    """One partition's next records as the driver read them ahead, in offset order:
    their offsets and event times (`matcher.watermark.NO_TIME` for none), from
    offset `start` to `end` (the offset after the last one read, and after any
    offsets without a record that followed it). Kept between batches, so that no
    record is read twice on the driver; 16 bytes a record. Invariant: the offsets
    rise, each in [start, end)."""

    start: int
    end: int = -1
    offsets: array = field(default_factory=lambda: array("q"))
    times: array = field(default_factory=lambda: array("q"))

    def __post_init__(self) -> None:
        if self.end < self.start:
            self.end = self.start

    def move_to(self, offset: int) -> None:
        """Forget the records before `offset` (all, if it is outside what is held).
        Cost: O(records held)."""
        if not self.start <= offset <= self.end:
            self.start = self.end = offset
            self.offsets, self.times = array("q"), array("q")
            return
        drop = bisect_left(self.offsets, offset)
        del self.offsets[:drop], self.times[:drop]
        self.start = offset

    def add(self, offsets: list[int], times: list[int], end: int) -> None:
        """Append the records read from `self.end` up to `end`. Cost: O(records)."""
        self.offsets.extend(offsets)
        self.times.extend(times)
        self.end = end


def plan_by_event_time(
    start: Mark,
    marks: Watermarks,
    ahead: Mapping[tuple[str, int], ReadAhead],
    max_rows: int | None,
    tie_order: Callable[[tuple[str, int]], object],
    holds: Callable[[tuple[str, int], bool, bool], bool],
) -> Mark:
    """The end of the next batch: from each partition, its records up to a common
    time, at most `max_rows` in all (`matcher.watermark.cut`), and the watermark
    its rows carry (`matcher.watermark.next_watermark`).

    `ahead` holds, for every partition with a backlog, its next records from where
    this batch starts (at least `max_rows` of them, or all up to the watermark
    `marks` gives). `tie_order` orders partitions among equal times (SEMANTICS §5:
    subscriptions first, then by partition number). `holds(partition, waiting,
    seen)` says whether a partition holds the watermark back (`waiting`: records
    left after this batch; `seen`: it has given a record with a time; the caller
    adds idleness, or AvailableNow's end). New partitions start at their low
    watermark, as in `next_end`. Pure: the same arguments give the same Mark."""
    begin = dict(start.positions)
    for tp, (lo, hi) in marks.items():
        if tp not in begin:
            begin[tp] = lo
        elif hi < begin[tp]:
            raise ValueError(
                f"{tp[0]}-{tp[1]}: latest offset {hi} is below the offset already read "
                f"{begin[tp]}; was the topic deleted and re-created?"
            )
    backlog = sorted((tp for tp, (_, hi) in marks.items() if hi > begin[tp]), key=tie_order)
    for tp in backlog:
        if ahead[tp].start != begin[tp]:
            raise ValueError(f"{tp[0]}-{tp[1]}: read ahead from {ahead[tp].start}, not {begin[tp]}")
    times = {}  # (the records read ahead past the latest offset are not this batch's)
    for tp in backlog:
        within = bisect_left(ahead[tp].offsets, marks[tp][1])
        # (a copy: a view would keep the array from being cut later)
        times[tp] = np.frombuffer(ahead[tp].times, dtype=np.int64)[:within].copy()
    taken = cut(times, max_rows)
    end, largest = dict(begin), dict(start.largest)
    for tp, count in taken.items():
        read = ahead[tp]
        end[tp] = read.offsets[count] if count < len(times[tp]) else min(read.end, marks[tp][1])
        top = largest_time(times[tp][:count])
        if top is not None and top > largest.get(tp, top - 1):
            largest[tp] = top
    holding = {}
    for tp in sorted(set(marks) | set(largest)):
        waiting = tp in marks and end[tp] < marks[tp][1]
        if holds(tp, waiting, tp in largest):
            left = times[tp][taken[tp] :] if tp in taken else ()
            holding[tp] = first_time(left)
    return Mark(end, largest, next_watermark(start.watermark, largest, holding))
