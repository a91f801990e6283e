"""The `where` language: operators, precedence, NOT push-down, errors, limits, equivalence."""

from __future__ import annotations

import operator
import random
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
from matcher.where import MAX_DEPTH, parse_where


def A(attr, op, value=None):  # noqa: N802 - reads like the dataclass it builds
    return Atom(attr, op, value)


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


NOT_EXISTS = "NOT EXISTS is not supported: a filter can only constrain attributes that are present"

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
    ("x IN (1, 'a', 2.5)", [[A("x", "in", (1, "a", 2.5))]]),
    ("x in (1)", [[A("x", "in", (1,))]]),
    ("x EXISTS", [[A("x", "exists")]]),
    # LIKE
    ("x LIKE 'ab%'", [[A("x", "prefix", "ab")]]),
    ("x LIKE '%ab'", [[A("x", "suffix", "ab")]]),
    ("x LIKE '%ab%'", [[A("x", "contains", "ab")]]),
    ("x LIKE 'ab'", [[A("x", "=", "ab")]]),
    ("x LIKE '%'", [[A("x", "prefix", "")]]),
    ("x LIKE 'a\\_b%'", [[A("x", "prefix", "a_b")]]),
    ("x LIKE '100\\%'", [[A("x", "=", "100%")]]),
    ("x NOT LIKE 'ab%'", [[A("x", "not_prefix", "ab")]]),
    ("x NOT LIKE '%ab'", [[A("x", "not_suffix", "ab")]]),
    ("x NOT LIKE '%ab%'", [[A("x", "not_contains", "ab")]]),
    ("x NOT LIKE 'ab'", [[A("x", "!=", "ab")]]),
    # TIMESTAMP
    ("ts > TIMESTAMP '2026-11-22T10:00:00Z'", [[A("ts", ">", 1795341600000)]]),
    ("ts = timestamp '2026-11-22T12:00:00+02:00'", [[A("ts", "=", 1795341600000)]]),
    ("ts = TIMESTAMP '2026-11-22T10:00:00'", [[A("ts", "=", 1795341600000)]]),
    ("ts = TIMESTAMP '2026-11-22T10:00:00.0019Z'", [[A("ts", "=", 1795341600001)]]),
    ("ts = TIMESTAMP '1970-01-01'", [[A("ts", "=", 0)]]),
    ("timestamp > 5", [[A("timestamp", ">", 5)]]),
    # names
    ('"my attr" = 1', [[A("my attr", "=", 1)]]),
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
    # precedence: OR < AND < NOT; keywords in any case
    ("a=1 OR b=2 AND c=3", [[A("a", "=", 1)], [A("b", "=", 2), A("c", "=", 3)]]),
    ("(a=1 OR b=2) AND c=3", [[A("a", "=", 1), A("c", "=", 3)], [A("b", "=", 2), A("c", "=", 3)]]),
    ("a=1 and b=2 or c=3", [[A("a", "=", 1), A("b", "=", 2)], [A("c", "=", 3)]]),
    ("NOT a=1 AND b=2", [[A("a", "!=", 1), A("b", "=", 2)]]),
    ("NOT (a=1 AND b=2)", [[A("a", "!=", 1)], [A("b", "!=", 2)]]),
    ("NOT (a=1 OR b=2)", [[A("a", "!=", 1), A("b", "!=", 2)]]),
    ("Not nOt a=1", [[A("a", "=", 1)]]),
    ("((a = 1))", [[A("a", "=", 1)]]),
    # NOT push-down on every kind of atom
    ("NOT a < 5", [[A("a", ">=", 5)]]),
    ("NOT a <= 5", [[A("a", ">", 5)]]),
    ("NOT a > 5", [[A("a", "<=", 5)]]),
    ("NOT a >= 5", [[A("a", "<", 5)]]),
    ("NOT a = 'v'", [[A("a", "!=", "v")]]),
    ("NOT a != 'v'", [[A("a", "=", "v")]]),
    ("a NOT BETWEEN 1 AND 2", [[A("a", "<", 1)], [A("a", ">", 2)]]),
    ("NOT a BETWEEN 1 AND 2", [[A("a", "<", 1)], [A("a", ">", 2)]]),
    ("NOT a NOT BETWEEN 1 AND 2", [[A("a", "between", (1, 2))]]),
    ("a NOT IN (1, 2)", [[A("a", "!=", 1), A("a", "!=", 2)]]),
    ("NOT a IN (1, 2)", [[A("a", "!=", 1), A("a", "!=", 2)]]),
    ("NOT a NOT IN (1, 2)", [[A("a", "in", (1, 2))]]),
    ("NOT a NOT LIKE 'x%'", [[A("a", "prefix", "x")]]),
    ("NOT a NOT LIKE '%x'", [[A("a", "suffix", "x")]]),
    ("NOT a NOT LIKE '%x%'", [[A("a", "contains", "x")]]),
    ("NOT NOT a EXISTS", [[A("a", "exists")]]),
    # booleans keep apart from 1 when deduplicating
    ("a != 1 AND a != TRUE AND a != 1.0", [[A("a", "!=", 1), A("a", "!=", True)]]),
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
    [[atom]] = parse_where("x IN (1, 1.0, 1e0, TRUE)")
    assert [type(v) for v in atom.value] == [int, float, float, bool]


