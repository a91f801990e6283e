"""The `where` language: operators, precedence, NOT push-down, errors, limits.

What selectors mean (JMS's three-valued logic, arithmetic, LIKE) is checked
against the specification in test_selectors.py."""

from __future__ import annotations

import math
import sys
import time
from datetime import datetime

import pytest

from matcher.constraints import (
    MAX_ATTRIBUTES,
    MAX_CONJUNCTIONS,
    MAX_WHERE_BYTES,
    Atom,
    predicate_of,
)
from matcher.errors import FilterError
from matcher.expressions import Computed
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
<<<<<<< HEAD
    ("a != 1 AND a != TRUE AND a != 1.0", [[A("a", "!=", 1), A("a", "!=", True)]]),
=======
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
>>>>>>> 0ce8742 (where: the full JMS message selector language (issue 38))
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
    ("'x'", "expected a comparison operator, BETWEEN, IN, LIKE, IS or EXISTS after 'x'"),
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
    ("a NOT = 1", "unexpected '=' at column 7: expected BETWEEN, IN, LIKE or EXISTS after NOT"),
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
<<<<<<< HEAD


# --- equivalence: random trees, printed as text, parsed, evaluated both ways ---------------

NUMS = st.sampled_from([-2, -1, 0, 1, 2, 0.5, -1.5])
STRS = st.sampled_from(["", "x", "y", "xy", "yx", "x'y", "x%", "_y"])
COMPARE = ["=", "!=", "<>", "<", "<=", ">", ">="]


def _leaf():
    return st.one_of(
        st.tuples(st.just("cmp"), st.sampled_from(["a", "b"]), st.sampled_from(COMPARE), NUMS),
        st.tuples(st.just("cmp"), st.just("s"), st.sampled_from(COMPARE), STRS),
        st.tuples(st.just("cmp"), st.just("f"), st.sampled_from(["=", "!=", "<>"]), st.booleans()),
        st.tuples(st.just("between"), st.sampled_from(["a", "b"]), NUMS, NUMS, st.booleans()),
        st.tuples(st.just("between"), st.just("s"), STRS, STRS, st.booleans()),
        st.tuples(
            st.just("in"),
            st.sampled_from(["a", "b"]),
            st.lists(NUMS, min_size=1, max_size=3),
            st.booleans(),
        ),
        st.tuples(
            st.just("in"), st.just("s"), st.lists(STRS, min_size=1, max_size=3), st.booleans()
        ),
        st.tuples(
            st.just("in"),
            st.just("f"),
            st.lists(st.booleans(), min_size=1, max_size=2),
            st.booleans(),
        ),
        st.tuples(
            st.just("like"),
            st.just("s"),
            st.sampled_from(["=", "prefix", "suffix", "contains"]),
            STRS,
            st.booleans(),
        ),
        st.tuples(st.just("exists"), st.sampled_from(["a", "s", "f"])),
        st.tuples(st.just("const"), st.booleans()),
    )


TREES = st.recursive(
    _leaf(),
    lambda kids: st.one_of(
        st.tuples(st.just("not"), kids),
        st.tuples(st.sampled_from(["and", "or"]), st.lists(kids, min_size=2, max_size=3)),
    ),
    max_leaves=6,  # each leaf is at most 2 conjunctions: 2**6 stays within the limit
)
POINTS = st.fixed_dictionaries({"a": NUMS, "b": NUMS, "s": STRS, "f": st.booleans()})

