"""The streaming query: Kafka → decode → watermark → transformWithStateInPandas → Kafka.

    read both input topics (one source, batches cut at a common event time)
      → DecodeStage (mapInArrow): a row per state key, or a dead-letter row;
        `ets` = the batch's watermark from the source
      → withWatermark(ets, lateness), then ets dropped (see below)
      → groupBy(state key).transformWithStateInPandas(MatchProcessor), event time
      → Kafka: from the operator as it makes the records (at least once), or
        foreachBatch: the connectors' Kafka sink (rows of packed topic, keys,
        values; exactly once)

Spark's own watermark is the largest event time seen in any partition less
the delay; SEMANTICS §3's is the smallest over the input partitions of the
largest ts read from each. The bundled source computes that per batch on the
driver (`connectors.kafka_source`, `eventTime`) and every row of the batch
carries it; the decode stage puts it in `ets`, so that Spark's watermark (the
largest `ets` less the lateness) is SEMANTICS §3's, and the event-time timers
fire from it. (With `source = "native"`, Spark's JVM connector, `ets` is each
record's ts, and the watermark Spark's own.)

Spark drops rows below the watermark before a stateful operator without a
trace; SEMANTICS §3 wants them in the dead letters. So the watermark is
defined on `ets` and `ets` is dropped before the operator: the watermark
still moves (and fires the event-time timers), no row is filtered, and the
processor compares `ts` with the watermark of the batch itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from streaming.config import JobConfig

if TYPE_CHECKING:
    from connectors.tenants import TenantRouting
    from streaming.shipping import Executors

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
BatchWriter = Callable[[DataFrame, int], None]
ARROW_BATCH_BYTES = 1 << 20  # see session_settings


def session_settings(config: JobConfig) -> dict[str, str]:
    """Spark settings the job needs; the shuffle partition count is the state's partitioning."""
    return {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
        # A commit uploads the batch's changes to the checkpoint, not RocksDB's new
        # files (a snapshot blob among them); RocksDB's own snapshots are made in the
        # background. The product's commits at 10k subscriptions: 26-45 ms, not 70-109.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.shuffle.partitions": str(config.shuffle_partitions),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.session.timeZone": "UTC",
        # Arrow batches into a Python stage are cut at this size too: the sink's
        # task then gets each packed run of match records (about 1 MB) as soon as
        # the operator yields it, and writes it while the operator makes the next.
        "spark.sql.execution.arrow.maxBytesPerBatch": str(ARROW_BATCH_BYTES),
    }


def session(
    config: JobConfig,
    master: str,
    app_name: str,
    ui: bool = True,
    log_level: str = "WARN",
    executors: Executors | None = None,
) -> SparkSession:
    """The Spark session of `tsm run`, `tsm demo` and the pipeline benchmark.

    On a cluster (`master` not `local`), the executors are as `executors` asks
    (default `Executors()`), and the job's code goes to them as its package
    (`streaming.shipping`)."""
    from streaming import class_archive, shipping

    executors = executors or shipping.Executors()
    cluster = shipping.is_cluster(master)
    # Every Python worker (the data source's too, which reads only the
    # environment) must run an interpreter with the job's dependencies: in local
    # mode this one, which has the project installed too.
    if cluster:
        os.environ["PYSPARK_PYTHON"] = executors.interpreter
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    builder = builder.config("spark.ui.enabled", str(ui).lower())
    builder = builder.config("spark.ui.showConsoleProgress", "false")  # stderr is the batch log
    # A Python worker must connect back within this; the default 15 s is too
    # short for its imports on a busy 2-core machine.
    builder = builder.config("spark.python.authenticate.socketTimeout", "120s")
    # In local mode the driver's heap is the executor's: the state server holds a
    # key's snapshot (about 1 KB a subscription) several times over while it
    # writes it; Spark's default 1 GB runs out at about 100k subscriptions.
    builder = builder.config("spark.driver.memory", "4g")
    java_options = class_archive.driver_java_options()
    if java_options:  # (Spark's classes mapped from one file: a quicker start)
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    settings = session_settings(config)
    if cluster:
        settings |= executors.settings(config.shuffle_partitions)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if cluster:
        package = shipping.job_package()
        with shipping.on_driver_path(package):
            spark = builder.getOrCreate()
        shipping.ship(spark.sparkContext, package)
    else:
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def direct_output(config: JobConfig) -> dict[str, object] | None:
    """The client configuration the operator writes its records with, or None when
    the sink must (exactly once: its transactions are keyed by Spark's batch id)."""
    from connectors.config import confluent_config

    if config.exactly_once:
        return None
    return confluent_config(config.bootstrap, config.kafka_options)


