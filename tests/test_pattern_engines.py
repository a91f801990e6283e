"""The pattern tests (MATCHES, TOPIC, HAS, XPATH) and their engines, against
`tests.pattern_oracle` and `tests.selector_oracle`, written from the definitions."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from matcher.constraints import predicate_of
from matcher.double_forest import DoubleForest
from matcher.engine import SpaceMatcher
from matcher.engines import gated
from matcher.engines.pattern_index import ENGINES
from matcher.engines.patterns import topic_covers, topic_levels
from matcher.engines.regex_set import BASE, RegexSet
from matcher.engines.xpath_groups import leading_path
from matcher.errors import FilterError, RecordError
from matcher.filter_json import parse_filter
from matcher.profiles import Profile
from matcher.records import Source, decode
from matcher.where import parse_where
from streaming.state.codec import dump_snapshot, load_snapshot
from tests import oracle, pattern_oracle
from tests import selector_oracle as jms

PROPS = settings(
    max_examples=int(os.environ.get("TSM_EXAMPLES", 200)), deadline=None, print_blob=True
)
POOLS = {
    "matches": (pattern_oracle.REGEXES, jms.PATTERN_TEXTS + jms.TEXTS),
    "topic": (pattern_oracle.TOPIC_FILTERS, pattern_oracle.TOPICS),
    "has": (pattern_oracle.TAG_PATTERNS, None),
    "xpath": (pattern_oracle.XPATHS, pattern_oracle.DOCS),
}


def engine_values(op: str):
    if op == "has":
        return st.frozensets(st.sampled_from(pattern_oracle.TAGS), max_size=4)
    return st.sampled_from(POOLS[op][1]) | st.integers(0, 2)


@pytest.mark.parametrize("op", sorted(ENGINES))
@PROPS
@given(data=st.data())
def test_an_engine_answers_as_each_pattern_does(op, data):
    """Adds and removes in any order; each answer is the set of held patterns
    whose definition holds on the value."""
    engine, held, next_id = ENGINES[op](), {}, 0
    patterns = st.sampled_from(POOLS[op][0])
    for step in data.draw(st.lists(st.booleans(), max_size=30)):
        if step or not held:
            held[next_id] = data.draw(patterns)
            engine.add(next_id, held[next_id])
            next_id += 1
        else:
            gone = data.draw(st.sampled_from(sorted(held)))
            engine.remove(gone)
            del held[gone]
        value = data.draw(engine_values(op))
        got = engine.matches(value)
        assert len(got) == len(set(got))
        assert set(got) == {i for i, p in held.items() if pattern_oracle.holds(op, p, value)}
    assert len(engine) == len(held)


def test_a_regex_set_of_many_levels_answers_as_the_loop():
    """Past several merges and removals (levels of BASE × 8**k)."""
    rnd = random.Random(7)
    words = ["".join(rnd.choice("abcdef") for _ in range(3)) for _ in range(400)]
    engine, held = RegexSet(), {}
    for i in range(BASE * 10):
        held[i] = f"{rnd.choice(words)}[0-9]?{rnd.choice(words)}"
        engine.add(i, held[i])
        if i % 3 == 0:
            gone = rnd.choice(sorted(held))
            engine.remove(gone)
            del held[gone]
    assert len(engine.levels) >= 2
    for _ in range(40):
        text = " ".join(rnd.choice(words) + rnd.choice(["", "1"]) for _ in range(30))
        want = {i for i, p in held.items() if pattern_oracle.regex_holds(p, text)}
        assert set(engine.matches(text)) == want == set(engine.loop(text))


def _topics(max_levels: int) -> list[str]:
    names = ("a", "b", "c", "$s", "", "z")
    return [
        "/".join(levels)
        for n in range(1, max_levels + 1)
        for levels in itertools.product(names, repeat=n)
    ]


TOPIC_UNIVERSE = _topics(4)
FILTERS = [f for f in (*pattern_oracle.TOPIC_FILTERS, "a/+/#", "+/b/#", "$s/+", "c/#") if f]


@pytest.mark.parametrize("wide", FILTERS)
def test_topic_covering_is_exact(wide):
    """A filter covers another exactly where every topic the other matches,
    it matches too (over every topic of up to 4 levels of a, b, c, $s, '' and
    a fresh name)."""
    for narrow in FILTERS:
        wanted = all(
            pattern_oracle.topic_holds(wide, t)
            for t in TOPIC_UNIVERSE
            if pattern_oracle.topic_holds(narrow, t)
        )
        assert topic_covers(topic_levels(wide), topic_levels(narrow)) == wanted, (wide, narrow)


def test_topic_covering_orders_filters():
    wide, narrow = predicate_of(parse_where("t TOPIC 'a/#'"))[0], None
    narrow = predicate_of(parse_where("t TOPIC 'a/+/c' AND x > 1"))[0]
    assert wide.covers_filter(narrow) and not narrow.covers_filter(wide)
    regex = predicate_of(parse_where("s MATCHES 'a'"))[0]
    same = predicate_of(parse_where("s MATCHES 'a' AND x = 1"))[0]
    other = predicate_of(parse_where("s MATCHES 'a+'"))[0]
    assert regex.covers_filter(same) and not regex.covers_filter(other)


@PROPS
@given(jms.selectors(patterns=True), st.randoms(), jms.profiles(intervals=False, patterns=True))
def test_point_profiles_as_the_definitions_say(tree, rnd, attrs):
    text = jms.render(tree, rnd)
    try:
        filters = predicate_of(parse_where(text))
    except FilterError as error:
        assume("conjunctions" not in str(error))
        raise
    values = {n: oracle.profile_value(v) for n, v in attrs.items()}
    expected = jms.selects(tree, jms.point_of(values))
    profile = Profile(attrs)
    assert any(c.overlaps(profile) for c in filters) == expected, text
    assert any(c.covers(profile) for c in filters) == expected, text


@contextlib.contextmanager
def _few(few: int):
    before, gated.FEW = gated.FEW, few
    try:
        yield
    finally:
        gated.FEW = before


def _compiled(text: str) -> list | None:
    try:
        return predicate_of(parse_where(text))
    except FilterError:
        return None  # (the expansion limit)


@PROPS
@given(
    st.lists(
        st.tuples(
            jms.selectors(3, patterns=True), st.randoms(use_true_random=False), st.booleans()
        ),
        min_size=1,
        max_size=12,
    ),
    st.lists(jms.profiles(intervals=True, patterns=True), min_size=1, max_size=10),
    st.integers(0, 11),
)
def test_the_forest_finds_what_the_oracle_holds(subscriptions, profiles, drop):
    """Both directions of the DoubleForest, gated filters and others, after a
    removal, against the selector oracle's relations (interval profiles too)."""
    compiled = [(tree, _compiled(jms.render(tree, rnd)), c) for tree, rnd, c in subscriptions]
    held = [(tree, filters, c) for tree, filters, c in compiled if filters is not None]
    forest = DoubleForest()
    for slot, (_, filters, covers) in enumerate(held):
        forest.add_subscription(slot, filters, covers, 0, math.inf)
    if held and drop < len(held):
        forest.remove_subscription(drop)
        forest.add_subscription(drop, held[drop][1], held[drop][2], 0, math.inf)
    points = [Profile(attrs) for attrs in profiles]
    values = [{n: oracle.profile_value(v) for n, v in attrs.items()} for attrs in profiles]
    for i, p in enumerate(points):
        forest.add_profile(i, p, 0, math.inf)
    forest.check_invariants()

    def holds(tree, covers, attrs) -> bool:
        return jms.holds(tree, "covers" if covers else "overlaps", attrs)

    want = {
        (q, s) for q, v in enumerate(values) for s, (t, _, c) in enumerate(held) if holds(t, c, v)
    }
    for few in (0, 100):  # the vector path, and the one for few profiles and rests
        with _few(few):
            qi, slots = forest.match_profiles(points, [(0, 1)] * len(points))
        assert {(int(q), forest.subs.handles[s]) for q, s in zip(qi, slots, strict=True)} == want
    grouped = forest.match_profiles_grouped(points, [(0, 1)] * len(points))
    assert {(q, forest.subs.handles[s]) for q, g in enumerate(grouped) for s in g} == want
    qi, slots = forest.match_subscriptions([(f, c, 0, 1) for _, f, c in held])
    got = {(forest.profiles.handles[s], int(q)) for q, s in zip(qi, slots, strict=True)}
    assert got == want


