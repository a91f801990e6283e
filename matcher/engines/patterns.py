"""The pattern tests of the filter language, each on one value (docs/SELECTORS.md).

- `attr MATCHES 're'`: a regular expression in RE2 syntax that matches
  somewhere in a string value (`^`, `$` anchor it). RE2 runs in time linear in
  the value, so no pattern can stall the matcher.
- `attr TOPIC 'a/+/c/#'`: an MQTT topic filter on a string value; levels are
  split on `/`, `+` is any one level, a last `#` any number of further levels
  (none too: `a/#` matches `a`), and a filter whose first level is a wildcard
  matches no topic whose first level starts with `$` (MQTT's system topics).
- `tags HAS 'k=v'`: a tag set (a profile's list of strings) holds the tag
  `k=v`; `tags HAS 'k=*'` holds some tag `k=...`; `tags HAS 'x'` holds `x`.
- `doc XPATH '/order[item/@sku="x"]'`: an XPath 1.0 expression over an XML
  document in a string value (`lxml`), true where its value is: a non-empty
  node set, a true boolean, a number other than 0 and NaN, a non-empty string.

A value of another type (or a string that is not XML, for XPATH) fails the
test; an absent attribute makes it unknown, as a comparison (JMS). Each
pattern is checked when a subscription arrives (`pattern_problem`), and each
compiled form is cached by its text.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any

import re2
from lxml import etree

PATTERN_OPS = ("matches", "topic", "has", "xpath")
KEYWORDS = {op: op.upper() for op in PATTERN_OPS}  # as `where` writes them
MAX_PATTERN_BYTES = 4096
"""The longest pattern of any kind, in bytes of UTF-8."""
MAX_TOPIC_LEVELS = 128

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # (a refused pattern is reported as a dead letter)
_XML_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
_PROBE = etree.fromstring(b"<tsm/>")  # a document to run a new XPath on once
_CACHE = 65536  # compiled patterns and parsed documents kept, each


def pattern_problem(op: str, pattern: Any) -> str | None:
    """Why `pattern` is no pattern for `op` (None if it is one), naming the position."""
    if not isinstance(pattern, str):
        return None  # (the caller says that a string is needed)
    size = len(pattern.encode("utf-8", "surrogatepass"))
    if size > MAX_PATTERN_BYTES:
        return f"the {op.upper()} pattern is {size} bytes, over the limit of {MAX_PATTERN_BYTES}"
    if op == "matches":
        return _regex_problem(pattern)
    if op == "topic":
        return topic_problem(pattern)
    if op == "has":
        return None if pattern else "HAS needs a tag ('k=v', 'k=*' or 'k'), got ''"
    return _xpath_problem(pattern)


# -- MATCHES ----------------------------------------------------------------------


@functools.lru_cache(maxsize=_CACHE)
def regex(pattern: str) -> Any:
    """The compiled RE2 form of a pattern (raises `re2.error`)."""
    return re2.compile(pattern, _RE2_OPTIONS)


def _regex_problem(pattern: str) -> str | None:
    try:
        regex(pattern)
    except re2.error as error:
        reason = error.args[0]
        reason = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        what, _, fragment = reason.partition(": ")
        at = pattern.find(fragment) if fragment else -1
        where = f" at character {at + 1} of the pattern" if at >= 0 else ""
        return f"invalid regular expression (RE2 syntax){where}: {what}: {fragment!r}"
    return None


# -- TOPIC ------------------------------------------------------------------------


def topic_problem(pattern: str) -> str | None:
    """Why a topic filter is not a valid MQTT filter, naming the level."""
    levels = pattern.split("/")
    if len(levels) > MAX_TOPIC_LEVELS:
        return f"the topic filter has {len(levels)} levels, over the limit of {MAX_TOPIC_LEVELS}"
    at = 1
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            return (
                f"unbalanced topic filter at character {at + level.index('#')}: "
                "'#' must be a whole level and the last one ('a/#')"
            )
        if "+" in level and level != "+":
            return (
                f"unbalanced topic filter at character {at + level.index('+')}: "
                "'+' must be a whole level ('a/+/c')"
            )
        at += len(level) + 1
    return None


@functools.lru_cache(maxsize=_CACHE)
def topic_levels(pattern: str) -> tuple[str, ...]:
    """A topic filter's levels."""
    return tuple(pattern.split("/"))


def topic_matches(levels: tuple[str, ...], topic: str) -> bool:
    """Does the topic filter (its levels) match the topic name? O(levels)."""
    names = topic.split("/")
    if levels[0] in ("+", "#") and names[0].startswith("$"):
        return False
    for i, level in enumerate(levels):
        if level == "#":
            return True
        if i >= len(names) or (level != "+" and level != names[i]):
            return False
    return len(names) == len(levels)


def topic_covers(wide: tuple[str, ...], narrow: tuple[str, ...]) -> bool:
    """Does every topic that `narrow` matches also match `wide` (exact)? O(levels)."""
    if wide[0] in ("+", "#") and narrow[0] not in ("+", "#") and narrow[0].startswith("$"):
        return False
    for i, level in enumerate(wide):
        if level == "#":
            return True
        if i >= len(narrow):
            return False
        theirs = narrow[i]
        if theirs == "#":  # (at the first level, `+/#` is `#`: a topic has a level)
            return i == 0 and level == "+" and wide[1:] == ("#",)
        if level != "+" and (theirs == "+" or theirs != level):
            return False
    return len(narrow) == len(wide)


