"""`Producer`: every Kafka producer of `tsm`, behind one small typed wrapper.

It wraps confluent-kafka's producer so that what each writer of records would
otherwise repeat is done once:

* configuration from one place: `config.producer_config` (compression,
  idempotence, `acks=all`, the murmur2 partitioner) over the client settings
  the caller made with `config.confluent_config` (bootstrap, the user's
  `kafka.*` options), plus a `transactional_id` where one is wanted;
* a full local queue is waited out (`BufferError`: it serves delivery reports
  until there is room), and delivery reports are served every `POLL_EVERY`
  records;
* failures raised, as `errors.ProduceError` with one line that says how many
  records and the first cause: a failed delivery at the next `flush`, a
  producer that failed for good at the next `produce` (`RecordTooLarge` for a
  record over `message.max.bytes`), a refused setting at construction
  (`errors.BadClientSetting`);
* `with Producer(config) as producer:` flushes on a clean exit and closes.

librdkafka reports failed deliveries only (`delivery.report.only.error`): a
report per record costs a Python callback each, 8-12% of the producing
client's CPU on a batch of match records, and an acknowledged record needs
none (what a flush leaves unreported was delivered).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from connectors.config import producer_config
from connectors.errors import BadClientSetting, ProduceError, RecordTooLarge

# How long a flush or a transaction step (init, send offsets, commit, abort) may take.
TIMEOUT_S = 60.0
# Records between polls for delivery reports (failures only): a poll waits on the
# queue lock that the client's threads hold while they batch and compress, so it is
# worth doing rarely; the queue (100k records by default) never fills between two.
POLL_EVERY = 20_000

Record = tuple[str, bytes | None, bytes]  # (topic, key, value)
Headers = Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None]


class Producer:
    """A `tsm` producer of `config` (a `confluent_config`): see the module docstring.

    Not thread-safe, as confluent-kafka's is not across `produce` and `flush`."""

    def __init__(self, config: Mapping[str, object], *, transactional_id: str | None = None):
        from confluent_kafka import KafkaException
        from confluent_kafka import Producer as ConfluentProducer

        settings: dict[str, object] = {
            **producer_config(config),
            "delivery.report.only.error": True,
            "on_delivery": self._delivered,
        }
        if transactional_id is not None:
            settings["transactional.id"] = transactional_id
        try:
            self._producer = ConfluentProducer(settings)
        except KafkaException as exc:
            raise BadClientSetting(f"Kafka producer settings: {exc.args[0].str()}") from None
        self._sent = 0  # records produced since the last flush
        self._failed = 0  # of them, reported failed
        self.first_failure: str | None = None  # the first report's cause, since the last flush

    # -- writing ---------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        *,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Queue one record (the partition from `key`, murmur2, unless `partition`).
        Cost: one client call; waits only while the local queue is full."""
        extra: dict[str, Any] = {}
        if headers is not None:
            extra["headers"] = headers
        if partition is not None:
            extra["partition"] = partition
        if timestamp_ms is not None:
            extra["timestamp"] = timestamp_ms
        self._queue(topic, value, key, extra)

    def produce_many(self, records: Iterable[Record]) -> int:
        """Queue each `(topic, key, value)` in order; returns how many. The loop of a
        writer of hundreds of thousands of records a batch: one client call each,
        with no keyword arguments (they cost a third more per call)."""
        from confluent_kafka import KafkaException

        produce, poll = self._producer.produce, self._producer.poll
        sent = self._sent
        value = b""
        try:
            for topic, key, value in records:
                while True:
                    try:
                        produce(topic, value, key)
                        break
                    except BufferError:  # local queue full: let deliveries drain it
                        poll(0.1)
                sent += 1
                if sent % POLL_EVERY == 0:
                    poll(0)
        except KafkaException as exc:
            raise _refused(exc, value) from None
        finally:
            count, self._sent = sent - self._sent, sent
        return count

    def _queue(self, topic: str, value: bytes, key: bytes | None, extra: dict[str, Any]) -> None:
        from confluent_kafka import KafkaException

        while True:
            try:
                self._producer.produce(topic, value, key, **extra)
                break
            except BufferError:
                self._producer.poll(0.1)
            except KafkaException as exc:
                raise _refused(exc, value) from None
        self._sent += 1
        if self._sent % POLL_EVERY == 0:
            self._producer.poll(0)

    def flush(self, timeout: float = TIMEOUT_S) -> None:
        """Wait until every queued record is acknowledged or failed; raise
        `ProduceError` if any failed or is still queued after `timeout` seconds.
        Either way the counts start again from zero."""
        try:
            remaining = self._producer.flush(timeout)
        except SystemError:  # confluent-kafka 2.x: a fatal error set while it calls back
            if self.first_failure is None:
                raise
            remaining = len(self._producer)
        sent, failed, first = self._sent, self._failed, self.first_failure
        self._sent = self._failed = 0
        self.first_failure = None
        if failed or remaining:
            cause = first or f"{remaining} still queued after {timeout:g}s"
            missing = failed + remaining
            raise ProduceError(f"{missing} of {sent} records not acknowledged: {cause}", missing)

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery reports, waiting up to `timeout` seconds for one."""
        return self._producer.poll(timeout)

    def __len__(self) -> int:
        """Records queued and not yet acknowledged."""
        return len(self._producer)

    def _delivered(self, error: Any, message: Any) -> None:
        # Called by librdkafka (from `poll`/`flush`) for failed deliveries only.
        if error is not None:
            self._failed += 1
            if self.first_failure is None:
                self.first_failure = f"{error.str()} (topic {message.topic()})"

    # -- transactions ----------------------------------------------------------------

    def init_transactions(self, timeout: float = TIMEOUT_S) -> None:
        """Fence earlier producers of this `transactional_id`; finish or abort their
        open transaction."""
        self._producer.init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._producer.begin_transaction()

    def send_offsets_to_transaction(
        self, offsets: list[Any], group_metadata: Any, timeout: float = TIMEOUT_S
    ) -> None:
        """Commit `offsets` (TopicPartitions) for the consumer group of `group_metadata`
        if and only if the open transaction commits."""
        self._producer.send_offsets_to_transaction(offsets, group_metadata, timeout)

    def commit_transaction(self, timeout: float = TIMEOUT_S) -> None:
        self._producer.commit_transaction(timeout)

    def abort_transaction(self, timeout: float = TIMEOUT_S) -> None:
        self._producer.abort_transaction(timeout)

    # -- life ------------------------------------------------------------------------

    def close(self) -> None:
        """Release the client; records still queued are dropped (`flush` first), so
        that closing a producer whose broker is gone does not wait for them to time
        out (`message.timeout.ms`, 5 minutes by default)."""
        with contextlib.suppress(RuntimeError):  # (closed already)
            self._producer.purge()
            self._producer.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        try:
            if exc_type is None:
                self.flush()
        finally:
            self.close()


def _refused(exc: Exception, value: bytes) -> ProduceError:
    """The error for a record that the client refused to queue."""
    from confluent_kafka import KafkaError

    error = exc.args[0]
    if error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return RecordTooLarge(
            f"a record of {len(value):,} bytes is over the producer's message.max.bytes; "
            "raise it with --kafka message.max.bytes=N (and the topic's max.message.bytes)"
        )
    return ProduceError(f"the Kafka producer failed: {error.str()}")
