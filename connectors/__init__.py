"""Kafka around the matcher: the embedded broker, topic tools, Spark source and sink.

| module | job |
|---|---|
| `config` | client settings (broker-required defaults, `kafka.*` pass-through), topic names |
| `broker` | noida-db as a tracked process: `tsm broker`, `EmbeddedBroker` |
| `admin` | create the topics explicitly (`retention.ms=-1`), check the broker answers |
| `produce` / `consume` | `tsm produce` / `tsm consume` |
| `offsets` | offset arithmetic of the source (start, limits, AvailableNow), no I/O |
| `kafka_source` | Spark Python data source `tsm-kafka`, `read_stream` |
| `kafka_sink` | `foreachBatch` writer (idempotent, exactly-once); the operator's `DirectWriter` |
| `bench_source` | `python -m connectors.bench_source`: source throughput |
"""
