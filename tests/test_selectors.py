"""The `where` language as JMS message selectors, against the specification.

Random selector trees of every form are printed as `where` text, parsed, and
matched by the matcher's filters (`Conjunction.overlaps` / `covers`); the
same trees are evaluated by `tests.selector_oracle`, written from JMS 2.0
§3.8.1 and docs/SELECTORS.md, on random profiles with absent, mistyped and
present attributes. Then the selector cases of the JMS conformance suites
(ActiveMQ's SelectorTest, the spec's own examples) as a table.
"""

from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from matcher.constraints import predicate_of
from matcher.double_forest import DoubleForest
from matcher.engine import SpaceMatcher
from matcher.errors import FilterError
from matcher.profiles import Profile
from matcher.records import Source, decode
from matcher.where import parse_where
from streaming.state.codec import dump_snapshot, load_snapshot
from tests import oracle
from tests import selector_oracle as jms

PROPS = settings(
    max_examples=int(os.environ.get("TSM_EXAMPLES", 300)), deadline=None, print_blob=True
)


def values(attrs: dict) -> dict:
    """Profile attributes as the oracles take them (numbers as intervals)."""
    return {n: oracle.profile_value(v) for n, v in attrs.items()}


def predicate(text: str):
    try:
        return predicate_of(parse_where(text))
    except FilterError as error:
        assume("conjunctions" not in str(error))  # (the expansion limit: tested in test_where)
        raise


def relations(filters, attrs) -> tuple[bool, bool]:
    """(overlaps, covers) of the matcher's predicate for the profile."""
    profile = Profile(attrs)
    return any(c.overlaps(profile) for c in filters), any(c.covers(profile) for c in filters)


@PROPS
@given(
    jms.selectors(),
    st.randoms(use_true_random=False),
    st.lists(jms.profiles(intervals=False), min_size=1, max_size=6),
)
def test_point_profiles_as_the_specification_says(tree, rnd, profiles):
    text = jms.render(tree, rnd)
    filters = predicate(text)
    for attrs in profiles:
        expected = jms.selects(tree, jms.point_of(values(attrs)))
        assert relations(filters, attrs) == (expected, expected), (text, attrs, filters)


@PROPS
@given(
    jms.selectors(),
    st.randoms(use_true_random=False),
    st.lists(jms.profiles(intervals=True), min_size=1, max_size=6),
)
def test_interval_profiles_as_the_rule_says(tree, rnd, profiles):
    text = jms.render(tree, rnd)
    filters = predicate(text)
    for attrs in profiles:
        expected = tuple(jms.holds(tree, r, values(attrs)) for r in ("overlaps", "covers"))
        assert relations(filters, attrs) == expected, (text, attrs, filters)


@PROPS
@given(jms.selectors(), jms.profiles(intervals=False))
def test_the_oracles_normal_form_keeps_the_truth(tree, attrs):
    """The interval rule, on a point profile, is the specification's evaluation."""
    expected = jms.selects(tree, jms.point_of(values(attrs)))
    assert jms.holds(tree, "overlaps", values(attrs)) == expected
    assert jms.holds(tree, "covers", values(attrs)) == expected


@settings(max_examples=int(os.environ.get("TSM_EXAMPLES", 100)), deadline=None, print_blob=True)
@given(
    st.lists(
        st.tuples(jms.selectors(), st.randoms(use_true_random=False), st.booleans()),
        min_size=1,
        max_size=12,
    ),
    st.lists(jms.profiles(intervals=True), min_size=1, max_size=12),
)
def test_the_forests_find_what_the_filters_hold(subscriptions, profiles):
    """Boxes, inexact marks and covering of every selector form, in both
    directions of the DoubleForest, against each filter's own relation."""
    forest, held = DoubleForest(), []
    for tree, rnd, covers in subscriptions:
        try:
            filters = predicate_of(parse_where(jms.render(tree, rnd)))
        except FilterError:
            continue  # (the expansion limit)
        forest.add_subscription(len(held), filters, covers, 0, math.inf)
        held.append((filters, covers))
    points = [Profile(attrs) for attrs in profiles]
    for i, p in enumerate(points):
        forest.add_profile(i, p, 0, math.inf)
    forest.check_invariants()

    def holds(filters, covers, p) -> bool:
        return any(c.covers(p) if covers else c.overlaps(p) for c in filters)

    qi, slots = forest.match_profiles(points, [(0, 1)] * len(points))
    got = {(int(q), forest.subs.handles[s]) for q, s in zip(qi, slots, strict=True)}
    assert got == {
        (q, s) for q, p in enumerate(points) for s, (f, c) in enumerate(held) if holds(f, c, p)
    }
    qi, slots = forest.match_subscriptions([(f, c, 0, 1) for f, c in held])
    got = {(int(q), forest.profiles.handles[s]) for q, s in zip(qi, slots, strict=True)}
    assert got == {
        (q, i) for q, (f, c) in enumerate(held) for i, p in enumerate(points) if holds(f, c, p)
    }


