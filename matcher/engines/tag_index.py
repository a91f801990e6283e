"""Every HAS test of one attribute, in two hash maps.

`k=v` (and a plain tag `k`) is kept under the whole tag, `k=*` under its key
`k`; a tag set is matched by looking up each of its tags, whole and by its
key: O(tags + answers), however many tests there are.
"""

from __future__ import annotations

from typing import Any

from matcher.engines.patterns import tag_key


class TagIndex:
    """HAS patterns by id.

    Invariant: each live id is in `patterns` and in exactly one set: of
    `exact` under its tag, or of `keys` under its key (`k=*`); no set is empty.
    """

    def __init__(self) -> None:
        self.patterns: dict[int, str] = {}
        self.exact: dict[str, set[int]] = {}
        self.keys: dict[str, set[int]] = {}

    def __len__(self) -> int:
        return len(self.patterns)

    def _home(self, pattern: str) -> tuple[dict[str, set[int]], str]:
        key = tag_key(pattern)
        return (self.exact, pattern) if key is None else (self.keys, key)

    def add(self, ident: int, pattern: str) -> None:
        """Hold a HAS pattern under a new id. O(1)."""
        self.patterns[ident] = pattern
        table, key = self._home(pattern)
        table.setdefault(key, set()).add(ident)

    def remove(self, ident: int) -> None:
        """Drop a pattern. O(1)."""
        table, key = self._home(self.patterns.pop(ident))
        held = table[key]
        held.discard(ident)
        if not held:
            del table[key]

    def matches(self, value: Any) -> list[int]:
        """The ids of the patterns the tag set (a frozenset; [] for any other
        value) holds. O(tags + answers)."""
        if not isinstance(value, frozenset) or not self.patterns:
            return []
        found: set[int] = set()
        exact, keys = self.exact, self.keys
        for tag in value:
            hit = exact.get(tag)
            if hit:
                found |= hit
            if keys:
                key, equals, _ = tag.partition("=")
                hit = keys.get(key) if equals else None
                if hit:
                    found |= hit
        return list(found)
