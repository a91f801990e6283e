"""Preloading (the thesis's ch. 7): precomputed answers for regions of a space.

A grid over the numeric attributes that a space's subscriptions constrain
most; each filled cell keeps the subscriptions that can match a profile
inside it, sorted so that a point or small profile is answered by a few
binary searches and runs of precomputed entries, at a cost that grows with
the answer and not with the number of subscriptions held.

| module | job |
|---|---|
| `preloader` | a space's grid, cells, index (beside its `DoubleForest`, unpickled), counts |
| `grid` | `Grid`: cells over the chosen columns, the cell of a box; `choose` the columns |
| `subscription_cells` | `SubscriptionCells`: the filled cells, their change log, their queries |
| `cell_pool` | `CellPool`: every cell's members in one set of arrays, a region each |
| `segments` | binary search in many sorted segments of one array at once |
| `equality_index` | `EqualityIndex`: nodes by required value or range, for points (no grid) |
| `path_costs` | `PathCosts`: the forest or the cells (or index) for a batch, by measured cost |
| `settings` | `PreloadSettings`: the memory budget per space, the attributes, thresholds |
"""