def test_gated_filters_prune_on_the_other_attributes_first():
    """A profile the rests' forest rejects runs no engine; removing the last
    filter of a rest removes its gate."""
    forest = DoubleForest()
    forest.add_subscription("a", predicate_of(parse_where("s MATCHES 'x' AND n > 5")), False, 0, 1)
    forest.add_subscription("b", predicate_of(parse_where("s MATCHES 'y' AND n > 5")), False, 0, 1)
    calls = []
    index = forest.gated.index
    real = index.matched
    index.matched = lambda attrs: calls.append(attrs) or real(attrs)
    profiles = [Profile({"s": "x", "n": 1}), Profile({"s": "xy", "n": 9})]
    qi, slots = forest.match_profiles(profiles, [(0, 0)] * 2)
    assert [(int(q), forest.subs.handles[s]) for q, s in zip(qi, slots, strict=True)] == [
        (1, "a"),
        (1, "b"),
    ]
    assert len(calls) == 1 and len(forest.gated.rests) == 1
    forest.remove_subscription(0)
    forest.remove_subscription(1)
    forest.check_invariants()
    assert not forest.gated.rests and not len(forest.gated.index)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("s MATCHES '(ab'", "invalid regular expression (RE2 syntax) at character 1"),
        (
            "x > 1 AND s MATCHES 'a**'",
            "bad repetition operator: '**' (in the pattern at column 21)",
        ),
        ("s MATCHES '(?<=a)b'", "invalid perl operator"),
        ("t TOPIC 'a/#/b'", "unbalanced topic filter at character 3"),
        ("t TOPIC 'a/b+'", "unbalanced topic filter at character 4: '+' must be a whole level"),
        ("d XPATH '/a['", "XPath syntax error at character 3"),
        ("d XPATH 'nofunction(1)'", "XPath error: Unregistered function"),
        ("g HAS ''", "HAS needs a tag"),
        ("s MATCHES 3", "expected a comparison operator"),
        ("s MATCHES '" + "a" * 5000 + "'", "over the limit of 4096"),
        ("3 TOPIC 'a'", "TOPIC at column 3 needs an attribute name before it"),
    ],
)
def test_bad_patterns_are_refused_with_their_position(text, message):
    with pytest.raises(FilterError) as caught:
        parse_where(text)
    assert message in str(caught.value)


