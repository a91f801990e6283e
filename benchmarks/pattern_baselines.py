"""What `tsm bench matcher` times the pattern tests against: each subscription's
pattern compiled once and tested in turn on every event (NaradaBrokering's way),
and, for topics, a trie of levels written plainly. One profile at a time; an
answer is the list of the subscriptions' keys that hold."""

from __future__ import annotations

from typing import Any

import re2
from lxml import etree


class LoopRegex:
    name = "loop"

    def __init__(self, items: list[tuple[int, str]]) -> None:
        self.items = [(key, re2.compile(pattern)) for key, pattern in items]

    def match(self, attrs: dict[str, Any]) -> list[int]:
        text = attrs["text"]
        return [key for key, compiled in self.items if compiled.search(text) is not None]


def _topic_match(levels: list[str], names: list[str]) -> bool:
    if levels[0] in ("+", "#") and names[0].startswith("$"):
        return False
    for i, level in enumerate(levels):
        if level == "#":
            return True
        if i == len(names) or level not in ("+", names[i]):
            return False
    return len(levels) == len(names)


class LoopTopics:
    name = "loop"

    def __init__(self, items: list[tuple[int, str]]) -> None:
        self.items = [(key, pattern.split("/")) for key, pattern in items]

    def match(self, attrs: dict[str, Any]) -> list[int]:
        names = attrs["topic"].split("/")
        return [key for key, levels in self.items if _topic_match(levels, names)]


class PlainTrie:
    """Nested dicts: a level's literal children by name, "+" and "#" as keys."""

    name = "plain-trie"

    def __init__(self, items: list[tuple[int, str]]) -> None:
        self.root: dict = {}
        for key, pattern in items:
            node = self.root
            for level in pattern.split("/"):
                node = node.setdefault(level, {})
            node.setdefault(None, []).append(key)  # (None: the filters that end here)

    def match(self, attrs: dict[str, Any]) -> list[int]:
        names = attrs["topic"].split("/")
        out: list[int] = []

        def walk(node: dict, depth: int) -> None:
            if "#" in node and not (depth == 0 and names[0].startswith("$")):
                out.extend(node["#"].get(None, ()))
            if depth == len(names):
                out.extend(node.get(None, ()))
                return
            if names[depth] in node:
                walk(node[names[depth]], depth + 1)
            if "+" in node and not (depth == 0 and names[0].startswith("$")):
                walk(node["+"], depth + 1)

        walk(self.root, 0)
        return out


class LoopXPath:
    name = "loop"

    def __init__(self, items: list[tuple[int, str]]) -> None:
        self.items = [(key, etree.XPath(expression)) for key, expression in items]

    def match(self, attrs: dict[str, Any]) -> list[int]:
        root = etree.fromstring(attrs["doc"].encode())  # (parsed once an event)
        return [key for key, compiled in self.items if _true(compiled(root))]


def _true(result: Any) -> bool:
    if isinstance(result, float):
        return result == result and result != 0
    return bool(result)


BASELINES = {"regex": (LoopRegex,), "topics": (LoopTopics, PlainTrie), "xpath": (LoopXPath,)}
