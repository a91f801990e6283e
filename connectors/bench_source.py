"""Throughput of the `tsm-kafka` source: `python -m connectors.bench_source [--records N]`.

Starts a private broker, produces N records of ~200 bytes to a topic with
`--partitions` partitions, warms Spark up (Python workers, imports) with a
small query, then reads the N records with Trigger.AvailableNow into Spark's
`noop` sink. Prints one JSON line: rows, batches, `query_s` (wall time of the
query, start-up included), `batch_s` (time in its micro-batches), `plan_s`
(of that, in the driver's `latestOffset`) and `rows_per_s` (rows / batch_s,
the steady-state rate). `--event-time` plans
the batches by event time as the job does (the driver reads every record
ahead, `connectors.kafka_source`): the difference is that planning's cost.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-per-trigger", type=int, help="maxRecordsPerTrigger")
    parser.add_argument("--event-time", action="store_true", help="plan batches by event time")
    args = parser.parse_args(argv)
    idle_ms = 10_000 if args.event_time else None

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from connectors.admin import create_topics
    from connectors.broker import EmbeddedBroker
    from connectors.produce import produce_lines

    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as checkpoint:
        create_topics(broker.bootstrap, {"bench": args.partitions, "warmup": args.partitions})
        pad = "x" * 150
        for topic, n in (("bench", args.records), ("warmup", 1000)):
            lines = (
                json.dumps({"op": "publish", "id": str(i), "space": f"s{i % 64}", "p": pad})
                for i in range(n)
            )
            produce_lines(broker.bootstrap, topic, (line.encode() for line in lines))
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            read_all(spark, broker.bootstrap, "warmup", checkpoint + "/warmup", None, idle_ms)
            started = time.perf_counter()
            progress = read_all(
                spark,
                broker.bootstrap,
                "bench",
                checkpoint + "/bench",
                args.max_per_trigger,
                idle_ms,
            )
            query_s = time.perf_counter() - started
        finally:
            spark.stop()
    rows = sum(p["numInputRows"] for p in progress)
    batch_s = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    plan_s = sum(p["durationMs"].get("latestOffset", 0) for p in progress) / 1000
    result = {
        "rows": rows,
        "batches": sum(1 for p in progress if p["numInputRows"]),
        "query_s": round(query_s, 2),
        "batch_s": round(batch_s, 2),
        "plan_s": round(plan_s, 2),
        "rows_per_s": round(rows / batch_s),
    }
    print(json.dumps(result))
    return 0


def read_all(
    spark,
    bootstrap: str,
    topic: str,
    checkpoint: str,
    max_per_trigger: int | None,
    idle_ms: int | None = None,
):
    """Run the source over `topic` to its current end; return the query's progress reports."""
    from connectors.kafka_source import read_stream

    stream = read_stream(
        spark, bootstrap, [topic], max_records_per_trigger=max_per_trigger, idle_ms=idle_ms
    )
    query = (
        stream.writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query.recentProgress


if __name__ == "__main__":
    sys.exit(main())
