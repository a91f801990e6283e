"""Topic records from JSON-lines files through the engine (`tsm replay`).

The offline twin of the Spark job: the same engine, so the same input gives
the same matches. Both files are merged in the order of SEMANTICS §5 as one
micro-batch (or, with `batch_lines`, as batches of that many lines of each
file, to see how micro-batch boundaries and lateness play out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # the engine pulls in numpy: keep `tsm --help` fast
    from matcher.admission import Input
    from matcher.engine import Engine


def _lines(path: str, kind: str) -> Iterator[Input]:
    from matcher.admission import Input
    from matcher.records import Source

    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip(b"\r\n")
            if line.strip():
                yield Input(kind, line, Source(file=path, line=number))


def _batches(subs: list[Input], profiles: list[Input], size: int | None) -> Iterator[list[Input]]:
    if not size:
        yield subs + profiles
        return
    for start in range(0, max(len(subs), len(profiles)), size):
        yield subs[start : start + size] + profiles[start : start + size]


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
    subs = list(_lines(subscriptions, "subscription"))
    profs = list(_lines(profiles, "profile"))
    total = len(subs) + len(profs)
    counts = {"matches": 0, "deadletter": 0}
    done = 0
    for batch in _batches(subs, profs, batch_lines):
        for output in engine.process_batch(batch):
            target = out if output.topic == "matches" else dead_letters
            target.write(encode(output.value) + b"\n")
            counts[output.topic] += 1
        done += len(batch)
        if progress is not None:
            progress(done, total)
    return counts["matches"], counts["deadletter"]
