"""Produce a JSON-lines file to a topic, each line as one record, bytes unchanged.

Lines are not validated here: a bad line must reach the topic so that the
job dead-letters it with its Kafka position, exactly as `tsm replay` does
with its file position. The key is the record's `space` where the line
parses, so that a space's records share a partition and keep their order.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from connectors.config import confluent_config, producer_config
from connectors.errors import ProduceError
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
    from confluent_kafka import Producer

    producer = Producer(
        producer_config(confluent_config(bootstrap, options, required={"linger.ms": 20}))
    )
    failures: list[str] = []
    acked = 0

    def on_delivery(err, _msg) -> None:
        nonlocal acked
        if err is None:
            acked += 1
        else:
            failures.append(str(err))

    sent = 0
    too_large: list[str] = []
    next_report = time.monotonic() + 1.0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not _send(producer, topic, line, on_delivery):
            too_large.append(f"line {number} ({len(line):,} bytes)")
            continue
        sent += 1
        if sent % 1000 == 0:  # serve delivery callbacks; per record it costs 3x the time
            producer.poll(0)
        if progress is not None and time.monotonic() >= next_report:
            progress(sent)
            next_report += 1.0
    remaining = producer.flush(timeout)
    problems = []
    if remaining or failures:
        first = failures[0] if failures else f"{remaining} still queued after {timeout:g}s"
        problems.append(f"{sent - acked} of {sent} records not acknowledged: {first}")
    if too_large:
        shown = ", ".join(too_large[:5]) + (", ..." if len(too_large) > 5 else "")
        problems.append(
            f"{len(too_large)} line(s) too large for one Kafka message, not sent: {shown}"
        )
    if problems:
        raise ProduceError(f"{acked} records produced to {topic}; " + "; ".join(problems))
    return acked


def _send(producer: Any, topic: str, line: bytes, on_delivery: Callable) -> bool:
    """Queue one record; False if the client refuses it as over `message.max.bytes`."""
    from confluent_kafka import KafkaError, KafkaException

    while True:
        try:
            producer.produce(topic, value=line, key=record_key(line), on_delivery=on_delivery)
            return True
        except BufferError:  # local queue full: let deliveries drain it
            producer.poll(0.1)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                raise
            return False


def terminal_progress(label: str) -> Callable[[int], None] | None:
    """A progress line on stderr when stderr is a terminal, else None."""
    if not sys.stderr.isatty():
        return None
    return lambda n: print(f"\r{label}: {n} records", end="", file=sys.stderr, flush=True)
