"""The `where` language: JMS message selectors (docs/SELECTORS.md), parsed.

A hand-written tokenizer and recursive-descent parser build a small tree,
which `matcher.normal_form` turns into the disjunctive normal form of atoms
and residual tests. Every error is a `FilterError` that says what was
expected and at which column (1-based character position), because a
subscriber only ever sees the message in the dead-letter topic. The limits of
`matcher.constraints` are enforced while parsing, so a hostile selector is
refused before it costs memory.

`IS`, `NULL`, `ESCAPE` and `TIMESTAMP`, and the pattern tests' `MATCHES`,
`TOPIC`, `HAS` and `XPATH`, are keywords only where the grammar has them
(after an operand, after IS, after a LIKE pattern, before a string), so an
attribute may still bear those names.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple, NoReturn

from matcher import like
from matcher.constraints import MAX_ATTRIBUTES, MAX_WHERE_BYTES, Atom
from matcher.engines.patterns import KEYWORDS as PATTERN_KEYWORDS
from matcher.errors import FilterError
from matcher.expressions import ARITHMETIC, Expr, combine
from matcher.normal_form import DNF, finite, normal_form, normalize, value_problem
from matcher.times import epoch_ms

__all__ = ["MAX_DEPTH", "normalize", "parse_where", "value_problem"]

MAX_DEPTH = 200
"""Deepest nesting of parentheses, and of arithmetic: deeper text would
exhaust Python's recursion limit."""

_KEYWORDS = frozenset("AND OR NOT BETWEEN IN LIKE EXISTS TRUE FALSE".split())
_ORDERING = frozenset(("<", "<=", ">", ">="))
_TAILS = "a comparison operator, BETWEEN, IN, LIKE, IS, EXISTS, MATCHES, TOPIC, HAS or XPATH"
# The pattern tests' operators, keywords only before a quoted pattern (so `topic`
# stays a name: `topic TOPIC 'a/#'`).
_PATTERN_WORDS = {word: op for op, word in PATTERN_KEYWORDS.items()}

# A token and the blanks before it, in one match (half the matches of a pattern
# that makes the blanks a token of their own). Numbers are unsigned: a sign is
# the unary operator.
_TOKEN = re.compile(
    r"""
    \s*
    (?: (?P<num>0[xX][0-9a-fA-F]+[lL]?|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[lLdDfF]?)
    | (?P<name>(?:[^\W\d]|\$)[\w$.]*)
    | (?P<str>'(?:[^']|'')*')
    | (?P<qname>"(?:[^"]|"")*")
    | (?P<op><=|>=|<>|!=|=|<|>)
    | (?P<punct>[(),+\-*/])
    )
    """,
    re.VERBOSE,
)


END_PAD = 2  # "end" tokens after the text's: the parser looks one token ahead


class _Token(NamedTuple):
    kind: str  # num, str, name, qname, kw, op, "(", ")", ",", "+", "-", "*", "/", end
    text: str  # as written (keywords upper-cased)
    col: int  # 1-based


# The tree of `matcher.normal_form`, plus ("value", expr, first token, next
# token): an operand with nothing after it, which is a condition only if it is
# a boolean attribute or literal (the caller decides: it may be an arithmetic
# group in parentheses). While parsing, an operand is an expression of
# `matcher.expressions`, or ("cond", node, column) for a condition in parentheses.
_Node = tuple[Any, ...]


def parse_where(text: str) -> DNF:
    """Parse a `where` text into a list of conjunctions of atoms and residual
    tests; `TRUE` is `[[]]`."""
    if not isinstance(text, str):
        raise FilterError(f"'where' must be a string, got {type(text).__name__}")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_WHERE_BYTES:
        raise FilterError(
            f"'where' is {size} bytes of UTF-8, over the limit of {MAX_WHERE_BYTES} bytes"
        )
    return normal_form(_Parser(text).parse())


