"""Bit rows that say, for a bound a query may have, which boxes of a block
can meet it: a met block's boxes pruned by words of 64 boxes, not cell by cell.

Each column's bounds are cut at ROWS - 1 edges (quantiles of the list's
finite lows, and of its highs). For a block, row j of a column's low side has
the bit of every box whose low is at most the j-th edge (the last row: every
box); row k of its high side, of every box whose high is at least the edge
below k (row 0: every box). A query's high falls at or under the edge of its
low-side row, and its low at or over the edge of its high-side row, so the AND
of its rows, over the columns tested, holds every box of the block the query
meets, and a few more (those whose bound lies between the query's and the
edge): those bits are then tested on the bounds themselves, pair by pair. The
rows are conservative, never exact on their own: an answer is only ever what
the bounds say.

Bits are packed little-endian by byte (`np.packbits(..., bitorder="little")`),
a block's in `words` 64-bit words (its boxes padded to a multiple of 64 with
zeros); the kernel ANDs them as 64-bit words and reads them back as bytes, so
that a bit's position never depends on the machine's byte order.
"""

from __future__ import annotations

import numpy as np

from matcher.forest import tuning
from matcher.forest.arrays import Bounds, Ids
from matcher.forest.box_kernels import meet_on, meeting_in_blocks

LOW, HIGH = 0, 1  # the two sides of a column's rows

# byte value -> its set bits (positions 0-7, in order), and how many
_BIT_COUNT = np.array([bin(v).count("1") for v in range(256)], dtype=np.int64)
_BIT_AT = np.array(
    [[i for i in range(8) if v >> i & 1] + [0] * (8 - bin(v).count("1")) for v in range(256)],
    dtype=np.int64,
)


def _edges(values: Bounds, rows: int) -> Bounds:
    """Per column (a row of `values`), `rows - 1` ascending edges: quantiles of
    its finite values, distinct, padded with inf. O(columns × n log n)."""
    out = np.full((values.shape[0], rows - 1), np.inf)
    cut = np.linspace(0.0, 1.0, rows + 1)[1:-1]
    for col, column in enumerate(values):
        finite = column[np.isfinite(column)]
        if len(finite):
            edges = np.unique(np.quantile(finite, cut))
            out[col, : len(edges)] = edges
    return out


