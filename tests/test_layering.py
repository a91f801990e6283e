"""The layering of the code base: `matcher/` is pure and its imports go one way."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = ("streaming", "connectors", "benchmarks", "pyspark", "confluent_kafka", "pandas")


def _imports(path: Path) -> set[str]:
    """Every module a file imports, wherever the import stands (functions and
    `TYPE_CHECKING` blocks too: a cycle hidden in them is still a cycle)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def _matcher_graph() -> dict[str, set[str]]:
    modules = {f"matcher.{p.stem}": p for p in (ROOT / "matcher").glob("*.py")}
    return {name: _imports(path) for name, path in modules.items()}


def test_matcher_imports_have_no_cycle():
    graph = _matcher_graph()
    inner = {name: {m for m in deps if m in graph} for name, deps in graph.items()}
    try:
        order = list(TopologicalSorter(inner).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle in matcher/: {' -> '.join(exc.args[1])}") from None
    assert set(order) == set(graph)


def test_matcher_imports_nothing_above_it():
    for name, deps in _matcher_graph().items():
        above = sorted(d for d in deps if d.split(".")[0] in OUTSIDE)
        assert not above, f"{name} imports {above}"


def test_snapshots_naming_held_in_the_engine_still_load(monkeypatch):
    """`matcher.engine.Held`, the name that existing checkpoints' snapshots carry, loads."""
    import pickle

    from matcher.held import Held

    monkeypatch.setattr(Held, "__module__", "matcher.engine")
    blob = pickle.dumps(Held(None, "v1", 3))  # (as such a snapshot writes it)
    monkeypatch.undo()
    assert b"matcher.engine" in blob
    assert pickle.loads(blob) == Held(None, "v1", 3)
