"""The delivery fields of a subscription (docs/DELIVERY.md §1), decoded and checked.

`options_of(obj)` reads them from a subscribe record's JSON object: an
`Options`, or None when the record has none of them; a broken rule raises
`RecordError` with a sentence a person can act on. `Options.to_json()` writes
them back in canonical form for `matcher.records.to_state`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from matcher.errors import RecordError

MODES = ("anycast", "manycast", "faircast", "bestcast")
MAX_DWELL_MS = 366 * 24 * 3600 * 1000
MAX_NEAR_ATTRIBUTES = 16
MAX_GROUP_CHARS = 1024
FIELDS = ("delivery", "dwell_ms", "exit_dwell_ms", "margin")


@dataclass(frozen=True, slots=True)
class Options:
    """A subscription's delivery fields. `margin` is None (no margin), one number for
    every numeric attribute, or `(attribute, margin)` pairs sorted by attribute."""

    group: str | None = None
    mode: str | None = None
    k: int = 1
    near: tuple[tuple[str, float], ...] = ()
    dwell_ms: int = 0
    exit_dwell_ms: int = 0
    margin: float | tuple[tuple[str, float], ...] | None = None

    @property
    def policy(self) -> tuple[str | None, int, tuple[str, ...]]:
        """What every member of a group must agree on: mode, k, `near`'s attributes."""
        return (self.mode, self.k, tuple(name for name, _ in self.near))

    def margin_of(self, attribute: str) -> float:
        """The margin on one attribute (0 where there is none)."""
        if self.margin is None:
            return 0.0
        if isinstance(self.margin, float):
            return self.margin
        return dict(self.margin).get(attribute, 0.0)

    def to_json(self) -> dict[str, Any]:
        """The fields as a subscribe record writes them, canonical (defaults left out)."""
        out: dict[str, Any] = {}
        if self.group is not None:
            delivery: dict[str, Any] = {"group": self.group, "mode": self.mode, "k": self.k}
            if self.near:
                delivery["near"] = dict(self.near)
            out["delivery"] = delivery
        if self.dwell_ms:
            out["dwell_ms"] = self.dwell_ms
        if self.exit_dwell_ms:
            out["exit_dwell_ms"] = self.exit_dwell_ms
        if self.margin is not None:
            out["margin"] = self.margin if isinstance(self.margin, float) else dict(self.margin)
        return out


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RecordError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def _duration(obj: dict, name: str) -> int:
    value = obj.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"'{name}' must be whole milliseconds, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise RecordError(f"'{name}' must be whole milliseconds, got {value!r}")
    if not 0 <= value <= MAX_DWELL_MS:
        raise RecordError(f"'{name}' must be from 0 to {MAX_DWELL_MS} ms (366 days), not {value!r}")
    return int(value)


def _margin(value: Any) -> float | tuple[tuple[str, float], ...] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        if not value:
            raise RecordError("'margin' as an object needs at least one attribute")
        pairs = []
        for name, m in sorted(value.items()):
            m = _number(m, f"'margin' of {name!r}")
            if m < 0:
                raise RecordError(f"'margin' of {name!r} must be at least 0, got {m!r}")
            pairs.append((name, m))
        return tuple(pairs)
    m = _number(value, "'margin'")
    if m < 0:
        raise RecordError(f"'margin' must be at least 0, got {value!r}")
    return m


def _delivery(value: Any) -> tuple[str, str, int, tuple[tuple[str, float], ...]]:
    if not isinstance(value, dict):
        raise RecordError(f"'delivery' must be an object with 'group' and 'mode', got {value!r}")
    unknown = sorted(set(value) - {"group", "mode", "k", "near"})
    if unknown:
        raise RecordError(f"'delivery' has unknown fields {unknown}: use group, mode, k, near")
    group = value.get("group")
    if not isinstance(group, str) or not group or len(group) > MAX_GROUP_CHARS:
        raise RecordError(
            f"'delivery.group' must be a non-empty string of at most {MAX_GROUP_CHARS} "
            f"characters, got {group!r}"
        )
    mode = value.get("mode")
    if mode not in MODES:
        raise RecordError(f"'delivery.mode' must be one of {', '.join(MODES)}, got {mode!r}")
    k = value.get("k")
    if k is None:
        if mode != "anycast":
            raise RecordError(f"'delivery.k' is required for {mode}: how many members receive")
        k = 1
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise RecordError(f"'delivery.k' must be an integer of at least 1, got {k!r}")
    if mode == "anycast" and k != 1:
        raise RecordError(f"anycast delivers to one member: 'delivery.k' must be 1, got {k}")
    near = value.get("near")
    if mode != "bestcast":
        if near is not None:
            raise RecordError(f"'delivery.near' is for bestcast only, not {mode}")
        return group, mode, k, ()
    if not isinstance(near, dict) or not 1 <= len(near) <= MAX_NEAR_ATTRIBUTES:
        raise RecordError(
            "bestcast needs 'delivery.near': an object of 1 to "
            f"{MAX_NEAR_ATTRIBUTES} attributes, each a number (the member's position)"
        )
    pairs = tuple(
        (name, _number(x, f"'delivery.near' of {name!r}")) for name, x in sorted(near.items())
    )
    return group, mode, k, pairs


def options_of(obj: dict[str, Any], relation: str) -> Options | None:
    """The delivery fields of a subscribe record's object, or None if it has none."""
    if all(obj.get(name) is None for name in FIELDS):
        return None
    group = mode = None
    k, near = 1, ()
    if obj.get("delivery") is not None:
        group, mode, k, near = _delivery(obj["delivery"])
    margin = _margin(obj.get("margin"))
    if margin is not None and relation != "overlaps":
        raise RecordError("'margin' needs relation 'overlaps' (a covers pair has no margin)")
    options = Options(
        group, mode, k, near, _duration(obj, "dwell_ms"), _duration(obj, "exit_dwell_ms"), margin
    )
    return None if options == Options() else options


def disagreement(options: Options, theirs: Options) -> str | None:
    """Why a subscribe's delivery `options` are refused where a held member of its
    group has `theirs` (§1: members agree on mode, k and `near`'s attributes), or None."""
    if theirs.policy == options.policy:
        return None
    mode, k, near = theirs.policy
    named = f", near on {list(near)}" if near else ""
    return (
        f"delivery disagrees with group {options.group!r}, whose members have "
        f"mode {mode}, k {k}{named}: every member of a group must agree (or name "
        "another group)"
    )