ERRORS = [
    # syntax, with the column of the offending token
    ("a >= AND b = 1", "unexpected 'AND' at column 6: expected a value after '>='"),
    ("a >=", "unexpected end of text at column 5: expected a value after '>='"),
    ("a = 1 AND AND", "unexpected 'AND' at column 11: expected an attribute name"),
    ("and = 1", 'expected an attribute name (write "and" for an attribute with that name)'),
    ("", "unexpected end of text at column 1: expected an attribute name"),
    ("a = 1 b = 2", "unexpected 'b' at column 7: expected AND, OR or the end of the text"),
    ("(a = 1", "unexpected end of text at column 7: expected ')' to close the '(' at column 1"),
    ("a = 1)", "unexpected ')' at column 6"),
    ("a 1", "unexpected '1' at column 3: expected a comparison operator, BETWEEN, IN, LIKE"),
    ("a", "unexpected end of text at column 2"),
    ("a = b", "unexpected 'b' at column 5: expected a value after '='"),
    ('a = "bus"', "expected a value after '=' (strings take single quotes)"),
    ("5 = 6", "unexpected '6' at column 5: expected an attribute name after '='"),
    ("5 BETWEEN", "unexpected 'BETWEEN' at column 3: expected a comparison operator after '5'"),
    ("a BETWEEN 1 OR 2", "unexpected 'OR' at column 13: expected AND between the bounds"),
    ("a IN 1", "unexpected '1' at column 6: expected '(' after IN"),
    ("a IN ()", "unexpected ')' at column 7: expected a value in the IN list"),
    ("a IN (1,)", "unexpected ')' at column 9: expected a value after ','"),
    ("a IN (1 2)", "unexpected '2' at column 9: expected ',' or ')' in the IN list"),
    ("a LIKE 5", "unexpected '5' at column 8: expected a quoted pattern after LIKE"),
    ("a NOT = 1", "unexpected '=' at column 7: expected BETWEEN, IN or LIKE after NOT"),
    ("a == 1", "unexpected '=' at column 4: expected a value after '='"),
    # lexical
    ("a = 'abc", "unterminated string starting at column 5"),
    ('"abc = 1', "unterminated quoted attribute name starting at column 1"),
    ('"" = 1', "empty attribute name at column 1"),
    ("a = 1 # x", "unexpected character '#' at column 7"),
    ("a = 1 AND é = 2", "unexpected character 'é' at column 11"),
    ("a = " + "9" * 5000, "number too long at column 5"),
    # values
    ("a = 1e999", "numbers must be finite (in the condition at column 1)"),
    ("a BETWEEN -1e999 AND 0", "numbers must be finite"),
    ("x = 1 AND a < TRUE", "'<' got true: booleans only work with =, != and in (in the condition "),
    ("a BETWEEN FALSE AND TRUE", "booleans only work with =, != and in"),
    (
        "a LIKE 'x%' AND FALSE > a",
        "booleans only work with =, != and in (in the condition at column 17)",
    ),
    ("a BETWEEN 5 AND 1", "'between' needs lo <= hi, got 5 > 1 (in the condition at column 1)"),
    ("a BETWEEN 'b' AND 'a'", "'between' needs lo <= hi"),
    ("a BETWEEN 1 AND 'z'", "'between' needs two numbers or two strings, got 1 and \"z\""),
    # NOT EXISTS
    (
        "NOT a EXISTS",
        NOT_EXISTS + " (at column 5)",
    ),
    (
        "a NOT EXISTS",
        NOT_EXISTS + " (at column 7)",
    ),
    ("NOT (b = 1 OR NOT NOT a EXISTS)", "NOT EXISTS is not supported"),
    # LIKE patterns
    ("a LIKE 'a%b'", "unsupported LIKE pattern at column 8: LIKE supports 'abc' (equals), 'abc%'"),
    ("a LIKE 'a_'", "no '_' wildcard"),
    ("a LIKE '%%a'", "unsupported LIKE pattern"),
    ("a LIKE 'a%%'", "unsupported LIKE pattern"),
    ("a LIKE '%a%b%'", "unsupported LIKE pattern"),
    ("a LIKE 'a\\'", "ends with a lone '\\'"),
    # TIMESTAMP
    ("ts > TIMESTAMP 'tomorrow'", "TIMESTAMP 'tomorrow' at column 16 is not an ISO-8601 time"),
    ("ts > TIMESTAMP '2026-13-01'", "is not an ISO-8601 time"),
    ("ts > TIMESTAMP 5", "unexpected 'TIMESTAMP' at column 6: expected a value after '>'"),
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
