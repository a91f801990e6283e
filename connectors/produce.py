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

from connectors.config import confluent_config, producer_config


class ProduceError(RuntimeError):
    """The broker did not acknowledge some records; the message says how many and why."""


def record_key(line: bytes) -> bytes | None:
    """The UTF-8 `space` of a JSON object line, or None if there is none."""
    try:
        record = json.loads(line.decode())  # str: skips json's encoding detection
        space = record.get("space") if isinstance(record, dict) else None
        return space.encode() if isinstance(space, str) else None
    # bad JSON and bad UTF-8 (UnicodeDecodeError) alike, nesting deeper than json
    # recurses, a space with a lone surrogate escape (UnicodeEncodeError)
    except (ValueError, RecursionError):
        return None


def read_lines(stream: Iterable[bytes]) -> Iterable[bytes]:
    """Lines without their terminator (`\\n` or `\\r\\n`); blank lines are skipped."""
    for line in stream:
        line = line.rstrip(b"\n").removesuffix(b"\r")
        if line.strip():
            yield line


def produce_lines(
    bootstrap: str,
    topic: str,
    lines: Iterable[bytes],
    options: Mapping[str, str] | None = None,
    progress: Callable[[int], None] | None = None,
    timeout: float = 60.0,
) -> int:
    """Send each line as a record value with an idempotent producer; wait for every ack.

    Returns the number of records acknowledged. Raises `ProduceError` if any
    was not (after librdkafka's own retries), reporting the first error.
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
    next_report = time.monotonic() + 1.0
    for line in lines:
        while True:
            try:
                producer.produce(topic, value=line, key=record_key(line), on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: let deliveries drain it
                producer.poll(0.1)
        sent += 1
        if sent % 1000 == 0:  # serve delivery callbacks; per record it costs 3x the time
            producer.poll(0)
        if progress is not None and time.monotonic() >= next_report:
            progress(sent)
            next_report += 1.0
    remaining = producer.flush(timeout)
    if remaining or failures:
        first = failures[0] if failures else f"{remaining} still queued after {timeout:g}s"
        raise ProduceError(f"{sent - acked} of {sent} records not acknowledged: {first}")
    return acked


def terminal_progress(label: str) -> Callable[[int], None] | None:
    """A progress line on stderr when stderr is a terminal, else None."""
    if not sys.stderr.isatty():
        return None
    return lambda n: print(f"\r{label}: {n} records", end="", file=sys.stderr, flush=True)
