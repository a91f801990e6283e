"""Offset arithmetic of the Kafka source, free of Spark and of any client.

An offset is `{"topic": {"partition": next offset to read}}`, the JSON form
of Spark's own Kafka source, kept in one canonical order (topics by name,
partitions by number): Spark compares offsets as JSON text to decide whether
a batch has new data, so an equal offset written in another order would run
an empty batch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

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
