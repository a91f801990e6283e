"""A selector tree to its disjunctive normal form (docs/SELECTORS.md, "Normal form").

The tree (built by `matcher.where`) has nodes `("const", True | False | None)`
(None: unknown), `("atom", Atom)` for a test of one attribute against constants,
`("cmp", op, left, right)` for a comparison of two expressions
(`matcher.expressions`), `("not", node)`, and `("and" | "or", [nodes])`.

NOT is pushed down to the tests by De Morgan's laws, which hold in JMS's
three-valued logic, and AND is distributed over OR. What a NOT over a test
becomes follows JMS, where a comparison of unlike types is false, not unknown:
`NOT a < 5` holds for a string `a` (the `not` atom: present, and not a number
below 5), while `NOT a + 0 < 5` does not (arithmetic on a string is unknown,
and so is its NOT). A comparison becomes:

- of constants only: TRUE, FALSE or unknown, now;
- of an attribute with a constant: a typed atom (`a < 5`);
- of a one-attribute monotone expression with a number: the exact range of
  doubles of that attribute where it is true (`matcher.expressions.solve`);
- anything else: a `Computed` residual test.

The limits of `matcher.constraints` are enforced while expanding, so a hostile
selector is refused before it costs memory. `value_problem` and `normalize`
are shared with `matcher.filter_json`, so that both forms accept the same
atoms and return the same shape.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

from matcher.constraints import MAX_CONJUNCTIONS, Atom
from matcher.engines.patterns import PATTERN_OPS, pattern_problem
from matcher.errors import FilterError
from matcher.expressions import (
    COMPLEMENT,
    FLIPPED,
    NULL,
    Computed,
    Expr,
    attributes,
    monotone_attribute,
    solve,
)

Literal = Atom | Computed
DNF = list[list[Literal]]

_STRING_OPS = frozenset("prefix suffix contains not_prefix not_suffix not_contains like".split())
_BOOL_OPS = frozenset(("=", "!=", "in"))


def normal_form(node: tuple) -> DNF:
    """The selector tree as a list of conjunctions; TRUE is `[[]]`, never `[]`."""
    return normalize(_dnf(node, negate=False))


def value_problem(op: str, value: Any) -> str | None:
    """Say why `value` cannot go with `op` (None if it can): both filter forms share this."""
    if op == "exists":
        return None if value is None else f"'exists' takes no value, got {_show(value)}"
    if op in _STRING_OPS:
        return None if isinstance(value, str) else f"'{op}' needs a string, got {_show(value)}"
    if op in PATTERN_OPS:
        if not isinstance(value, str):
            return f"'{op}' needs a string pattern, got {_show(value)}"
        return pattern_problem(op, value)
    if op == "in":
        if not isinstance(value, list | tuple) or not value:
            return f"'in' needs a non-empty list of values, got {_show(value)}"
        items = value
    elif op == "between":
        if not isinstance(value, list | tuple) or len(value) != 2:
            return f"'between' needs [lo, hi], got {_show(value)}"
        items = value
    else:
        items = (value,)
    for item in items:
        if isinstance(item, bool):
            if op not in _BOOL_OPS:
                return f"'{op}' got {_show(item)}: booleans only work with =, != and in"
        elif isinstance(item, int | float):
            if not finite(item):
                return f"'{op}' got {_show(item)}: numbers must be finite"
        elif not isinstance(item, str):
            return f"'{op}' got {_show(item)}: a value is a number, a string or a boolean"
    if op == "between":
        lo, hi = value
        if isinstance(lo, str) != isinstance(hi, str):
            return f"'between' needs two numbers or two strings, got {_show(lo)} and {_show(hi)}"
        if lo > hi:
            return f"'between' needs lo <= hi, got {_show(lo)} > {_show(hi)}"
    return None


def normalize(dnf: DNF) -> DNF:
    """Drop repeated atoms and redundant conjunctions, keeping order; enforce MAX_CONJUNCTIONS.

    A conjunction whose atoms include all of another's is implied by it (for
    `overlaps` and for `covers`), so it is dropped: `TRUE OR x` is `[[]]`.
    """
    unique: dict[frozenset, list[Literal]] = {}
    for conjunction in dnf:
        atoms: dict[Any, Literal] = {}
        for atom in conjunction:
            atoms.setdefault(_key(atom), atom)
        unique.setdefault(frozenset(atoms), list(atoms.values()))
    if len(unique) > MAX_CONJUNCTIONS:
        raise too_many_conjunctions()
    keys = list(unique)
    return [unique[k] for k in keys if not any(other < k for other in keys)]


def too_many_conjunctions() -> FilterError:
    return FilterError(
        f"the filter expands to more than {MAX_CONJUNCTIONS} conjunctions "
        "(each AND of ORs multiplies them); simplify it or split it into several subscriptions"
    )


def _dnf(node: tuple, negate: bool) -> DNF:
    kind = node[0]
    if kind == "const":
        value = node[1]
        if value is not None and negate:
            value = not value
        return [[]] if value is True else []
    if kind == "atom":
        return _negated(node[1]) if negate else [[node[1]]]
    if kind == "cmp":
        return _comparison(node[1], node[2], node[3], negate)
    if kind == "not":
        return _dnf(node[1], not negate)
    parts = [_dnf(child, negate) for child in node[1]]
    if (kind == "and") != negate:
        return _product(parts)
    return normalize([conjunction for part in parts for conjunction in part])


def _negated(atom: Atom) -> DNF:
    """JMS's NOT over one test of one attribute."""
    attr = atom.attr
    if atom.op == "exists":
        return [[Atom(attr, "absent")]]
    if atom.op == "absent":
        return [[Atom(attr, "exists")]]
    if atom.op == "between":  # NOT (a >= lo AND a <= hi)
        lo, hi = atom.value
        below, above = Atom(attr, ">=", lo), Atom(attr, "<=", hi)
        return [[Atom(attr, "not", below)], [Atom(attr, "not", above)]]
    return [[Atom(attr, "not", atom)]]