class _Parser:
    """Recursive descent over the tokens; precedence OR < AND < NOT < predicate
    < + - < * / < unary + -."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.pos = 0
        self.depth = 0
        self.attrs: set[str] = set()
        # Nesting of each arithmetic node built (by id: the nodes live in the tree).
        self.depths: dict[int, int] = {}

    def parse(self) -> _Node:
        node = self.condition(self.parse_or())
        if self.peek().kind != "end":
            self.fail("AND, OR or the end of the text")
        return node

    # -- tokens ---------------------------------------------------------------

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

    def at_word(self, word: str, ahead: int = 0) -> bool:
        """A name that is a keyword here (IS, NULL, ESCAPE, TIMESTAMP)."""
        token = self.tokens[self.pos + ahead]
        return token.kind == "name" and token.text.upper() == word

    def fail(self, expected: str, token: _Token | None = None) -> NoReturn:
        token = token or self.peek()
        hint = ""
        if token.kind == "qname" and "attribute" not in expected:
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

    # -- conditions -------------------------------------------------------------

    # Each level of parentheses costs four frames (parse_or, predicate,
    # parse_sum, operand): MAX_DEPTH levels stay within Python's limit.

    def parse_or(self) -> _Node:
        terms = []
        while True:
            factors = []
            while True:
                negate = self.nots()
                node = self.predicate()
                factors.append(("not", self.condition(node)) if negate else node)
                if not self.at("kw", "AND"):
                    break
                self.take()
            if len(factors) > 1:
                factors = [("and", [self.condition(item) for item in factors])]
            terms.append(factors[0])
            if not self.at("kw", "OR"):
                break
            self.take()
        if len(terms) == 1:
            return terms[0]
        return ("or", [self.condition(item) for item in terms])

    def condition(self, node: _Node) -> _Node:
        """A node as a condition: an operand alone is one only if it is a boolean
        attribute (`flag`, which is `flag = TRUE`) or literal."""
        if node[0] != "value":
            return node
        _, expr, start, following = node
        if expr[0] == "attr":
            return ("atom", Atom(expr[1], "=", True))
        if expr[0] == "bool":
            return ("const", expr[1])
        self.fail(f"{_TAILS} after {_describe(start)}", following)

    def nots(self) -> bool:
        """Take the NOTs before a predicate: do they negate it? (Counted in a
        loop, not recursed into, so only parentheses add depth.)"""
        negate = False
        while self.at("kw", "NOT"):
            self.take()
            negate = not negate
        return negate

    def predicate(self) -> _Node:
        start = self.peek()
        left = self.parse_sum("an attribute name")
        if left[0] == "cond":
            if self.at("op") or self.at("kw") and self.peek().text in ("BETWEEN", "IN", "LIKE"):
                self.fail("AND, OR, ')' or the end of the text after a condition in parentheses")
            return left[1]
        token = self.peek()
        if token.kind == "op":
            self.take()
            right = self.value(self.parse_sum(f"a value after '{token.text}'"))
            return self.comparison(_operator(token.text), left, right, start)
        negate = self.at("kw", "NOT")
        if negate:
            self.take()
            token = self.peek()
            if not (
                token.kind == "kw"
                and token.text in ("BETWEEN", "IN", "LIKE", "EXISTS")
                or self.pattern_word() is not None
            ):
                self.fail("BETWEEN, IN, LIKE, EXISTS, MATCHES, TOPIC, HAS or XPATH after NOT")
        op = self.pattern_word()
        if op is not None:
            self.take()
            attr = self.attribute_before(left, token, start)
            pattern = self.take()
            problem = value_problem(op, _unquote(pattern.text))
            if problem:
                raise FilterError(f"{problem} (in the pattern at column {pattern.col})")
            node = ("atom", Atom(attr, op, _unquote(pattern.text)))
            return ("not", node) if negate else node
        if token.kind == "kw" and token.text == "BETWEEN":
            self.take()
            return self.between(left, start, negate)
        if token.kind == "kw" and token.text in ("IN", "LIKE", "EXISTS") or self.at_word("IS"):
            self.take()
            attr = self.attribute_before(left, token, start)
            if token.text == "IN":
                node = self.parse_in(attr, start)
            elif token.text == "LIKE":
                node = self.parse_like(attr, start)
            elif token.text == "EXISTS":
                node = ("atom", Atom(attr, "exists"))
            else:
                node = self.parse_is(attr)
            return ("not", node) if negate else node
        if token.kind in ("kw", "end", ")") and token.text in ("AND", "OR", ")", ""):
            return ("value", left, start, token)
        self.fail(f"{_TAILS} after {_describe(start)}")

    def pattern_word(self) -> str | None:
        """The pattern test whose keyword comes next, before a quoted pattern."""
        token = self.peek()
        if token.kind != "name" or not self.at("str", ahead=1):
            return None
        return _PATTERN_WORDS.get(token.text.upper())

    def attribute_before(self, operand: Expr, keyword: _Token, start: _Token) -> str:
        if operand[0] != "attr":
            raise FilterError(
                f"{keyword.text.upper()} at column {keyword.col} needs an attribute name "
                f"before it, got {_describe(start)}"
            )
        return operand[1]

    def comparison(self, op: str, left: Expr, right: Expr, start: _Token) -> _Node:
        """A comparison, with the type errors the text alone shows refused."""
        where = f"(in the condition at column {start.col})"
        for side, other in ((left, right), (right, left)):
            if side[0] == "bool" and op in _ORDERING:
                raise FilterError(
                    f"'{op}' got {_show_literal(side)}: booleans only work with =, != and in "
                    + where
                )
            if side[0] in ("str", "bool") and _is_arithmetic(other):
                raise FilterError(
                    f"arithmetic compares only with numbers, got {_show_literal(side)} {where}"
                )
        for side in (left, right):
            if _is_literal(side):
                self.check(op, side[1], start)
        return ("cmp", op, left, right)

    def check(self, op: str, value: Any, start: _Token) -> None:
        problem = value_problem(op, value)
        if problem:
            raise FilterError(f"{problem} (in the condition at column {start.col})")

    def between(self, operand: Expr, start: _Token, negate: bool) -> _Node:
        lo = self.value(self.parse_sum("a value after BETWEEN"))
        self.expect("kw", "AND", "AND between the bounds of BETWEEN")
        hi = self.value(self.parse_sum("a value after AND"))
        if operand[0] == "attr" and _is_literal(lo) and _is_literal(hi):
            attr, bounds = operand[1], (lo[1], hi[1])
            self.check("between", bounds, start)
            if negate:  # JMS: "a NOT BETWEEN lo AND hi" is "a < lo OR a > hi"
                return ("or", [("atom", Atom(attr, "<", lo[1])), ("atom", Atom(attr, ">", hi[1]))])
            return ("atom", Atom(attr, "between", bounds))
        ops = ("<", ">", "or") if negate else (">=", "<=", "and")
        low = self.comparison(ops[0], operand, lo, start)
        return (ops[2], [low, self.comparison(ops[1], operand, hi, start)])

    def parse_in(self, attr: str, start: _Token) -> _Node:
        self.expect("(", "(", "'(' after IN")
        values = [self.literal("a value in the IN list")]
        while self.at(","):
            self.take()
            values.append(self.literal("a value after ','"))
        self.expect(")", ")", "',' or ')' in the IN list")
        groups: dict[type, list[Any]] = {}  # IN is the OR of its equalities: one atom a type
        for value in values:
            kind = bool if isinstance(value, bool) else str if isinstance(value, str) else float
            groups.setdefault(kind, []).append(value)
        atoms = []
        for group in groups.values():
            self.check("in", tuple(group), start)
            atoms.append(("atom", Atom(attr, "in", tuple(group))))
        return atoms[0] if len(atoms) == 1 else ("or", atoms)

    def literal(self, expected: str) -> Any:
        token = self.peek()
        expr = self.value(self.parse_sum(expected))
        if not _is_literal(expr):
            self.fail(expected, token)
        return expr[1]

    def parse_like(self, attr: str, start: _Token) -> _Node:
        pattern = self.take()
        if pattern.kind != "str":
            self.fail("a quoted pattern after LIKE", pattern)
        escape = "\\"
        if self.at_word("ESCAPE") and self.at("str", ahead=1):
            self.take()
            literal = self.take()
            escape = _unquote(literal.text)
            if len(escape) != 1:
                raise FilterError(
                    f"ESCAPE at column {literal.col} takes one character, got {literal.text}"
                )
        op, value = like.classify(like.read(_unquote(pattern.text), escape))
        self.check(op, value, start)
        return ("atom", Atom(attr, op, value))

    def parse_is(self, attr: str) -> _Node:
        negate = self.at("kw", "NOT")
        if negate:
            self.take()
        if not self.at_word("NULL"):
            self.fail("NULL after IS NOT" if negate else "NULL or NOT NULL after IS")
        self.take()
        return ("atom", Atom(attr, "exists" if negate else "absent"))

    # -- operands -----------------------------------------------------------------

    def value(self, operand: Expr) -> Expr:
        if operand[0] == "cond":
            raise FilterError(
                f"a condition in parentheses at column {operand[2]} is not a value: "
                "it cannot be compared or computed with"
            )
        return operand

    def parse_sum(self, expected: str) -> Expr:
        """A sum of products, left to right."""
        total, total_op = None, None
        product = self.operand(expected)
        while True:
            if self.at("*") or self.at("/"):
                op = self.take()
                right = self.operand(f"a value after '{op.text}'")
                product = self.arithmetic(op, product, right)
            elif self.at("+") or self.at("-"):
                op = self.take()
                total = product if total is None else self.arithmetic(total_op, total, product)
                total_op = op
                product = self.operand(f"a value after '{op.text}'")
            else:
                break
        return product if total is None else self.arithmetic(total_op, total, product)

    def arithmetic(self, op: _Token, left: Expr, right: Expr | None = None) -> Expr:
        """`left op right`, or `-left` for a "-" sign with no right."""
        self.number_operand(left, op)
        depth = self.depths.get(id(left), 0)
        if right is None:
            out = combine("neg", left)
        else:
            self.number_operand(right, op)
            depth = max(depth, self.depths.get(id(right), 0))
            out = combine(op.text, left, right)
        if out[0] in ARITHMETIC or out[0] == "neg":
            if depth >= MAX_DEPTH:
                raise FilterError(
                    f"arithmetic nested deeper than {MAX_DEPTH} levels at column {op.col}"
                )
            self.depths[id(out)] = depth + 1
        return out

    def number_operand(self, operand: Expr, op: _Token) -> None:
        if operand[0] in ("str", "bool", "cond"):
            what = "a condition" if operand[0] == "cond" else _show_literal(operand)
            raise FilterError(f"'{op.text}' at column {op.col} takes numbers, got {what}")
        if operand[0] == "num" and not finite(operand[1]):
            raise FilterError(
                f"'{op.text}' at column {op.col} got {operand[1]!r}: numbers must be finite"
            )

    def operand(self, expected: str) -> Expr:
        """A signed primary: a literal, an attribute or a group in parentheses."""
        signs = []
        while self.at("+") or self.at("-"):
            signs.append(self.take())
        token = self.peek()
        if token.kind == "(":
            self.take()
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise FilterError(
                    f"parentheses nested deeper than {MAX_DEPTH} levels at column {token.col}"
                )
            inner = self.parse_or()
            self.expect(")", ")", f"')' to close the '(' at column {token.col}")
            self.depth -= 1
            operand = inner[1] if inner[0] == "value" else ("cond", inner, token.col)
        else:
            operand = self.primary(expected)
        if signs:
            self.number_operand(operand, signs[-1])
            if sum(sign.text == "-" for sign in signs) % 2:  # (--x is x: no deep trees)
                operand = self.arithmetic(signs[-1], operand)
            elif operand[0] == "attr":  # +x is arithmetic: NULL on a string, as x + 0
                operand = self.arithmetic(_Token("+", "+", signs[-1].col), operand, ("num", 0))
        return operand

    def primary(self, expected: str) -> Expr:
        """A literal or an attribute name."""
        token = self.peek()
        if self.at_word("TIMESTAMP") and self.at("str", ahead=1):
            self.take()
            literal = self.take()
            return ("num", _epoch_ms(_unquote(literal.text), literal.col))
        if self.at_word("NULL"):
            raise FilterError(
                f"NULL at column {token.col} is not a value: test for it with 'IS NULL' "
                'or write "NULL" for an attribute with that name'
            )
        self.take()
        if token.kind == "num":
            return ("num", _number(token))
        if token.kind == "str":
            return ("str", _unquote(token.text))
        if token.kind == "kw" and token.text in ("TRUE", "FALSE"):
            return ("bool", token.text == "TRUE")
        if token.kind in ("name", "qname"):
            return ("attr", self.attribute(token))
        self.fail(expected, token)

    def attribute(self, token: _Token) -> str:
        if token.kind == "name":
            name = token.text
        else:
            name = token.text[1:-1].replace('""', '"')
            if not name:
                raise FilterError(f"empty attribute name at column {token.col}")
        self.attrs.add(name)
        if len(self.attrs) > MAX_ATTRIBUTES:
            raise FilterError(
                f"more than {MAX_ATTRIBUTES} distinct attributes (the limit) at column {token.col}"
            )
        return name


def _is_literal(expr: Expr) -> bool:
    return expr[0] in ("num", "str", "bool")


def _is_arithmetic(expr: Expr) -> bool:
    """A computed number (not a bare attribute, not a literal)."""
    return expr[0] == "neg" or expr[0] in ARITHMETIC


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


def _show_literal(expr: Expr) -> str:
    if expr[0] == "bool":
        return "true" if expr[1] else "false"
    return "'" + expr[1].replace("'", "''") + "'" if expr[0] == "str" else repr(expr[1])


def _operator(op: str) -> str:
    return "!=" if op == "<>" else op


def _unquote(literal: str) -> str:
    return literal[1:-1].replace("''", "'")


def _number(token: _Token) -> int | float:
    """A numeric literal as Java writes it: `57`, `57L`, `0x39`, `7.`, `.5`,
    `7E3`, `5.7d` (a float's `F` and an octal's leading zero are refused)."""
    text = token.text
    if text[:2] in ("0x", "0X"):
        return int(text.rstrip("lL"), 16)
    suffix = text[-1] if text[-1] in "lLdDfF" else ""
    digits = text[:-1] if suffix else text
    integral = not any(c in digits for c in ".eE")
    if suffix in ("f", "F"):
        raise FilterError(
            f"number {text} at column {token.col}: float (F) literals are not supported; "
            "write it without the F for a double"
        )
    if suffix in ("l", "L") and not integral:
        raise FilterError(f"number {text} at column {token.col}: L marks an integer")
    if integral and len(digits) > 1 and digits[0] == "0":
        raise FilterError(
            f"number {text} at column {token.col}: a leading zero makes it octal in Java; "
            "write it without the leading zero"
        )
    try:
        if integral and suffix not in ("d", "D"):
            return int(digits)
        return float(digits)
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
