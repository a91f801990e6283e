"""The producer wrapper's own contract, without a broker: its settings come from
`config.producer_config`, and every way it fails is a `ConnectorError` with one line."""

from __future__ import annotations

import pytest

from connectors.broker import free_port
from connectors.config import confluent_config
from connectors.errors import BadClientSetting, ConnectorError, ProduceError, RecordTooLarge
from connectors.producer import Producer


def nowhere(**required: object) -> dict[str, object]:
    """Settings of a client whose broker never answers (a free local port)."""
    return confluent_config(f"localhost:{free_port()}", required={"log_level": 0, **required})


def test_a_refused_setting_is_one_line() -> None:
    with pytest.raises(BadClientSetting) as caught:
        Producer(confluent_config("localhost:1", {"kafka.compression.type": "rot13"}))
    assert isinstance(caught.value, ConnectorError)
    assert str(caught.value).startswith("Kafka producer settings: ")
    assert "\n" not in str(caught.value) and "compression" in str(caught.value)


def test_a_record_over_the_size_limit_is_refused_before_it_is_queued() -> None:
    producer = Producer(nowhere(**{"message.max.bytes": 10_000}))
    try:
        with pytest.raises(RecordTooLarge, match=r"^a record of 20,000 bytes is over"):
            producer.produce("t", b"x" * 20_000)
        producer.produce("t", b"small", b"key", headers=[("h", b"1")], partition=0)
        with pytest.raises(ProduceError) as caught:
            producer.flush(0.05)
    finally:
        producer.close()
    assert caught.value.unacknowledged == 1  # the small record only: the big one never queued
    assert str(caught.value) == "1 of 1 records not acknowledged: 1 still queued after 0.05s"


def test_failed_deliveries_are_counted_and_the_first_cause_named() -> None:
    producer = Producer(nowhere(**{"message.timeout.ms": 200}))
    try:
        assert producer.produce_many(("t", None, b"v%d" % i) for i in range(3)) == 3
        producer.produce("u", b"w")
        with pytest.raises(ProduceError) as caught:
            producer.flush(10)
        message = str(caught.value)
        assert message.startswith("4 of 4 records not acknowledged: ")
        assert "timed out" in message and "(topic " in message and "\n" not in message
        assert caught.value.unacknowledged == 4
        producer.flush(1)  # the counts start again: nothing is queued now
    finally:
        producer.close()