def test_the_json_filter_form_has_the_pattern_tests():
    dnf = parse_filter(
        [
            [{"attr": "t", "op": "topic", "value": "a/+"}],
            [{"attr": "g", "op": "has", "value": "k=*"}],
        ]
    )
    filters = predicate_of(dnf)
    assert filters == predicate_of(parse_where("t TOPIC 'a/+' OR g HAS 'k=*'"))
    with pytest.raises(FilterError, match=r"filter\[0\]\[0\]: unbalanced topic filter"):
        parse_filter([[{"attr": "t", "op": "topic", "value": "a#"}]])
    with pytest.raises(FilterError, match=r"filter\[0\]\[0\]: 'matches' needs a string pattern"):
        parse_filter([[{"attr": "t", "op": "matches", "value": 1}]])


SOURCE = Source(topic="t", partition=0, offset=0)


def test_a_subscription_with_a_bad_pattern_is_a_dead_letter_reason():
    record = {"op": "subscribe", "id": "s", "space": "v", "subscriber": "u", "ts": 0}
    record["where"] = "d XPATH '//a[@'"
    with pytest.raises(RecordError, match="XPath syntax error at character 5"):
        decode(
            "subscription", json.dumps(record).encode(), Source(topic="t", partition=0, offset=0)
        )
    record = {"op": "publish", "id": "p", "space": "v", "attrs": {"d": "<a>"}, "ts": 0}
    with pytest.raises(RecordError, match="XML does not parse at line 1, column 4"):
        decode("profile", json.dumps(record).encode(), SOURCE)


