"""Throughput of the `tsm-kafka` source: `python -m connectors.bench_source [--records N]`.

Starts a private broker, produces N records of ~200 bytes to a topic with
`--partitions` partitions, then reads them with Trigger.AvailableNow into
Spark's `noop` sink, and prints one JSON line: rows, batches, seconds and
rows/s of the streaming query alone (Spark start-up excluded).
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
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from connectors.admin import create_topics
    from connectors.broker import EmbeddedBroker
    from connectors.kafka_source import read_stream
    from connectors.produce import produce_lines

    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as checkpoint:
        create_topics(broker.bootstrap, {"bench": args.partitions})
        pad = "x" * 150
        lines = (
            json.dumps({"op": "publish", "id": str(i), "space": f"s{i % 64}", "p": pad}).encode()
            for i in range(args.records)
        )
        produce_lines(broker.bootstrap, "bench", lines)
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            stream = read_stream(
                spark, broker.bootstrap, ["bench"], max_records_per_trigger=args.max_per_trigger
            )
            started = time.perf_counter()
            query = (
                stream.writeStream.format("noop")
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            seconds = time.perf_counter() - started
            rows = sum(p["numInputRows"] for p in query.recentProgress)
            batches = sum(1 for p in query.recentProgress if p["numInputRows"])
        finally:
            spark.stop()
    result = {"rows": rows, "batches": batches, "seconds": round(seconds, 2)}
    result["rows_per_s"] = round(rows / seconds)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