# Forms whose box is only a necessary condition (a value in the box may fail them).
INEXACT = [
    "x != 2",  # (a new one against the held profiles once took {x: 2} inside {x: [1, 3]})
    "x IN (1, 3)",
    "x + 1 <> 3",
    "x > 0 AND NOT x <> 5",
    "x > 0 AND NOT x BETWEEN 1 AND 3",
    "NOT x = 2",
    "x IS NULL",
    "x * x > 4",
    "x < y",
    "s LIKE 'a_'",
    "s NOT LIKE 'a%'",
    "NOT b",
    "x EXISTS AND NOT x IN (2, 'a')",
]
PROFILES = [{"x": 2}, {"x": 7}, {"x": [1, 3]}, {"x": 2, "y": 1}, {"s": "ab"}, {"b": False}, {}]


@pytest.mark.parametrize("covers", [False, True])
def test_inexact_boxes_are_tested(covers):
    forest, held = DoubleForest(), [predicate_of(parse_where(text)) for text in INEXACT]
    for slot, filters in enumerate(held):
        forest.add_subscription(slot, filters, covers, 0, math.inf)
    points = [Profile(attrs) for attrs in PROFILES]
    for i, p in enumerate(points):
        forest.add_profile(i, p, 0, math.inf)
    relation = "covers" if covers else "overlaps"
    want = {
        (q, s)
        for q, p in enumerate(points)
        for s, filters in enumerate(held)
        if any(getattr(c, relation)(p) for c in filters)
    }
    qi, slots = forest.match_profiles(points, [(0, 1)] * len(points))
    assert {(int(q), forest.subs.handles[s]) for q, s in zip(qi, slots, strict=True)} == want
    qi, slots = forest.match_subscriptions([(f, covers, 0, 1) for f in held])
    got = {(forest.profiles.handles[s], int(q)) for q, s in zip(qi, slots, strict=True)}
    assert got == want
    assert (0, 0) not in want and (1, 3) not in want  # x != 2 at 2; NOT x <> 5 at 7


# -- the conformance cases: ActiveMQ's SelectorTest and the spec's own examples --------

