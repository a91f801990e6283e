"""One subscriber's match records across the sites of a network, as if she never moved.

ROUTING §5: when a subscriber moves from site A to site B at event time T, A
writes her last record, `{"event": "moved", "subscriber": ..., "to": "B",
"ts": T}`, to its matches topic, and B makes her records from T on. A
consumer that reads A's matches up to that record and B's from there sees
exactly the records a subscriber who never moved would see. `follow_moves`
does that reading, so that a client needs no protocol code of its own: it
reads her records at one site, and at her `moved` record goes on at the
site it names, where it left off there (at the start, the first time: a
site makes none of her records before she arrives), and so on, back and
forth.

The reading is over any per-site source of records (`SiteReader`): a list
per site (`ListReader`, what `tsm replay --network` gives) or each site's
Kafka matches topic (`KafkaReader`, what `tsm consume matches
--follow-moves` uses).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from connectors.config import confluent_config

# How long, beyond the timeout, to wait for a partition assignment.
JOIN_WAIT = 10.0


class SiteReader(Protocol):
    def read(self, site: str, cursor: Any) -> Iterator[tuple[Any, dict[str, Any]]]:
        """A site's records from `cursor` (None: the start), each with the cursor just
        after it; ends when the source has nothing more (for now)."""
        ...


def follow_moves(subscriber: str, start: str, reader: SiteReader) -> Iterator[dict[str, Any]]:
    """The subscriber's records, from her site `start` on, switching at each `moved`
    record to the site it names. The `moved` records themselves are not yielded.
    Ends when the site she is at has nothing more to read. A site's job writes at
    least once: a `moved` record written twice is followed once (a client moves at
    most once a millisecond), and records written twice are yielded twice, the same
    `match_id`, for the reader to drop as duplicates."""
    cursors: dict[str, Any] = {}
    followed: set[tuple[str, Any]] = set()  # (site, ts) of the `moved` records followed
    site = start
    while True:
        moved_to = None
        for cursor, record in reader.read(site, cursors.get(site)):
            if record.get("subscriber") != subscriber:
                continue
            if record.get("event") == "moved":
                if (site, record.get("ts")) in followed:
                    continue  # (written again by a batch that ran again: followed once)
                followed.add((site, record.get("ts")))
                cursors[site] = cursor
                moved_to = record.get("to")
                break
            yield record
        if not isinstance(moved_to, str):
            return
        site = moved_to


class ListReader:
    """Per-site lists of records (e.g. `matcher.routing.replay.site_streams`)."""

    def __init__(self, streams: Mapping[str, list[dict[str, Any]]]) -> None:
        self.streams = streams

    def read(self, site: str, cursor: int | None) -> Iterator[tuple[int, dict[str, Any]]]:
        records = self.streams.get(site, [])
        for at in range(cursor or 0, len(records)):
            yield at + 1, records[at]


class KafkaReader:
    """Each site's matches topic on its own cluster (bootstrap and topic per site).

    A cursor is the next offset of each partition. A site is read by one
    consumer at a time, assigned every partition of its topic (her records
    are in the partition of her key, which this reader need not know), and
    closed when she moves on: an idle open consumer makes noida-db spin, and
    one that vanished without closing is never evicted (PLATFORM.md).
    Reading a site stops after `timeout` seconds with nothing new."""

    def __init__(
        self,
        sites: Mapping[str, tuple[str, str]],
        *,
        timeout: float = 10.0,
        options: Mapping[str, str] | None = None,
    ) -> None:
        self.sites = sites  # site -> (bootstrap, topic)
        self.timeout = timeout
        self.options = options

    def read(self, site: str, cursor: dict[int, int] | None) -> Iterator[tuple[Any, dict]]:
        from confluent_kafka import (
            OFFSET_BEGINNING,
            Consumer,
            KafkaError,
            KafkaException,
            TopicPartition,
        )

        if site not in self.sites:
            raise ValueError(f"the subscriber moved to site {site!r}, which the network lacks")
        bootstrap, topic = self.sites[site]
        consumer = Consumer(
            confluent_config(
                bootstrap,
                self.options,
                required={
                    "group.id": f"tsm-follow-{uuid.uuid4().hex[:12]}",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                },
            )
        )
        offsets = dict(cursor or {})
        try:
            meta = consumer.list_topics(topic, timeout=self.timeout + JOIN_WAIT)
            partitions = sorted(meta.topics[topic].partitions) if topic in meta.topics else []
            consumer.assign(
                [TopicPartition(topic, p, offsets.get(p, OFFSET_BEGINNING)) for p in partitions]
            )
            quiet_until = time.monotonic() + self.timeout
            while partitions:
                wait = quiet_until - time.monotonic()
                if wait <= 0:
                    return
                for message in consumer.consume(500, timeout=min(wait, 0.5)):
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise KafkaException(error)
                    quiet_until = time.monotonic() + self.timeout
                    offsets[message.partition()] = message.offset() + 1
                    try:
                        record = json.loads(message.value() or b"")
                    except ValueError:
                        continue
                    if isinstance(record, dict):
                        yield dict(offsets), record
        finally:
            consumer.close()
