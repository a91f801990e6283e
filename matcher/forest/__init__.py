"""One covering forest (SEMANTICS §7), matched a whole batch of queries at a time.

| module | job |
|---|---|
| `covering_tree` | `Forest`: nodes ordered by covering; insert, splice-delete, subtree bounds |
| `list_store` | `ListStore`: every node's children (or entries) in one array, gathered at once |
"""

from matcher.forest.covering_tree import ROOT, Forest

__all__ = ["ROOT", "Forest"]