def _comparison(op: str, left: Expr, right: Expr, negate: bool) -> DNF:
    if left == NULL or right == NULL:
        return []  # unknown, and so is its NOT
    if not attributes(left):
        if not attributes(right):
            return [[]] if constant_comparison(op, left, right) != negate else []
        left, right, op = right, left, FLIPPED[op]
    if not attributes(right):
        if left[0] == "attr":
            atom = Atom(left[1], op, right[1])
            return [[Atom(left[1], "not", atom)]] if negate else [[atom]]
        name = monotone_attribute(left)
        if name is not None and right[0] == "num":
            return _ranges(name, solve(left, COMPLEMENT[op] if negate else op, float(right[1])))
    return [[Computed(left, op, right, negate)]]


def constant_comparison(op: str, left: Expr, right: Expr) -> bool:
    """Two constants compared (JMS: unlike types compare false)."""
    kinds = {"num": 0, "str": 1, "bool": 2}
    a, b = left[1], right[1]
    if kinds[left[0]] != kinds[right[0]]:
        return False
    if op == "=":
        return a == b
    if op == "!=":
        return a != b
    if left[0] == "bool":
        return False
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _ranges(attr: str, ranges: list[tuple[float, float]]) -> DNF:
    """A solved comparison: the attribute in one range, or in one but a gap."""
    if not ranges:
        return []
    (lo, hi), *rest = ranges
    if not rest:
        return [[Atom(attr, "between", (lo, hi))]]
    (lo2, hi2) = rest[0]
    gap = (math.nextafter(hi, math.inf), math.nextafter(lo2, -math.inf))
    return [[Atom(attr, "between", (lo, hi2)), Atom(attr, "not", Atom(attr, "between", gap))]]


def _product(parts: list[DNF]) -> DNF:
    """AND of DNFs: count the result before building it, so a blow-up fails fast."""
    if any(not part for part in parts):
        return []
    size = 1
    for part in parts:
        size *= len(part)
        if size > MAX_CONJUNCTIONS:
            raise too_many_conjunctions()
    return normalize(
        [[atom for conj in combo for atom in conj] for combo in itertools.product(*parts)]
    )


def _key(item: Any) -> Any:
    """Equality key that keeps True apart from 1 (bool is an int subclass)."""
    if isinstance(item, Atom):
        return (item.attr, item.op, _key(item.value))
    if isinstance(item, bool):
        return ("bool", item)
    if isinstance(item, tuple):
        return tuple(_key(part) for part in item)
    return item


def finite(number: int | float) -> bool:
    """Is the number finite (an int too large for a double is not)?"""
    try:
        return math.isfinite(number)
    except OverflowError:  # an int too large for a float
        return False


def _show(value: Any) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."
