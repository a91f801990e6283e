"""The JSON `filter` form: every op, shapes and types, positions in errors, limits."""

from __future__ import annotations

import json

import pytest

from matcher.constraints import MAX_ATTRIBUTES, MAX_CONJUNCTIONS, Atom
from matcher.errors import FilterError
from matcher.filter_json import parse_filter
from matcher.where import parse_where


def c(attr, op, *value):
    """One constraint object, with "value" only when given."""
    return {"attr": attr, "op": op, **({"value": value[0]} if value else {})}


PARSES = [
    ([], []),
    ([[]], [[]]),
    ([[c("x", "=", 1)]], [[Atom("x", "=", 1)]]),
    ([[c("x", "=", "bus")]], [[Atom("x", "=", "bus")]]),
    ([[c("x", "=", True)]], [[Atom("x", "=", True)]]),
    ([[c("x", "!=", False)]], [[Atom("x", "!=", False)]]),
    ([[c("x", "<", 1.5)]], [[Atom("x", "<", 1.5)]]),
    ([[c("x", "<=", 1)]], [[Atom("x", "<=", 1)]]),
    ([[c("x", ">", -1)]], [[Atom("x", ">", -1)]]),
    ([[c("x", ">=", "m")]], [[Atom("x", ">=", "m")]]),
    ([[c("x", "between", [1, 2])]], [[Atom("x", "between", (1, 2))]]),
    ([[c("x", "between", [2, 2.0])]], [[Atom("x", "between", (2, 2.0))]]),
    ([[c("x", "between", ["a", "b"])]], [[Atom("x", "between", ("a", "b"))]]),
    ([[c("x", "in", [1, "a", True])]], [[Atom("x", "in", (1, "a", True))]]),
    ([[c("x", "prefix", "ab")]], [[Atom("x", "prefix", "ab")]]),
    ([[c("x", "suffix", "ab")]], [[Atom("x", "suffix", "ab")]]),
    ([[c("x", "contains", "")]], [[Atom("x", "contains", "")]]),
    ([[c("x", "not_prefix", "ab")]], [[Atom("x", "not_prefix", "ab")]]),
    ([[c("x", "not_suffix", "ab")]], [[Atom("x", "not_suffix", "ab")]]),
    ([[c("x", "not_contains", "ab")]], [[Atom("x", "not_contains", "ab")]]),
    ([[c("x", "exists")]], [[Atom("x", "exists")]]),
    ([[c("x", "exists", None)]], [[Atom("x", "exists")]]),
    # the same cleanup as `where`: repeated atoms and implied conjunctions go
    ([[c("b", "=", 2), c("a", "=", 1), c("b", "=", 2)]], [[Atom("b", "=", 2), Atom("a", "=", 1)]]),
    ([[c("a", "=", 1), c("b", "=", 2)], [c("a", "=", 1)]], [[Atom("a", "=", 1)]]),
    ([[c("a", "=", 1)], []], [[]]),
    # True is not 1
    ([[c("a", "!=", 1), c("a", "!=", True)]], [[Atom("a", "!=", 1), Atom("a", "!=", True)]]),
]


@pytest.mark.parametrize(("obj", "expected"), PARSES)
def test_parses(obj, expected):
    assert parse_filter(obj) == expected


def test_json_numbers_keep_their_types():
    obj = json.loads('[[{"attr": "x", "op": "in", "value": [1, 1.0, true]}]]')
    [[atom]] = parse_filter(obj)
    assert [type(v) for v in atom.value] == [int, float, bool]


def test_same_atoms_as_where():
    obj = [[c("speed", "between", [40, 60]), c("kind", "=", "bus")]]
    assert parse_filter(obj) == parse_where("speed BETWEEN 40 AND 60 AND kind = 'bus'")