# ActiveMQ's test message, as profile attributes (JMSType is an attribute like any other).
MESSAGE = {
    "JMSType": "selector-test",
    "name": "James",
    "location": "London",
    "byteProp": 123,
    "byteProp2": 33,
    "shortProp": 123,
    "intProp": 123,
    "longProp": 123,
    "floatProp": 123.0,
    "doubleProp": 123.0,
    "rank": 123,
    "version": 2,
    "quote": "'In God We Trust'",
    "foo": "_foo",
    "punctuation": "!#$&()*+,-./:;<=>?@[\\]^`{|}~",
    "endingUnderScore": "XD7xlJIQn_",
    "trueProp": True,
    "falseProp": False,
}
MODEL = {
    "modelClassId": "com.whatever.something.foo.bar",
    "modelInstanceId": "170",
    "modelRequestError": "abc",
    "modelCorrelatedClientId": "whatever",
}
MODEL_SELECTOR = (
    "modelClassId LIKE 'com.whatever.something.%' AND modelInstanceId = '170' "
    "AND (modelRequestError IS NULL OR modelCorrelatedClientId = 'whatever')"
)
ACTIVEMQ = [
    ("(trueProp OR falseProp) AND trueProp", True),
    ("(trueProp OR falseProp) AND falseProp", False),
    ("trueProp", True),
    ("JMSType = 'selector-test'", True),
    ("JMSType = 'crap'", False),
    ("name = 'James'", True),
    ("rank > 100", True),
    ("rank >= 123", True),
    ("rank >= 124", False),
    ("byteProp = 123", True),
    ("byteProp = 10", False),
    ("byteProp2 = 33", True),
    ("shortProp = 123", True),
    ("intProp = 123", True),
    ("longProp = 123", True),
    ("floatProp = 123", True),
    ("doubleProp = 123", True),
    ("doubleProp = 10", False),
    ("name = 'James' and rank < 200", True),
    ("name = 'James' and rank > 200", False),
    ("name = 'Foo' and rank < 200", False),
    ("unknown = 'Foo' and anotherUnknown < 200", False),
    ("name = 'James' or rank < 200", True),
    ("name = 'Foo' or rank < 200", True),
    ("name = 'Foo' or rank > 200", False),
    ("unknown = 'Foo' or anotherUnknown < 200", False),
    ("rank + 2 = 125", True),
    ("(rank + 2) = 125", True),
    ("125 = (rank + 2)", True),
    ("rank + version = 125", True),
    ("rank + 2 < 124", False),
    ("rank - 2 = 121", True),
    ("rank - version = 121", True),
    ("rank - 2 > 122", False),
    ("rank * 2 = 246", True),
    ("rank * version = 246", True),
    ("rank * 2 < 130", False),
    ("rank / version = 61.5", True),
    ("rank / 3 > 100.0", False),
    ("rank / 3 > 100", False),
    ("version / 2 = 1", True),
    ("rank between 100 and 150", True),
    ("rank between 10 and 120", False),
    ("name in ('James', 'Bob', 'Gromit')", True),
    ("name in ('Gromit', 'Bob', 'James')", True),
    ("name in ('Gromit', 'Bob', 'Cheddar')", False),
    ("name not in ('Gromit', 'Bob', 'Cheddar')", True),
    ("dummy is null", True),
    ("dummy is not null", False),
    ("name is not null", True),
    ("name is null", False),
    ("SessionserverId=1870414179", False),
    ("Command NOT IN ('MirrorLobbyRequest', 'MirrorLobbyReply')", False),
    ("1.0 < 1.1", True),
    ("-1.1 < 1.0", True),
    ("1.0E1 < 1.1E1", True),
    ("-1.1E1 < 1.0E1", True),
    ("1. < 1.1", True),
    ("-1.1 < 1.", True),
    ("1.E1 < 1.1E1", True),
    ("-1.1E1 < 1.E1", True),
    (".1 < .5", True),
    ("-.5 < .1", True),
    (".1E1 < .5E1", True),
    ("-.5E1 < .1E1", True),
    ("4E10 < 5E10", True),
    ("5E8 < 5E10", True),
    ("-4E10 < 2E10", True),
    ("-5E8 < 2E2", True),
    ("4E+10 < 5E+10", True),
    ("4E-10 < 5E-10", True),
    ("quote = '''In God We Trust'''", True),
    ("quote LIKE '''In G_d We Trust'''", True),
    ("quote LIKE '''In Gd_ We Trust'''", False),
    ("quote NOT LIKE '''In G_d We Trust'''", False),
    ("quote NOT LIKE '''In Gd_ We Trust'''", True),
    ("foo LIKE '%oo'", True),
    ("foo LIKE '%ar'", False),
    ("foo NOT LIKE '%oo'", False),
    ("foo NOT LIKE '%ar'", True),
    ("foo LIKE '!_%' ESCAPE '!'", True),
    ("quote LIKE '!_%' ESCAPE '!'", False),
    ("foo NOT LIKE '!_%' ESCAPE '!'", False),
    ("quote NOT LIKE '!_%' ESCAPE '!'", True),
    ("punctuation LIKE '!#$&()*+,-./:;<=>?@[\\]^`{|}~'", True),
    ("foo LIKE '%_%' ESCAPE '%'", True),
    ("endingUnderScore LIKE '_D7xlJIQn$_' ESCAPE '$'", True),
    ("endingUnderScore LIKE '_D7xlJIQn__' ESCAPE '_'", True),
    ("endingUnderScore LIKE '%D7xlJIQn%_' ESCAPE '%'", True),
    ("endingUnderScore LIKE '%D7xlJIQn%'  ESCAPE '%'", True),
    ("endingUnderScore LIKE '%D7xlJIQn%%'  ESCAPE '%'", False),
    ("endingUnderScore LIKE '_D7xlJIQn\\_' ESCAPE '\\'", True),
    ("endingUnderScore LIKE '%D7xlJIQn\\_' ESCAPE '\\'", True),
]
SPEC = [  # JMS 2.0 §3.8.1.1's examples
    ("Country IN ('UK', 'US', 'France')", {"Country": "UK"}, True),
    ("Country IN ('UK', 'US', 'France')", {"Country": "Peru"}, False),
    ("Country NOT IN ('UK', 'US', 'France')", {"Country": "UK"}, False),
    ("Country NOT IN ('UK', 'US', 'France')", {"Country": "Peru"}, True),
    ("Country NOT IN ('UK', 'US', 'France')", {}, False),
    ("age BETWEEN 15 AND 19", {"age": 15}, True),
    ("age BETWEEN 15 AND 19", {"age": 20}, False),
    ("age NOT BETWEEN 15 AND 19", {"age": 14}, True),
    ("age NOT BETWEEN 15 AND 19", {"age": 19}, False),
    ("phone LIKE '12%3'", {"phone": "123"}, True),
    ("phone LIKE '12%3'", {"phone": "12993"}, True),
    ("phone LIKE '12%3'", {"phone": "1234"}, False),
    ("word LIKE 'l_se'", {"word": "lose"}, True),
    ("word LIKE 'l_se'", {"word": "loose"}, False),
    ("underscored LIKE '\\_%' ESCAPE '\\'", {"underscored": "_foo"}, True),
    ("underscored LIKE '\\_%' ESCAPE '\\'", {"underscored": "bar"}, False),
    ("phone NOT LIKE '12%3'", {"phone": "123"}, False),
    ("phone NOT LIKE '12%3'", {"phone": "12993"}, False),
    ("phone NOT LIKE '12%3'", {"phone": "1234"}, True),
    (
        "JMSType = 'car' AND color = 'blue' AND weight > 2500",
        {"JMSType": "car", "color": "blue", "weight": 3000},
        True,
    ),
    ("Age IS NULL AND Weight IS NOT NULL", {"Weight": 80}, True),
    (
        "Weight NOT BETWEEN (Age * 5) AND (Height / Age * 2.23)",
        {"Weight": 80, "Age": 20, "Height": 180},
        True,
    ),
]
CASES = (
    [(text, MESSAGE, expected) for text, expected in ACTIVEMQ]
    + [
        ("SessionserverId=1870414179", {"SessionserverId": 1870414179}, True),
        ("SessionserverId=1870414179", {"SessionserverId": 1234}, False),
        ("Command NOT IN ('MirrorLobbyRequest', 'MirrorLobbyReply')", {"Command": "Cheese"}, True),
        (
            "Command NOT IN ('MirrorLobbyRequest', 'MirrorLobbyReply')",
            {"Command": "MirrorLobbyReply"},
            False,
        ),
        (MODEL_SELECTOR, MODEL, True),
        (MODEL_SELECTOR, MODEL | {"modelCorrelatedClientId": "shouldFailNow"}, False),
        (MODEL_SELECTOR, {k: v for k, v in MODEL.items() if k != "modelRequestError"}, True),
    ]
    + SPEC
)


