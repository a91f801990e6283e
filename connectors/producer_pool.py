"""A process's Kafka producers, one per client configuration, kept across tasks.

A Spark Python worker runs many tasks, one batch after another; a producer
made once and kept serves them all, where one made per task would connect
every time and, being idempotent, wait 500 ms for its producer id before its
first record is sent (librdkafka's PID timer starts before any broker
connection is up). `WORKER_PRODUCERS` is the worker's pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from connectors.producer import Producer

PoolKey = tuple[tuple[str, str], ...]


class ProducerPool:
    """`Producer`s by client configuration. Invariant: at most one per `key(config)`;
    each `get` is a dict look-up, and makes the producer the first time."""

    def __init__(self) -> None:
        self._producers: dict[PoolKey, Producer] = {}

    @staticmethod
    def key(config: Mapping[str, object]) -> PoolKey:
        """The pool's key for `config` (make it once: it sorts the settings)."""
        return tuple(sorted((name, str(value)) for name, value in config.items()))

    def get(self, key: PoolKey, config: Mapping[str, object]) -> Producer:
        """The producer of `config` (`key`: its `key(config)`), made on first use."""
        producer = self._producers.get(key)
        if producer is None:
            producer = self._producers[key] = Producer(config)
        return producer

    def drop(self, key: PoolKey) -> None:
        """Close and forget the producer of `key` (one that failed), if there is one."""
        producer = self._producers.pop(key, None)
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.close()

    def close(self) -> None:
        """Close and forget every producer."""
        for key in list(self._producers):
            self.drop(key)

    def __len__(self) -> int:
        return len(self._producers)


WORKER_PRODUCERS = ProducerPool()
