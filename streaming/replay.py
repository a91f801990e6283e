"""Topic records from JSON-lines files through the engine (`tsm replay`).

The offline twin of the Spark job: the same engine, so the same input gives
the same matches. Both files are merged in the order of SEMANTICS §5 as one
micro-batch, or, with `--batch-lines N`, cut into batches of at most N
records as the job's source cuts a backlog (SEMANTICS §3, `matcher.watermark`):
each batch takes from each file its records up to a common time, and each
file is an input partition of the watermark.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # the engine pulls in numpy: keep `tsm --help` fast
    from matcher.admission import Input
    from matcher.engine import Engine


def input_lines(path: str, kind: str) -> Iterator[Input]:
    from matcher.admission import Input
    from matcher.records import Source

    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip(b"\r\n")
            if line.strip():
                yield Input(kind, line, Source(file=path, line=number))


def _batches(
    subs: list[Input], profiles: list[Input], size: int | None
) -> Iterator[tuple[list[Input], dict[Hashable, int | None]]]:
    """The micro-batches, each with the files that have records left after it (and
    the time of each one's next record, among its next `size`): the input
    partitions that hold the watermark back (`Engine.process_batch`)."""
    from matcher.engine import input_partition
    from matcher.watermark import as_times, cut, event_time, first_time

    if not size:
        yield subs + profiles, {}
        return
    files = {input_partition(items[0]): items for items in (subs, profiles) if items}
    times = {p: as_times([event_time(i.raw, i.timestamp) for i in f]) for p, f in files.items()}
    at = dict.fromkeys(files, 0)
    while any(at[p] < len(items) for p, items in files.items()):
        taken = cut({p: times[p][at[p] : at[p] + size] for p in files}, size)
        batch = [i for p, n in taken.items() for i in files[p][at[p] : at[p] + n]]
        for p, n in taken.items():
            at[p] += n
        pending = {
            p: first_time(times[p][at[p] : at[p] + size])
            for p, items in files.items()
            if at[p] < len(items)
        }
        yield batch, pending


def replay(
    subscriptions: str,
    profiles: str,
    out: IO[bytes],
    dead_letters: IO[bytes],
    lateness_ms: int = 0,
    batch_lines: int | None = None,
    engine: Engine | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, int]:
    """Run both files through an engine; returns (match records, dead letters).

    `progress(done, total)` is called after each batch with the input records done."""
    from matcher.encoding import encode
    from matcher.engine import Engine

    engine = engine or Engine(lateness_ms=lateness_ms)
    subs = list(input_lines(subscriptions, "subscription"))
    profs = list(input_lines(profiles, "profile"))
    total = len(subs) + len(profs)
    counts = {"matches": 0, "deadletter": 0}
    done = 0
    for batch, pending in _batches(subs, profs, batch_lines):
        for output in engine.process_batch(batch, pending):
            target = out if output.topic == "matches" else dead_letters
            target.write(encode(output.value) + b"\n")
            counts[output.topic] += 1
        done += len(batch)
        if progress is not None:
            progress(done, total)
    return counts["matches"], counts["deadletter"]