def tenant_routing(config: JobConfig) -> TenantRouting | None:
    """Where match records go by tenant (`tenant_topic`), or None: all to `matches`."""
    from connectors.tenants import TenantRouting, TenantTopics

    if not config.tenant_topic:
        return None
    topics = TenantTopics(config.tenant_topic, config.tenant_separator)
    return TenantRouting(topics, config.bootstrap, config.kafka_options)


def matched_stream(spark: SparkSession, config: JobConfig, metrics: Any) -> DataFrame:
    """The output rows of the job, before the sink: `topic, keys, values`, each row a
    run of records (`connectors.sink_rows.PACKED_COLUMNS`); none when the operator
    writes its records itself (`direct_output`)."""
    from connectors.kafka_source import read_stream
    from streaming.checkpoint_guard import check_sharding
    from streaming.config import build_sharding
    from streaming.decode_stage import DECODED_DDL, INPUT_COLUMNS, WATERMARK_COLUMN, DecodeStage
    from streaming.processor import OUTPUT_DDL, MatchProcessor
    from streaming.state.reader import held_keys

    if config.bootstrap is None:
        raise ValueError("no bootstrap address: give --bootstrap or set bootstrap in tsm.toml")
    for key, value in session_settings(config).items():
        if not key.startswith("spark.pyspark."):
            spark.conf.set(key, value)
    topics = config.topics
    held = held_keys(spark, config.checkpoint) if config.sharding else ()
    sharding = build_sharding(config.sharding, config.shuffle_partitions, held)
    check_sharding(config.checkpoint, sharding)
    raw = read_stream(
        spark,
        config.bootstrap,
        [topics.subscriptions, topics.profiles],
        starting_offsets="earliest",
        max_records_per_trigger=config.max_records_per_trigger,
        options=config.kafka_options,
        source=config.source,
        idle_ms=config.idle_ms if config.source == "python" else None,
    )
    columns = [*INPUT_COLUMNS, *([WATERMARK_COLUMN] if config.source == "python" else [])]
    decoded = raw.select(*columns).mapInArrow(DecodeStage(topics, sharding), DECODED_DDL)
    keyed = decoded.withWatermark("ets", f"{config.lateness_ms} milliseconds").drop("ets")
    processor = MatchProcessor(
        topics,
        sharding,
        config.lateness_ms,
        config.snapshot_every,
        metrics,
        direct_output(config),
        config.preload,
        tenant_routing(config),
    )
    return keyed.groupBy("skey").transformWithStateInPandas(
        processor, OUTPUT_DDL, outputMode="Append", timeMode="EventTime"
    )


def kafka_writer(config: JobConfig) -> BatchWriter:
    """The connectors' foreachBatch Kafka sink, idempotent or transactional."""
    from connectors.kafka_sink import foreach_batch_writer

    return foreach_batch_writer(
        config.bootstrap,
        config.query_name,
        exactly_once=config.exactly_once,
        options=config.kafka_options,
    )


def start(
    spark: SparkSession,
    config: JobConfig,
    metrics: Any,
    *,
    available_now: bool = False,
    writer: BatchWriter | None = None,
) -> StreamingQuery:
    """Start the named query; `writer` replaces the Kafka sink (tests, benchmarks)."""
    stream = matched_stream(spark, config, metrics)
    writer = writer or kafka_writer(config)
    trigger = (
        {"availableNow": True} if available_now else {"processingTime": config.trigger_interval}
    )
    return (
        stream.writeStream.queryName(config.query_name)
        .foreachBatch(writer)
        .option("checkpointLocation", config.checkpoint)
        .trigger(**trigger)
        .start()
    )
