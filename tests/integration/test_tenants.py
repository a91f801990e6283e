"""Tenants kept apart by topic (`tenant_topic`): the job against a real broker and Spark.

Subscribers of the tenants `acme` and `bob` (the part of the subscriber before
`/`), and subscriptions that try to write into acme's topic by naming it: as
their subscriber (acme's topic name, `acme.evil`, `acmecorp`, `acme_2e`) or in
a field of the record. Each tenant's topic must hold exactly the matches of its
own subscribers, the topics under acme's ACL prefix only acme's, and all the
tenant topics together what the engine makes.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient

from connectors.config import confluent_config
from connectors.consume import consume_values
from connectors.produce import produce_lines
from connectors.tenants import TenantTopics
from streaming.config import JobConfig
from tests.integration.test_job import T0, expected, inputs_of, make_topics, run_in_process

pytestmark = pytest.mark.integration


def test_each_tenant_s_matches_go_to_its_own_topic_and_no_subscription_reaches_another(
    spark, bootstrap, new_topic, tmp_path
):
    topics = make_topics(new_topic, bootstrap)
    template = f"tn{os.getpid()}.{{tenant}}.matches"
    tenants = TenantTopics(template, separator="/")
    acme_topic = tenants.topic(b"acme")
    subscribers = ["acme/alice", "acme/carol", "bob/dave", "bob", acme_topic]
    subscribers += ["acme.evil/x", "acmecorp/y", "acme_2e/z", "acme"]
    subs = [
        {"op": "subscribe", "id": f"s{i}", "space": "a", "subscriber": name, "ts": T0 + i}
        | {"where": "x > 1"}
        for i, name in enumerate(subscribers)
    ]
    subs.append(subs[2] | {"id": "named-topic", "topic": acme_topic, "ts": T0 + 50})  # (bob's)
    profiles = [
        {"op": "publish", "id": f"p{j}", "space": "a", "attrs": {"x": j}, "ts": T0 + 100 + j}
        for j in range(6)
    ]
    produce_lines(bootstrap, topics.subscriptions, [json.dumps(r).encode() for r in subs])
    produce_lines(bootstrap, topics.profiles, [json.dumps(r).encode() for r in profiles])
    config = JobConfig(
        bootstrap=bootstrap,
        topics=topics,
        checkpoint=str(tmp_path / "ck"),
        tenant_topic=template,
        tenant_separator="/",
    )
    run_in_process(spark, JobConfig.validated(config))
    want = expected([inputs_of(bootstrap, topics)])["matches"]
    events = Counter(json.loads(v)["event"] for v in want.elements())
    assert events["match"] == 4 * len(subs)  # (x > 1: p2 .. p5; then unmatch as each expires)

    existing = AdminClient(confluent_config(bootstrap)).list_topics(timeout=10).topics
    made = sorted(name for name in existing if name.startswith(f"tn{os.getpid()}."))
    got: dict[str, Counter] = {
        name: Counter(consume_values(bootstrap, name, from_beginning=True, timeout=3.0))
        for name in made
    }
    assert sum(got.values(), Counter()) == want
    assert list(consume_values(bootstrap, topics.matches, from_beginning=True, timeout=2.0)) == []
    for name, records in got.items():
        owners = {tenants.topic(json.loads(v)["subscriber"].encode()) for v in records}
        assert owners == {name}
    acme = {json.loads(v)["subscriber"] for v in got[acme_topic]}
    assert acme == {"acme/alice", "acme/carol", "acme"}
    assert [n for n in made if n.startswith(tenants.acl_prefix("acme"))] == [acme_topic]
    assert len(made) == len({tenants.topic(s.encode()) for s in subscribers})
