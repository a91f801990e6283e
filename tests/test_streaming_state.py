"""The job's state and output encodings, without Spark: snapshots load back to the
same matcher, and the processor's fast match encoding is `matcher.engine.encode`."""

from __future__ import annotations

import json

from benchmarks.workloads import generate
from matcher.engine import MATCH_FIELDS, SpaceMatcher, encode
from matcher.records import Source, decode
from streaming.processor import _encode_match, _Out
from streaming.state_cache import dump_snapshot, load_snapshot


def _records(kind: str, rows: list[dict], topic: str) -> list:
    return [decode(kind, json.dumps(r), Source(topic, 0, i)) for i, r in enumerate(rows)]


def test_snapshot_loads_back_to_a_matcher_that_matches_the_same():
    subs, profiles = generate("nested", 3, 300, 200)
    matcher = SpaceMatcher(subs[0]["space"])
    matcher.apply_batch(_records("subscription", subs, "s"))
    matcher.apply_batch(_records("profile", profiles[:100], "p"))
    matcher.drain_changes()
    copy = load_snapshot(dump_snapshot(matcher))
    assert copy.subs.keys() == matcher.subs.keys()
    assert copy.profiles.keys() == matcher.profiles.keys()
    assert copy.subs["s7"] == matcher.subs["s7"]
    # the old form (SpaceMatcher.dump) still loads
    assert load_snapshot(matcher.dump()).subs.keys() == matcher.subs.keys()
    rest = _records("profile", profiles[100:], "p")
    assert copy.apply_batch(rest) == matcher.apply_batch(rest)
    assert copy.drain_changes() == matcher.drain_changes()
    assert copy.expire(float("inf")) == matcher.expire(float("inf"))


def test_fast_match_encoding_is_the_engines():
    event = {
        "event": "match",
        "reason": "new-profile",
        "match_id": "0123456789abcdef" * 2,
        "space": "uniform",
        "subscription_id": "s1",
        "subscriber": "u1",
        "profile_id": "p1",
        "relation": "overlaps",
        "valid_from": 1_700_000_000_000,
        "valid_to": 1_700_000_060_000,
        "ts": 1_700_000_000_000,
        "payload": {"seq": 1},
    }
    assert tuple(event) == MATCH_FIELDS
    odd = 'ü "quoted" \\ \n \u2028 \x00 😀'
    cases = [
        event,
        event | {"valid_to": None, "payload": None, "subscriber": odd, "space": odd},
        event | {"payload": {"a": [1, 2.5, None, True, "é"], "b": {"c": 1e300}}},
        event | {"valid_from": 1.5},  # not the usual types: the generic path
        event | {"ts": True},
        event | {"subscriber": None},
        {k: event[k] for k in reversed(MATCH_FIELDS)},
    ]
    payloads: dict = {}
    for case in cases:
        assert _encode_match(case, payloads) == encode(case)
    row = _Out("t", b"k", b"v")
    assert row.asDict(True) == {"topic": "t", "key": b"k", "value": b"v"}
    assert (row.topic, row.key, row.value) == ("t", b"k", b"v")
