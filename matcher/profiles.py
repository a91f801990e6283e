"""Profiles: subspaces of a content space (points and closed intervals)."""

from __future__ import annotations

import math
from typing import Any

from matcher.engines.patterns import looks_like_xml, xml_problem
from matcher.errors import RecordError

MAX_PROFILE_ATTRIBUTES = 256
MAX_TAGS = 1024  # the tags of one tag set


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"attribute {name!r}: interval ends must be numbers, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise RecordError(f"attribute {name!r}: {value!r} is not a finite number")
    return number


def normalize_value(name: str, value: Any) -> Any:
    """A profile value as stored: numbers become closed intervals `(lo, hi)`, a
    list of strings a tag set (a frozenset). A string that starts with '<' is an
    XML document and must parse (XPATH tests read it)."""
    if isinstance(value, str):
        if looks_like_xml(value):
            problem = xml_problem(value)
            if problem:
                raise RecordError(f"attribute {name!r}: {problem}")
        return value
    if isinstance(value, bool):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        if len(value) > MAX_TAGS:
            raise RecordError(f"attribute {name!r}: {len(value)} tags, over the limit {MAX_TAGS}")
        return frozenset(value)
    if isinstance(value, int | float):
        n = _number(name, value)
        return (n, n)
    if isinstance(value, list | tuple) and len(value) == 2:
        lo, hi = _number(name, value[0]), _number(name, value[1])
        if lo > hi:
            raise RecordError(f"attribute {name!r}: interval [{value[0]}, {value[1]}] has lo > hi")
        return (lo, hi)
    raise RecordError(
        f"attribute {name!r}: expected a number, [lo, hi], a string, a boolean "
        f"or a list of strings (tags), got {value!r}"
    )


class Profile:
    """The attribute values of a profile, hashable by content.

    Equal profiles are the same box, so they share one profile-forest node.
    """

    __slots__ = ("attrs", "_key", "_hash")

    def __init__(self, attrs: dict[str, Any]):
        if len(attrs) > MAX_PROFILE_ATTRIBUTES:
            raise RecordError(
                f"profile has {len(attrs)} attributes; the limit is {MAX_PROFILE_ATTRIBUTES}"
            )
        self.attrs = {name: normalize_value(name, v) for name, v in sorted(attrs.items())}
        self._key = tuple((name, type(v).__name__, v) for name, v in self.attrs.items())
        self._hash = hash(self._key)

    @classmethod
    def from_normalized(cls, attrs: dict[str, Any]) -> Profile:
        """The profile of another one's `attrs` (sorted, normalized), not checked again."""
        profile = cls.__new__(cls)
        profile.attrs = attrs
        profile._key = tuple((name, type(v).__name__, v) for name, v in attrs.items())
        profile._hash = hash(profile._key)
        return profile

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Profile) and self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Profile({self.attrs!r})"

    def to_json(self) -> dict[str, Any]:
        """The attributes as written in a record (points stay points)."""
        return {n: _written(v) for n, v in self.attrs.items()}

    def covers(self, other: Profile) -> bool:
        """Same attribute set, and this profile contains the other on each (§2)."""
        if self.attrs.keys() != other.attrs.keys():
            return False
        for name, mine in self.attrs.items():
            theirs = other.attrs[name]
            if isinstance(mine, tuple) and isinstance(theirs, tuple):
                if not (mine[0] <= theirs[0] and theirs[1] <= mine[1]):
                    return False
            elif type(mine) is not type(theirs) or mine != theirs:
                return False
        return True


def _written(v: Any) -> Any:
    if isinstance(v, tuple):
        return list(v) if v[0] != v[1] else _plain(v[0])
    if isinstance(v, frozenset):
        return sorted(v)
    return v


def _plain(x: float) -> int | float:
    return int(x) if x.is_integer() and abs(x) < 2**53 else x
