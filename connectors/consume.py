"""Read a topic's records until a count or a quiet period, for people and scripts.

The consumer is closed in `finally`: noida-db never evicts a consumer that
vanished without leaving its group, and an idle open consumer makes it spin
(PLATFORM.md). Each run uses a fresh group unless one is given, so that runs
do not steal partitions from each other.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from connectors.config import confluent_config

# How long, beyond the timeout, to wait for the consumer group's assignment.
JOIN_WAIT = 10.0


def consume_values(bootstrap: str, topic: str, **how: Any) -> Iterator[bytes]:
    """Yield record values of `topic`: those of `consume_records`, given the same
    keyword arguments."""
    return (value for _key, value in consume_records(bootstrap, topic, **how))


def consume_records(
    bootstrap: str,
    topic: str,
    *,
    from_beginning: bool = False,
    max_records: int | None = None,
    timeout: float = 10.0,
    read_committed: bool = False,
    group: str | None = None,
    options: Mapping[str, str] | None = None,
) -> Iterator[tuple[bytes | None, bytes]]:
    """Yield the key and value of `topic`'s records in arrival order, per partition in
    offset order.

    Stops after `max_records` values, or when nothing new arrived for
    `timeout` seconds since the partitions were assigned. `from_beginning`
    applies where the group has no committed offset (always, for the default
    fresh group). With
    `read_committed`, records of open or aborted transactions are not shown.
    """
    from confluent_kafka import Consumer, KafkaError, KafkaException

    consumer = Consumer(
        confluent_config(
            bootstrap,
            options,
            required={
                "group.id": group or f"tsm-consume-{uuid.uuid4().hex[:12]}",
                "auto.offset.reset": "earliest" if from_beginning else "latest",
                # A fresh group's progress is worth nothing; a named one resumes.
                "enable.auto.commit": group is not None,
                "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            },
        )
    )
    count = 0
    # The quiet period starts once the group has given this consumer its partitions
    # (about half a second on noida-db), not before: a short timeout would end the
    # read before it began.
    quiet_until = time.monotonic() + timeout + JOIN_WAIT

    def assigned(_consumer: Any, _partitions: list) -> None:
        nonlocal quiet_until
        quiet_until = time.monotonic() + timeout

    try:
        consumer.subscribe([topic], on_assign=assigned)
        while max_records is None or count < max_records:
            wait = quiet_until - time.monotonic()
            if wait <= 0:
                return
            want = 500 if max_records is None else min(500, max_records - count)
            for message in consumer.consume(want, timeout=min(wait, 0.5)):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(error)
                count += 1
                quiet_until = time.monotonic() + timeout
                yield message.key(), message.value() or b""
    finally:
        consumer.close()


def as_json_line(value: bytes) -> tuple[bytes, bool]:
    """`value` as one line of JSON, and whether it was JSON already.

    UTF-8 JSON is printed as it is (re-encoded only if it spans lines);
    anything else becomes a JSON string: its text, or its base64 if it is not
    UTF-8 (JSON in UTF-16 too, which would reach stdout as UTF-16).
    """
    try:
        text = value.decode()
    except UnicodeDecodeError:
        return json.dumps(base64.b64encode(value).decode()).encode(), False
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):  # (nested deeper than json recurses: shown as text)
        return json.dumps(text).encode(), False
    if "\n" in text or "\r" in text:
        text = json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)
        # (a lone surrogate escape has no UTF-8: keep the escapes then)
        return text.encode("utf-8", "backslashreplace"), True
    return value.strip(), True
