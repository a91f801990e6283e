"""The `where` language: operators, precedence, NOT push-down, errors, limits.

What selectors mean (JMS's three-valued logic, arithmetic, LIKE) is checked
against the specification in test_selectors.py."""

from __future__ import annotations

import math
import sys
import time
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matcher.constraints import (
    MAX_ATTRIBUTES,
    MAX_CONJUNCTIONS,
    MAX_WHERE_BYTES,
    Atom,
    predicate_of,
)
from matcher.errors import FilterError
from matcher.expressions import Computed
from matcher.profiles import Profile
from matcher.where import MAX_DEPTH, parse_where


def A(attr, op, value=None):  # noqa: N802 - reads like the dataclass it builds
    return Atom(attr, op, value)


def N(attr, op, value=None):  # noqa: N802 - JMS's NOT over a test of one attribute
    return Atom(attr, "not", Atom(attr, op, value))


def C(left, op, right, negate=False):  # noqa: N802
    return Computed(left, op, right, negate)


X, Y = ("attr", "x"), ("attr", "y")
MAX = sys.float_info.max


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


PARSES = [
    # comparisons
    ("x = 1", [[A("x", "=", 1)]]),
    ("x != 1", [[A("x", "!=", 1)]]),
    ("x <> 1", [[A("x", "!=", 1)]]),
    ("x < 1", [[A("x", "<", 1)]]),
    ("x <= 1", [[A("x", "<=", 1)]]),
    ("x > 1", [[A("x", ">", 1)]]),
    ("x >= 1", [[A("x", ">=", 1)]]),
    ("x='bus'", [[A("x", "=", "bus")]]),
    ("x = 'it''s'", [[A("x", "=", "it's")]]),
    ("x = ''", [[A("x", "=", "")]]),
    ("x < 'm'", [[A("x", "<", "m")]]),
    ("x = TRUE", [[A("x", "=", True)]]),
    ("x != false", [[A("x", "!=", False)]]),
    ("x IN (TRUE)", [[A("x", "in", (True,))]]),
    # numbers
    ("x = -5", [[A("x", "=", -5)]]),
    ("x = 2.5", [[A("x", "=", 2.5)]]),
    ("x = .5", [[A("x", "=", 0.5)]]),
    ("x = 1e3", [[A("x", "=", 1000.0)]]),
    ("x = -1.5E-2", [[A("x", "=", -0.015)]]),
    ("x>-5", [[A("x", ">", -5)]]),
    # numbers as Java writes them (JMS 3.8.1.1)
    ("x = 7E3", [[A("x", "=", 7000.0)]]),
    ("x = -57.9E2", [[A("x", "=", -5790.0)]]),
    ("x = 7.", [[A("x", "=", 7.0)]]),
    ("x = +62", [[A("x", "=", 62)]]),
    ("x = 57L", [[A("x", "=", 57)]]),
    ("x = 0x1F", [[A("x", "=", 31)]]),
    ("x = 5d", [[A("x", "=", 5.0)]]),
    ("x = - -5", [[A("x", "=", 5)]]),
    ("x = 0", [[A("x", "=", 0)]]),
    ("x = 0.5", [[A("x", "=", 0.5)]]),
    # reversed comparisons
    ("5 < x", [[A("x", ">", 5)]]),
    ("5 <= x", [[A("x", ">=", 5)]]),
    ("5 > x", [[A("x", "<", 5)]]),
    ("5 >= x", [[A("x", "<=", 5)]]),
    ("'bus' = kind", [[A("kind", "=", "bus")]]),
    ("TRUE <> flag", [[A("flag", "!=", True)]]),
    ("TIMESTAMP '2026-11-22T10:00:00Z' <= ts", [[A("ts", ">=", ms("2026-11-22T10:00:00+00:00"))]]),
    # between, in, exists
    ("x BETWEEN 1 AND 2", [[A("x", "between", (1, 2))]]),
    ("x BETWEEN 2 AND 2", [[A("x", "between", (2, 2))]]),
    ("x BETWEEN 'a' AND 'c'", [[A("x", "between", ("a", "c"))]]),
    ("x BETWEEN 1 AND 2 AND y = 3", [[A("x", "between", (1, 2)), A("y", "=", 3)]]),
    ("x IN (1, 'a', 2.5)", [[A("x", "in", (1, 2.5))], [A("x", "in", ("a",))]]),
    ("x in (1)", [[A("x", "in", (1,))]]),
    ("x EXISTS", [[A("x", "exists")]]),
    ("x IS NOT NULL", [[A("x", "exists")]]),
    ("x is null", [[A("x", "absent")]]),
    ("x NOT EXISTS", [[A("x", "absent")]]),
    ("NOT x IS NULL", [[A("x", "exists")]]),
    ("NOT x IS NOT NULL", [[A("x", "absent")]]),
    # LIKE
    ("x LIKE 'ab%'", [[A("x", "prefix", "ab")]]),
    ("x LIKE '%ab'", [[A("x", "suffix", "ab")]]),
    ("x LIKE '%ab%'", [[A("x", "contains", "ab")]]),
    ("x LIKE 'ab'", [[A("x", "=", "ab")]]),
    ("x LIKE '%'", [[A("x", "prefix", "")]]),
    ("x LIKE 'a\\_b%'", [[A("x", "prefix", "a_b")]]),
    ("x LIKE '100\\%'", [[A("x", "=", "100%")]]),
    ("x LIKE 'a\\b'", [[A("x", "=", "a\\b")]]),  # a backslash before a letter is itself
    ("x LIKE 'a\\'", [[A("x", "=", "a\\")]]),
    ("x LIKE 'a%%'", [[A("x", "prefix", "a")]]),
    ("x LIKE '%%a'", [[A("x", "suffix", "a")]]),
    ("x LIKE '%a%%'", [[A("x", "contains", "a")]]),
    ("x LIKE 'a%b'", [[A("x", "like", "a%b")]]),
    ("x LIKE 'a_'", [[A("x", "like", "a_")]]),
    ("x LIKE '%_%_'", [[A("x", "like", "__%")]]),
    ("x LIKE '%a%b%'", [[A("x", "like", "%a%b%")]]),
    ("x LIKE '!_%' ESCAPE '!'", [[A("x", "prefix", "_")]]),
    ("x LIKE '_!%' escape '!'", [[A("x", "like", "_\\%")]]),
    ("x LIKE '!!' ESCAPE '!'", [[A("x", "=", "!")]]),
    ("x LIKE '\\%' ESCAPE '!'", [[A("x", "prefix", "\\")]]),
    ("x LIKE '%_%' ESCAPE '%'", [[A("x", "prefix", "_")]]),  # (ActiveMQ's reading)
    ("x LIKE 'it''s'", [[A("x", "=", "it's")]]),
    ("x NOT LIKE 'ab%'", [[N("x", "prefix", "ab")]]),
    ("x NOT LIKE '%ab'", [[N("x", "suffix", "ab")]]),
    ("x NOT LIKE '%ab%'", [[N("x", "contains", "ab")]]),
    ("x NOT LIKE 'ab'", [[N("x", "=", "ab")]]),
    ("x NOT LIKE 'a_'", [[N("x", "like", "a_")]]),
    # TIMESTAMP
    ("ts > TIMESTAMP '2026-11-22T10:00:00Z'", [[A("ts", ">", 1795341600000)]]),
    ("ts = timestamp '2026-11-22T12:00:00+02:00'", [[A("ts", "=", 1795341600000)]]),
    ("ts = TIMESTAMP '2026-11-22T10:00:00'", [[A("ts", "=", 1795341600000)]]),
    ("ts = TIMESTAMP '2026-11-22T10:00:00.0019Z'", [[A("ts", "=", 1795341600001)]]),
    ("ts = TIMESTAMP '1970-01-01'", [[A("ts", "=", 0)]]),
    ("timestamp > 5", [[A("timestamp", ">", 5)]]),
    # names
    ('"my attr" = 1', [[A("my attr", "=", 1)]]),
    ("é = 1", [[A("é", "=", 1)]]),
    ("$x = 1", [[A("$x", "=", 1)]]),
    ("is = 1 AND escape = 3", [[A("is", "=", 1), A("escape", "=", 3)]]),
    ('"null" = 2', [[A("null", "=", 2)]]),
    ('"and" = 1', [[A("and", "=", 1)]]),
    ('"say ""hi""" = 1', [[A('say "hi"', "=", 1)]]),
    ("geo.lat_1 > 0", [[A("geo.lat_1", ">", 0)]]),
    ("_x = 1", [[A("_x", "=", 1)]]),
    # constants
    ("TRUE", [[]]),
    ("true", [[]]),
    ("FALSE", []),
    ("NOT TRUE", []),
    ("NOT FALSE", [[]]),
    ("x = 1 AND TRUE", [[A("x", "=", 1)]]),
    ("x = 1 AND FALSE", []),
    ("x = 1 OR TRUE", [[]]),
    ("x = 1 OR FALSE", [[A("x", "=", 1)]]),
    ("(TRUE)", [[]]),
    ("1.0 < 1.1", [[]]),
    ("5 = 6", []),
    ("NOT 5 = 6", [[]]),
    ("'a' = 1", []),
    ("NOT 'a' = 1", [[]]),  # unlike types compare false
    ("1 / 0 > 0", []),
    ("NOT 1 / 0 > 0", []),  # unknown, and so is its NOT
    # boolean attributes as conditions
    ("flag", [[A("flag", "=", True)]]),
    ("(flag)", [[A("flag", "=", True)]]),
    ("NOT flag", [[N("flag", "=", True)]]),
    ("a AND NOT b", [[A("a", "=", True), N("b", "=", True)]]),
    # precedence: OR < AND < NOT; keywords in any case
    ("a=1 OR b=2 AND c=3", [[A("a", "=", 1)], [A("b", "=", 2), A("c", "=", 3)]]),
    ("(a=1 OR b=2) AND c=3", [[A("a", "=", 1), A("c", "=", 3)], [A("b", "=", 2), A("c", "=", 3)]]),
    ("a=1 and b=2 or c=3", [[A("a", "=", 1), A("b", "=", 2)], [A("c", "=", 3)]]),
    ("NOT a=1 AND b=2", [[N("a", "=", 1), A("b", "=", 2)]]),
    ("NOT (a=1 AND b=2)", [[N("a", "=", 1)], [N("b", "=", 2)]]),
    ("NOT (a=1 OR b=2)", [[N("a", "=", 1), N("b", "=", 2)]]),
    ("Not nOt a=1", [[A("a", "=", 1)]]),
    ("((a = 1))", [[A("a", "=", 1)]]),
    # NOT push-down on every kind of atom: JMS's NOT (a value of another type
    # passes NOT a < 5, whose comparison is false), not the opposite comparison
    ("NOT a < 5", [[N("a", "<", 5)]]),
    ("NOT a = 'v'", [[N("a", "=", "v")]]),
    ("NOT a != 'v'", [[N("a", "!=", "v")]]),
    ("a NOT BETWEEN 1 AND 2", [[A("a", "<", 1)], [A("a", ">", 2)]]),  # JMS: a < 1 OR a > 2
    ("NOT a BETWEEN 1 AND 2", [[N("a", ">=", 1)], [N("a", "<=", 2)]]),
    ("NOT a NOT BETWEEN 1 AND 2", [[N("a", "<", 1), N("a", ">", 2)]]),
    ("a NOT IN (1, 2)", [[N("a", "in", (1, 2))]]),
    ("NOT a IN (1, 2)", [[N("a", "in", (1, 2))]]),
    ("NOT a NOT IN (1, 2)", [[A("a", "in", (1, 2))]]),
    ("NOT a IN (1, 'x')", [[N("a", "in", (1,)), N("a", "in", ("x",))]]),
    ("NOT a NOT LIKE 'x%'", [[A("a", "prefix", "x")]]),
    ("NOT NOT a EXISTS", [[A("a", "exists")]]),
    ("NOT a EXISTS", [[A("a", "absent")]]),
    # booleans keep apart from 1 when deduplicating
    ("a NOT IN (1, TRUE, 1.0)", [[N("a", "in", (1, 1.0)), N("a", "in", (True,))]]),
    # arithmetic: on one attribute, solved into the exact range of doubles
    ("a + 1 > 3", [[A("a", "between", (2.0000000000000004, MAX))]]),
    ("NOT a + 1 > 3", [[A("a", "between", (-MAX, 2.0))]]),  # (only numbers: NULL otherwise)
    ("a * 2 + 1 > 7", [[A("a", "between", (3.0000000000000004, MAX / 2))]]),
    ("-a >= 2", [[A("a", "between", (-MAX, -2.0))]]),
    ("10 - a < 4", [[A("a", "between", (6.000000000000001, MAX))]]),
    ("a / 4 = 0.5", [[A("a", "between", (2.0, 2.0))]]),
    ("+a = 2", [[A("a", "between", (2.0, 2.0))]]),
    ("a - 1 <> 2", [[A("a", "between", (-MAX, MAX)), N("a", "between", (3.0, 3.0))]]),
    ("2 * 3 > a - 1", [[A("a", "between", (-MAX, 6.999999999999999))]]),
    # (1e-308 * 1e308 is 0.9999999999999999: the next double is the first above 1)
    ("a * 1e308 > 1", [[A("a", "between", (math.nextafter(1e-308, 1), MAX / 1e308))]]),
    ("a BETWEEN 1 + 1 AND 3", [[A("a", "between", (2, 3))]]),
    # every other comparison: a residual test
    ("x = y", [[C(X, "=", Y)]]),
    ("x < y + 1", [[C(X, "<", ("+", Y, ("num", 1)))]]),
    ("NOT x * x > 4", [[C(("*", X, X), ">", ("num", 4), negate=True)]]),
    ("1 / x > 2", [[C(("/", ("num", 1), X), ">", ("num", 2))]]),
    ("x * 0 = 0", [[C(("*", X, ("num", 0)), "=", ("num", 0))]]),
    ("x BETWEEN y AND 3", [[C(X, ">=", Y), A("x", "<=", 3)]]),
    ("x NOT BETWEEN y AND 3", [[C(X, "<", Y)], [A("x", ">", 3)]]),
    # dedupe of atoms and conjunctions, absorption, order of appearance
    ("b = 2 AND a = 1 AND b = 2", [[A("b", "=", 2), A("a", "=", 1)]]),
    ("a = 1 OR a = 1", [[A("a", "=", 1)]]),
    ("a = 1 AND b = 2 OR b = 2 AND a = 1", [[A("a", "=", 1), A("b", "=", 2)]]),
    ("a = 1 AND (a = 1 OR b = 2)", [[A("a", "=", 1)]]),
    ("c = 3 OR a = 1 AND b = 2 OR a = 1", [[A("c", "=", 3)], [A("a", "=", 1)]]),
    ("a = 1 AND a = 2", [[A("a", "=", 1), A("a", "=", 2)]]),
]


