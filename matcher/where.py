"""The SQL-like `where` language (SEMANTICS §6) to disjunctive normal form of `Atom`s.

A hand-written tokenizer and recursive-descent parser build a small tree; NOT is
then pushed down to the atoms (De Morgan) and AND is distributed over OR. Every
error is a `FilterError` that says what was expected and at which column
(1-based character position), because a subscriber only ever sees the message in
the dead-letter topic. The limits of `matcher.constraints` are enforced while
parsing and expanding, so a hostile filter is refused before it costs memory.

`value_problem` and `normalize` are shared with `matcher.filter_json`, so that
both forms accept the same atoms and return the same shape.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any, NamedTuple, NoReturn

from matcher.constraints import MAX_ATTRIBUTES, MAX_CONJUNCTIONS, MAX_WHERE_BYTES, Atom
from matcher.errors import FilterError
from matcher.times import epoch_ms

MAX_DEPTH = 200
"""Deepest parenthesis nesting: deeper text would exhaust Python's recursion limit."""

_KEYWORDS = frozenset("AND OR NOT BETWEEN IN LIKE EXISTS TRUE FALSE".split())
_COMPARISONS = frozenset("= != <> < <= > >=".split())
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_OPPOSITE = {
    "=": "!=",
    "!=": "=",
    "<": ">=",
    ">=": "<",
    ">": "<=",
    "<=": ">",
    "prefix": "not_prefix",
    "suffix": "not_suffix",
    "contains": "not_contains",
    "not_prefix": "prefix",
    "not_suffix": "suffix",
    "not_contains": "contains",
}
_STRING_OPS = frozenset("prefix suffix contains not_prefix not_suffix not_contains".split())
_BOOL_OPS = frozenset(("=", "!=", "in"))
_NOT_EXISTS = "NOT EXISTS is not supported: a filter can only constrain attributes that are present"
_LIKE_HELP = (
    "LIKE supports 'abc' (equals), 'abc%' (prefix), '%abc' (suffix) and '%abc%' (contains), "
    "with no '_' wildcard; write \\% or \\_ for a literal % or _"
)

# A token and the blanks before it, in one match (half the matches of a pattern
# that makes the blanks a token of their own).
_TOKEN = re.compile(
    r"""
    \s*
    (?: (?P<num>-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
    | (?P<name>[A-Za-z_][A-Za-z0-9_.]*)
    | (?P<str>'(?:[^']|'')*')
    | (?P<qname>"(?:[^"]|"")*")
    | (?P<op><=|>=|<>|!=|=|<|>)
    | (?P<punct>[(),])
    )
    """,
    re.VERBOSE,
)


END_PAD = 2  # "end" tokens after the text's: the parser looks one token ahead


class _Token(NamedTuple):
    kind: str  # num, str, name, qname, kw, op, "(", ")", ",", end
    text: str  # as written (keywords upper-cased)
    col: int  # 1-based


# A parse tree node: ("atom", Atom, col) | ("const", bool) | ("not", node)
# | ("and", [nodes]) | ("or", [nodes]).
_Node = tuple[Any, ...]


def parse_where(text: str) -> list[list[Atom]]:
    """Parse a `where` text into a list of conjunctions of atoms; `TRUE` is `[[]]`."""
    if not isinstance(text, str):
        raise FilterError(f"'where' must be a string, got {type(text).__name__}")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_WHERE_BYTES:
        raise FilterError(
            f"'where' is {size} bytes of UTF-8, over the limit of {MAX_WHERE_BYTES} bytes"
        )
    return normalize(_dnf(_Parser(text).parse(), negate=False))


def value_problem(op: str, value: Any) -> str | None:
    """Say why `value` cannot go with `op` (None if it can): both filter forms share this."""
    if op == "exists":
        return None if value is None else f"'exists' takes no value, got {_show(value)}"
    if op in _STRING_OPS:
        return None if isinstance(value, str) else f"'{op}' needs a string, got {_show(value)}"
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
            if not _finite(item):
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


