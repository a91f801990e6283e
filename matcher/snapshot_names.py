"""Where the classes a snapshot pickles have moved, for the snapshot codec.

A snapshot (`streaming.state.codec.dump_snapshot`) pickles a `SpaceMatcher`
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
    ("matcher.forest", "_Mirror"): ("matcher.forest.wide_list", "WideList"),
    ("matcher.forest", "_Points"): ("matcher.forest.point_columns", "PointColumns"),
    ("matcher.blocks", "BlockStore"): ("matcher.forest.list_store", "ListStore"),
}

PICKLED_ATTRIBUTE_RENAMES: dict[tuple[str, str], dict[str, str | None]] = {
    ("matcher.double_forest", "DoubleForest"): {
        "e_sub": "entry_slot",
        "e_covers": "entry_covers",
        "e_from": "entry_from",
        "e_to": "entry_to",
        "p_from": "profile_from",
        "p_to": "profile_to",
    },
    ("matcher.forest.covering_tree", "Forest"): {
        "_wide": "wide_lists",
        "_plan": None,  # (a descent's state, left on the forest after one)
    },
    ("matcher.forest.wide_list", "WideList"): {
        "n": "count",
        "blo": "block_lo",
        "bhi": "block_hi",
        "ilo": "inner_lo",
        "ihi": "inner_hi",
        "nblocks": "block_count",
        "block": "block_size",
        "tried": "sort_tried_at",
        "widened": "widenings",
        "pts": "point_columns",
        "spread": "non_points",
    },
    ("matcher.forest.list_store", "ListStore"): {
        "data": "elements",
        "vals": "values",
        "cap": "capacity",
        "slot": "position",
    },
}
