"""Doubles numbered in their order, so that a search over doubles is a search over integers.

`rank` maps every double but NaN to an integer, increasing with the double, with
adjacent doubles one apart (-0.0 and 0.0 share a rank); `double_at` is its inverse.
A bisection between the ranks of two doubles visits every double between them
(about 64 steps at most), which finds where a monotone test over the doubles
turns, to the last bit.
"""

from __future__ import annotations

import struct

_SIGN = 0x8000_0000_0000_0000


def rank(x: float) -> int:
    """The rank of double `x` (not NaN): its bits read as a signed integer, with the
    negative ones mirrored so that order is kept. O(1)."""
    bits = struct.unpack("<q", struct.pack("<d", x))[0]
    return bits if bits >= 0 else -(bits & (_SIGN - 1))


def double_at(n: int) -> float:
    """The double whose rank is `n` (0.0 for 0). O(1)."""
    bits = n if n >= 0 else (-n) | -_SIGN
    return struct.unpack("<d", struct.pack("<q", bits))[0]
