"""The `StatefulProcessor` that runs one site of a network inside Spark.

One state key per site (the site's name): its whole `network_site.SiteJob`, as
a snapshot (`streaming.state.codec`: a batch may run in another Python process
than the one before it, and the filters' hashes are taken again there), in one
value of Spark's state store (RocksDB), read at the start of each batch and
written at its end. A batch's rows are the records the site's query read (its
clients' topics, its inbound links, its control topic); the step's records go
to Kafka from here, as the single-site job's operator writes its own
(`connectors.outlet`, at least once): match records and dead letters to the
site's cluster, link records to each neighbour's. Every write is acknowledged
before the task ends, so before Spark commits the batch's state: a batch that
fails runs again from the state before it and writes the same records again
(links: with the same numbers, which the receiver applies once; matches: the
same `match_id`s).

The output row of a batch is the site's report (`SiteJob.report`): the
driver logs it and stops a run whose every site is done.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import TimerValues

from connectors.outlet import pack
from matcher.routing.network import Network
from streaming.network_site import KafkaRow, SiteJob
from streaming.network_topics import SiteTopics
from streaming.state.codec import dump_snapshot, load_snapshot

OUTPUT_DDL = "site string, report string"
STATE_DDL = "blob binary"
ROW_COLUMNS = ("topic", "partition", "offset", "ts_ms", "key", "value", "watermark")


def _int(value: Any) -> int | None:
    """A long column's value from pandas (a null comes as NaN in a float column)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)


def kafka_rows(frames: Iterator[pd.DataFrame]) -> list[KafkaRow]:
    out = []
    for frame in frames:
        columns = [frame[name].tolist() for name in ROW_COLUMNS]
        for topic, part, off, ts, key, value, wm in zip(*columns, strict=True):
            out.append(
                KafkaRow(
                    topic if isinstance(topic, str) else None,
                    _int(part),
                    _int(off),
                    _int(ts),
                    None if key is None else bytes(key),
                    None if value is None else bytes(value),
                    _int(wm),
                )
            )
    return out


class SiteProcessor(StatefulProcessor):
    """Per batch: the site's state, one step, its records to Kafka, the state back."""

    def __init__(
        self,
        net: Network,
        topics: SiteTopics,
        local: Mapping[str, object],
        neighbours: Mapping[str, Mapping[str, object]],
    ) -> None:
        self.net = net
        self.topics = topics
        self.local = dict(local)  # client configuration of the site's cluster
        self.neighbours = {n: dict(c) for n, c in neighbours.items()}  # and of each neighbour's

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("site", STATE_DDL)

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        if self.state.exists():
            job = load_snapshot(bytes(self.state.get()[0]))
        else:
            job = SiteJob(self.net, self.topics.site, self.topics)
        out = job.step(kafka_rows(rows))
        writes = [
            (self.topics.topics.matches, out.matches, self.local),
            (self.topics.topics.deadletter, out.dead_letters, self.local),
            (self.topics.interest, out.interest, self.local),
        ]
        for neighbour, records in out.links.items():
            topic = self.topics.outbound[neighbour][1]
            writes.append((topic, records, self.neighbours[neighbour]))
        for topic, records, config in writes:
            if records:
                for _ in pack(topic, records, config):
                    pass
        self.state.update((dump_snapshot(job),))
        report = job.report() | {"matches": len(out.matches), "dead_letters": len(out.dead_letters)}
        yield pd.DataFrame({"site": [self.topics.site], "report": [json.dumps(report)]})

    def close(self) -> None:
        pass
