"""A quenching producer (ROUTING §4, Elvin's quenching): profiles that nobody wants stay here.

A site of a network publishes the interest that reaches it (its subscribers'
and its neighbours', as a covering root set) to a compacted topic
(`<prefix>tsm.interest`, keyed by space and filter; a tombstone removes one;
with `flooding`, one record `*` says that every profile is wanted). This
producer reads that topic before it sends and as it sends, and:

- sends a publish that some interest filter of its space overlaps, and any
  publish of an id it has sent before (the site holds that id: its pairs
  must change or end there, as they would with the record sent);
- holds back a publish that no interest overlaps (a newer version of the id
  replaces the held one); a retract of a held-back id is dropped with it, a
  retract of a sent id is sent;
- sends a held-back publish when interest for it appears while it is still
  valid: its `valid_to` at or after the producer's clock, the largest `ts` it
  has sent. It enters the network then: its `ts` becomes that clock (a record
  older than the site's watermark would be late), so a subscriber that
  arrived meanwhile gets it as `new-profile` at that time;
- sends every other record (advertisements, bad lines: the site's dead
  letters say what is wrong with them) as it is.

Costs: a publish, one overlap test against its space's filters
(`matcher.routing.cover_set.CoverSet`, vectorised); new interest, one test per
held-back publish of its space.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from connectors.config import confluent_config
from connectors.producer import Producer
from matcher.errors import RecordError
from matcher.records import Publish, Retract, Source, decode
from matcher.routing import wire
from matcher.routing.cover_set import CoverSet

WANT_ALL_KEY = b"*"


@dataclass
class QuenchCounts:
    sent: int = 0  # records sent as they came
    held_back: int = 0  # publishes held back when they came
    released: int = 0  # of them, sent later, when interest appeared
    dropped: int = 0  # of them, never sent: replaced, retracted or expired while held


@dataclass
class Interest:
    """The interest a site publishes, per space, as its compacted topic says now."""

    spaces: dict[str, CoverSet] = field(default_factory=dict)
    filters: dict[bytes, tuple[str, Any]] = field(default_factory=dict)  # key -> (space, filter)
    everything: bool = False

    def apply(self, key: bytes | None, value: bytes | None) -> str | None:
        """One record of the topic; the space whose interest grew, if any."""
        if key is None:
            return None
        if key == WANT_ALL_KEY:
            self.everything = value is not None
            return None
        old = self.filters.pop(key, None)
        if old is not None:
            self.spaces[old[0]].discard(old[1])
        if value is None:
            return None
        change = wire.decode(value)
        assert isinstance(change, wire.FilterChange)
        self.filters[key] = (change.space, change.filter)
        self.spaces.setdefault(change.space, CoverSet()).add(change.filter)
        return change.space

    def wants(self, pub: Publish) -> bool:
        if self.everything:
            return True
        table = self.spaces.get(pub.space)
        return table is not None and len(table) > 0 and bool(table.overlapping([pub.profile])[0])


class Quench:
    """The decisions of a quenching producer, without Kafka (see the module docstring):
    `interest` and `line` return the records to send, as `(value, key)`."""

    def __init__(self) -> None:
        self.counts = QuenchCounts()
        self.interest = Interest()
        self.clock = -math.inf  # the largest ts sent
        self.held: dict[tuple[str, str], tuple[Publish, dict[str, Any]]] = {}
        self.sent_ids: set[tuple[str, str]] = set()
        self._line = 0

    def interest_records(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> list:
        """Records of the interest topic; the held-back publishes they release."""
        grown = set()
        for key, value in records:
            space = self.interest.apply(key, value)
            if space is not None:
                grown.add(space)
        if not (grown or self.interest.everything):
            return []
        out = []
        for key, (pub, raw) in list(self.held.items()):
            if pub.valid_to < self.clock:
                del self.held[key]
                self.counts.dropped += 1
            elif (pub.space in grown or self.interest.everything) and self.interest.wants(pub):
                del self.held[key]
                ts = max(pub.ts, self.clock)
                out.append(self._sent(json.dumps({**raw, "ts": ts}).encode(), key))
                self.counts.released += 1
        return out

    def line(self, line: bytes) -> list[tuple[bytes, bytes | None]]:
        """One profiles-topic record: what to send now (it, or nothing)."""
        self._line += 1
        try:
            record = decode("profile", line, Source(file="quench", line=self._line))
            raw = json.loads(line)
        except (RecordError, ValueError):
            record = None
        if not isinstance(record, Publish | Retract):
            self.counts.sent += 1
            return [(line, None)]
        key = (record.space, record.id)
        self.clock = max(self.clock, record.ts)
        if self.held.pop(key, None) is not None:
            self.counts.dropped += 1
        if isinstance(record, Retract):
            if key not in self.sent_ids:
                return []
            self.sent_ids.discard(key)
            self.counts.sent += 1
            return [(line, key[0].encode())]
        if key in self.sent_ids or self.interest.wants(record):
            self.counts.sent += 1
            return [self._sent(line, key)]
        self.held[key] = (record, raw)
        self.counts.held_back += 1
        return []

    def _sent(self, value: bytes, key: tuple[str, str]) -> tuple[bytes, bytes]:
        self.sent_ids.add(key)
        return (value, key[0].encode())

    def end(self) -> QuenchCounts:
        """What is still held back is dropped; the counts."""
        self.counts.dropped += len(self.held)
        self.held.clear()
        return self.counts


class QuenchingProducer:
    """Send profiles-topic lines to `topic`, quenched by `interest_topic` (`Quench`).
    Use as a context manager; `close(wait_s)` waits up to that long for interest in
    what is still held back."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        interest_topic: str,
        options: Mapping[str, str] | None = None,
    ) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.topic = topic
        self.quench = Quench()
        self._producer = Producer(confluent_config(bootstrap, options))
        self._consumer = Consumer(
            confluent_config(
                bootstrap,
                options,
                required={"group.id": "tsm-quench", "enable.auto.commit": False},
            )
        )
        meta = self._consumer.list_topics(interest_topic, timeout=10).topics[interest_topic]
        if meta.error is not None:
            self._consumer.close()
            raise ValueError(
                f"no interest topic {interest_topic!r} at {bootstrap}: is the site's job "
                "(tsm run --network) running there?"
            )
        self._parts = [TopicPartition(interest_topic, p, 0) for p in meta.partitions]
        self._consumer.assign(self._parts)
        self._ends = {
            p.partition: self._consumer.get_watermark_offsets(p, timeout=10)[1] for p in self._parts
        }
        self.refresh(until_caught_up=True)

    def __enter__(self) -> QuenchingProducer:
        return self

    def __exit__(self, *_: object) -> None:
        self._consumer.close()

    def refresh(self, *, until_caught_up: bool = False, timeout: float = 0.0) -> None:
        """Read the interest records that arrived (with `until_caught_up`, all up to
        the topic's end when this producer started); send what new interest asks for."""
        deadline = time.monotonic() + (30.0 if until_caught_up else timeout)
        while True:
            messages = [m for m in self._consumer.consume(1000, timeout=0.1) if m.error() is None]
            self._send(self.quench.interest_records((m.key(), m.value()) for m in messages))
            behind = until_caught_up and any(
                0 < self._ends[p.partition] and p.offset < self._ends[p.partition]
                for p in self._consumer.position(self._parts)
            )
            if time.monotonic() >= deadline or not (behind or messages):
                return

    def send_lines(self, lines: Iterable[bytes], refresh_every: int = 200) -> None:
        for n, line in enumerate(lines, start=1):
            if line.strip():
                self._send(self.quench.line(line))
            if n % refresh_every == 0:
                self.refresh()

    def _send(self, records: list[tuple[bytes, bytes | None]]) -> None:
        for value, key in records:
            self._producer.produce(self.topic, value, key)

    def close(self, wait_s: float = 0.0) -> QuenchCounts:
        """Wait up to `wait_s` for interest in what is held back; flush; the counts."""
        deadline = time.monotonic() + wait_s
        while self.quench.held and time.monotonic() < deadline:
            self.refresh(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
        self._producer.flush()
        return self.quench.end()