@pytest.mark.parametrize(("text", "expected"), PARSES)
def test_parses(text, expected):
    assert parse_where(text) == expected


def test_number_types_are_kept():
    [[numbers], [booleans]] = parse_where("x IN (1, 1.0, 1e0, TRUE)")
    assert [type(v) for v in numbers.value + booleans.value] == [int, float, float, bool]


ERRORS = [
    # syntax, with the column of the offending token
    ("a >= AND b = 1", "unexpected 'AND' at column 6: expected a value after '>='"),
    ("a >=", "unexpected end of text at column 5: expected a value after '>='"),
    ("a = 1 AND AND", "unexpected 'AND' at column 11: expected an attribute name"),
    ("and = 1", 'expected an attribute name (write "and" for an attribute with that name)'),
    ("", "unexpected end of text at column 1: expected an attribute name"),
    ("a = 1 b = 2", "unexpected 'b' at column 7: expected AND, OR or the end of the text"),
    ("a = 1 AMD b = 2", "unexpected 'AMD' at column 7: expected AND, OR or the end of the text"),
    ("prop1 = prop2 foo AND s = 'x'", "unexpected 'foo' at column 15"),
    ("=TEST 'test'", "unexpected '=' at column 1: expected an attribute name"),
    ("(a = 1", "unexpected end of text at column 7: expected ')' to close the '(' at column 1"),
    ("a = 1)", "unexpected ')' at column 6"),
    ("a 1", "unexpected '1' at column 3: expected a comparison operator, BETWEEN, IN, LIKE"),
    ("3 + 5", "unexpected end of text at column 6: expected a comparison operator, BETWEEN, IN"),
    ("TRUE AND 3 + 5", "unexpected end of text at column 15: expected a comparison operator"),
    ("(3 + 5) OR a", "unexpected 'OR' at column 9: expected a comparison operator, BETWEEN"),
    ("'x'", "expected a comparison operator, BETWEEN, IN, LIKE, IS, EXISTS, MATCHES, TOPIC"),
    ("5 BETWEEN", "unexpected end of text at column 10: expected a value after BETWEEN"),
    ("a BETWEEN 1 OR 2", "unexpected 'OR' at column 13: expected AND between the bounds"),
    ("a IN 1", "unexpected '1' at column 6: expected '(' after IN"),
    ("a IN ()", "unexpected ')' at column 7: expected a value in the IN list"),
    ("a IN (1,)", "unexpected ')' at column 9: expected a value after ','"),
    ("a IN (1 2)", "unexpected '2' at column 9: expected ',' or ')' in the IN list"),
    ("a IN (y)", "unexpected 'y' at column 7: expected a value in the IN list"),
    ("a IN (1 / 0)", "unexpected '1' at column 7: expected a value in the IN list"),
    ("a LIKE 5", "unexpected '5' at column 8: expected a quoted pattern after LIKE"),
    ("a LIKE 'x' ESCAPE 'ab'", "ESCAPE at column 19 takes one character, got 'ab'"),
    ("a LIKE 'x' ESCAPE ''", "ESCAPE at column 19 takes one character"),
    ("a NOT = 1", "unexpected '=' at column 7: expected BETWEEN, IN, LIKE, EXISTS, MATCHES"),
    ("a == 1", "unexpected '=' at column 4: expected a value after '='"),
    ("a IS 5", "unexpected '5' at column 6: expected NULL or NOT NULL after IS"),
    ("a IS NOT 5", "unexpected '5' at column 10: expected NULL after IS NOT"),
    ("1 IN (1)", "IN at column 3 needs an attribute name before it, got '1'"),
    ("a + 1 LIKE 'x'", "LIKE at column 7 needs an attribute name before it, got 'a'"),
    ("a = NULL", "NULL at column 5 is not a value: test for it with 'IS NULL'"),
    ("(a = 1) = TRUE", "expected AND, OR, ')' or the end of the text after a condition in"),
    ("(a = 1) + 1 > 0", "'+' at column 9 takes numbers, got a condition"),
    ("a = (b = 1)", "a condition in parentheses at column 5 is not a value"),
    ("ts > TIMESTAMP 5", "unexpected '5' at column 16: expected AND, OR or the end of the text"),
    # lexical
    ("a = 'abc", "unterminated string starting at column 5"),
    ('"abc = 1', "unterminated quoted attribute name starting at column 1"),
    ('"" = 1', "empty attribute name at column 1"),
    ("a = 1 # x", "unexpected character '#' at column 7"),
    ("a = 1 AND @ = 2", "unexpected character '@' at column 11"),
    ("a = " + "9" * 5000, "number too long at column 5"),
    ("a = 017", "number 017 at column 5: a leading zero makes it octal in Java"),
    ("a = 1.5F", "number 1.5F at column 5: float (F) literals are not supported"),
    ("a = 1.5L", "number 1.5L at column 5: L marks an integer"),
    # values and types
    ("a = 1e999", "numbers must be finite (in the condition at column 1)"),
    ("a BETWEEN -1e999 AND 0", "numbers must be finite"),
    ("a + 1e999 > 0", "'+' at column 3 got inf: numbers must be finite"),
    ("x = 1 AND a < TRUE", "'<' got true: booleans only work with =, != and in (in the condition "),
    ("a BETWEEN FALSE AND TRUE", "booleans only work with =, != and in"),
    ("a + 1 BETWEEN FALSE AND 2", "booleans only work with =, != and in"),
    (
        "a LIKE 'x%' AND FALSE > a",
        "booleans only work with =, != and in (in the condition at column 17)",
    ),
    ("a BETWEEN 5 AND 1", "'between' needs lo <= hi, got 5 > 1 (in the condition at column 1)"),
    ("a BETWEEN 'b' AND 'a'", "'between' needs lo <= hi"),
    ("a BETWEEN 1 AND 'z'", "'between' needs two numbers or two strings, got 1 and \"z\""),
    ("a + 'x' > 1", "'+' at column 3 takes numbers, got 'x'"),
    ("-'x' = a", "'-' at column 1 takes numbers, got 'x'"),
    ("TRUE * 2 > a", "'*' at column 6 takes numbers, got true"),
    (
        "a + 1 = 'x'",
        "arithmetic compares only with numbers, got 'x' (in the condition at column 1)",
    ),
    ("TRUE <> -a", "arithmetic compares only with numbers, got true"),
    # TIMESTAMP
    ("ts > TIMESTAMP 'tomorrow'", "TIMESTAMP 'tomorrow' at column 16 is not an ISO-8601 time"),
    ("ts > TIMESTAMP '2026-13-01'", "is not an ISO-8601 time"),
]