class BlockBits:
    """The bit rows of a wide list's blocks of `size` boxes.

    Invariant: for every indexed block, column and row, the row's bits hold
    every box of the block whose bound is within the row's edge (a box moved
    in by a removal once `widen` has run for it); a row may hold more.
    `bits` is (side, column, block, row, word) uint64."""

    __slots__ = ("edges", "bits", "size", "words")

    def __init__(self, lo: Bounds, hi: Bounds, size: int) -> None:
        """Edges from a list's bounds, no block yet. O(columns × n log n)."""
        rows = tuning.BIT_ROWS
        self.edges = np.stack([_edges(lo, rows), _edges(hi, rows)])  # (side, column, edge)
        self.size, self.words = size, -(-size // 64)
        self.bits = np.zeros((2, lo.shape[0], 0, rows, self.words), dtype=np.uint64)

    def nbytes(self) -> int:
        return self.edges.nbytes + self.bits.nbytes

    def rebuild_from(self, first: int, lo: Bounds, hi: Bounds) -> None:
        """Blocks from `first` on made anew from their bounds (`lo`, `hi`: those
        blocks' boxes, whole blocks), the ones before kept.
        O(columns × ROWS × boxes)."""
        self.bits = np.concatenate([self.bits[:, :, :first], self._rows(lo, hi)], axis=2)

    def _rows(self, lo: Bounds, hi: Bounds) -> np.ndarray:
        columns, size = lo.shape[0], self.size
        blocks, rows = lo.shape[1] // size, self.edges.shape[2] + 1
        at = np.arange(rows)[None, :, None]
        padded = np.zeros((blocks, rows, 64 * self.words), dtype=bool)
        out = np.empty((2, columns, blocks, rows, self.words), dtype=np.uint64)
        for col in range(columns):
            first_row = np.searchsorted(self.edges[LOW, col], lo[col], "left")
            last_row = np.searchsorted(self.edges[HIGH, col], hi[col], "right")
            for side, held in (
                (LOW, at >= first_row.reshape(blocks, 1, size)),
                (HIGH, at <= last_row.reshape(blocks, 1, size)),
            ):
                padded[:, :, :size] = held
                packed = np.packbits(padded, axis=2, bitorder="little")
                out[side, col] = packed.view(np.uint64)
        return out

    def widen(self, positions: Ids, lo: Bounds, hi: Bounds) -> None:
        """Set the bits of the boxes now at `positions` (their bounds `lo`,
        `hi`, columns × positions) in the rows that hold them: a removal
        moved them into their blocks. O(columns × ROWS × positions)."""
        rows = self.edges.shape[2] + 1
        as_bytes = self.bits.view(np.uint8)  # (side, column, block, row, byte)
        block, within = positions // self.size, positions % self.size
        byte, bit = within // 8, (1 << (within % 8)).astype(np.uint8)
        at = np.arange(rows)[None, :]
        for col in range(lo.shape[0]):
            first_row = np.searchsorted(self.edges[LOW, col], lo[col], "left")
            last_row = np.searchsorted(self.edges[HIGH, col], hi[col], "right")
            for side, held in (
                (LOW, at >= first_row[:, None]),
                (HIGH, at <= last_row[:, None]),
            ):
                which, row = np.nonzero(held)
                np.bitwise_or.at(as_bytes[side, col], (block[which], row, byte[which]), bit[which])

    def check(self, lo: Bounds, hi: Bounds, blocks: int, name: str) -> None:
        """Assert the invariant for the first `blocks` blocks, whose boxes'
        bounds are `lo`, `hi`. O(columns × ROWS × boxes): for tests."""
        want = self._rows(lo[:, : blocks * self.size], hi[:, : blocks * self.size])
        have = self.bits[:, :, :blocks]
        assert not (want & ~have).any(), f"{name}: block bits miss a box"

    def meeting(
        self,
        lo: Bounds,
        hi: Bounds,
        queries: Ids,
        pair_rows: Ids,
        pair_blocks: Ids,
        query_lo: Bounds,
        query_hi: Bounds,
        tested: list[int],
    ) -> tuple[Ids, Ids]:
        """Every (query, box) pair whose boxes meet on the `tested` columns, for
        the (query, block) pairs (`pair_rows` into `queries`, `pair_blocks`),
        the boxes (`lo`, `hi`) in this index's blocks: as (index into
        `queries`, index into the boxes), each pair once. O(pairs × columns ×
        words) to AND the queries' rows, then O(columns) a box whose bit
        survives (a few times the pairs that meet) to test its bounds. A pair
        whose rows leave over 1/BIT_DENSE of its block is tested as a tensor
        (`meeting_in_blocks`: there a box costs less than its bit would), and
        so is every pair where a sample of BIT_SAMPLE pairs' rows leave over
        1/BIT_DENSE_SAMPLE of their blocks."""
        empty = np.zeros(0, dtype=np.int64)
        if not len(pair_rows):
            return empty, empty
        if not tested:
            dense = np.ones(len(pair_rows), dtype=bool)  # (no column tested: every box)
        else:
            # A sample of the pairs first: where its rows leave over
            # 1/BIT_DENSE_SAMPLE of its blocks, all pairs go to the tensors
            # without the rows' cost.
            sample = np.linspace(0, len(pair_rows) - 1, min(tuning.BIT_SAMPLE, len(pair_rows)))
            sample = sample.astype(np.int64)
            some = self._anded(
                queries, pair_rows[sample], pair_blocks[sample], query_lo, query_hi, tested
            )
            left = int(np.bitwise_count(some).sum())  # (the sample's bits left)
            if left * tuning.BIT_DENSE_SAMPLE > len(sample) * self.size:
                dense = np.ones(len(pair_rows), dtype=bool)
            else:
                found = self._anded(queries, pair_rows, pair_blocks, query_lo, query_hi, tested)
                dense = self._dense(found)
        parts = []
        if dense.any():
            at = np.flatnonzero(dense)
            at = at[np.argsort(pair_blocks[at], kind="stable")]
            parts.append(
                meeting_in_blocks(
                    lo,
                    hi,
                    self.size,
                    queries,
                    pair_rows[at],
                    pair_blocks[at],
                    query_lo,
                    query_hi,
                    tested,
                )
            )
            if dense.all():
                return parts[0]
            sparse = ~dense
            found, pair_rows, pair_blocks = found[sparse], pair_rows[sparse], pair_blocks[sparse]
        words = self.words
        # The set bits: the words that have any, their bytes that have any,
        # then each byte's bits from a table.
        flat = found.reshape(-1)
        some = np.flatnonzero(flat)
        in_words = flat[some].view(np.uint8)
        some_bytes = np.flatnonzero(in_words)
        values = in_words[some_bytes]
        count = _BIT_COUNT[values]
        byte_of = np.repeat(np.arange(len(some_bytes)), count)
        nth = np.arange(len(byte_of)) - np.repeat(np.cumsum(count) - count, count)
        bit = _BIT_AT[values[byte_of], nth]
        byte = some[some_bytes[byte_of] >> 3] * 8 + (some_bytes[byte_of] & 7)
        pair, within = byte // (8 * words), (byte % (8 * words)) * 8 + bit
        box = pair_blocks[pair] * self.size + within
        row = pair_rows[pair]
        ok = meet_on(tested, query_lo, query_hi, queries[row], lo, hi, box)
        if not parts:
            return row[ok], box[ok]
        return np.concatenate([parts[0][0], row[ok]]), np.concatenate([parts[0][1], box[ok]])

    def _anded(
        self,
        queries: Ids,
        pair_rows: Ids,
        pair_blocks: Ids,
        query_lo: Bounds,
        query_hi: Bounds,
        tested: list[int],
    ) -> np.ndarray:
        """For each (query, block) pair, the AND of its rows over the `tested`
        columns (not empty): (pairs × words). O(pairs × columns × words)."""
        rows, words = self.edges.shape[2] + 1, self.words
        pair_queries = queries[pair_rows]
        first_row = pair_blocks * rows
        found = None
        for col in tested:
            row_of = np.searchsorted(self.edges[LOW, col], query_hi[col], "left")
            held = np.take(
                self.bits[LOW, col].reshape(-1, words), first_row + row_of[pair_queries], axis=0
            )
            if found is None:
                found = held
            else:
                found &= held
            row_of = np.searchsorted(self.edges[HIGH, col], query_lo[col], "right")
            found &= np.take(
                self.bits[HIGH, col].reshape(-1, words), first_row + row_of[pair_queries], axis=0
            )
        return found

    def _dense(self, found: np.ndarray) -> np.ndarray:
        """Which pairs' ANDed rows (`found`) hold over 1/BIT_DENSE of a block."""
        return np.bitwise_count(found).sum(axis=1) * tuning.BIT_DENSE > self.size
