"""Produce a JSON-lines file to a topic, each line as one record, bytes unchanged.

Lines are not validated here: a bad line must reach the topic so that the
job dead-letters it with its Kafka position, exactly as `tsm replay` does
with its file position. The key is the record's `space` where the line
parses, so that a space's records share a partition and keep their order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping

from connectors.config import confluent_config
from connectors.errors import ProduceError, RecordTooLarge
from connectors.producer import Producer
from matcher.records import as_name


def record_key(line: bytes) -> bytes | None:
    """The UTF-8 `space` of a JSON object line, or None if there is none."""
    try:
        record = json.loads(line.decode())  # str: skips json's encoding detection
        space = as_name(record.get("space")) if isinstance(record, dict) else None
        return None if space is None else space.encode()
    # bad JSON and bad UTF-8 (UnicodeDecodeError) alike, nesting deeper than json
    # recurses, a space with a lone surrogate escape (UnicodeEncodeError)
    except (ValueError, RecursionError):
        return None


def read_lines(stream: Iterable[bytes]) -> Iterable[bytes]:
    """Lines without their terminator (`\\n` or `\\r\\n`), blank ones too, so that
    `produce_lines` counts file lines."""
    for line in stream:
        yield line.rstrip(b"\n").removesuffix(b"\r")


def produce_lines(
    bootstrap: str,
    topic: str,
    lines: Iterable[bytes],
    options: Mapping[str, str] | None = None,
    progress: Callable[[int], None] | None = None,
    timeout: float = 60.0,
) -> int:
    """Send each line as a record value with an idempotent producer; wait for every ack.

    Blank lines are skipped. Returns the number of records acknowledged.
    Raises `ProduceError` if any was not (after librdkafka's own retries),
    reporting the first error, or if a line was too large for one Kafka
    message: such a line cannot reach the topic (nor the dead letters), and
    the error names it by its position in `lines`, after the rest are sent.
    `progress(sent)` is called about once a second.
    """
    sent = 0
    unacknowledged = 0
    too_large: list[str] = []
    next_report = time.monotonic() + 1.0
    problems = []
    with Producer(confluent_config(bootstrap, options, required={"linger.ms": 20})) as producer:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                producer.produce(topic, line, record_key(line))
            except RecordTooLarge:
                too_large.append(f"line {number} ({len(line):,} bytes)")
                continue
            sent += 1
            if progress is not None and time.monotonic() >= next_report:
                progress(sent)
                next_report += 1.0
        try:
            producer.flush(timeout)
        except ProduceError as exc:
            unacknowledged = exc.unacknowledged
            problems.append(str(exc))
    acked = sent - unacknowledged
    if too_large:
        shown = ", ".join(too_large[:5]) + (", ..." if len(too_large) > 5 else "")
        problems.append(
            f"{len(too_large)} line(s) too large for one Kafka message, not sent: {shown}"
        )
    if problems:
        raise ProduceError(f"{acked} records produced to {topic}; " + "; ".join(problems))
    return acked
