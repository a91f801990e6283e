"""Tenant topics (`connectors.tenants`): each tenant's topic is a Kafka topic name that
no other tenant's prefixed ACL covers, whatever the subscribers are called; and
the outlet that routes records to them keeps each topic's order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.config import TOPIC_NAME
from connectors.outlet import Routed
from connectors.sink_rows import Packer
from connectors.tenants import TenantTopics, topic_safe
from streaming.config import ConfigError, JobConfig

TEMPLATE = "tenant.{tenant}.matches"

# Subscribers that try to reach bob's topic, or another's, by their names.
TRICKY = [
    "bob",
    "Bob",
    "BOB",
    "bo",
    "bobby",
    "bob.x",
    "bob.",
    ".bob",
    "bob_",
    "bob_2e",
    "bob-",
    "bob/x",
    "bob\x00",
    "tenant.bob.matches",
    "bob.matches",
    "../bob",
    "*",
    "",
    "_",
    "_z",
    "日本",
    "bob " * 100,
    "b" * 240,
    "b" * 241,
]


def assert_apart(topics: TenantTopics, tenants: list[str]) -> None:
    """Every tenant has a valid topic of its own, under its prefix and no other's."""
    named = {t: topics.topic_of_tenant(t.encode()) for t in tenants}
    prefixes = {t: topics.acl_prefix(t) for t in tenants}
    for tenant, topic in named.items():
        assert TOPIC_NAME.fullmatch(topic), topic
        assert topic.startswith(prefixes[tenant])
    for tenant, prefix in prefixes.items():
        for other, topic in named.items():
            if other != tenant:
                assert not topic.startswith(prefix), (tenant, other, topic)


def test_no_tenant_s_acl_prefix_covers_another_tenant_s_topic():
    assert_apart(TenantTopics(TEMPLATE), TRICKY)
    assert_apart(TenantTopics("{tenant}.tsm-matches"), TRICKY)


@given(st.lists(st.text(max_size=30), min_size=2, max_size=6, unique=True))
def test_tenants_of_any_names_are_kept_apart(tenants):
    assert_apart(TenantTopics(TEMPLATE), tenants)


@given(st.binary(max_size=40), st.binary(max_size=40))
def test_the_topic_safe_form_is_one_to_one_and_has_no_dot(a, b):
    assert "." not in topic_safe(a)
    assert (topic_safe(a) == topic_safe(b)) == (a == b)


def test_a_subscriber_names_its_tenant_up_to_the_separator():
    topics = TenantTopics(TEMPLATE, separator="/")
    assert topics.topic(b"acme/alice") == topics.topic(b"acme/bob") == "tenant.acme.matches"
    assert topics.topic(b"acme") == "tenant.acme.matches"
    assert topics.topic("jürgen/x".encode()) == "tenant.j_c3_bcrgen.matches"
    assert topics.acl_prefix("acme") == "tenant.acme."
    whole = TenantTopics(TEMPLATE)
    assert whole.topic(b"acme/alice") == "tenant.acme_2falice.matches"


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("tenant.matches", "must hold {tenant} once"),
        ("t.{tenant}.{tenant}.m", "must hold {tenant} once"),
        ("tenant.{tenant}", "put a '.' right after {tenant}"),
        ("tenant.{tenant}-matches", "put a '.' right after {tenant}"),
        ("tenant/{tenant}.m", "is not a Kafka topic name"),
    ],
)
def test_templates_that_cannot_keep_tenants_apart_are_refused(template, says):
    with pytest.raises(ValueError, match=says.replace("{", r"\{").replace("}", r"\}")):
        TenantTopics(template)


def test_the_settings_refuse_a_template_that_could_name_the_job_s_own_topics():
    with pytest.raises(ConfigError, match="would name the topic 'tsm.profiles'"):
        JobConfig.validated(JobConfig(tenant_topic="{tenant}.profiles"))
    with pytest.raises(ConfigError, match="put a '.'"):
        JobConfig.validated(JobConfig(tenant_topic="m.{tenant}"))
    assert JobConfig.validated(JobConfig(tenant_topic=TEMPLATE)).tenant_topic == TEMPLATE


class Recording:
    """A routing that names topics after the key and records what it was asked to make."""

    def __init__(self) -> None:
        self.made: list[set[str]] = []

    def topic(self, key: bytes | None) -> str:
        return f"t.{(key or b'none').decode()}.m"

    def ensure(self, topics: set[str]) -> None:
        self.made.append(set(topics))


def test_the_routed_outlet_splits_records_by_topic_in_order_and_makes_each_topic_once():
    routing = Recording()
    out = Routed(routing.topic, Packer, routing.ensure)
    records = [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (None, b"4")]
    frames = [*out.add(records[:3]), *out.add(records[3:]), *out.add([(b"b", b"5")])]
    frames += list(out.flush())
    assert routing.made == [{"t.a.m", "t.b.m"}, {"t.none.m"}]
    got = {
        topic: [
            v
            for frame in frames
            for t, vs in zip(frame.topic, frame["values"], strict=True)
            for v in vs
            if t == topic
        ]
        for topic in ("t.a.m", "t.b.m", "t.none.m")
    }
    assert got == {"t.a.m": [b"1", b"3"], "t.b.m": [b"2", b"5"], "t.none.m": [b"4"]}
    assert out.count == 5
