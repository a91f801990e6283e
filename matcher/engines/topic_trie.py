"""Every MQTT topic filter of one attribute, in a trie of levels.

A node is a sequence of filter levels; its literal children are a dict by
level, its `+` child is apart (a topic level named "+" is then no wildcard),
and the filters that end in `#` after it are kept on it. Matching a topic
walks the trie along its levels, into the literal child and the `+` child
at each, so it visits at most the nodes on the topic's paths: O(levels × the
`+` branches that match), however many filters there are.
"""

from __future__ import annotations

from typing import Any

from matcher.engines.patterns import topic_levels


class _Node:
    __slots__ = ("children", "plus", "ends", "rest")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.plus: _Node | None = None
        self.ends: set[int] = set()  # filters that end here
        self.rest: set[int] = set()  # filters that end here with a "#" level after

    def empty(self) -> bool:
        return not (self.children or self.plus or self.ends or self.rest)


class TopicTrie:
    """Topic filters by id.

    Invariants: each live id is in `filters` and in the `ends` (or, for a
    filter ending in `#`, the `rest`) of exactly one node, the node of its
    levels (before the `#`); no node but the root is empty.
    """

    def __init__(self) -> None:
        self.root = _Node()
        self.filters: dict[int, tuple[str, ...]] = {}

    def __len__(self) -> int:
        return len(self.filters)

    def add(self, ident: int, pattern: str) -> None:
        """Hold a valid topic filter under a new id. O(levels)."""
        levels = topic_levels(pattern)
        self.filters[ident] = levels
        node = self.root
        for level in levels:
            if level == "#":
                node.rest.add(ident)
                return
            if level == "+":
                node.plus = node.plus or _Node()
                node = node.plus
            else:
                node = node.children.setdefault(level, _Node())
        node.ends.add(ident)

    def remove(self, ident: int) -> None:
        """Drop a filter, and the nodes it leaves empty. O(levels)."""
        levels = self.filters.pop(ident)
        path = [self.root]
        for level in levels:
            if level == "#":
                break
            node = path[-1]
            path.append(node.plus if level == "+" else node.children[level])
        node = path[-1]
        (node.rest if levels[-1] == "#" else node.ends).discard(ident)
        for depth in range(len(path) - 1, 0, -1):
            node = path[depth]
            if not node.empty():
                break
            parent, level = path[depth - 1], levels[depth - 1]
            if level == "+":
                parent.plus = None
            else:
                del parent.children[level]

    def matches(self, value: Any) -> list[int]:
        """The ids of the filters that match a topic name (a string; [] for
        any other value). O(nodes visited + answers): the nodes are walked a
        level at a time, the literal child and the `+` child of each."""
        if not isinstance(value, str) or not self.filters:
            return []
        names = value.split("/")
        out: list[int] = []
        root = self.root
        frontier = [root]
        if names[0][:1] == "$":  # no wildcard in the first level matches a system topic
            child = root.children.get(names[0])
            frontier = [child] if child is not None else []
            names = names[1:]
        for name in names:
            below = []
            for node in frontier:
                if node.rest:
                    out += node.rest
                child = node.children.get(name)
                if child is not None:
                    below.append(child)
                if node.plus is not None:
                    below.append(node.plus)
            if not below:
                return out
            frontier = below
        for node in frontier:
            out += node.rest  # (`a/#` matches `a`)
            out += node.ends
        return out
