"""The `where` language as JMS message selectors, against the specification.

Random selector trees of every form are printed as `where` text, parsed, and
matched by the matcher's filters (`Conjunction.overlaps` / `covers`); the
same trees are evaluated by `tests.selector_oracle`, written from JMS 2.0
§3.8.1 and docs/SELECTORS.md, on random profiles with absent, mistyped and
present attributes. Then the selector cases of the JMS conformance suites
(ActiveMQ's SelectorTest, the spec's own examples) as a table.
"""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from matcher.constraints import predicate_of
from matcher.double_forest import DoubleForest
from matcher.errors import FilterError
from matcher.profiles import Profile
from matcher.where import parse_where
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
