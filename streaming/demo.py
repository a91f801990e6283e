"""The demo's scenario, replayed in event time against the running job (`tsm demo`).

`Director` publishes the bundled scenario (`examples/demo/`) tick by tick of
event time while it hands the matches and dead letters, as they reach their
topics, to a `Display`, and ends once everything published has been matched
and read back. The command (`tsm_cli.demo`) starts the broker and the job
and draws the display.

The first tick (the subscriptions of 08:00) is published before the clock
starts and the clock waits for the job's first batch, so that the start-up
of Spark's Python workers does not swallow the first minutes of the
scenario. Output topics are read by offset ranges, never by an idle
subscribed consumer (PLATFORM.md: an idle consumer makes noida-db spin).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

SCENARIO = Path(__file__).resolve().parents[1] / "examples" / "demo"
# Event-time seconds replayed per wall second: the 5-minute scenario in ~30 s.
DEFAULT_SPEED = 10.0
TRIGGER = "1 second"
# Quiet time after the last batch before the demo calls the output drained:
# longer than the trigger, so that a no-data batch (event-time timers) runs first.
SETTLE_S = 2.5
POLL_S = 0.25


# -- the scenario ---------------------------------------------------------------------------


@dataclass
class Tick:
    """The records of one event-time instant, by topic role, in file order."""

    ts: int
    lines: dict[str, list[bytes]] = field(
        default_factory=lambda: {"subscriptions": [], "profiles": []}
    )


class ScenarioError(ValueError):
    """A scenario directory that cannot be replayed; the message says which file and why."""


def load_ticks(directory: Path) -> list[Tick]:
    """Both files merged by `ts`; a line without a readable `ts` (a bad record on purpose)
    goes out with the line before it in its file."""
    from matcher.errors import RecordError
    from matcher.records import Source, decode

    ticks: dict[int, Tick] = {}
    for role, kind in (("subscriptions", "subscription"), ("profiles", "profile")):
        path = directory / f"{role}.jsonl"
        if not path.is_file():
            raise ScenarioError(f"no scenario file {path}")
        ts = None
        for line in path.read_bytes().splitlines():
            if not line.strip():
                continue
            try:
                ts = decode(kind, line, Source()).ts
            except RecordError:
                pass
            if ts is None:
                raise ScenarioError(f"{path}: the first record needs a readable ts")
            ticks.setdefault(ts, Tick(ts)).lines[role].append(line)
    return [ticks[ts] for ts in sorted(ticks)]


def clock(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S")


# -- reading the output topics ----------------------------------------------------------------


class OutputReader:
    """New records of the output topics since the last call, read by offset range."""

    def __init__(
        self, bootstrap: str, topics: list[str], options: dict[str, str] | None = None
    ) -> None:
        from confluent_kafka import Consumer

        from connectors.config import confluent_config

        self.config = confluent_config(
            bootstrap, options, required={"group.id": "tsm-demo", "enable.auto.commit": False}
        )
        self.watermarks = Consumer(self.config)  # metadata only: never assigned, never fetches
        self.next: dict[tuple[str, int], int] = {}
        for topic in topics:
            for partition in (
                self.watermarks.list_topics(topic, timeout=10).topics[topic].partitions
            ):
                self.next[(topic, partition)] = 0

    def poll(self) -> list[tuple[str, bytes, int]]:
        """(topic, value, Kafka timestamp in ms) of every record since the last call."""
        from confluent_kafka import TopicPartition

        from connectors.kafka_source import OffsetRange, read_range

        out = []
        for (topic, partition), start in self.next.items():
            _low, high = self.watermarks.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=10, cached=False
            )
            if high <= start:
                continue
            part = OffsetRange(topic, partition, start, high)
            for batch in read_range(self.config, part, poll_timeout=30.0):
                values, stamps = batch.column("value").to_pylist(), batch.column("timestamp")
                micros = stamps.cast("int64").to_pylist()
                out.extend((topic, v, t // 1000) for v, t in zip(values, micros, strict=True))
            self.next[(topic, partition)] = high
        return out

    def close(self) -> None:
        self.watermarks.close()


class Display(Protocol):
    """What the demo shows: the output records as they arrive, and each tick as published."""

    def show(self, records: list[tuple[str, bytes, int]]) -> None: ...

    def published(self, ts: int, counts: dict[str, int]) -> None: ...


# -- the job's progress -----------------------------------------------------------------------


def progress_listener(query_name: str) -> Any:
    """A listener counting the query's batches and input rows (for the summary and
    to know when everything published has been processed)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):
        def __init__(self) -> None:
            self.batches = 0
            self.rows = 0
            self.last = time.monotonic()

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            if event.progress.name == query_name:
                self.batches += 1
                self.rows += event.progress.numInputRows
                self.last = time.monotonic()

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return Progress()


# -- replaying the scenario ---------------------------------------------------------------


class Director:
    """Publishes the ticks on the event-time clock while the display shows the output,
    then waits until everything published is processed and read back.

    `speed` is event-time seconds per wall second (0: all at once); with
    `follow`, it keeps showing the output after the scenario, until stopped.
    """

    def __init__(
        self,
        ticks: list[Tick],
        bootstrap: str,
        config: Any,
        listener: Any,
        reader: OutputReader,
        display: Display,
        stop: Any,
        *,
        speed: float = DEFAULT_SPEED,
        follow: bool = False,
    ) -> None:
        self.speed, self.follow = speed, follow
        self.ticks, self.bootstrap, self.config = ticks, bootstrap, config
        self.listener, self.reader, self.display, self.stop = listener, reader, display, stop
        self.published = 0
        self.finished = False

    def run(self, query: Any) -> None:
        try:
            self._publish(self.ticks[0])
            self._await(lambda: self.listener.rows > 0, query)  # the job is warm
            origin_ts, origin = self.ticks[0].ts, time.monotonic()
            for tick in self.ticks[1:]:
                if self.speed:
                    due = origin + (tick.ts - origin_ts) / 1000 / self.speed
                    self._await(lambda due=due: time.monotonic() >= due, query)
                if self.stop.event.is_set() or not query.isActive:
                    return
                self._publish(tick)
            self._await(lambda: self._drained(query), query)
            self.finished = not self.stop.event.is_set()
            if self.finished and not self.follow:
                self.stop.event.set()
            elif self.finished:
                log.info("scenario done; following the topics until Ctrl-C")
                self._await(lambda: False, query)
        except Exception:
            self.stop.event.set()  # the main thread stops the query and reports
            raise

    def _publish(self, tick: Tick) -> None:
        from connectors.produce import produce_lines

        counts = {}
        for role in ("subscriptions", "profiles"):
            lines = tick.lines[role]
            if lines:
                topic = getattr(self.config.topics, role)
                options = self.config.kafka_options
                self.published += produce_lines(self.bootstrap, topic, lines, options)
                counts[role] = len(lines)
        self.display.published(tick.ts, counts)

    def _drained(self, query: Any) -> bool:
        return (
            self.listener.rows >= self.published
            and not query.status["isTriggerActive"]
            and time.monotonic() - self.listener.last > SETTLE_S
        )

    def _await(self, done: Any, query: Any) -> None:
        """Show the output while waiting for `done()`, a stop request or the query's end."""
        while not done() and not self.stop.event.is_set() and query.isActive:
            self.display.show(self.reader.poll())
            self.stop.event.wait(POLL_S)
        self.display.show(self.reader.poll())
