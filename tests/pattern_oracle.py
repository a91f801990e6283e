"""The pattern tests of docs/SELECTORS.md from their definitions, for the oracles.

Nothing here uses `matcher`: MATCHES is Python's `re.search` (the generated
patterns are in the subset where RE2 and `re` agree), TOPIC the MQTT 3.1.1
rules (§4.7) written as a recursion over levels, HAS a scan of the tag set,
XPATH lxml's XPath on the parsed document and XPath 1.0's boolean().
"""

from __future__ import annotations

import math
import re
from typing import Any

from lxml import etree


def regex_holds(pattern: str, value: Any) -> bool:
    return isinstance(value, str) and re.search(pattern, value) is not None


def topic_holds(topic_filter: str, value: Any) -> bool:
    """MQTT: `+` one level, `#` (last) this level's parent and everything below;
    no filter starting with a wildcard matches a topic starting with `$`."""
    if not isinstance(value, str):
        return False
    levels, names = topic_filter.split("/"), value.split("/")
    if levels[0] in ("+", "#") and value.startswith("$"):
        return False

    def match(fs: list[str], ns: list[str]) -> bool:
        if not fs:
            return not ns
        if fs[0] == "#":
            return True
        if not ns:
            return False
        return fs[0] in ("+", ns[0]) and match(fs[1:], ns[1:])

    return match(levels, names)


def tag_holds(pattern: str, value: Any) -> bool:
    """`k=*`: some tag `k=<anything>`; otherwise the tag itself."""
    if not isinstance(value, frozenset):
        return False
    if pattern.endswith("=*"):
        key = pattern[:-2]
        return any(t.split("=", 1)[0] == key and "=" in t for t in value)
    return pattern in value


def xpath_holds(expression: str, value: Any) -> bool:
    if not isinstance(value, str) or not value.lstrip().startswith("<"):
        return False
    try:
        root = etree.fromstring(value.encode())
    except etree.XMLSyntaxError:
        return False
    result = root.xpath(expression)
    if isinstance(result, list):
        return len(result) > 0
    if isinstance(result, float):
        return not math.isnan(result) and result != 0
    return bool(result)


HOLDS = {"matches": regex_holds, "topic": topic_holds, "has": tag_holds, "xpath": xpath_holds}


def holds(op: str, pattern: str, value: Any) -> bool:
    """The test (not negated) on a present value."""
    return HOLDS[op](pattern, value)


# -- pools the strategies draw from -------------------------------------------------------

REGEXES = ("a", "^a", "b$", "a.b", "[ab]+c", "(a|b)c", "^$", "a*", r"\d", "^(ab)+$", "a{2}", "[^a]")
TOPIC_FILTERS = (
    "#", "+", "a", "a/#", "a/+", "a/b", "+/b", "$s/#", "+/+/c", "a/+/c/#", "/#", "a/b/c", "+/#",
)  # fmt: skip
TOPICS = ("a", "a/b", "a/b/c", "$s/x", "b", "/a", "a//c", "a/b/c/d", "x/b", "$s", "a/x/c")
TAGS = ("k=1", "k=2", "j=1", "x", "k=", "j")
TAG_PATTERNS = ("k=1", "k=*", "x", "j=*", "k=", "j=1", "z")
DOCS = (
    '<a><b c="1"/></a>',
    "<a/>",
    "<m><d><p>2</p></d><d><p>0.5</p></d></m>",
    '<a><b c="2"/><b/></a>',
    "not xml",
)
XPATHS = (
    "/a",
    "/a/b",
    '/a/b[@c="1"]',
    "/m/d[p > 1]",
    "count(//b)",
    "/a/@x",
    "//p",
    "/m/d/p",
    "/a/b[2]",
    "string(/m)",
    "/a | /m",
)
