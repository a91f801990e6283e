"""Constraints on attributes and the relations between filters and profiles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OPS = frozenset(
    "= != < <= > >= between in prefix suffix contains exists "
    "not_prefix not_suffix not_contains".split()
)

MAX_WHERE_BYTES = 64 * 1024
MAX_ATTRIBUTES = 256
MAX_CONJUNCTIONS = 64


@dataclass(frozen=True, slots=True)
class Atom:
    """One constraint as written: `attr op value`, before normalization."""

    attr: str
    op: str
    value: Any = None