@pytest.mark.parametrize(("text", "message"), ERRORS)
def test_errors(text, message):
    with pytest.raises(FilterError) as caught:
        parse_where(text)
    assert message in str(caught.value)


def test_not_a_string():
    with pytest.raises(FilterError, match="'where' must be a string, got int"):
        parse_where(5)  # type: ignore[arg-type]


def test_size_limit_counts_utf8_bytes():
    text = "a = 1"
    assert parse_where(text + " " * (MAX_WHERE_BYTES - len(text))) == [[A("a", "=", 1)]]
    with pytest.raises(FilterError, match=f"over the limit of {MAX_WHERE_BYTES} bytes"):
        parse_where(text + " " * (MAX_WHERE_BYTES - len(text) + 1))
    wide = "a = '" + "é" * (MAX_WHERE_BYTES // 2) + "'"  # fewer characters than bytes
    with pytest.raises(FilterError, match="bytes of UTF-8"):
        parse_where(wide)


def test_attribute_limit():
    names = [f"a{i}" for i in range(MAX_ATTRIBUTES)]
    assert len(parse_where(" AND ".join(f"{n} = 1" for n in names))[0]) == MAX_ATTRIBUTES
    repeated = " AND ".join(f"{n} = 2" for n in names)  # the same names again do not count
    assert len(parse_where(f"{repeated} AND {repeated}")[0]) == MAX_ATTRIBUTES
    text = " AND ".join(f"{n} = 1" for n in [*names, "extra"])
    column = text.index("extra") + 1
    with pytest.raises(
        FilterError, match=f"more than {MAX_ATTRIBUTES} distinct .* column {column}"
    ):
        parse_where(text)


def test_conjunction_limit_on_or():
    ok = " OR ".join(f"a = {i}" for i in range(MAX_CONJUNCTIONS))
    assert len(parse_where(ok)) == MAX_CONJUNCTIONS
    assert len(parse_where(f"{ok} OR a = 0")) == MAX_CONJUNCTIONS  # duplicates do not count
    with pytest.raises(FilterError, match=f"more than {MAX_CONJUNCTIONS} conjunctions"):
        parse_where(f"{ok} OR a = -1")


def test_conjunction_limit_on_and_of_ors_fails_fast():
    assert len(parse_where(" AND ".join(f"(a{i} = 1 OR b{i} = 2)" for i in range(6)))) == 64
    blowup = " AND ".join(f"(a{i} = 1 OR b{i} = 2)" for i in range(20))
    start = time.perf_counter()
    with pytest.raises(FilterError, match="more than 64 conjunctions"):
        parse_where(blowup)
    assert time.perf_counter() - start < 0.5


def test_conjunction_limit_counts_negated_between():
    text = " AND ".join(f"a{i} NOT BETWEEN 1 AND 2" for i in range(7))
    with pytest.raises(FilterError, match="conjunctions"):
        parse_where(text)


def test_arithmetic_nesting_limit():
    ok = "a" + " + a" * MAX_DEPTH + " > 0"
    assert parse_where(ok)
    with pytest.raises(FilterError, match=f"arithmetic nested deeper than {MAX_DEPTH} levels"):
        parse_where("a" + " + a" * (MAX_DEPTH + 1) + " > 0")
    assert parse_where("-" * 10_000 + "a > 0")  # signs fold: no deep tree
    assert parse_where("1" + " + 1" * 10_000 + " + a > 0")  # constants fold too


def test_nesting_limit():
    ok = "(" * MAX_DEPTH + "a = 1" + ")" * MAX_DEPTH
    assert parse_where(ok) == [[A("a", "=", 1)]]
    deep = "(" * (MAX_DEPTH + 1) + "a = 1" + ")" * (MAX_DEPTH + 1)
    with pytest.raises(FilterError, match=f"nested deeper than {MAX_DEPTH} levels at column"):
        parse_where(deep)
    alternating = "a = 0"  # a deep tree, not just redundant parentheses
    for i in range(MAX_DEPTH):
        alternating = f"(b{i % 50} = {i} {'OR' if i % 40 == 0 else 'AND'} {alternating})"
    assert len(parse_where(alternating)) == 6


def test_long_not_chain_does_not_recurse():
    assert parse_where("NOT " * 10_000 + "a = 1") == [[A("a", "=", 1)]]


def test_long_flat_conjunction_is_fast():
    text = " AND ".join(f"a{i % 200}={i}" for i in range(4000))
    start = time.perf_counter()
    [conjunction] = parse_where(text)
    assert len(conjunction) == 4000
    assert time.perf_counter() - start < 2


def test_a_solved_inequality_that_nothing_equals_is_one_range():
    [[atom]] = parse_where("x + 1e308 <> 5")  # no double x makes x + 1e308 exactly 5
    assert atom.op == "between" and atom.value[0] == -MAX


def test_solved_comparisons_of_a_long_selector_are_fast():
    """Each is solved from its real-arithmetic answer: a few steps, not 4 x 64."""
    text = " AND ".join(f"a{i % 200} * 3 + 1 > {i}" for i in range(2000))
    start = time.perf_counter()
    assert len(parse_where(text)[0]) == 2000
    assert time.perf_counter() - start < 2


PIECES = [
    "x", "y", '"n"', "1", "0x1F", "2.5E3", "7.", "1e999", "'a%_'", "''", "TRUE", "NULL", "IS",
    "NOT", "AND", "OR", "BETWEEN", "IN", "LIKE", "ESCAPE", "EXISTS", "TIMESTAMP", "(", ")",
    ",", "=", "<>", "<", ">=", "+", "-", "*", "/", "'!'", "0", "017", "1.5F",
]  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=14))
def test_any_text_parses_or_says_why(pieces):
    """Token soup: a selector or a FilterError, never another exception."""
    try:
        parse_where(" ".join(pieces))
    except FilterError as error:
        assert "column" in str(error) or "limit" in str(error)


@pytest.mark.parametrize(
    ("value", "inside"), [(1, True), ("a", True), (2, False), ("b", False), (True, False)]
)
def test_an_in_list_of_mixed_types_is_its_equalities_with_or_without_not(value, inside):
    """`x IN (1, 'a')` is `x = 1 OR x = 'a'` (SELECTORS.md; SEMANTICS §1: no coercion, so
    each equality holds only on its own type), and `NOT x IN (...)` its negation."""
    profile = Profile({"x": value})
    for text, expected in (("x IN (1, 'a')", inside), ("NOT x IN (1, 'a')", not inside)):
        assert any(c.overlaps(profile) for c in predicate_of(parse_where(text))) == expected