ERRORS = [
    ({"attr": "x"}, "filter must be a list of conjunctions (lists of constraints), got an object"),
    ("x = 1", "filter must be a list of conjunctions (lists of constraints), got a string"),
    (None, "got null"),
    ([c("x", "=", 1)], "filter[0]: a conjunction must be a list of constraints, got an object"),
    ([[], 5], "filter[1]: a conjunction must be a list of constraints, got a number"),
    ([[c("x", "=", 1), "x = 1"]], "filter[0][1]: a constraint must be an object"),
    ([[{"attr": "x", "op": "=", "valeu": 1}]], "filter[0][0]: unknown key 'valeu'"),
    ([[{"op": "=", "value": 1}]], "filter[0][0]: 'attr' must be a non-empty string, got null"),
    ([[c("", "=", 1)]], "filter[0][0]: 'attr' must be a non-empty string, got an empty string"),
    ([[c(5, "=", 1)]], "filter[0][0]: 'attr' must be a non-empty string, got a number"),
    ([[c("x", "==", 1)]], "filter[0][0]: unknown op '==': expected one of"),
    ([[c("x", "BETWEEN", [1, 2])]], "unknown op 'BETWEEN'"),
    ([[c("x", ["="], 1)]], "unknown op ['=']"),
    ([[{"attr": "x"}]], "filter[0][0]: unknown op None"),
    ([[c("x", "=")]], "filter[0][0]: '=' needs a 'value'"),
    (
        [[c("x", "=", None)]],
        "filter[0][0]: '=' got null: a value is a number, a string or a boolean",
    ),
    ([[c("x", "=", [1])]], "'=' got [1]: a value is a number"),
    ([[c("x", "=", {"a": 1})]], "'=' got {\"a\": 1}: a value is a number"),
    ([[c("x", "=", float("nan"))]], "filter[0][0]: '=' got NaN: numbers must be finite"),
    ([[c("x", "<", float("inf"))]], "'<' got Infinity: numbers must be finite"),
    ([[c("x", "=", 10**400)]], "numbers must be finite"),
    ([[c("x", "<", True)]], "filter[0][0]: '<' got true: booleans only work with =, != and in"),
    ([[c("x", ">=", False)]], "booleans only work with =, != and in"),
    ([[c("x", "between", 5)]], "filter[0][0]: 'between' needs [lo, hi], got 5"),
    ([[], [c("x", "between", [1, 2, 3])]], "filter[1][0]: 'between' needs [lo, hi], got [1, 2, 3]"),
    ([[c("x", "between", [2, 1])]], "'between' needs lo <= hi, got 2 > 1"),
    ([[c("x", "between", [1, "z"])]], "'between' needs two numbers or two strings"),
    ([[c("x", "between", [False, True])]], "booleans only work with =, != and in"),
    ([[c("x", "between", [0, float("nan")])]], "numbers must be finite"),
    ([[c("x", "in", [])]], "filter[0][0]: 'in' needs a non-empty list of values, got []"),
    ([[c("x", "in", 1)]], "'in' needs a non-empty list of values, got 1"),
    ([[c("x", "in", [1, None])]], "'in' got null: a value is a number"),
    ([[c("x", "in", [[1]])]], "'in' got [1]"),
    ([[c("x", "prefix", 1)]], "filter[0][0]: 'prefix' needs a string, got 1"),
    ([[c("x", "not_contains", None)]], "'not_contains' needs a string, got null"),
    ([[c("x", "exists", True)]], "filter[0][0]: 'exists' takes no value, got true"),
]


@pytest.mark.parametrize(("obj", "message"), ERRORS)
def test_errors(obj, message):
    with pytest.raises(FilterError) as caught:
        parse_filter(obj)
    assert message in str(caught.value)


def test_conjunction_limit():
    ok = [[c("a", "=", i)] for i in range(MAX_CONJUNCTIONS)]
    assert len(parse_filter(ok)) == MAX_CONJUNCTIONS
    with pytest.raises(FilterError, match=f"65 conjunctions, over the limit of {MAX_CONJUNCTIONS}"):
        parse_filter([*ok, [c("a", "=", -1)]])


def test_attribute_limit():
    names = [f"a{i}" for i in range(MAX_ATTRIBUTES)]
    conjunction = [c(name, "=", 1) for name in names]
    assert len(parse_filter([conjunction, conjunction[:1]])[0]) == 1  # the subset absorbs
    with pytest.raises(FilterError, match=rf"filter\[1\]\[0\]: more than {MAX_ATTRIBUTES}"):
        parse_filter([conjunction, [c("extra", "exists")]])