def test_profiles_hold_tag_sets_and_parsed_xml():
    profile = Profile({"g": ["k=1", "x"], "d": "<a><b/></a>", "n": [1, 2]})
    assert profile.attrs["g"] == frozenset({"k=1", "x"}) and profile.attrs["n"] == (1.0, 2.0)
    assert profile.to_json()["g"] == ["k=1", "x"]
    with pytest.raises(
        RecordError, match=r"attribute 'd': XML does not parse at line 1, column 11"
    ):
        Profile({"d": "<a><b></a>"})
    # a tag set is no string and no number: other tests of its attribute fail
    assert not predicate_of(parse_where("g = 'x'"))[0].overlaps(profile)
    assert predicate_of(parse_where("g HAS 'k=*' AND g EXISTS"))[0].overlaps(profile)


@pytest.mark.parametrize(
    ("expression", "path"),
    [
        ("/menu/drinks[price > 1.8]/name", ("menu", "drinks")),
        ("/a/b", ("a", "b")),
        ("/a/b/@c", ("a", "b")),
        ('/a[b = "]/x"]/c', ("a",)),
        ("/a | /b", ()),
        ("//a", ()),
        ("count(/a)", ()),
        ("/a/b = 1", ()),
        ("/ns:a/b", ()),
    ],
)
def test_an_xpath_is_grouped_only_when_it_is_one_path_from_the_root(expression, path):
    assert leading_path(expression) == path


def test_a_snapshot_keeps_the_pattern_tests_and_their_indexes():
    """The state codec carries gated filters (RE2 sets are compiled again on
    the copy's first match) and tag sets; the copy matches the same, and takes
    new subscriptions into the same indexes."""
    wheres = [
        "s MATCHES '^a.c$'",
        "s MATCHES 'b' AND x > 1",
        "t TOPIC 'a/+/c/#' OR g HAS 'k=*'",
        "d XPATH '/a/b[@c=\"1\"]' AND NOT (s MATCHES 'z')",
        "g HAS 'x' AND t TOPIC '#'",
    ]
    subs = [
        {"op": "subscribe", "id": f"s{i}", "space": "A", "subscriber": "u", "where": w, "ts": 1}
        for i, w in enumerate(wheres)
    ]
    attrs = [
        {"s": "abc", "x": 2},
        {"s": "ab", "t": "a/b/c/d", "g": ["x"]},
        {"d": '<a><b c="1"/></a>', "s": "y"},
        {"g": ["k=2"], "t": "$s/c"},
    ]
    profiles = [
        {"op": "publish", "id": f"p{i}", "space": "A", "attrs": a, "ts": 2, "valid_to": None}
        for i, a in enumerate(attrs)
    ]

    def records(kind, rows):
        return [decode(kind, json.dumps(r), Source("t", 0, i)) for i, r in enumerate(rows)]

    matcher = SpaceMatcher("A")
    matcher.apply_batch(records("subscription", subs[:3]))
    matcher.apply_batch(records("profile", profiles[:1]))  # (compiles the RE2 sets)
    copy = load_snapshot(dump_snapshot(matcher))
    for m in (matcher, copy):
        m.apply_batch(records("subscription", subs[3:]))
    got = copy.apply_batch(records("profile", profiles))
    assert got == matcher.apply_batch(records("profile", profiles))
    pairs = {(e["subscription_id"], e["profile_id"]) for e in map(_event, got)}
    assert pairs == {("s0", "p0"), ("s1", "p0"), ("s2", "p1"), ("s2", "p3"), ("s4", "p1")} | {
        ("s3", "p2")
    }


def _event(item) -> dict:
    return json.loads(item) if isinstance(item, bytes | str) else item
