"""Create the topics `tsm` uses, explicitly and idempotently.

Explicitly, because an auto-created topic gets one partition (no
parallelism) and the default retention: noida-db deletes records whose
CreateTime is older than 7 days within seconds, and replayed workloads carry
old event times, so every topic gets `retention.ms=-1` (PLATFORM.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from connectors.config import SINK_COMMITS_TOPIC, Topics, confluent_config
from connectors.errors import BadClientSetting, BrokerUnreachable

KEEP_FOREVER = {"retention.ms": "-1"}
DEFAULT_PARTITIONS = 4  # of each data topic


def require_broker(
    bootstrap: str, options: Mapping[str, str] | None = None, timeout: float = 5.0
) -> set[str]:
    """Fail fast, with one clear message, if the client settings are refused or no
    broker answers a metadata request; else return the topics it has (the answer).

    Without it a client retries quietly (a producer for 5 minutes) while
    librdkafka logs every refused connection.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        admin = AdminClient(confluent_config(bootstrap, options, required={"log_level": 0}))
    except KafkaException as exc:
        raise BadClientSetting(f"Kafka client settings: {exc.args[0].str()}") from None
    try:
        return set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise BrokerUnreachable(
            f"no Kafka broker answers at {bootstrap} ({exc.args[0].str()}); "
            "is it running? (tsm broker status)"
        ) from None


def create_topics(
    bootstrap: str,
    names: Mapping[str, int],
    config: Mapping[str, str] | None = None,
    options: Mapping[str, str] | None = None,
    timeout: float = 15.0,
) -> dict[str, bool]:
    """Create each topic of `names` (name → partitions) with `config` (default: keep forever).

    Returns name → True if created, False if it already existed (left as it is).
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(confluent_config(bootstrap, options))
    topic_config = dict(KEEP_FOREVER if config is None else config)
    new = [NewTopic(name, num_partitions=n, config=topic_config) for name, n in names.items()]
    futures = admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout)
    created = {}
    for name, future in futures.items():
        try:
            future.result()
            created[name] = True
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            created[name] = False
    return created


def delete_topics(
    bootstrap: str,
    names: Iterable[str],
    options: Mapping[str, str] | None = None,
    timeout: float = 15.0,
) -> None:
    """Delete the topics `names` and their records; one that does not exist is no error."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(confluent_config(bootstrap, options))
    futures = admin.delete_topics(list(names), operation_timeout=timeout, request_timeout=timeout)
    for future in futures.values():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise


def create_tsm_topics(
    bootstrap: str,
    partitions: int = DEFAULT_PARTITIONS,
    topics: Topics | None = None,
    options: Mapping[str, str] | None = None,
) -> dict[str, bool]:
    """The four data topics with `partitions` each, plus the exactly-once sink's anchor topic.

    `retention.ms=-1` everywhere; the anchor topic never holds records and
    needs one partition.
    """
    topics = topics or Topics()
    created = create_topics(bootstrap, dict.fromkeys(topics.all(), partitions), options=options)
    created.update(create_topics(bootstrap, {SINK_COMMITS_TOPIC: 1}, options=options))
    return created
