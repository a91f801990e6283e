"""Arithmetic in selectors: expression trees, their values, and comparisons.

An expression is a tuple: `("num", x)`, `("str", s)`, `("bool", b)`, `("null",)`
(a constant with no value, such as `1 / 0`), `("attr", name)`, `("neg", e)` or
`(op, a, b)` for `op` in `+ - * /`. Arithmetic is IEEE double arithmetic, as
JMS's numeric promotion gives for doubles; a result that is not a finite number
(an overflow, a division by zero) is NULL, as is arithmetic on an absent
attribute or on a string or a boolean. A comparison with NULL is unknown; a
comparison of a number with a string or a boolean is false (JMS §3.8.1.2).

Two ways to decide a comparison on a profile live here:

- `solve` turns a comparison of a one-attribute monotone expression (the
  attribute used once, only added to, subtracted from, negated, multiplied or
  divided by a non-zero constant) with a number into the exact set of doubles
  of that attribute for which it is true: a range, so a box;
- `Computed` is every other comparison (several attributes, or arithmetic that
  is not monotone): a residual test run on the forest's candidates. On a profile
  whose numbers are intervals it is decided by interval arithmetic, on its own
  (docs/SELECTORS.md, "Intervals").
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from matcher.float_order import double_at, rank

MAX = sys.float_info.max
INF = math.inf
NULL: tuple = ("null",)
ARITHMETIC = frozenset("+-*/")
FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
COMPLEMENT = {"=": "!=", "!=": "=", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}

Expr = tuple


def attributes(expr: Expr) -> list[str]:
    """The attribute names an expression reads, once per occurrence, left to right."""
    kind = expr[0]
    if kind == "attr":
        return [expr[1]]
    if kind == "neg":
        return attributes(expr[1])
    if kind in ARITHMETIC:
        return attributes(expr[1]) + attributes(expr[2])
    return []


def combine(op: str, a: Expr, b: Expr | None = None) -> Expr:
    """`a op b` (or `-a` for op "neg"), computed now where both are numbers."""
    if op == "neg":
        if a[0] == "num":
            return ("num", -a[1])
        return NULL if a == NULL else ("neg", a)
    assert b is not None
    if a == NULL or b == NULL:
        return NULL
    if a[0] == "num" and b[0] == "num":
        value = arithmetic(op, float(a[1]), float(b[1]))
        return NULL if value is None else ("num", value)
    return (op, a, b)


def arithmetic(op: str, a: float, b: float) -> float | None:
    """`a op b` in doubles; None where the result is not a finite number."""
    if op == "+":
        result = a + b
    elif op == "-":
        result = a - b
    elif op == "*":
        result = a * b
    elif b == 0:
        return None
    else:
        result = a / b
    return result if math.isfinite(result) else None


# -- one attribute, monotone: solved into ranges --------------------------------------


def monotone_attribute(expr: Expr) -> str | None:
    """The attribute of a one-attribute monotone expression (see the module
    docstring), or None if `expr` is not one."""
    names = attributes(expr)
    if len(names) != 1 or expr[0] == "attr":
        return None
    node = expr
    while node[0] != "attr":
        if node[0] == "neg":
            node = node[1]
            continue
        op, a, b = node
        if b[0] == "num" and (op in "+-" or b[1] != 0):
            node = a
        elif a[0] == "num" and op in "+-*" and (op != "*" or a[1] != 0):
            node = b
        else:
            return None
    return names[0]


def _direction(expr: Expr) -> int:
    """+1 if a monotone expression grows with its attribute, -1 if it shrinks."""
    sign, node = 1, expr
    while node[0] != "attr":
        if node[0] == "neg":
            sign, node = -sign, node[1]
            continue
        op, a, b = node
        if b[0] == "num":
            if op in "*/" and b[1] < 0:
                sign = -sign
            node = a
        else:
            if (op == "-") or (op == "*" and a[1] < 0):
                sign = -sign
            node = b
    return sign


def _steps(expr: Expr) -> list[tuple[str, float]]:
    """A monotone expression as the operations applied to its attribute, in
    order: ("neg", 0), ("+", c) for x + c, ("r-", c) for c - x, and so on."""
    out = []
    node = expr
    while node[0] != "attr":
        if node[0] == "neg":
            out.append(("neg", 0.0))
            node = node[1]
            continue
        op, a, b = node
        if b[0] == "num":
            out.append((op, float(b[1])))
            node = a
        else:
            out.append(("r" + op, float(a[1])))
            node = b
    return out[::-1]


def _run(steps: list[tuple[str, float]], x: float) -> float:
    """The expression at attribute value `x`, in doubles with their infinities
    (a monotone expression divides only by non-zero constants: no NaN)."""
    for op, c in steps:
        if op == "+" or op == "r+":
            x = x + c
        elif op == "*" or op == "r*":
            x = x * c
        elif op == "-":
            x = x - c
        elif op == "r-":
            x = c - x
        elif op == "/":
            x = x / c
        else:
            x = -x
    return x


_LOWEST, _HIGHEST = rank(-MAX), rank(MAX)


def _first(
    test: Callable[[float], bool], lo: int, hi: int, guess: float | None = None
) -> int | None:
    """The first n in [lo, hi] whose double passes `test`, which is false then
    true along the doubles; None if none does. From a `guess`, the search first
    gallops out to bracket the answer: a few steps where the guess is a few
    doubles off (the usual rounding); 64 more at most where it is far off."""
    if lo > hi or not test(double_at(hi)):
        return None
    if guess is not None and math.isfinite(guess):
        at, step = min(max(rank(guess), lo), hi), 1
        if test(double_at(at)):
            hi = at
            while at - step >= lo and step < _GALLOP:
                if not test(double_at(at - step)):
                    lo = at - step + 1
                    break
                at -= step
                hi, step = at, step * 2
        else:
            lo = at + 1
            while at + step < hi and step < _GALLOP:
                if test(double_at(at + step)):
                    hi = at + step
                    break
                at += step
                lo, step = at + 1, step * 2
    while lo < hi:
        mid = (lo + hi) // 2
        if test(double_at(mid)):
            hi = mid
        else:
            lo = mid + 1
    return lo


_GALLOP = 1 << 12  # past this many doubles from the guess, bisect what is left


def _inverse(expr: Expr, y: float) -> float | None:
    """The attribute value that gives a monotone expression the value `y`, in
    real arithmetic (a guess: rounding may put the answer a few doubles off)."""
    node = expr
    try:
        while node[0] != "attr":
            if node[0] == "neg":
                y, node = -y, node[1]
                continue
            op, a, b = node
            if b[0] == "num":
                c = float(b[1])
                y = {"+": y - c, "-": y + c, "*": y / c if op == "*" else 0.0, "/": y * c}[op]
                node = a
            else:
                c = float(a[1])
                y = {"+": y - c, "-": c - y, "*": y / c if op == "*" else 0.0}[op]
                node = b
    except (OverflowError, ZeroDivisionError):
        return None
    return y if math.isfinite(y) else None


def solve(expr: Expr, op: str, bound: float) -> list[tuple[float, float]]:
    """The doubles x for which `expr op bound` is true when the monotone
    expression's attribute is x: at most two closed ranges, in order.

    Exact for every double (the rounding of each operation included), since a
    monotone expression is monotone in doubles too. Cost: four searches over
    the doubles from the real-arithmetic answer, each step one evaluation of
    `expr`: a few steps each where rounding moves the answer a few doubles.
    """
    steps = _steps(expr)
    if _direction(expr) > 0:

        def f(x: float) -> float:
            return _run(steps, x)

    else:  # -f grows: compare it with -bound

        def f(x: float) -> float:
            return -_run(steps, x)

        op, bound = FLIPPED[op], -bound
    sign = _direction(expr)

    def guess(y: float) -> float | None:  # where f is about y
        return _inverse(expr, sign * y)

    lo = _first(lambda x: f(x) > -INF, _LOWEST, _HIGHEST, guess(-MAX))
    if lo is None:
        return []
    top = _first(lambda x: f(x) == INF, lo, _HIGHEST, guess(MAX))
    hi = _HIGHEST if top is None else top - 1
    if lo > hi:
        return []
    at_least = _first(lambda x: f(x) >= bound, lo, hi, guess(bound))  # the first >= bound
    above = _first(lambda x: f(x) > bound, lo, hi, guess(bound))  # the first > bound
    ge = hi + 1 if at_least is None else at_least
    gt = hi + 1 if above is None else above
    spans = {
        ">": [(gt, hi)],
        ">=": [(ge, hi)],
        "<": [(lo, ge - 1)],
        "<=": [(lo, gt - 1)],
        "=": [(ge, gt - 1)],
        "!=": [(lo, ge - 1), (gt, hi)] if ge < gt else [(lo, hi)],  # (nothing equals bound)
    }[op]
    return [(double_at(a), double_at(b)) for a, b in spans if a <= b]


# -- values on a profile, for residual tests --------------------------------------------

# A value set: ("num", lo, hi, maybe_null) for the numbers [lo, hi] (and NULL
# too if maybe_null); ("str", s); ("bool", b); or NULL.


def value_set(expr: Expr, attrs: dict[str, Any]) -> tuple:
    """The values `expr` takes on a profile, by interval arithmetic: on a point
    profile the exact value, on intervals a range that holds every value."""
    kind = expr[0]
    if kind == "attr":
        value = attrs.get(expr[1], NULL)
        if isinstance(value, tuple):
            return value if value == NULL else ("num", value[0], value[1], False)
        return ("bool", value) if isinstance(value, bool) else ("str", value)
    if kind == "num":
        return ("num", float(expr[1]), float(expr[1]), False)
    if kind in ("str", "bool", "null"):
        return expr
    if kind == "neg":
        a = value_set(expr[1], attrs)
        return ("num", -a[2], -a[1], a[3]) if a[0] == "num" else NULL
    a, b = value_set(expr[1], attrs), value_set(expr[2], attrs)
    if a[0] != "num" or b[0] != "num":
        return NULL
    maybe_null = a[3] or b[3]
    if kind == "+":
        lo, hi = a[1] + b[1], a[2] + b[2]
    elif kind == "-":
        lo, hi = a[1] - b[2], a[2] - b[1]
    elif kind == "*":
        ends = (a[1] * b[1], a[1] * b[2], a[2] * b[1], a[2] * b[2])
        lo, hi = min(ends), max(ends)
    elif b[1] <= 0 <= b[2]:  # a divisor that may be zero
        if b[1] == b[2]:
            return NULL
        lo, hi, maybe_null = -MAX, MAX, True
    else:
        ends = (a[1] / b[1], a[1] / b[2], a[2] / b[1], a[2] / b[2])
        lo, hi = min(ends), max(ends)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        maybe_null = True
        lo, hi = max(lo, -MAX), min(hi, MAX)
        if lo > hi:
            return NULL
    return ("num", lo, hi, maybe_null)


def _numbers_can(op: str, a: tuple, b: tuple) -> tuple[bool, bool]:
    """(can be true, can be false) for `x op y`, x in [a1, a2] and y in [b1, b2]."""
    a1, a2, b1, b2 = a[1], a[2], b[1], b[2]
    meet = a1 <= b2 and b1 <= a2
    single = a1 == a2 == b1 == b2
    if op == "=":
        return meet, not single
    if op == "!=":
        return not single, meet
    if op == "<":
        return a1 < b2, a2 >= b1
    if op == "<=":
        return a1 <= b2, a2 > b1
    if op == ">":
        return a2 > b1, a1 <= b2
    return a2 >= b1, a1 < b2  # >=


def _compare_points(op: str, x: Any, y: Any) -> bool:
    if op == "=":
        return x == y
    if op == "!=":
        return x != y
    if isinstance(x, bool):  # booleans are not ordered
        return False
    return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]


def truths(op: str, a: tuple, b: tuple) -> frozenset:
    """The truth values (True, False, None for unknown) `a op b` can take."""
    if a == NULL or b == NULL:
        return _UNKNOWN
    out = set()
    if a[0] != b[0]:
        out.add(False)
    elif a[0] == "num":
        true, false = _numbers_can(op, a, b)
        if true:
            out.add(True)
        if false:
            out.add(False)
    else:
        out.add(_compare_points(op, a[1], b[1]))
    if (a[0] == "num" and a[3]) or (b[0] == "num" and b[3]):
        out.add(None)
    return frozenset(out)


_UNKNOWN = frozenset([None])
_NEGATED = {True: False, False: True, None: None}


@dataclass(frozen=True, slots=True)
class Computed:
    """A residual test: `left op right`, or its negation (JMS's NOT: unknown
    stays unknown). Hashable by content, so equal filters stay equal."""

    left: Expr
    op: str
    right: Expr
    negate: bool = False

    def truths(self, attrs: dict[str, Any]) -> frozenset:
        """The truth values the test can take on a profile (`Profile.attrs`):
        exactly one on a point profile. Cost: one pass over the expressions."""
        out = truths(self.op, value_set(self.left, attrs), value_set(self.right, attrs))
        return frozenset(_NEGATED[t] for t in out) if self.negate else out

    def describe(self) -> str:
        text = f"{show(self.left)} {self.op} {show(self.right)}"
        return f"NOT ({text})" if self.negate else text


def show(expr: Expr) -> str:
    """An expression as selector text (fully parenthesized)."""
    kind = expr[0]
    if kind == "attr":
        return '"' + expr[1].replace('"', '""') + '"'
    if kind == "num":
        return repr(expr[1])
    if kind == "str":
        return "'" + expr[1].replace("'", "''") + "'"
    if kind == "bool":
        return "TRUE" if expr[1] else "FALSE"
    if kind == "null":
        return "NULL"
    if kind == "neg":
        return f"-({show(expr[1])})"
    return f"({show(expr[1])} {kind} {show(expr[2])})"
