"""A site of a network as a streaming query (ROUTING §2, §4): `tsm run --network`.

    the clients' topics (event-time source: batches cut at a common time, each
    row with the batch's watermark)  ∪  the inbound links and the control topic
    (read as they come)
      → groupBy(site).transformWithStateInPandas(SiteProcessor): one step of the
        site (`network_site`), its records written to the site's cluster and to
        each neighbour's
      → foreachBatch: the step's report, logged; a run that stops when it is
        done stops once every site it runs is

The data path is the single-site job's: the same Kafka source
(`connectors.kafka_source`), a stateful Python operator over Spark's state
store, and the operator's own at-least-once writer (`connectors.outlet`).
Several sites may run in one Spark application, one query each.

A run over what the clients' topics hold now (`available_now`) writes, before
its query starts, a `start` record with their end offsets to the site's
control topic; a live run writes a `start` without ends and, every
`idle_ms / 2`, a `tick` with the wall clock (`network_site`'s idle rule).
The query itself runs on processing-time triggers: links bring records at any
time, and a site that is done waits for nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from connectors.config import Topics, confluent_config
from matcher.routing.network import Network
from streaming.network_site import control_tick
from streaming.network_topics import COMPACTED, SiteTopics, site_topics
from streaming.site_processor import OUTPUT_DDL, SiteProcessor

log = logging.getLogger(__name__)
BATCH_LOG = logging.getLogger("streaming.listener.batches")


@dataclass
class SiteRun:
    """What the driver knows of one site's query."""

    topics: SiteTopics
    query: StreamingQuery | None = None
    done: bool = False
    batches: int = 0
    report: dict[str, Any] = field(default_factory=dict)


def prepare(net: Network, name: str, topics: Topics, options: Mapping[str, str]) -> SiteTopics:
    """The site's topics, created where missing: its own on its cluster, its outbound
    links on each neighbour's. ConnectionError names a broker that does not answer."""
    from connectors.admin import BrokerUnreachable, create_topics, require_broker

    here = site_topics(net, name, topics)
    wanted = {here.bootstrap: here.created_here()}
    for _, (bootstrap, topic) in sorted(here.outbound.items()):
        wanted.setdefault(bootstrap, {})[topic] = 1
    for bootstrap, names in wanted.items():
        try:
            require_broker(bootstrap, options)
        except BrokerUnreachable as exc:
            raise ConnectionError(f"site {name!r}: {exc}") from None
        create_topics(bootstrap, names, options=options)
    create_topics(here.bootstrap, {here.interest: 1}, COMPACTED, options=options)
    return here


def local_ends(here: SiteTopics, options: Mapping[str, str]) -> dict[tuple[str, int], int]:
    """The end offset of every partition of the site's clients' topics, now."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(confluent_config(here.bootstrap, options, required={"group.id": "tsm-net"}))
    try:
        ends = {}
        for topic in here.local_inputs:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            for p in meta.partitions:
                _, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                ends[topic, p] = hi
        return ends
    finally:
        consumer.close()


def write_control(here: SiteTopics, value: bytes, options: Mapping[str, str]) -> None:
    from connectors.produce import produce_lines

    produce_lines(here.bootstrap, here.control, [value], options)


def site_stream(
    spark: SparkSession,
    net: Network,
    here: SiteTopics,
    options: Mapping[str, str],
    max_records_per_trigger: int | None,
) -> DataFrame:
    """The site's reports, one row a batch (see the module docstring)."""
    from connectors.kafka_source import read_stream

    local = read_stream(
        spark,
        here.bootstrap,
        here.local_inputs,
        starting_offsets="earliest",
        max_records_per_trigger=max_records_per_trigger,
        options=options,
        idle_ms=net.idle_ms,
    )
    links = read_stream(
        spark, here.bootstrap, here.link_inputs, starting_offsets="earliest", options=options
    )
    columns = [
        "topic",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("ts_ms"),
        "key",
        "value",
    ]
    rows = local.select(*columns, "watermark").unionByName(
        links.select(*columns, F.lit(None).cast("long").alias("watermark"))
    )
    neighbours = {n: confluent_config(b, options) for n, (b, _) in here.outbound.items()}
    processor = SiteProcessor(net, here, confluent_config(here.bootstrap, options), neighbours)
    return (
        rows.withColumn("skey", F.lit(here.site))
        .groupBy("skey")
        .transformWithStateInPandas(processor, OUTPUT_DDL, outputMode="Append", timeMode="None")
    )


def start_site(
    spark: SparkSession,
    net: Network,
    run: SiteRun,
    *,
    options: Mapping[str, str],
    checkpoint: str,
    max_records_per_trigger: int | None,
    trigger_interval: str,
    guard: Callable[[Callable[[DataFrame, int], None]], Callable[[DataFrame, int], None]],
) -> StreamingQuery:
    """Start one site's query; each batch's report goes to the batch log and `run`."""
    here = run.topics
    spark.conf.set("spark.sql.shuffle.partitions", "1")  # (one state key a site)

    def report(df: DataFrame, batch_id: int) -> None:
        for row in df.collect():
            facts = json.loads(row["report"])
            run.report = facts
            run.done = bool(facts["done"])
            run.batches += 1
            BATCH_LOG.info(json.dumps({"batch": batch_id, **facts}))

    stream = site_stream(spark, net, here, options, max_records_per_trigger)
    return (
        stream.writeStream.queryName(f"tsm-site-{here.site}")
        .foreachBatch(guard(report))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=trigger_interval)
        .start()
    )


class Ticker:
    """A live run's clock: a `tick` to each site's control topic every `every_s`."""

    def __init__(self, sites: list[SiteTopics], options: Mapping[str, str], every_s: float):
        self.sites, self.options, self.every_s = sites, options, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tsm-net-ticker", daemon=True)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            for here in self.sites:
                try:
                    write_control(here, control_tick(int(time.time() * 1000)), self.options)
                except Exception as exc:  # (a broker away for a moment: the next tick)
                    log.warning("site %s: cannot write a clock tick: %s", here.site, exc)
