"""One covering forest (SEMANTICS §7), matched a whole batch of queries at a time.

| module | job |
|---|---|
| `covering_tree` | `Forest`: nodes ordered by covering; insert, splice-delete, subtree bounds |
| `descent` | a batch of query boxes walked down a `Forest`, level by level |
| `box_kernels` | vector tests of query boxes against lists of boxes (meet, contain) |
| `wide_list` | `WideList`: a wide child list's bounds, contiguous, and its sorted blocks |
| `block_bits` | `BlockBits`: bit rows that prune the boxes of a wide list's met blocks |
| `point_columns` | `PointColumns`: a list of point boxes' columns, each sorted |
| `list_store` | `ListStore`: every node's children (or entries) in one array, gathered at once |
| `tuning` | the thresholds that choose between equivalent paths |
| `arrays` | the array types the functions above take |
"""

from matcher.forest.covering_tree import ROOT, Forest

__all__ = ["ROOT", "Forest"]
