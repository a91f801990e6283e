"""SEMANTICS §2 relations: tables checked against both the matcher and the oracle,
then random filters and profiles checked against the oracle."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher.constraints import conjunction_of, predicate_of
from matcher.profiles import Profile
from matcher.where import parse_where
from tests import oracle

FAST = settings(max_examples=150, deadline=None, print_blob=True)


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def atoms_of(text: str):
    (conj,) = parse_where(text)
    return conj


def conj(text: str):
    c = conjunction_of(atoms_of(text))
    assert c is not None, text
    return c


T10, T11, T12 = (f"TIMESTAMP '2026-11-22T{h}:00:00Z'" for h in ("10", "11", "12"))

# (filter, profile attrs, overlaps, covers)
FILTER_PROFILE = [
    # Example 2.1, the ranges of F2 and F3 as profiles of F1 = x < 10
    ("x < 10", {"x": [5, 9]}, True, True),
    ("x < 10", {"x": [8, 15]}, True, False),
    ("x < 10", {"x": [10, 12]}, False, False),
    ("x <= 10", {"x": [10, 12]}, True, False),
    ("x > 5", {"x": 5}, False, False),
    ("x > 5", {"x": [5, 6]}, True, False),
    ("x >= 5", {"x": [5, 6]}, True, True),
    ("x = 5", {"x": [4, 6]}, True, False),
    ("x = 5", {"x": 5.0}, True, True),
    ("x != 5", {"x": [4, 6]}, True, False),
    ("x != 5", {"x": 5}, False, False),
    ("x != 5", {"x": [5.5, 6]}, True, True),
    ("x BETWEEN 1 AND 2", {"x": [0, 1]}, True, False),
    ("x BETWEEN 1 AND 2", {"x": [1, 2]}, True, True),
    ("x BETWEEN 1 AND 2", {"x": [2.5, 3]}, False, False),
    ("x IN (1, 3)", {"x": [1.5, 2.5]}, False, False),
    ("x IN (1, 3)", {"x": [0, 1]}, True, False),
    ("x IN (1, 3)", {"x": 3}, True, True),
    ("x >= 0 AND x != 3", {"x": [0, 5]}, True, False),
    ("x >= 0 AND x != 3", {"x": 3}, False, False),
    ("s < 'b' AND s != 'a'", {"s": "a"}, False, False),
    ("x > 1 AND y < 3", {"x": [0, 2], "y": [2, 4]}, True, False),
    ("x > 1 AND y < 3", {"x": [2, 3], "y": [0, 1]}, True, True),
    ("x > 1 AND y < 3", {"x": [2, 3]}, False, False),  # y missing
    # no coercion between types (§1)
    ("x = 1", {"x": "1"}, False, False),
    ("x = 1", {"x": True}, False, False),
    ("x != 1", {"x": "a"}, False, False),
    ("b = TRUE", {"b": 1}, False, False),
    ("s = 'a'", {"s": [1, 2]}, False, False),
    # times
    (f"t >= {T10}", {"t": [ms("2026-11-22T09:59:00Z"), ms("2026-11-22T10:01:00Z")]}, True, False),
    (
        f"t BETWEEN {T10} AND {T12}",
        {"t": [ms("2026-11-22T10:00:00Z"), ms("2026-11-22T11:00:00Z")]},
        True,
        True,
    ),
    (f"t < {T11}", {"t": ms("2026-11-22T11:00:00Z")}, False, False),
    # strings
    ("s = 'bus'", {"s": "bus"}, True, True),
    ("s = 'bus'", {"s": "tram"}, False, False),
    ("s != 'bus'", {"s": "tram"}, True, True),
    ("s != 'bus'", {"s": "bus"}, False, False),
    ("s < 'b'", {"s": "a"}, True, True),
    ("s < 'b'", {"s": "b"}, False, False),
    ("s BETWEEN 'a' AND 'c'", {"s": "bz"}, True, True),
    ("s IN ('a', 'b')", {"s": "b"}, True, True),
    ("s LIKE 'ab%'", {"s": "abc"}, True, True),
    ("s LIKE 'ab%'", {"s": "xab"}, False, False),
    ("s LIKE '%ab'", {"s": "xab"}, True, True),
    ("s LIKE '%ab%'", {"s": "xaby"}, True, True),
    ("s LIKE '%ab%'", {"s": "ba"}, False, False),
    ("NOT s LIKE 'ab%'", {"s": "abc"}, False, False),
    ("NOT s LIKE 'ab%'", {"s": "xab"}, True, True),
    ("NOT s LIKE '%ab'", {"s": "xab"}, False, False),
    ("NOT s LIKE '%ab%'", {"s": "ba"}, True, True),
    ("NOT s LIKE 'ab%'", {"s": 1}, True, True),  # JMS: LIKE on a number is false
    ("s LIKE 'a_c%'", {"s": "abcd"}, True, True),
    ("s LIKE 'a_c%'", {"s": "ac"}, False, False),
    ("s NOT LIKE 'a_c'", {"s": "abc"}, False, False),
    ("s NOT LIKE 'a_c'", {"s": [1, 2]}, True, True),
    ("s NOT LIKE 'a_c'", {}, False, False),  # unknown
    # JMS's NOT: a comparison of unlike types is false, with an absent attribute unknown
    ("NOT x = 1", {"x": "a"}, True, True),
    ("NOT x = 1", {"x": [0, 2]}, True, False),
    ("NOT x = 1", {"x": [1, 1]}, False, False),
    ("NOT x = 1", {}, False, False),
    ("NOT x BETWEEN 1 AND 2", {"x": [3, 4]}, True, True),
    ("NOT x BETWEEN 1 AND 2 AND x > 0", {"x": [0, 3]}, True, False),
    ("NOT x BETWEEN 1 AND 2 AND x BETWEEN 1 AND 3", {"x": [0, 1.5]}, False, False),
    ("NOT x IN (1, 2) AND x >= 1", {"x": [1, 2]}, True, False),
    ("NOT x IN (1, 'a')", {"x": "b"}, True, True),
    ("NOT x IN (1, 'a')", {"x": "a"}, False, False),
    ("NOT x > 5 AND NOT x < 1", {"x": [1, 5]}, True, True),
    ("NOT x > 5 AND NOT x < 1", {"x": [0.5, 5]}, True, False),
    ("x NOT BETWEEN 1 AND 2", {"x": "a"}, False, False),  # JMS: x < 1 OR x > 2
    # arithmetic on one attribute: a range; NULL (unknown) on a string
    ("x * 2 > 4", {"x": [1, 3]}, True, False),
    ("NOT x * 2 > 4", {"x": [1, 2]}, True, True),
    ("NOT x * 2 > 4", {"x": "a"}, False, False),
    ("x + 1 <> 3", {"x": [1, 3]}, True, False),
    ("x + 1 <> 3", {"x": [3, 4]}, True, True),
    # IS NULL
    ("x IS NULL", {}, True, True),
    ("x IS NULL", {"x": "a"}, False, False),
    ("x IS NULL AND y = 1", {"y": 1}, True, True),
    # booleans
    ("b = TRUE", {"b": True}, True, True),
    ("b = TRUE", {"b": False}, False, False),
    ("b != TRUE", {"b": False}, True, True),
    ("b IN (TRUE, FALSE)", {"b": True}, True, True),
    ("b = TRUE", {"b": "true"}, False, False),
    # exists, TRUE
    ("x EXISTS", {"x": [1, 2]}, True, True),
    ("x EXISTS", {"x": "a"}, True, True),
    ("x EXISTS", {"y": 1}, False, False),
    ("TRUE", {}, True, True),
]


@pytest.mark.parametrize(("where", "attrs", "overlaps", "covers"), FILTER_PROFILE)
def test_filter_profile(where, attrs, overlaps, covers):
    dnf, p = parse_where(where), Profile(attrs)
    values = {n: oracle.profile_value(v) for n, v in attrs.items()}
    filters = predicate_of(dnf)
    assert (any(c.overlaps(p) for c in filters), any(c.covers(p) for c in filters)) == (
        overlaps,
        covers,
    )
    assert (
        oracle.predicate_holds(dnf, "overlaps", values),
        oracle.predicate_holds(dnf, "covers", values),
    ) == (overlaps, covers)


def test_predicate_covers_needs_one_filter_that_covers():
    """§2: a predicate holds if one of its filters does; the union does not count."""
    dnf = parse_where("x <= 3 OR x >= 3")
    p = Profile({"x": [0, 6]})
    assert any(c.overlaps(p) for c in predicate_of(dnf))
    assert not any(c.covers(p) for c in predicate_of(dnf))
    assert not oracle.predicate_holds(dnf, "covers", {"x": (0.0, 6.0)})


F1, F2, F3 = "x < 10", "x BETWEEN 5 AND 9", "x BETWEEN 8 AND 15"  # Example 2.1

# (F1, F2, F1 covers F2): Siena's rules
FILTER_FILTER = [
    (F1, F2, True),
    (F1, F3, False),
    (F2, F3, False),
    (F3, F2, False),
    (F2, F1, False),
    ("x < 10", "x < 5", True),
    ("x < 10", "x <= 10", False),
    ("x <= 10", "x < 10", True),
    ("x > 5", "x = 7", True),
    ("x > 5", "x IN (6, 7)", True),
    ("x > 5", "x IN (5, 7)", False),
    ("x != 3", "x > 4", True),
    ("x != 3", "x > 2", False),
    ("x != 3", "x != 3", True),
    ("x != 3", "x IN (1, 2)", True),
    ("x = 3", "x BETWEEN 3 AND 3", True),
    ("x >= 1", "x >= 1 AND y = 2", True),
    ("x >= 1 AND y = 2", "x >= 1", False),
    ("TRUE", "x = 1", True),
    ("x EXISTS", "x = 1", True),
    ("x EXISTS", "s LIKE 'a%'", False),
    ("x = 1", "x EXISTS", False),
    ("x > 1", "x = 'a'", False),
    ("x = 1", "x = TRUE", False),
    (f"t >= {T10}", f"t BETWEEN {T11} AND {T12}", True),
    (f"t >= {T11}", f"t BETWEEN {T10} AND {T12}", False),
    ("s LIKE 'a%'", "s LIKE 'ab%'", True),
    ("s LIKE 'ab%'", "s LIKE 'a%'", False),
    ("s LIKE '%b'", "s LIKE '%ab'", True),
    ("s LIKE '%b%'", "s LIKE 'ab%'", True),
    ("s LIKE '%b%'", "s = 'abc'", True),
    ("s LIKE 'a%'", "s IN ('ab', 'ac')", True),
    ("s LIKE 'a%'", "s IN ('ab', 'b')", False),
    ("s != 'a'", "s LIKE 'b%'", True),
    ("NOT s LIKE 'a%'", "NOT s LIKE 'a%'", True),
    ("NOT s LIKE 'ab%'", "NOT s LIKE 'a%'", True),
    ("NOT s LIKE 'a%'", "NOT s LIKE 'ab%'", False),
    ("NOT s LIKE 'a%'", "s LIKE 'b%'", True),
    ("NOT s LIKE '%ab%'", "NOT s LIKE '%b%'", True),
    ("NOT s LIKE '%b%'", "NOT s LIKE '%ab%'", False),
    ("NOT s LIKE '%b%'", "s = 'ac'", True),
    ("NOT x = 1", "x = 2", True),
    ("NOT x = 1", "x > 1", True),
    ("NOT x = 1", "x >= 1", False),
    ("NOT x = 1", "x = 'a'", True),
    ("NOT x = 1", "NOT x IN (1, 2)", True),
    ("NOT x IN (1, 2)", "NOT x = 1", False),
    ("NOT x = 1", "x EXISTS", False),
    ("x EXISTS", "NOT x = 1", True),
    ("NOT x IN (1, 5)", "NOT x IN (1, 2, 5)", True),
    ("NOT x IN (1, 2, 5)", "NOT x IN (1, 5)", False),
    ("s LIKE 'a_c'", "s = 'abc'", True),
    ("s LIKE 'a_c'", "s LIKE 'a_c'", True),
    ("s LIKE 'a_c'", "s = 'abd'", False),
    ("b = TRUE", "b = TRUE", True),
    ("b != FALSE", "b = TRUE", True),
    ("b = TRUE", "b IN (TRUE, FALSE)", False),
    ("b IN (TRUE, FALSE)", "b = FALSE", True),
]


@pytest.mark.parametrize(("f1", "f2", "expected"), FILTER_FILTER)
def test_filter_covers_filter(f1, f2, expected):
    assert conj(f1).covers_filter(conj(f2)) is expected
    assert oracle.filter_covers(atoms_of(f1), atoms_of(f2)) is expected


# The five intersection examples of 003 (filter F, advertisement A), and Example 2.1's overlaps.
INTERSECTS = [
    ("x > 5", "x > 5", True),
    ("x > 5", "x < 7", True),
    ("x > 5 AND y > 6", "x < 5 AND y > 6", False),
    ("x > 5", "x > 4 AND y > 6", True),
    ("x > 5 AND y > 7", "x > 5", True),
    (F1, F2, True),
    (F1, F3, True),
    (F2, F3, True),
    ("x < 5", "x > 5", False),
    ("x <= 5", "x >= 5", True),
    ("x = 1", "x != 1", False),
    ("x IN (1, 2)", "x BETWEEN 1.5 AND 3", True),
    ("b = TRUE", "b = FALSE", False),
    ("x < 5", "y > 5", True),
    ("x = 1", "x = 'a'", False),
    ("s LIKE 'a%'", "s LIKE 'b%'", False),
    ("NOT x = 1", "x = 1", False),
    ("NOT x = 1", "x IN (1, 2)", True),
    ("NOT x = 1", "x = 'a'", True),
    ("NOT s LIKE 'a%'", "s LIKE 'ab%'", False),
    ("x IS NULL", "x = 1", False),
    ("x IS NULL", "y = 1", True),
]


@pytest.mark.parametrize(("f", "a", "expected"), INTERSECTS)
def test_intersects(f, a, expected):
    assert conj(f).intersects(conj(a)) is expected
    assert conj(a).intersects(conj(f)) is expected
    assert oracle.filters_intersect(atoms_of(f), atoms_of(a)) is expected


PROFILE_PROFILE = [
    ({"x": [0, 10]}, {"x": [2, 3]}, True),
    ({"x": [2, 3]}, {"x": [0, 10]}, False),
    ({"x": [0, 10]}, {"x": [0, 10], "y": 1}, False),  # attribute sets differ
    ({"x": [0, 10], "y": 1}, {"x": [0, 10]}, False),
    ({"x": [0, 10], "s": "a"}, {"x": 5, "s": "a"}, True),
    ({"s": "a"}, {"s": "b"}, False),
    ({"x": 1}, {"x": 1.0}, True),
    ({"b": True}, {"b": 1}, False),
    ({"x": 1}, {"x": "1"}, False),
    ({"b": False}, {"b": False}, True),
]


@pytest.mark.parametrize(("p1", "p2", "expected"), PROFILE_PROFILE)
def test_profile_covers_profile(p1, p2, expected):
    assert Profile(p1).covers(Profile(p2)) is expected
    values = [{n: oracle.profile_value(v) for n, v in p.items()} for p in (p1, p2)]
    assert oracle.profile_covers(*values) is expected


# -- random filters and profiles against the oracle --------------------------------


@FAST
@given(oracle.conjunctions(), oracle.profile_attrs())
def test_random_filter_profile(atoms, attrs):
    values = {n: oracle.profile_value(v) for n, v in attrs.items()}
    c, p = conjunction_of(atoms), Profile(attrs)
    overlaps = oracle.overlaps(atoms, values)
    covers = oracle.covers(atoms, values)
    if c is None:  # unsatisfiable: no point satisfies it
        assert not overlaps
        return
    assert (c.overlaps(p), c.covers(p)) == (overlaps, covers)


def has_strings(atoms) -> bool:
    """String constraints: the oracle decides them on finite witnesses only."""
    values = [v for a in atoms for v in (a.value if isinstance(a.value, tuple) else (a.value,))]
    return any(isinstance(v, str) for v in values)


@FAST
@given(oracle.conjunctions(), oracle.conjunctions())
def test_random_filter_covering(f1, f2):
    c1, c2 = conjunction_of(f1), conjunction_of(f2)
    if c1 is None or c2 is None:
        return
    truth = oracle.filter_covers(f1, f2)
    if c1.covers_filter(c2):
        assert truth, "covers_filter is unsound"
    if not has_strings(f1 + f2):
        assert c1.covers_filter(c2) == truth, "covers_filter is incomplete on numbers/booleans"


@FAST
@given(oracle.conjunctions(), oracle.conjunctions())
def test_random_filter_intersection(f1, f2):
    c1, c2 = conjunction_of(f1), conjunction_of(f2)
    if c1 is None or c2 is None:
        return
    truth = oracle.filters_intersect(f1, f2)
    if truth:
        assert c1.intersects(c2) and c2.intersects(c1)
    if not has_strings(f1 + f2):
        assert c1.intersects(c2) == truth


@FAST
@given(oracle.profile_attrs(), oracle.profile_attrs())
def test_random_profile_covering(a1, a2):
    values = [{n: oracle.profile_value(v) for n, v in a.items()} for a in (a1, a2)]
    assert Profile(a1).covers(Profile(a2)) == oracle.profile_covers(*values)


@FAST
@given(oracle.predicates(), st.lists(oracle.profile_attrs(), min_size=1, max_size=4))
def test_where_rendering_round_trips(dnf, profiles):
    """The property tests send predicates as `where` text: the text means the atoms."""
    parsed = parse_where(oracle.where_text(dnf))
    for attrs in profiles:
        values = {n: oracle.profile_value(v) for n, v in attrs.items()}
        for relation in ("overlaps", "covers"):
            assert oracle.predicate_holds(parsed, relation, values) == oracle.predicate_holds(
                dnf, relation, values
            )
