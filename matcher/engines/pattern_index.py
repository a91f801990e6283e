"""The pattern tests of many filters, compiled together per attribute.

Each distinct positive test (`PatternTest`) gets an id, shared by every
filter that has it; the tests of one (attribute, operator) live in that
operator's engine: MATCHES in a `RegexSet`, TOPIC in a `TopicTrie`, HAS in a
`TagIndex`, XPATH in `XPathGroups`. Matching a profile runs each engine once
on its attribute's value.
"""

from __future__ import annotations

from typing import Any, Protocol

from matcher.engines.patterns import PatternTest
from matcher.engines.regex_set import RegexSet
from matcher.engines.tag_index import TagIndex
from matcher.engines.topic_trie import TopicTrie
from matcher.engines.xpath_groups import XPathGroups


class Engine(Protocol):
    """An engine: `matches` answers each held id at most once."""

    def add(self, ident: int, pattern: str) -> None: ...
    def remove(self, ident: int) -> None: ...
    def matches(self, value: Any) -> list[int]: ...
    def __len__(self) -> int: ...


ENGINES: dict[str, type] = {
    "matches": RegexSet,
    "topic": TopicTrie,
    "has": TagIndex,
    "xpath": XPathGroups,
}


class PatternIndex:
    """Positive pattern tests by id, counted by the filters that hold them.

    Invariants: `ids` and `tests` are inverse maps of the held tests; each
    held test has a positive count in `refs` and is in the engine of its
    (attribute, operator), under its id; ids are never reused; an engine
    left empty is dropped.
    """

    def __init__(self) -> None:
        self.ids: dict[PatternTest, int] = {}
        self.tests: dict[int, PatternTest] = {}
        self.refs: dict[int, int] = {}
        self.engines: dict[tuple[str, str], Engine] = {}
        self.next_id = 0  # (every id so far is below it)

    def __len__(self) -> int:
        return len(self.tests)

    def add(self, test: PatternTest) -> int:
        """Count a filter's test; its id. O(1) for a test already held, else
        one engine `add`."""
        ident = self.ids.get(test)
        if ident is None:
            ident = self.ids[test] = self.next_id
            self.next_id += 1
            self.tests[ident] = test
            self.refs[ident] = 0
            key = (test.attr, test.op)
            engine = self.engines.get(key)
            if engine is None:
                engine = self.engines[key] = ENGINES[test.op]()
            engine.add(ident, test.pattern)
        self.refs[ident] += 1
        return ident

    def release(self, ident: int) -> None:
        """Uncount a filter's test; the last one drops it (one engine `remove`)."""
        self.refs[ident] -= 1
        if self.refs[ident]:
            return
        del self.refs[ident]
        test = self.tests.pop(ident)
        del self.ids[test]
        key = (test.attr, test.op)
        engine = self.engines[key]
        engine.remove(ident)
        if not len(engine):
            del self.engines[key]

    def matched(self, attrs: dict[str, Any]) -> list[int]:
        """The ids of the held tests that hold on a profile (`Profile.attrs`),
        each once: one engine pass per (attribute, operator) it has a value for."""
        out: list[int] = []
        for (attr, _), engine in self.engines.items():
            value = attrs.get(attr)
            if value is not None:
                out += engine.matches(value)
        return out