PYTHON_OPS = {
    "=": operator.eq,
    "!=": operator.ne,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
STRING_TESTS = {
    "=": operator.eq,
    "prefix": str.startswith,
    "suffix": str.endswith,
    "contains": operator.contains,
}


def eval_tree(node, point) -> bool:
    kind = node[0]
    if kind == "cmp":
        return PYTHON_OPS[node[2]](point[node[1]], node[3])
    if kind == "between":
        lo, hi = sorted(node[2:4])
        return (lo <= point[node[1]] <= hi) != node[4]
    if kind == "in":
        return (point[node[1]] in node[2]) != node[3]
    if kind == "like":
        return STRING_TESTS[node[2]](point[node[1]], node[3]) != node[4]
    if kind == "exists":
        return True
    if kind == "const":
        return node[1]
    if kind == "not":
        return not eval_tree(node[1], point)
    results = [eval_tree(child, point) for child in node[1]]
    return all(results) if kind == "and" else any(results)


def negated_exists(node, negated=False) -> bool:
    if node[0] == "exists":
        return negated
    if node[0] == "not":
        return negated_exists(node[1], not negated)
    if node[0] in ("and", "or"):
        return any(negated_exists(child, negated) for child in node[1])
    return False


def same_kind(x, y) -> bool:
    def kind(v):
        return bool if isinstance(v, bool) else str if isinstance(v, str) else float

    return kind(x) is kind(y)


def atom_holds(atom: Atom, point) -> bool:
    """A tiny reference evaluator of one atom on a point (SEMANTICS §1: no coercion)."""
    if atom.attr not in point:
        return False
    value, op, arg = point[atom.attr], atom.op, atom.value
    if op == "exists":
        return True
    if op == "in":
        return any(same_kind(value, item) and value == item for item in arg)
    if op == "between":
        return same_kind(value, arg[0]) and arg[0] <= value <= arg[1]
    if op.startswith("not_"):
        return isinstance(value, str) and not STRING_TESTS[op[4:]](value, arg)
    if op in STRING_TESTS and op != "=":
        return isinstance(value, str) and STRING_TESTS[op](value, arg)
    return same_kind(value, arg) and PYTHON_OPS[op](value, arg)


def dnf_holds(dnf, point) -> bool:
    return any(all(atom_holds(atom, point) for atom in conj) for conj in dnf)


def sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def sql_value(value) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return sql_string(value) if isinstance(value, str) else repr(value)


def like_pattern(form: str, literal: str) -> str:
    escaped = literal.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return {"=": "{}", "prefix": "{}%", "suffix": "%{}", "contains": "%{}%"}[form].format(escaped)


PRECEDENCE = {"or": 1, "and": 2, "not": 3}


def render(node, rnd: random.Random, context: int = 0) -> str:
    """Print a tree as `where` text, with minimal parentheses plus some random ones."""

    def kw(word: str) -> str:
        return rnd.choice([word, word.lower(), word.capitalize()])

    def name(attr: str) -> str:
        return rnd.choice([attr, f'"{attr}"'])

    def negatable(attr: str, keyword: str, rest: str, negated: bool) -> tuple[str, int]:
        if not negated:
            return f"{name(attr)} {kw(keyword)} {rest}", 4
        if rnd.random() < 0.5:
            return f"{name(attr)} {kw('NOT')} {kw(keyword)} {rest}", 4
        return f"{kw('NOT')} {name(attr)} {kw(keyword)} {rest}", 3

    kind = node[0]
    if kind == "cmp":
        _, attr, op, value = node
        if rnd.random() < 0.3:
            flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
            text, precedence = f"{sql_value(value)} {flipped} {name(attr)}", 4
        else:
            text, precedence = f"{name(attr)} {op} {sql_value(value)}", 4
    elif kind == "between":
        lo, hi = sorted(node[2:4])
        rest = f"{sql_value(lo)} {kw('AND')} {sql_value(hi)}"
        text, precedence = negatable(node[1], "BETWEEN", rest, node[4])
    elif kind == "in":
        rest = "(" + ", ".join(sql_value(v) for v in node[2]) + ")"
        text, precedence = negatable(node[1], "IN", rest, node[3])
    elif kind == "like":
        pattern = sql_string(like_pattern(node[2], node[3]))
        text, precedence = negatable(node[1], "LIKE", pattern, node[4])
    elif kind == "exists":
        text, precedence = f"{name(node[1])} {kw('EXISTS')}", 4
    elif kind == "const":
        text, precedence = kw("TRUE" if node[1] else "FALSE"), 4
    elif kind == "not":
        text, precedence = f"{kw('NOT')} {render(node[1], rnd, 3)}", 3
    else:
        precedence = PRECEDENCE[kind]
        joiner = f" {kw(kind.upper())} "
        text = joiner.join(render(child, rnd, precedence) for child in node[1])
    if precedence < context or rnd.random() < 0.1:
        return f"({text})"
    return text


@settings(max_examples=300, deadline=None)
@given(TREES, st.randoms(use_true_random=False), st.lists(POINTS, min_size=1, max_size=8))
def test_dnf_is_equivalent_to_the_tree(tree, rnd, points):
    text = render(tree, rnd)
    if negated_exists(tree):
        with pytest.raises(FilterError, match="NOT EXISTS is not supported"):
            parse_where(text)
        return
    dnf = parse_where(text)
    for point in points:
        assert dnf_holds(dnf, point) == eval_tree(tree, point), (text, dnf, point)


@pytest.mark.parametrize("text", ["x IN (1, 'a')", "NOT x IN (1, 'a')", "NOT x IN (TRUE, 1)"])
def test_an_in_list_of_mixed_types_is_refused_with_or_without_not(text):
    """`NOT x IN (...)` follows the rule of `x IN (...)`: one type a list (SEMANTICS §1:
    no coercion), refused with the list's position."""
    with pytest.raises(FilterError, match=r"must not mix types"):
        predicate_of(parse_where(text))
=======
>>>>>>> 0ce8742 (where: the full JMS message selector language (issue 38))
