"""Kafka client settings and topic names, in one place.

Every client `tsm` creates (CLI tools, the Spark source and sink, tests) gets
its configuration from here, so that the defaults the embedded broker needs
(PLATFORM.md) are never forgotten and user options (SASL, SSL, ...) reach
every client the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

# noida-db ignores fetch size limits and answers with whatever it has: a client
# that caps the response size stalls on a backlog over ~100 MB (PLATFORM.md).
MAX_RECEIVE_BYTES = 2147483647

# While a broker is down, librdkafka tries to connect again every half of this
# (not growing towards `reconnect.backoff.max.ms`) and logs each refusal at error
# level: its default 100 ms made 20 lines a second per client, hundreds a minute
# in `tsm run`'s log while a broker restarted. A client reconnects at most a
# second after the broker is back.
RECONNECT_BACKOFF_MS = 2000

# What every producer of `tsm` sets unless the user's options say otherwise.
# zstd: match records are repetitive JSON that it stores in about a seventh
# (300k match records: 42 MB on the broker against 291 MB uncompressed), which
# saves network and disk on any Kafka; on noida-db, which rewrites all of its
# data after each burst of writes (CPU in proportion to what it holds: 3.8 s
# for those 291 MB), it is most of the broker's CPU (PLATFORM.md). Consumers
# decompress by themselves (librdkafka, Java; kafka-python with `zstandard`).
# Level 1, not zstd's default 3: on match records it compresses as well (10.5x
# against 10.1x, 500 KB batches) and quicker; the sink's producer spent 0.49 CPU-s
# instead of 0.55 on a batch of 323k match records (in process, two runs each).
PRODUCER_DEFAULTS: dict[str, object] = {"compression.type": "zstd", "compression.level": 1}
# What every producer of `tsm` needs whatever the user's options say: no retry
# duplicates, in order per partition, and the partition a key gets from Java
# clients (and Spark's own sink): murmur2.
PRODUCER_REQUIRED: dict[str, object] = {
    "enable.idempotence": True,
    "acks": "all",
    "partitioner": "murmur2_random",
}

# User options are written as in Spark's Kafka connector: `kafka.<librdkafka key>`.
OPTION_PREFIX = "kafka."

# kafka-python spells a few security settings differently from librdkafka.
_KAFKA_PYTHON_NAMES = {
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
}


# Kafka's own rule for a topic name (org.apache.kafka.common.internals.Topic).
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True)
class Topics:
    """Topic names; `--config` may change them (CLI.md).

    The four differ: a job whose output went to one of its inputs would read
    its own records back, and a dead letter read as a bad record makes another
    dead letter, without end."""

    subscriptions: str = "tsm.subscriptions"
    profiles: str = "tsm.profiles"
    matches: str = "tsm.matches"
    deadletter: str = "tsm.deadletter"

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for role in fields(self):
            name = getattr(self, role.name)
            if not isinstance(name, str) or not TOPIC_NAME.fullmatch(name) or name in {".", ".."}:
                raise ValueError(
                    f"{role.name}: {name!r} is not a Kafka topic name "
                    "(1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-')"
                )
            if name in seen:
                raise ValueError(
                    f"{seen[name]} and {role.name} are both {name!r}; the four topics "
                    "must differ (a job reading its own output back never ends)"
                )
            seen[name] = role.name

    @classmethod
    def from_mapping(cls, names: Mapping[str, str] | None) -> Topics:
        """Defaults overridden by a mapping such as the `[topics]` table of `tsm.toml`."""
        names = dict(names or {})
        unknown = set(names) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown topic role(s): {', '.join(sorted(unknown))}")
        return cls(**names)

    def all(self) -> list[str]:
        return [getattr(self, f.name) for f in fields(self)]


# The exactly-once sink anchors its transactional progress markers (consumer
# group offsets) on this topic; it never holds records (see kafka_sink.py).
SINK_COMMITS_TOPIC = "tsm.sink-commits"


def kafka_options(options: Mapping[str, str] | None) -> dict[str, str]:
    """The `kafka.*` entries of `options` with the prefix removed; others are ignored."""
    return {
        key[len(OPTION_PREFIX) :]: str(value)
        for key, value in (options or {}).items()
        if key.startswith(OPTION_PREFIX) and len(key) > len(OPTION_PREFIX)
    }


def parse_cli_options(pairs: Iterable[str] | None) -> dict[str, str]:
    """`KEY=VALUE` strings from repeated `--kafka` flags → `{"kafka.KEY": VALUE}`."""
    options = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        if not key.startswith(OPTION_PREFIX):
            key = OPTION_PREFIX + key
        options[key] = value
    return options


def confluent_config(
    bootstrap: str,
    options: Mapping[str, str] | None = None,
    required: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """Configuration for a confluent-kafka client.

    Precedence, lowest first: the defaults the broker needs, the user's
    `kafka.*` options, then `required`: settings the caller's correctness
    depends on, such as `enable.idempotence` or `isolation.level`.
    """
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "receive.message.max.bytes": MAX_RECEIVE_BYTES,
        "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
    }
    config.update(kafka_options(options))
    config.update(required or {})
    return config


def producer_config(config: Mapping[str, object]) -> dict[str, object]:
    """A client configuration (`confluent_config`, the user's options in it) made a
    `tsm` producer's: `PRODUCER_DEFAULTS` under it, `PRODUCER_REQUIRED` over it."""
    return {**PRODUCER_DEFAULTS, **config, **PRODUCER_REQUIRED}


# librdkafka settings the Java client has no use for (its own logging is log4j's).
_LIBRDKAFKA_ONLY = frozenset({"log_level", "debug", "receive.message.max.bytes"})
_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def java_client_options(options: Mapping[str, str] | None) -> dict[str, str]:
    """`kafka.*` options written for librdkafka (`[kafka]` in tsm.toml) as Spark's JVM
    Kafka connector takes them (`source = "native"`): the same names where the two
    clients agree (`security.protocol`, `sasl.mechanism`, ...); `sasl.username` and
    `sasl.password` as the `sasl.jaas.config` of the mechanism's login module;
    `ssl.ca.location` (PEM) as a PEM trust store; librdkafka's own logging left out.
    Other entries pass as they are."""
    java = {k: str(v) for k, v in (options or {}).items()}
    for key in _LIBRDKAFKA_ONLY:
        java.pop(OPTION_PREFIX + key, None)
    username = java.pop(OPTION_PREFIX + "sasl.username", None)
    password = java.pop(OPTION_PREFIX + "sasl.password", None)
    if username is not None and OPTION_PREFIX + "sasl.jaas.config" not in java:
        mechanism = java.get(OPTION_PREFIX + "sasl.mechanism", "PLAIN").upper()
        if mechanism not in _JAAS_MODULES:
            raise ValueError(
                f"sasl.mechanism {mechanism}: give kafka.sasl.jaas.config for Spark's "
                "Kafka connector (source native) yourself"
            )
        java[OPTION_PREFIX + "sasl.jaas.config"] = (
            f"{_JAAS_MODULES[mechanism]} required "
            f"username={_jaas_quoted(username)} password={_jaas_quoted(password or '')};"
        )
    ca = java.pop(OPTION_PREFIX + "ssl.ca.location", None)
    if ca is not None and OPTION_PREFIX + "ssl.truststore.location" not in java:
        java[OPTION_PREFIX + "ssl.truststore.type"] = "PEM"
        java[OPTION_PREFIX + "ssl.truststore.location"] = ca
    return java


def _jaas_quoted(text: str) -> str:
    """A JAAS option value: double-quoted, `\\` and `"` escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def kafka_python_config(
    bootstrap: str, options: Mapping[str, str] | None = None
) -> dict[str, object]:
    """Keyword arguments for a kafka-python client, with the same defaults and options."""
    config: dict[str, object] = {
        "bootstrap_servers": bootstrap,
        "receive_message_max_bytes": MAX_RECEIVE_BYTES,
    }
    for key, value in kafka_options(options).items():
        config[_KAFKA_PYTHON_NAMES.get(key, key.replace(".", "_"))] = value
    return config
