"""Every regular expression of one attribute, matched against a value at once.

The patterns live in RE2 sets (`re2.Set`, unanchored: a match anywhere) of
geometrically growing sizes, as in a log-structured merge tree: a new pattern
joins the smallest level, and a level grown past its capacity is merged into
the next one, compiled again. Matching a value runs each level's sets once, a
pass over the value per set (a handful), however many patterns there are; a
removed pattern's id is dropped from the answers at once and from the sets at
the next merge. Compiling is lazy: a level is compiled when a value is first
matched after it changed.

A level is compiled as sets of at most PART patterns (and a set RE2 cannot
compile within its memory budget is split in two): RE2 matches with a DFA
built as values are seen, whose states hold every pattern still in play, so
one set per level is quickest, but a set of 100k patterns of five words
exceeds a budget of 256 MB. Each set's memory (its program and the DFA's
cache) is bounded by the budget; on this workload a level of 100k patterns
took about 200 MB in all.
"""

from __future__ import annotations

from typing import Any

import re2

from matcher.engines.patterns import regex

BASE = 256  # the smallest level's capacity; each next level holds GROWTH times more
GROWTH = 8
PART = 32768  # the most patterns in one RE2 set
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
_OPTIONS.max_mem = 256 << 20  # RE2's memory budget for one set: its program and DFA cache


class _Level:
    __slots__ = ("ids", "compiled")

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        # (the ids of a part, its re2.Set) covering `ids` in order; None until compiled
        self.compiled: list[tuple[list[int], Any]] | None = None

    def __reduce__(self) -> tuple:
        return _Level, (self.ids,)  # (a snapshot keeps the ids: RE2 sets do not pickle)


class RegexSet:
    """Regular expressions by id, matched together.

    Invariants: every live id is in `patterns` and in exactly one level
    (where dead ids, removed since the level was last compiled, may stay
    too); after an `add`, level k but the last holds at most BASE × GROWTH**k
    ids; a level's `compiled` is None or its parts hold its `ids` in order.
    """

    def __init__(self) -> None:
        self.patterns: dict[int, str] = {}
        self.levels: list[_Level] = [_Level([])]

    def __len__(self) -> int:
        return len(self.patterns)

    def add(self, ident: int, pattern: str) -> None:
        """Hold a valid RE2 pattern under a new id. O(1), and amortized
        O(log n) recompiled patterns: a pattern is compiled again once a level."""
        self.patterns[ident] = pattern
        self.levels[0].ids.append(ident)
        self.levels[0].compiled = None
        k = 0
        while len(self.levels[k].ids) > BASE * GROWTH**k:
            if k + 1 == len(self.levels):
                self.levels.append(_Level([]))
            live = [i for i in self.levels[k].ids if i in self.patterns]
            self.levels[k] = _Level([])
            self.levels[k + 1].ids.extend(live)
            self.levels[k + 1].compiled = None
            k += 1

    def remove(self, ident: int) -> None:
        """Drop a pattern. O(1); when dead ids outnumber the live ones, the
        levels are merged into one, compiled again (amortized O(1) a removal)."""
        del self.patterns[ident]
        held = sum(len(level.ids) for level in self.levels)
        if held > 2 * len(self.patterns) + BASE:
            ids = [i for level in self.levels for i in level.ids if i in self.patterns]
            self.levels = [_Level([]) for _ in self.levels]
            self.levels[-1] = _Level(ids)

    def matches(self, value: Any) -> list[int]:
        """The ids of the patterns that match somewhere in a string value ([]
        for any other value). One RE2 set pass a level, linear in the value."""
        if not isinstance(value, str) or not self.patterns:
            return []
        out = []
        live = self.patterns
        for level in self.levels:
            if not level.ids:
                continue
            if level.compiled is None:
                level.ids = [i for i in level.ids if i in live]
                level.compiled = [
                    part
                    for at in range(0, len(level.ids), PART)
                    for part in self._compile(level.ids[at : at + PART])
                ]
            for ids, compiled in level.compiled:
                hits = compiled.Match(value)
                if hits:
                    out.extend(ids[h] for h in hits if ids[h] in live)
        return out

    def _compile(self, ids: list[int]) -> list[tuple[list[int], Any]]:
        """RE2 sets of the patterns of `ids`, in order: one, or the halves'
        where RE2's budget does not hold it. O(their length)."""
        compiled = re2.Set.SearchSet(_OPTIONS)
        for i in ids:
            compiled.Add(self.patterns[i])
        try:
            compiled.Compile()
        except re2.error:
            if len(ids) == 1:
                raise
            half = len(ids) // 2
            return self._compile(ids[:half]) + self._compile(ids[half:])
        return [(ids, compiled)]

    def loop(self, value: str) -> list[int]:
        """The same answer from each compiled pattern in turn: O(patterns)
        runs (for tests and the benchmark's baseline)."""
        return [i for i, p in self.patterns.items() if regex(p).search(value) is not None]
