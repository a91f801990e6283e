"""Every XPATH test of one attribute, grouped by its leading path.

An expression that is one location path from the root (`/menu/drinks[price >
1.8]/name`) selects nothing unless its leading steps of plain element names
(`/menu/drinks`) do: such expressions are kept in a trie of those names. A
document is parsed once, and the trie walked along its elements from the
root: only the groups whose leading path the document has are run, each
expression of them once. Expressions of any other form (`count(//item) > 2`)
are run on every document.
"""

from __future__ import annotations

import re
from typing import Any

from lxml import etree

from matcher.engines.patterns import document, looks_like_xml, xpath_true

_NAME = re.compile(r"[A-Za-z_][\w.-]*")
_PATH_CHARS = re.compile(r"[\w.\-/:@*]")


def leading_path(expression: str) -> tuple[str, ...]:
    """The element names of the leading child steps of an expression that is
    one location path from the root, () for any other expression. O(its length)."""
    if not expression.startswith("/") or expression.startswith("//"):
        return ()
    depth, quote, cut = 0, "", None
    for i, char in enumerate(expression):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"" and depth:
            quote = char
        elif char == "[":
            depth += 1
            cut = i if cut is None else cut
        elif char == "]":
            depth -= 1
        elif not depth and not _PATH_CHARS.match(char):
            return ()  # an operator, a union, a function call, a blank: not one path
    names = []
    for step in expression[:cut].split("/")[1:]:
        if not _NAME.fullmatch(step):
            break
        names.append(step)
    return tuple(names)


class _Step:
    __slots__ = ("children", "members")

    def __init__(self) -> None:
        self.children: dict[str, _Step] = {}
        self.members: dict[int, str] = {}  # id -> expression, of this leading path


class XPathGroups:
    """XPath expressions by id.

    Invariants: each live id is in `expressions` and either in `loose` or in
    the `members` of exactly one trie node, the node of its leading path.
    """

    def __init__(self) -> None:
        self.root = _Step()
        self.loose: dict[int, str] = {}
        self.expressions: dict[int, tuple[str, tuple[str, ...]]] = {}

    def __len__(self) -> int:
        return len(self.expressions)

    def add(self, ident: int, expression: str) -> None:
        """Hold a valid XPath expression under a new id. O(its length)."""
        path = leading_path(expression)
        self.expressions[ident] = (expression, path)
        if not path:
            self.loose[ident] = expression
            return
        node = self.root
        for name in path:
            node = node.children.setdefault(name, _Step())
        node.members[ident] = expression

    def remove(self, ident: int) -> None:
        """Drop an expression, and the trie nodes it leaves empty. O(path)."""
        _, path = self.expressions.pop(ident)
        if not path:
            del self.loose[ident]
            return
        nodes = [self.root]
        for name in path:
            nodes.append(nodes[-1].children[name])
        del nodes[-1].members[ident]
        for depth in range(len(path), 0, -1):
            if nodes[depth].members or nodes[depth].children:
                break
            del nodes[depth - 1].children[path[depth - 1]]

    def matches(self, value: Any) -> list[int]:
        """The ids of the expressions true on the XML document in a string
        ([] for anything else): one parse, a walk of the trie along the
        document's elements, and one run of each expression whose leading
        path the document has, plus each loose one."""
        if not isinstance(value, str) or not self.expressions or not looks_like_xml(value):
            return []
        try:
            root = document(value)
        except etree.XMLSyntaxError:
            return []
        out = [i for i, e in self.loose.items() if xpath_true(e, root)]
        first = self.root.children.get(root.tag)
        stack = [(first, root)] if first is not None else []
        seen: set[int] = set()
        while stack:
            step, element = stack.pop()
            if id(step) not in seen:
                seen.add(id(step))
                out.extend(i for i, e in step.members.items() if xpath_true(e, root))
            if step.children:
                for child in element.iterchildren("*"):
                    below = step.children.get(child.tag)
                    if below is not None:
                        stack.append((below, child))
        return out
