"""LIKE patterns (JMS §3.8.1.1): read with their escape, classified, matched.

`_` stands for any one character, `%` for any run of characters (the empty
one too), every other character for itself; the escape character makes the
`%`, `_` or escape character after it stand for itself (elsewhere it means
what it means unescaped). With `ESCAPE 'c'` the escape is `c`; without, it is
a backslash (this project's default: JMS has none).

A pattern is kept in a canonical text: a backslash before each literal `%`,
`_` or backslash, and each run of wildcards written as its `_`s then one `%`
(`%_%` and `_%` mean the same). Matching splits it at the `%`s: the first
part must match at the start, the last at the end, and the others in order,
each at its leftmost place between. A part is a regular expression of single
characters (`.` for `_`) with no repetition, so a match costs at most the
text's length times the pattern's: no pattern backtracks exponentially.
"""

from __future__ import annotations

import functools
import re

ANY, ONE = object(), object()  # the two wildcards, as parsed


def read(pattern: str, escape: str) -> list[str | object]:
    """The pattern as a list of literal characters and wildcards.

    The escape character makes a following `%`, `_` or escape character
    literal; anywhere else (at the end too) it means what it means unescaped,
    as ActiveMQ reads it."""
    items: list[str | object] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == escape and i + 1 < n and pattern[i + 1] in ("%", "_", escape):
            items.append(pattern[i + 1])
            i += 2
            continue
        items.append(ANY if char == "%" else ONE if char == "_" else char)
        i += 1
    return items


def classify(items: list[str | object]) -> tuple[str, str]:
    """The test a pattern is: `("=", text)`, `("prefix", p)`, `("suffix", s)`,
    `("contains", c)`, or `("like", canonical pattern)` for the rest."""
    parts: list[str] = [""]
    ones = False
    for item in items:
        if item is ANY:
            parts.append("")
        elif item is ONE:
            ones = True
        else:
            parts[-1] += item
    if not ones:
        inner = [p for p in parts[1:-1] if p]
        if len(parts) == 1:
            return "=", parts[0]
        if not any(parts[1:]):
            return "prefix", parts[0]
        if not any(parts[:-1]):
            return "suffix", parts[-1]
        if not parts[0] and not parts[-1] and len(inner) == 1:
            return "contains", inner[0]
    return "like", canonical(items)


def canonical(items: list[str | object]) -> str:
    out: list[str] = []
    i = 0
    while i < len(items):
        item = items[i]
        if item is ANY or item is ONE:
            run = []
            while i < len(items) and (items[i] is ANY or items[i] is ONE):
                run.append(items[i])
                i += 1
            out.append("_" * sum(w is ONE for w in run) + ("%" if ANY in run else ""))
            continue
        out.append("\\" + item if item in ("%", "_", "\\") else item)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def matcher(pattern: str):
    """A test of strings against a canonical pattern (compiled once per pattern)."""
    parts: list[list[str]] = [[]]  # regex pieces of each %-separated part
    lengths = [0]
    escaped = False
    for char in pattern:
        if escaped:
            parts[-1].append(re.escape(char))
            lengths[-1] += 1
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "%":
            parts.append([])
            lengths.append(0)
        else:
            parts[-1].append("." if char == "_" else re.escape(char))
            lengths[-1] += 1
    regexes = [re.compile("".join(p), re.DOTALL) for p in parts]
    if len(regexes) == 1:
        only = regexes[0]
        return lambda s: only.fullmatch(s) is not None
    first, last, middle = regexes[0], regexes[-1], regexes[1:-1]
    head, tail = lengths[0], lengths[-1]

    def test(s: str) -> bool:
        end = len(s) - tail
        if end < head or not first.fullmatch(s, 0, head) or not last.fullmatch(s, end):
            return False
        pos = head
        for part in middle:
            found = part.search(s, pos, end)
            if found is None:
                return False
            pos = found.end()
        return True

    return test


def matches(pattern: str, text: str) -> bool:
    """Does `text` match the canonical `pattern`?"""
    return matcher(pattern)(text)
