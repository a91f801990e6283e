"""The grid of preloaded regions: the numeric columns it lies over, and its cells.

Cell `i` of a column is `[origin + i·width, origin + (i+1)·width)`; a cell of
the grid is one such range per grid column, widened by the column's margin on
both sides (a *loose* cell), so that a small profile lies inside the loose
cell of the cell that holds its centre. A profile wider than twice a margin,
or without one of the grid's attributes, has no cell (the forest answers it).
Cells are named by an int64 key: the cell index of each column, 21 bits each.

The grid is chosen from the live subscriptions and the held profiles
(`choose`): the columns that most subscriptions constrain narrowly, relative
to the spread of the profiles' values, so that few subscriptions meet a cell.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from matcher.boxes import Dims
from matcher.constraints import NUM
from matcher.forest.arrays import Bounds, Ids, Mask

KEY_BITS = 21  # bits of a cell index in a key (so at most 3 columns)
INDEX_LIMIT = 1 << (KEY_BITS - 1)  # cell indices lie in (-INDEX_LIMIT, INDEX_LIMIT)
MAX_COLUMNS = 2  # grid columns: more multiplies the cells a region needs
PRESENT_SHARE = 0.5  # a column the profiles have at least this often
MARGIN_SHARE = 0.25  # margins at most this share of the median constrained width
CELL_SHARE = 0.25  # a cell is this share of the median constrained width wide ...
MAX_CELLS = 1 << 14  # ... unless the profiles' spread then needs more cells than this
MAX_CANDIDATE_SHARE = 0.3  # a grid whose cell meets more of the entries is not worth it
SORTED_SHARE = 0.5  # ... nor one where fewer entries than this constrain only its
# columns and one value of another (the others are tested in full)
FIT_SHARE = 0.75  # every cell filled holds at most this share of the budget ...
WIDEN = 1.25  # ... cells widened by this factor a step until it does
WIDEN_STEPS = 16


@dataclass(frozen=True, eq=False)
class Grid:
    """Cells over `columns` (of the subscription dims): per column its origin,
    cell width and margin, arrays of one cell per column."""

    columns: Ids
    origin: np.ndarray
    width: np.ndarray
    margin: np.ndarray

    def keys(self, lo: Bounds, hi: Bounds) -> tuple[Ids, Mask]:
        """The key of the cell that holds each query box's centre, and whether the
        box may lie inside that loose cell (it has every grid attribute and fits the
        margins; the caller checks the cell's own bounds, computed by `bounds`).
        (columns × queries) in. O(queries × grid columns)."""
        glo, ghi = lo[self.columns], hi[self.columns]
        fits = (glo <= ghi).all(axis=0)  # (a missing attribute is [inf, -inf])
        with np.errstate(invalid="ignore", over="ignore"):
            fits &= ((ghi - glo) <= 2 * self.margin[:, None]).all(axis=0)
            index = np.floor(((glo + ghi) * 0.5 - self.origin[:, None]) / self.width[:, None])
            fits &= (np.abs(index) < INDEX_LIMIT - 1).all(axis=0)
        index = np.where(fits, index, 0).astype(np.int64) + INDEX_LIMIT
        key = index[0].copy()
        for c in range(1, len(self.columns)):
            key |= index[c] << (KEY_BITS * c)
        return key, fits

    def bounds(self, keys: Ids) -> tuple[Bounds, Bounds]:
        """The loose cells of `keys`, (grid columns × cells). O(cells × grid columns)."""
        keys = np.asarray(keys, dtype=np.int64)
        shifts = KEY_BITS * np.arange(len(self.columns), dtype=np.int64)
        index = ((keys[None, :] >> shifts[:, None]) & ((1 << KEY_BITS) - 1)) - INDEX_LIMIT
        start = self.origin[:, None] + index * self.width[:, None]
        return start - self.margin[:, None], start + self.width[:, None] + self.margin[:, None]


def choose(
    dims: Dims,
    node_lo: Bounds,
    node_hi: Bounds,
    weights: np.ndarray,
    profile_lo: Bounds,
    profile_hi: Bounds,
    named: tuple[str, ...] = (),
    exact: np.ndarray | None = None,
    fit: tuple[int, int, int] | None = None,
) -> Grid | None:
    """The grid for subscription boxes `node_lo/hi` (a sample of the forest's
    nodes, each weighing its entries, `exact` where a box is only a necessary
    condition) and profile boxes `profile_lo/hi` (a sample of the held and asked
    profiles), both (dims columns × boxes); None where no numeric column narrows
    the subscriptions enough, or where too few of them would sort into a cell's
    groups (most constrain more than the grid's columns and one value of
    another: each would be tested in full, as a scan does). The `named`
    attributes come first where subscriptions constrain them. O(columns ×
    sample). With `fit` = (live entries, bytes a member takes, budget bytes),
    cells are widened until all of them, filled, would hold about half the
    budget at most (`_members`), so that every region fits, not the hottest only."""
    if not len(weights) or not profile_lo.shape[1]:
        return None
    options = []
    for (attr, kind), col in dims.columns.items():
        if kind != NUM or col >= profile_lo.shape[0] or col >= node_lo.shape[0]:
            continue
        option = _column(col, node_lo[col], node_hi[col], weights, profile_lo[col], profile_hi[col])
        if option is not None:
            rank = named.index(attr) if attr in named else len(named)
            options.append((rank, option[0], col, *option[1:]))
    options.sort()
    chosen = options[:MAX_COLUMNS]
    if not chosen or float(np.prod([o[1] for o in chosen])) > MAX_CANDIDATE_SHARE:
        return None
    _, _, columns, origin, extent, width, margin = map(np.array, zip(*chosen, strict=True))
    if _sorted_share(node_lo, node_hi, weights, columns, exact) < SORTED_SHARE:
        return None
    cells = float(np.prod(np.ceil(extent / width)))
    if cells > MAX_CELLS:
        width = width * (cells / MAX_CELLS) ** (1 / len(width))
    if fit is not None:
        entries, member_bytes, budget = fit
        boxes = (node_lo[columns], node_hi[columns], weights)
        for _ in range(WIDEN_STEPS):
            members = _members(*boxes, origin, extent, width, margin) * entries
            if members * member_bytes <= FIT_SHARE * budget:
                break
            width = width * WIDEN
    return Grid(columns.astype(np.int64), origin, width, margin)


def _members(
    node_lo: Bounds,
    node_hi: Bounds,
    weights: np.ndarray,
    origin: np.ndarray,
    extent: np.ndarray,
    width: np.ndarray,
    margin: np.ndarray,
) -> float:
    """The members per entry that every cell of a grid, filled, would hold: the
    weighted mean over the sampled boxes of the product, over the grid's
    columns, of the cells each box's range meets. O(columns × sample)."""
    count = np.ones(node_lo.shape[1])
    for c in range(len(width)):
        low, high = origin[c], origin[c] + extent[c]
        spread = np.clip(node_hi[c], low, high) - np.clip(node_lo[c], low, high)
        cells = np.ceil(extent[c] / width[c])
        count *= np.minimum(cells, (spread + width[c] + 2 * margin[c]) / width[c])
    return float(np.average(count, weights=weights))


def _column(
    col: int,
    node_lo: np.ndarray,
    node_hi: np.ndarray,
    weights: np.ndarray,
    profile_lo: np.ndarray,
    profile_hi: np.ndarray,
) -> tuple[float, float, float, float, float] | None:
    """(share of entries a loose cell meets, origin, extent, cell width, margin) of
    one column, or None if too few profiles have it or no subscription
    constrains it."""
    present = profile_lo <= profile_hi
    if not present.any() or present.mean() < PRESENT_SHARE:
        return None
    low, high = float(profile_lo[present].min()), float(profile_hi[present].max())
    extent = high - low
    constrained = (node_lo > -np.inf) | (node_hi < np.inf)
    if not (0 < extent < np.inf) or not constrained.any():
        return None
    weight = weights[constrained]
    widths = np.clip(node_hi[constrained], low, high) - np.clip(node_lo[constrained], low, high)
    order = np.argsort(widths)
    median = widths[order][np.searchsorted(np.cumsum(weight[order]), weight.sum() / 2)]
    # every profile fits a loose cell, unless some are wide next to the subscriptions
    margin = float((profile_hi[present] - profile_lo[present]).max()) * 0.5
    margin = min(margin, float(median) * MARGIN_SHARE)
    width = max(float(median) * CELL_SHARE, extent / MAX_CELLS)
    loose = width + 2 * margin
    share = float(weight.sum() / weights.sum())
    meets = float(np.average(np.minimum(1.0, (widths + loose) / extent), weights=weight))
    return (1 - share) + share * meets, low, extent, width, margin


def _sorted_share(
    node_lo: Bounds, node_hi: Bounds, weights: np.ndarray, columns: Ids, exact: np.ndarray | None
) -> float:
    """The weighted share of the sampled boxes that constrain no column but the
    grid's `columns` and, with a single value, the one other column most of
    them constrain that way: those a cell sorts into groups instead of testing
    in full. O(columns × sample)."""
    constrained = (node_lo > -np.inf) | (node_hi < np.inf)
    constrained[columns] = False
    others = constrained.sum(axis=0)
    point = constrained & (node_lo == node_hi)
    ok = others == 0
    single = (others == 1) & point.any(axis=0)
    if single.any():
        column = np.argmax(point, axis=0)
        votes = np.bincount(column[single], weights[single], minlength=len(node_lo))
        ok |= single & (column == int(np.argmax(votes)))
    if exact is not None:
        ok &= ~exact
    return float(weights[ok].sum() / weights.sum())
