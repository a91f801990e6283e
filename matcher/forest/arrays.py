"""The array types the forest's functions take and return.

Boxes are column-major: one row of lows (or highs) per column, one cell per
box, so that a test of many boxes on one column reads one contiguous row.
"""

import numpy as np
import numpy.typing as npt

Bounds = npt.NDArray[np.float64]  # (columns × boxes) lows, or highs; or one box's (columns,)
Ids = npt.NDArray[np.integer]  # positions, node ids, entry ids or query indices
Mask = npt.NDArray[np.bool_]
