"""The forest's tuning: thresholds that choose between ways of doing the
same work (one matrix or pair by pair, a scan or an index, now or later).

None of them changes an answer; each changes only what a path costs, and
the measurements behind them are in `docs/DESIGN.md` ("Measurements behind
the forest's design"). The code reads them as `tuning.NAME` at each use, so
that tests can shrink them (`tests/layouts.py`) and make a handful of
entries take every path a large set takes.
"""

# -- which lists are scanned how (matcher.forest.covering_tree, .descent) --
WIDE = 32  # a child list this long keeps its bounds contiguous (a `WideList`) and
# is tested by broadcasting a (query × child) matrix ...
BROADCAST_CELLS = 4096  # ... if that matrix has at least this many cells
CHUNK = 1 << 18  # (query × child) matrix cells tested at once (they stay in cache)
SPARSE = 32  # a matrix under 1/SPARSE true: the rest of its columns are tested pair
# by pair on the survivors (a pair costs a few gathers a column, as much as a few
# dozen cells of a matrix)
FEW = 4096  # boxes tested against one box in one matrix op; more, column by column,
# each column on the survivors of the one before ...
FEW_GATHERED = 256  # ... and from this many when the boxes are gathered by position
# (a wide list's candidate blocks): only the survivors of a column are gathered for
# the next, not every column of every candidate

# -- sorted blocks of a wide list (matcher.forest.wide_list) --
BLOCKED = 4096  # a child list this long is also indexed by sorted blocks (and a
# filter batch against this many boxes is chunked by sets of constrained columns)
BLOCK = 512  # children per block
BIT_ROWS = 32  # bit rows a column's side in a block's bit index (`block_bits`): more
# prune more of a met block's boxes before their bounds are read, at BIT_ROWS bits a box
BIT_DENSE = 8  # a (query, block) pair with more than 1/BIT_DENSE of the block's bits
# left after its rows is tested as a tensor (`meeting_in_blocks`), not bit by bit ...
BIT_SAMPLE = 256  # ... and all of a list's pairs are, without their rows, where a
BIT_DENSE_SAMPLE = 16  # sample of this many pairs' rows leave over 1/this of their blocks
SETTLED = 16384  # a child list this long is kept in blocks by inserts too
RUN = 8  # an insert sorts the unsorted tail into a run of blocks this long
RATIO = 4  # a run is merged into the one before it while that is under RATIO times as long
SCAN_SHARE = 2  # blocks are read one by one only if the queries meet under 1/SCAN_SHARE
# of them; else one scan of the whole list costs less
FINITE_SHARE = 0.9  # blocks sort on the columns finite on this share of the boxes

# -- sorted columns of a list of points (matcher.forest.point_columns) --
POINT_SHARE = 8  # a filter whose narrowest column range holds under 1/POINT_SHARE of a
# point list's boxes tests only those, not the whole list
