"""Where a stage's output records go: out of the stage to the sink, or to Kafka directly.

A stage that makes its records in a Python worker (the job's operator) either
hands them on to the `foreachBatch` sink as packed rows (`Packer`; exactly
once needs this: the sink's transactions are keyed by Spark's batch id), or
writes them from the worker itself, at least once (`DirectWriter`). Then its
records never cross into the JVM and back (at 100k subscriptions, 320k records
and 92 MB a batch), and the worker keeps one connected producer for all its
batches (`producer_pool.WORKER_PRODUCERS`), where the sink's task makes,
connects and closes one per batch. It waits for every acknowledgement before
its task ends, so before Spark commits the batch's state and offsets: a batch
that fails is run again and writes its records again, as a re-run sink task
would.

Both have one interface (`Outlet`): `add` a list of `(key, value)` and yield
any frames to pass on, `flush` at the end and yield the rest.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

import pandas as pd

from connectors.producer_pool import WORKER_PRODUCERS
from connectors.sink_rows import Packer


class Routing(Protocol):
    """What `Routed` asks of a routing of records to topics (`connectors.tenants`)."""

    def topic(self, key: bytes | None) -> str: ...

    def ensure(self, topics: set[str]) -> None: ...


# The most records a `DirectWriter` keeps (references to, about 30 MB of match
# records) to write again after its producer failed; a batch of 100k profiles at
# 100k subscriptions makes 6.4M, which a retried task writes again instead.
KEPT = 100_000


class DirectWriter:
    """`Packer`'s interface, but each record goes to Kafka as it is added, from the
    worker's shared producer, and `flush` waits for them all: its frames are
    always empty. The stage's task must read `flush` to the end before it ends.

    A producer that fails (fatally: e.g. its idempotence sequence lost when a
    topic was deleted and made again) fails every later call, so it is dropped,
    and the records added since the last flush are written again by a new one
    (at least once: some may be in Kafka twice), if they are at most `KEPT`;
    otherwise, or if that fails too, the error is the task's, and Spark runs it
    again."""

    def __init__(self, topic: str, config: Mapping[str, object]) -> None:
        self.topic = topic
        self.count = 0
        self._config = config
        self._key = WORKER_PRODUCERS.key(config)  # (made once: `add` runs once per profile)
        # the records since the last flush, while they are at most KEPT; else None
        self._added: list[list[tuple[bytes | None, bytes]]] | None = []
        self._kept = 0

    def add(self, records: list[tuple[bytes | None, bytes]]) -> Iterator[pd.DataFrame]:
        if self._added is not None:
            self._kept += len(records)
            if self._kept <= KEPT:
                self._added.append(records)
            else:
                self._added = None
        try:
            self._write(records)
        except Exception as exc:
            self._again(exc)
        self.count += len(records)
        return iter(())

    def flush(self) -> Iterator[pd.DataFrame]:
        try:
            WORKER_PRODUCERS.get(self._key, self._config).flush()
        except Exception as exc:
            self._again(exc)
        self._added, self._kept = [], 0
        return iter(())

    def _write(self, records: list[tuple[bytes | None, bytes]]) -> None:
        topic = self.topic
        producer = WORKER_PRODUCERS.get(self._key, self._config)
        producer.produce_many((topic, key, value) for key, value in records)

    def _again(self, error: Exception) -> None:
        WORKER_PRODUCERS.drop(self._key)
        if self._added is None:
            raise error
        print(
            f"tsm: the Kafka producer failed ({error}); writing the records since the last "
            "flush again with a new one",
            file=sys.stderr,
        )
        try:
            for records in self._added:
                self._write(records)
            WORKER_PRODUCERS.get(self._key, self._config).flush()
        except BaseException:
            WORKER_PRODUCERS.drop(self._key)
            raise


class Routed:
    """`Packer`'s interface over one outlet per topic, the topic of each record chosen
    by its key (`connectors.tenants.TenantTopics.topic`: a tenant's matches to its
    own topic). A record keeps its order among those of its topic; a topic met for
    the first time is made first (`ensure`). Cost of `add`: a dict lookup per
    record, and a call per topic it meets."""

    def __init__(
        self,
        route: Callable[[bytes | None], str],
        make: Callable[[str], Packer | DirectWriter],
        ensure: Callable[[set[str]], None],
    ) -> None:
        self._route, self._make, self._ensure = route, make, ensure
        self._outlets: dict[str, Packer | DirectWriter] = {}
        self._topics: dict[bytes | None, str] = {}  # key → topic, as met

    @property
    def count(self) -> int:
        return sum(out.count for out in self._outlets.values())

    def add(self, records: list[tuple[bytes | None, bytes]]) -> Iterator[pd.DataFrame]:
        runs: dict[str, list[tuple[bytes | None, bytes]]] = {}
        for record in records:
            topic = self._topics.get(record[0])
            if topic is None:
                topic = self._topics[record[0]] = self._route(record[0])
            runs.setdefault(topic, []).append(record)
        new = set(runs) - set(self._outlets)
        if new:
            self._ensure(new)
            self._outlets.update((topic, self._make(topic)) for topic in new)
        for topic, run in runs.items():
            yield from self._outlets[topic].add(run)

    def flush(self) -> Iterator[pd.DataFrame]:
        for out in self._outlets.values():
            yield from out.flush()


Outlet = Packer | DirectWriter | Routed


def outlet(
    topic: str, direct: Mapping[str, object] | None = None, route: Routing | None = None
) -> Outlet:
    """Where a stage's records of `topic` go: to Kafka from here (`DirectWriter`) when
    given a client configuration in `direct`, else out of the stage (`Packer`); with a
    `route`, to the topic it gives each record's key instead (`Routed`)."""
    if route is not None:
        return Routed(route.topic, lambda name: outlet(name, direct), route.ensure)
    return Packer(topic) if direct is None else DirectWriter(topic, direct)


def pack(
    topic: str,
    records: list[tuple[bytes | None, bytes]],
    direct: Mapping[str, object] | None = None,
    route: Routing | None = None,
) -> Iterator[pd.DataFrame]:
    """Records of one topic, in order, through `outlet(topic, direct, route)`."""
    out = outlet(topic, direct, route)
    yield from out.add(records)
    yield from out.flush()
