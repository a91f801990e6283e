"""Reading a topic back whole, with each record's Kafka timestamp, for the benchmarks
that time the job from the outside (produce time against the time a record was written)."""

from __future__ import annotations

import time


def read_back(bootstrap: str, topic: str) -> list[tuple[int, int, bytes, int]]:
    """Every record of `topic`: (partition, offset, value, timestamp), in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    from connectors.config import confluent_config

    consumer = Consumer(confluent_config(bootstrap, required={"group.id": f"rb-{time.time()}"}))
    out: list[tuple[int, int, bytes, int]] = []
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        for partition in sorted(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            done = False
            while not done:
                for m in consumer.consume(5000, timeout=1.0):
                    if m.error() is None:
                        out.append((partition, m.offset(), m.value() or b"", m.timestamp()[1]))
                        done = m.offset() >= high - 1
        return out
    finally:
        consumer.close()
