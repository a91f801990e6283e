"""The errors of `connectors/`: one root, `ConnectorError`, and a class per cause.

Each message is one line that says what failed and what to do about it, so
that the CLI prints it as it is (`tsm <command>: error: ...`) and a caller
that wants any Kafka-side failure catches `ConnectorError`. Errors of the
Kafka client itself (`confluent_kafka.KafkaException`) that no module here
can explain better pass through unchanged.
"""

from __future__ import annotations


class ConnectorError(Exception):
    """Something on the Kafka side of `tsm` failed; the message says what and why."""


class BrokerError(ConnectorError, RuntimeError):
    """The embedded broker cannot be started, reached or stopped."""


class BrokerUnreachable(ConnectorError, ConnectionError):
    """No broker answered at the bootstrap address."""


class BadClientSetting(ConnectorError, ValueError):
    """The Kafka client refused a setting (`--kafka`, `[kafka]` in tsm.toml)."""


class ProduceError(ConnectorError, RuntimeError):
    """The broker did not acknowledge some records (`unacknowledged` of them), or the
    producer failed for good; the message says how many and the first cause."""

    def __init__(self, message: str, unacknowledged: int = 0) -> None:
        super().__init__(message)
        self.unacknowledged = unacknowledged


class RecordTooLarge(ProduceError):
    """One record is over the client's `message.max.bytes`: it cannot be sent at all."""