def normalize(dnf: list[list[Atom]]) -> list[list[Atom]]:
    """Drop repeated atoms and redundant conjunctions, keeping order; enforce MAX_CONJUNCTIONS.

    A conjunction whose atoms include all of another's is implied by it (for
    `overlaps` and for `covers`), so it is dropped: `TRUE OR x` is `[[]]`.
    """
    unique: dict[frozenset, list[Atom]] = {}
    for conjunction in dnf:
        atoms: dict[tuple, Atom] = {}
        for atom in conjunction:
            atoms.setdefault((atom.attr, atom.op, _key(atom.value)), atom)
        unique.setdefault(frozenset(atoms), list(atoms.values()))
    if len(unique) > MAX_CONJUNCTIONS:
        raise _too_many_conjunctions()
    keys = list(unique)
    return [unique[k] for k in keys if not any(other < k for other in keys)]


class _Parser:
    """Recursive descent over the tokens; precedence OR < AND < NOT < condition."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.pos = 0
        self.depth = 0
        self.attrs: set[str] = set()

    def parse(self) -> _Node:
        node = self.parse_or()
        if self.peek().kind != "end":
            self.fail("AND, OR or the end of the text")
        return node

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[self.pos + ahead]  # (the tokens end with END_PAD "end" tokens)

    def take(self) -> _Token:
        token = self.tokens[self.pos]
        if token.kind != "end":
            self.pos += 1
        return token

    def at(self, kind: str, text: str | None = None, ahead: int = 0) -> bool:
        token = self.tokens[self.pos + ahead]
        return token.kind == kind and (text is None or token.text == text)

    def fail(self, expected: str, token: _Token | None = None) -> NoReturn:
        token = token or self.peek()
        hint = ""
        if token.kind == "qname":
            hint = " (strings take single quotes)"
        elif token.kind == "kw" and expected.startswith("an attribute name"):
            hint = f' (write "{token.text.lower()}" for an attribute with that name)'
        raise FilterError(
            f"unexpected {_describe(token)} at column {token.col}: expected {expected}{hint}"
        )

    def expect(self, kind: str, text: str, expected: str) -> None:
        if not self.at(kind, text):
            self.fail(expected)
        self.take()

    def parse_or(self) -> _Node:
        items = [self.parse_and()]
        while self.at("kw", "OR"):
            self.take()
            items.append(self.parse_and())
        return items[0] if len(items) == 1 else ("or", items)

    def parse_and(self) -> _Node:
        items = [self.parse_unary()]
        while self.at("kw", "AND"):
            self.take()
            items.append(self.parse_unary())
        return items[0] if len(items) == 1 else ("and", items)

    def parse_unary(self) -> _Node:
        # NOTs are counted in a loop, not recursed into, so only parentheses add depth.
        negate = False
        while self.at("kw", "NOT"):
            self.take()
            negate = not negate
        if self.at("("):
            opening = self.take()
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise FilterError(
                    f"parentheses nested deeper than {MAX_DEPTH} levels at column {opening.col}"
                )
            node = self.parse_or()
            self.expect(")", ")", f"')' to close the '(' at column {opening.col}")
            self.depth -= 1
        elif self.at("kw") and self.peek().text in ("TRUE", "FALSE") and not self.at("op", ahead=1):
            node = ("const", self.take().text == "TRUE")
        else:
            node = self.parse_condition()
        return ("not", node) if negate else node

    def parse_condition(self) -> _Node:
        start = self.peek()
        if self.at_value():
            value = self.parse_value("a condition")
            if not self.at("op"):
                self.fail(f"a comparison operator after {_describe(start)}")
            op = _comparison(self.take().text)
            attr = self.parse_attr(f"an attribute name after '{op}'")
            return self.atom(attr, _FLIPPED[op], value, start)
        attr = self.parse_attr("an attribute name")
        token = self.take()
        if token.kind == "op":
            op = _comparison(token.text)
            return self.atom(attr, op, self.parse_value(f"a value after '{token.text}'"), start)
        negate = token.kind == "kw" and token.text == "NOT"
        if negate:
            token = self.take()
            if token.kind == "kw" and token.text == "EXISTS":
                raise FilterError(f"{_NOT_EXISTS} (at column {token.col})")
            if token.kind != "kw" or token.text not in ("BETWEEN", "IN", "LIKE"):
                self.fail("BETWEEN, IN or LIKE after NOT", token)
        if token.kind != "kw" or token.text not in ("BETWEEN", "IN", "LIKE", "EXISTS"):
            self.fail(
                f"a comparison operator, BETWEEN, IN, LIKE or EXISTS after {_describe(start)}",
                token,
            )
        if token.text == "BETWEEN":
            lo = self.parse_value("a value after BETWEEN")
            self.expect("kw", "AND", "AND between the bounds of BETWEEN")
            node = self.atom(attr, "between", (lo, self.parse_value("a value after AND")), start)
        elif token.text == "IN":
            self.expect("(", "(", "'(' after IN")
            values = [self.parse_value("a value in the IN list")]
            while self.at(","):
                self.take()
                values.append(self.parse_value("a value after ','"))
            self.expect(")", ")", "',' or ')' in the IN list")
            node = self.atom(attr, "in", tuple(values), start)
        elif token.text == "LIKE":
            pattern = self.take()
            if pattern.kind != "str":
                self.fail("a quoted pattern after LIKE", pattern)
            op, value = _like(_unquote(pattern.text), pattern.col)
            node = self.atom(attr, op, value, start)
        else:
            node = self.atom(attr, "exists", None, start)
        return ("not", node) if negate else node

    def at_value(self) -> bool:
        token = self.peek()
        return (
            token.kind in ("num", "str")
            or (token.kind == "kw" and token.text in ("TRUE", "FALSE"))
            or self.at_timestamp()
        )

    def at_timestamp(self) -> bool:
        # TIMESTAMP is a keyword only before a string, so `timestamp` stays usable as a name.
        return (
            self.at("name") and self.peek().text.upper() == "TIMESTAMP" and self.at("str", ahead=1)
        )

    def parse_value(self, expected: str) -> Any:
        if self.at_timestamp():
            self.take()
            literal = self.take()
            return _epoch_ms(_unquote(literal.text), literal.col)
        token = self.take()
        if token.kind == "num":
            return _number(token)
        if token.kind == "str":
            return _unquote(token.text)
        if token.kind == "kw" and token.text in ("TRUE", "FALSE"):
            return token.text == "TRUE"
        self.fail(expected, token)

    def parse_attr(self, expected: str) -> str:
        token = self.take()
        if token.kind == "name":
            name = token.text
        elif token.kind == "qname":
            name = token.text[1:-1].replace('""', '"')
            if not name:
                raise FilterError(f"empty attribute name at column {token.col}")
        else:
            self.fail(expected, token)
        self.attrs.add(name)
        if len(self.attrs) > MAX_ATTRIBUTES:
            raise FilterError(
                f"more than {MAX_ATTRIBUTES} distinct attributes (the limit) at column {token.col}"
            )
        return name

    def atom(self, attr: str, op: str, value: Any, start: _Token) -> _Node:
        problem = value_problem(op, value)
        if problem:
            raise FilterError(f"{problem} (in the condition at column {start.col})")
        return ("atom", Atom(attr, op, value), start.col)


def _tokenize(text: str) -> list[_Token]:
    tokens = []
    pos, end = 0, len(text.rstrip())
    while pos < end:
        match = _TOKEN.match(text, pos)
        if match is None:
            pos += len(text[pos:]) - len(text[pos:].lstrip())  # (the blanks before it)
            char, col = text[pos], pos + 1
            if char in "'\"":
                what = "string" if char == "'" else "quoted attribute name"
                raise FilterError(f"unterminated {what} starting at column {col}")
            raise FilterError(f"unexpected character {char!r} at column {col}")
        kind = match.lastgroup
        word = match.group(kind)
        col = match.start(kind) + 1
        pos = match.end()
        if kind == "name" and word.upper() in _KEYWORDS:
            kind, word = "kw", word.upper()
        elif kind == "punct":
            kind = word
        tokens.append(_Token(kind, word, col))
    return tokens + [_Token("end", "", len(text) + 1)] * END_PAD


def _describe(token: _Token) -> str:
    if token.kind == "end":
        return "end of text"
    if token.kind in ("str", "qname"):
        return token.text if len(token.text) <= 40 else token.text[:37] + "..."
    return f"'{token.text}'"


def _comparison(op: str) -> str:
    return "!=" if op == "<>" else op


def _unquote(literal: str) -> str:
    return literal[1:-1].replace("''", "'")


def _number(token: _Token) -> int | float:
    try:
        if any(c in token.text for c in ".eE"):
            return float(token.text)
        return int(token.text)
    except ValueError:  # more digits than int() accepts
        raise FilterError(f"number too long at column {token.col}") from None


def _epoch_ms(text: str, col: int) -> int:
    try:
        return epoch_ms(text)
    except ValueError:
        raise FilterError(
            f"TIMESTAMP '{text}' at column {col} is not an ISO-8601 time "
            "such as '2026-11-22T10:00:00Z'"
        ) from None


def _like(pattern: str, col: int) -> tuple[str, str]:
    """Map a LIKE pattern to an op: only one leading and/or one trailing % are meaningful."""
    parts = [""]
    chars = iter(pattern)
    for char in chars:
        if char == "\\":
            escaped = next(chars, None)
            if escaped is None:
                raise FilterError(f"LIKE pattern at column {col} ends with a lone '\\'")
            parts[-1] += escaped
        elif char == "%":
            parts.append("")
        elif char == "_":
            raise FilterError(f"unsupported LIKE pattern at column {col}: {_LIKE_HELP}")
        else:
            parts[-1] += char
    if len(parts) == 1:
        return "=", parts[0]
    if len(parts) == 2 and not parts[1]:
        return "prefix", parts[0]
    if len(parts) == 2 and not parts[0]:
        return "suffix", parts[1]
    if len(parts) == 3 and not parts[0] and not parts[2]:
        return "contains", parts[1]
    raise FilterError(f"unsupported LIKE pattern at column {col}: {_LIKE_HELP}")


def _dnf(node: _Node, negate: bool) -> list[list[Atom]]:
    kind = node[0]
    if kind == "const":
        return [[]] if node[1] != negate else []
    if kind == "atom":
        return _negated(node[1], node[2]) if negate else [[node[1]]]
    if kind == "not":
        return _dnf(node[1], not negate)
    parts = [_dnf(child, negate) for child in node[1]]
    if (kind == "and") != negate:
        return _product(parts)
    return normalize([conjunction for part in parts for conjunction in part])


def _negated(atom: Atom, col: int) -> list[list[Atom]]:
    if atom.op == "exists":
        raise FilterError(f"{_NOT_EXISTS} (at column {col})")
    if atom.op == "between":
        lo, hi = atom.value
        return [[Atom(atom.attr, "<", lo)], [Atom(atom.attr, ">", hi)]]
    if atom.op == "in":
        # (`x IN (...)` of mixed types is refused when its constraint is made;
        # its negation must be too, or each `!=` would pass alone)
        if len({_value_type(value) for value in atom.value}) > 1:
            raise FilterError(
                f"{atom.attr}: an IN list must not mix types, got {list(atom.value)!r}"
            )
        return [[Atom(atom.attr, "!=", value) for value in atom.value]]
    return [[Atom(atom.attr, _OPPOSITE[atom.op], atom.value)]]


def _product(parts: list[list[list[Atom]]]) -> list[list[Atom]]:
    """AND of DNFs: count the result before building it, so a blow-up fails fast."""
    if any(not part for part in parts):
        return []
    size = 1
    for part in parts:
        size *= len(part)
        if size > MAX_CONJUNCTIONS:
            raise _too_many_conjunctions()
    return normalize(
        [[atom for conj in combo for atom in conj] for combo in itertools.product(*parts)]
    )


def _too_many_conjunctions() -> FilterError:
    return FilterError(
        f"the filter expands to more than {MAX_CONJUNCTIONS} conjunctions "
        "(each AND of ORs multiplies them); simplify it or split it into several subscriptions"
    )


def _key(value: Any) -> Any:
    """Equality key that keeps True apart from 1 (bool is an int subclass)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, tuple):
        return tuple(_key(item) for item in value)
    return value


def _finite(number: int | float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:  # an int too large for a float
        return False


def _show(value: Any) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def _value_type(value: Any) -> str:
    """A literal's type as SEMANTICS §1 counts types (ints and floats are one)."""
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, int | float) else "string"
