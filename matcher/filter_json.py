"""The JSON `filter` form (SEMANTICS §6) to the same disjunctive normal form as `where`.

The input is already a list of conjunctions, so the work is validation: every
error names the position (`filter[1][0]: ...`) because the message is all a
subscriber sees in the dead-letter topic. Values are checked by
`matcher.normal_form.value_problem`, so both forms accept exactly the same atoms.
"""

from __future__ import annotations

from typing import Any

from matcher.constraints import MAX_ATTRIBUTES, MAX_CONJUNCTIONS, OPS, Atom
from matcher.errors import FilterError
from matcher.normal_form import normalize, value_problem

_KEYS = frozenset(("attr", "op", "value"))
_OPS_HELP = ", ".join(sorted(OPS))


def parse_filter(obj: Any) -> list[list[Atom]]:
    """Validate a JSON filter (a list of lists of constraint objects) into atoms.

    `[]` matches nothing and `[[]]` everything, as for `where`.
    """
    if not isinstance(obj, list):
        raise FilterError(
            f"filter must be a list of conjunctions (lists of constraints), got {_kind(obj)}"
        )
    if len(obj) > MAX_CONJUNCTIONS:
        raise FilterError(
            f"filter has {len(obj)} conjunctions, over the limit of {MAX_CONJUNCTIONS}"
        )
    attrs: set[str] = set()
    dnf = []
    for i, conjunction in enumerate(obj):
        if not isinstance(conjunction, list):
            raise FilterError(
                f"filter[{i}]: a conjunction must be a list of constraints, "
                f"got {_kind(conjunction)} (the filter is a list of conjunctions)"
            )
        atoms = []
        for j, item in enumerate(conjunction):
            atom = _atom(item, f"filter[{i}][{j}]")
            attrs.add(atom.attr)
            if len(attrs) > MAX_ATTRIBUTES:
                raise FilterError(
                    f"filter[{i}][{j}]: more than {MAX_ATTRIBUTES} distinct attributes (the limit)"
                )
            atoms.append(atom)
        dnf.append(atoms)
    return normalize(dnf)


def _atom(item: Any, where: str) -> Atom:
    if not isinstance(item, dict):
        raise FilterError(
            f'{where}: a constraint must be an object {{"attr": ..., "op": ..., "value": ...}}, '
            f"got {_kind(item)}"
        )
    unknown = sorted(str(key) for key in item.keys() - _KEYS)
    if unknown:
        raise FilterError(f"{where}: unknown key {unknown[0]!r}: expected attr, op and value")
    attr = item.get("attr")
    if not isinstance(attr, str) or not attr:
        raise FilterError(f"{where}: 'attr' must be a non-empty string, got {_kind(attr)}")
    op = item.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise FilterError(f"{where}: unknown op {op!r}: expected one of {_OPS_HELP}")
    if op != "exists" and "value" not in item:
        raise FilterError(f"{where}: {op!r} needs a 'value'")
    value = item.get("value")
    problem = value_problem(op, value)
    if problem:
        raise FilterError(f"{where}: {problem}")
    # Lists become tuples: atoms are hashable and `between`/`in` values are tuples.
    return Atom(attr, op, tuple(value) if isinstance(value, list) else value)


def _kind(value: Any) -> str:
    """Name a wrong value by its JSON type, as the sender wrote it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string" if value else "an empty string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
