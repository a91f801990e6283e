"""Each tenant's match records in a topic of its own, so that Kafka's ACLs keep tenants apart.

A tenant is named by the subscriber of the subscription a match record is for
(its Kafka key): the whole subscriber, or, with a `separator`, its part before
the first separator (`acme/alice` → `acme`). Its records go to the topic the
template names, `{tenant}` replaced by the tenant's *topic-safe* form:

    tenant.{tenant}.matches   +  acme/alice  →  tenant.acme.matches

Kafka's prefixed ACLs grant a principal every topic that starts with a string
(`--resource-pattern-type prefixed --topic tenant.acme.`). That keeps tenants
apart only if no tenant's topic starts with another tenant's prefix, and no
subscriber can pick a topic by its name. So:

* the topic-safe form keeps ASCII letters, digits and `-`, and writes every
  other byte of the tenant's UTF-8 (`.`, `_`, `/`, anything else) as `_` and two
  hex digits: it never holds a `.`, and different tenants get different forms
  (each `_` starts an escape, so the form reads back to one tenant only);
* the template must put a `.` right after `{tenant}` (the ACL prefix ends
  there: `acl_prefix`), so `acme`'s prefix `tenant.acme.` covers no topic of
  `acme.x`, `acmecorp` or `tenant.acme.matches` as a tenant (`tenant_2eacme_2e...`);
* a tenant whose topic would exceed Kafka's 249 characters is named by a digest
  (`_z` and 40 hex digits: `z` never follows `_` in an escape).

What a subscription can choose is its subscriber, so tenancy is only as good as
what writes the subscriptions topic: let only a service that sets subscriber
names from an authenticated identity write it (README, "Tenants").
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from connectors.config import TOPIC_NAME

PLACEHOLDER = "{tenant}"
MAX_TOPIC_CHARS = 249
_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_ESCAPES = {byte: chr(byte) if byte in _KEPT else f"_{byte:02x}" for byte in range(256)}
_DIGEST_MARK = "_z"


def topic_safe(tenant: bytes) -> str:
    """The tenant's form in a topic name: injective, of `[A-Za-z0-9_-]` only, no `.`."""
    return "".join(_ESCAPES[byte] for byte in tenant) or "_"


@dataclass(frozen=True)
class TenantTopics:
    """`template` (`{tenant}` once, then a `.`) and the subscriber's `separator` ("" for
    the whole subscriber). Raises ValueError for a template that cannot keep tenants
    apart."""

    template: str
    separator: str = ""

    def __post_init__(self) -> None:
        head, placeholder, tail = self.template.partition(PLACEHOLDER)
        if not placeholder or PLACEHOLDER in tail:
            raise ValueError(f"tenant_topic {self.template!r} must hold {PLACEHOLDER} once")
        if not tail.startswith("."):
            raise ValueError(
                f"tenant_topic {self.template!r}: put a '.' right after {PLACEHOLDER} "
                "(e.g. tenant.{tenant}.matches), so that a prefixed ACL of one tenant "
                "covers no other tenant's topic"
            )
        if not TOPIC_NAME.fullmatch(head + "x" + tail):
            raise ValueError(
                f"tenant_topic {self.template!r} is not a Kafka topic name around "
                f"{PLACEHOLDER} (a-z, A-Z, 0-9, '.', '_' and '-')"
            )

    def tenant(self, subscriber: bytes) -> bytes:
        """The tenant of a subscriber (a match record's key, UTF-8)."""
        if self.separator:
            return subscriber.split(self.separator.encode(), 1)[0]
        return subscriber

    def topic_of_tenant(self, tenant: bytes) -> str:
        """The tenant's topic. Cost: a pass over the tenant's bytes."""
        name = self.template.replace(PLACEHOLDER, topic_safe(tenant))
        if len(name) > MAX_TOPIC_CHARS:
            digest = _DIGEST_MARK + hashlib.sha256(tenant).hexdigest()[:40]
            name = self.template.replace(PLACEHOLDER, digest)
        return name

    def topic(self, subscriber: bytes | None) -> str:
        """The topic of a match record whose key is `subscriber`."""
        return self.topic_of_tenant(self.tenant(subscriber or b""))

    def acl_prefix(self, tenant: str) -> str:
        """The prefix to grant `tenant` in a prefixed ACL: its topic up to the `.` after it."""
        topic = self.topic_of_tenant(tenant.encode())
        head = self.template.partition(PLACEHOLDER)[0]
        return topic[: topic.index(".", len(head))] + "."


# Tenant topics this process has made or found (one per Python worker: each makes a
# topic at most once, whatever the batches).
_MADE: set[str] = set()


@dataclass(frozen=True)
class TenantRouting:
    """A stage's routing of match records to tenant topics (`connectors.outlet.Routed`):
    `topics` names them, `ensure` makes those that do not exist, as `tsm topics
    create` does (`DEFAULT_PARTITIONS`, kept forever), with the client settings
    `bootstrap` and `options`. Where the job's principal may not create topics, an
    administrator makes each tenant's topic with its ACLs first, and `ensure` goes
    on (a missing one then fails the write, with Kafka's reason)."""

    topics: TenantTopics
    bootstrap: str
    options: Mapping[str, str] = field(default_factory=dict)

    def topic(self, key: bytes | None) -> str:
        return self.topics.topic(key)

    def ensure(self, topics: set[str]) -> None:
        """Make the topics of `topics` not made yet by this process. Cost: one admin
        request for the new ones, none when there are none."""
        from confluent_kafka import KafkaException

        from connectors.admin import DEFAULT_PARTITIONS, create_topics

        new = topics - _MADE
        if not new:
            return
        try:
            create_topics(
                self.bootstrap, dict.fromkeys(sorted(new), DEFAULT_PARTITIONS), options=self.options
            )
        except KafkaException as exc:
            if not _refused(exc):
                raise
        _MADE.update(new)


def _refused(exc: Exception) -> bool:
    """Whether a failed create was refused for want of permission."""
    from confluent_kafka import KafkaError

    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    )


def tenant_pattern(template: str) -> re.Pattern[str]:
    """A pattern that matches every topic `template` names, for any tenant."""
    head, _, tail = template.partition(PLACEHOLDER)
    return re.compile(re.escape(head) + r"[A-Za-z0-9_-]+" + re.escape(tail))
