"""Where the classes a snapshot pickles have moved, for the snapshot codec.

A snapshot (`streaming.state_cache.dump_snapshot`) pickles a `SpaceMatcher`
with its forests, so it names each class by module and name, and each
object's state by attribute name. The codec that loads a snapshot written
before a move finds each class through `PICKLED_RENAMES` and renames the
attributes of its state through `PICKLED_ATTRIBUTE_RENAMES` before the
class's own `__setstate__` (if any) or the default sets them.

- `PICKLED_RENAMES`: (old module, old name) -> (new module, new name).
- `PICKLED_ATTRIBUTE_RENAMES`: (new module, new name) -> {old attribute:
  new attribute, or None for one that is dropped}. For a class with
  `__slots__` the state is the slots' dict of `(None, slots)`; else the
  instance `__dict__`.
"""

PICKLED_RENAMES: dict[tuple[str, str], tuple[str, str]] = {
    ("matcher.forest", "Forest"): ("matcher.forest.covering_tree", "Forest"),
    ("matcher.forest", "_Mirror"): ("matcher.forest.covering_tree", "_Mirror"),
    ("matcher.forest", "_Points"): ("matcher.forest.covering_tree", "_Points"),
    ("matcher.blocks", "BlockStore"): ("matcher.forest.list_store", "ListStore"),
}

PICKLED_ATTRIBUTE_RENAMES: dict[tuple[str, str], dict[str, str | None]] = {
    ("matcher.forest.list_store", "ListStore"): {
        "data": "elements",
        "vals": "values",
        "cap": "capacity",
        "slot": "position",
    },
}