@pytest.mark.parametrize(("text", "attrs", "expected"), CASES)
def test_conformance(text, attrs, expected):
    filters = predicate_of(parse_where(text))
    assert relations(filters, attrs) == (expected, expected)


@pytest.mark.parametrize(
    "text",
    [
        "3+5",
        "True AND 3+5",
        "=TEST 'test'",
        "prop1 = prop2 foo AND string = 'Test'",
        "a = 1 AMD  b = 2",
        "name + '!' = 'James!'",  # (ActiveMQ's string +: not JMS)
    ],
)
def test_conformance_refusals(text):
    with pytest.raises(FilterError, match="at column"):
        parse_where(text)


def test_a_snapshot_keeps_every_selector_form():
    """The job's state codec (streaming.state.codec) carries LIKE patterns,
    NOT-ed sets, IS NULL and computed tests, and the copy matches the same."""
    wheres = [*INEXACT, "x * 2 + 1 > 4", "s LIKE 'a\\%_' OR z IS NULL"]
    subs = [
        {"op": "subscribe", "id": f"s{i}", "space": "A", "subscriber": "u", "where": w, "ts": 1}
        for i, w in enumerate(wheres)
    ]
    profiles = [
        {"op": "publish", "id": f"p{i}", "space": "A", "attrs": a, "ts": 2, "valid_to": None}
        for i, a in enumerate(PROFILES + [{"s": "a%b", "x": 3}])
    ]

    def records(kind, rows):
        return [decode(kind, json.dumps(r), Source("t", 0, i)) for i, r in enumerate(rows)]

    matcher = SpaceMatcher("A")
    matcher.apply_batch(records("subscription", subs))
    copy = load_snapshot(dump_snapshot(matcher))
    got = copy.apply_batch(records("profile", profiles))
    assert got == matcher.apply_batch(records("profile", profiles))
    assert len(got) > len(wheres)


@PROPS
@given(
    jms.selectors(3),
    jms.selectors(3),
    st.randoms(use_true_random=False),
    st.lists(jms.profiles(intervals=True), min_size=4, max_size=12),
)
def test_covering_and_intersection_between_filters_are_sound(tree1, tree2, rnd, profiles):
    """Where one filter covers another (the subscription forest's order), every
    profile the other overlaps (covers), it overlaps (covers) too; two filters
    that both cover a profile intersect (the advertisement relation)."""
    f1, f2 = predicate(jms.render(tree1, rnd)), predicate(jms.render(tree2, rnd))
    points = [Profile(a) for a in profiles]
    for c1 in f1:
        for c2 in f2 + [c1]:
            if c1.covers_filter(c2):
                for p in points:
                    assert c1.overlaps(p) or not c2.overlaps(p), (c1, c2, p)
                    assert c1.covers(p) or not c2.covers(p), (c1, c2, p)
            if any(c1.covers(p) and c2.covers(p) for p in points):  # (a point has both)
                assert c1.intersects(c2) and c2.intersects(c1), (c1, c2)
