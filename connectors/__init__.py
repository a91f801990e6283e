"""Kafka around the matcher: the embedded broker, topic tools, Spark source and sink.

| module | job |
|---|---|
| `errors` | `ConnectorError`, the root of every error raised here, and a class per cause |
| `config` | client settings (broker-required defaults, `kafka.*` pass-through), topic names |
| `producer` | `Producer`: every Kafka producer of `tsm`, one typed wrapper |
| `producer_pool` | a worker's producers by configuration, kept across tasks (`WORKER_PRODUCERS`) |
| `broker` | noida-db as a tracked process: `tsm broker`, `EmbeddedBroker` |
| `admin` | create the topics explicitly (`retention.ms=-1`), check the broker answers |
| `produce` / `consume` | `tsm produce` / `tsm consume` |
| `offsets` | offset arithmetic of the source (start, limits, AvailableNow), no I/O |
| `kafka_source` | Spark Python data source `tsm-kafka`, `read_stream` |
| `sink_rows` | the sink's two row forms (a record, or a run of records, a row), `Packer` |
| `outlet` | an operator's writers: `DirectWriter` (to Kafka from its worker), `outlet`, `pack` |
| `kafka_sink` | the `foreachBatch` writer (idempotent, exactly-once) |
| `bench_source` | `python -m connectors.bench_source`: source throughput |
"""