# -- HAS --------------------------------------------------------------------------


def tag_key(pattern: str) -> str | None:
    """The key of a `k=*` pattern (any value of tag `k`); None for an exact tag."""
    return pattern[:-2] if pattern.endswith("=*") else None


def has_tag(pattern: str, tags: frozenset[str]) -> bool:
    """Does the tag set hold the pattern's tag? O(1) for an exact tag, O(tags) for `k=*`."""
    key = tag_key(pattern)
    if key is None:
        return pattern in tags
    return any(t.startswith(key) and t[len(key) : len(key) + 1] == "=" for t in tags)


# -- XPATH ------------------------------------------------------------------------


@functools.lru_cache(maxsize=_CACHE)
def xpath(pattern: str) -> etree.XPath:
    """The compiled XPath (raises `etree.XPathError`)."""
    return etree.XPath(pattern)


def _xpath_problem(pattern: str) -> str | None:
    try:
        compiled = xpath(pattern)
        compiled(_PROBE)  # unknown functions and variables show only when run
    except etree.XPathSyntaxError as error:
        column = max((entry.column for entry in error.error_log), default=0)
        where = f" at character {column}" if column else ""
        return f"XPath syntax error{where}: {error}"
    except etree.XPathError as error:
        return f"XPath error: {error} (XPath 1.0 functions only, no variables)"
    return None


def looks_like_xml(value: str) -> bool:
    """A string value that is meant as an XML document: it starts with '<'."""
    return value.lstrip()[:1] == "<"


def xml_problem(value: str) -> str | None:
    """Why an XML document does not parse, with its line and column."""
    try:
        document(value)
    except etree.XMLSyntaxError as error:
        line, column = error.position
        reason = re.sub(r", line \d+, column \d+$", "", error.msg)
        return f"XML does not parse at line {line}, column {column}: {reason}"
    return None


@functools.lru_cache(maxsize=1024)
def document(value: str) -> Any:
    """The parsed XML document of a string (raises `etree.XMLSyntaxError`)."""
    return etree.fromstring(value.encode("utf-8", "surrogatepass"), _XML_PARSER)


def xpath_true(pattern: str, root: Any) -> bool:
    """XPath 1.0's boolean() of the expression's value on a parsed document
    (False where running it fails: a pattern checked when it arrived runs on
    any document, but a failure must never stop the matcher)."""
    try:
        result = xpath(pattern)(root)
    except etree.XPathError:
        return False
    if isinstance(result, list):
        return bool(result)
    if isinstance(result, float):
        return result != 0 and not math.isnan(result)
    return bool(result)


def xpath_holds(pattern: str, value: str) -> bool:
    """The XPATH test on a string: False where it is not an XML document."""
    if not looks_like_xml(value):
        return False
    try:
        root = document(value)
    except etree.XMLSyntaxError:
        return False
    return xpath_true(pattern, root)


# -- the test ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PatternTest:
    """`attr op 'pattern'`, or JMS's NOT over it: a residual test of a
    `Conjunction` (as `matcher.expressions.Computed`), hashable by content."""

    attr: str
    op: str
    pattern: str
    negate: bool = False

    def holds(self, value: Any) -> bool:
        """The test itself (not negated) on a present value. O(value) for
        MATCHES, O(levels) for TOPIC, O(1) or O(tags) for HAS, one XPath run."""
        op = self.op
        if op == "has":
            return isinstance(value, frozenset) and has_tag(self.pattern, value)
        if not isinstance(value, str):
            return False
        if op == "matches":
            return regex(self.pattern).search(value) is not None
        if op == "topic":
            return topic_matches(topic_levels(self.pattern), value)
        return xpath_holds(self.pattern, value)

    def truths(self, attrs: dict[str, Any]) -> frozenset:
        """The truth values the test takes on a profile: None (unknown) where
        the attribute is absent. (A pattern's value is a point.)"""
        if self.attr not in attrs:
            return _UNKNOWN
        return _TRUTH[self.holds(attrs[self.attr]) != self.negate]

    def covers_test(self, other: PatternTest) -> bool:
        """Does every value `other` passes pass this test too? Exact between
        topic filters; otherwise only where the tests are equal."""
        if self == other:
            return True
        return (
            self.op == other.op == "topic"
            and self.attr == other.attr
            and not self.negate
            and not other.negate
            and topic_covers(topic_levels(self.pattern), topic_levels(other.pattern))
        )

    def describe(self) -> str:
        name = '"' + self.attr.replace('"', '""') + '"'
        text = f"{name} {KEYWORDS[self.op]} '" + self.pattern.replace("'", "''") + "'"
        return f"NOT ({text})" if self.negate else text


_UNKNOWN = frozenset([None])
_TRUTH = {True: frozenset([True]), False: frozenset([False])}
