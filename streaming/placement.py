"""Naming shard cells so that Spark runs them on different partitions.

Spark places a state key on shuffle partition `pmod(murmur3(key), n)`
(`HashPartitioning`), so the plain cell keys `space#0`, `space#1`, ... may
share a partition (`uniform#0` and `uniform#1` both land on 0 of 2) and then
run one after the other in one task: the space's index is split but its work
is not spread over cores. Here a cell whose plain key lands off its turn gets
a salted key `space#cell.salt` that lands on it: cell i goes to partition
(p0 + i) mod n, p0 being where cell 0 lands, so up to n cells run at once.

The names are state keys, so a checkpoint keeps its own: a cell that already
holds state there keeps that key whatever the partition count (`held`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from matcher.sharding import SALT, ShardSpec, cell_keys

_MASK = 0xFFFFFFFF
SEED = 42  # Spark's Murmur3Hash seed for partitioning


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix(h1: int, k1: int) -> int:
    k1 = _rotl((k1 * 0xCC9E2D51) & _MASK, 15) * 0x1B873593 & _MASK
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _MASK


def spark_hash(text: str, seed: int = SEED) -> int:
    """Spark SQL's `hash(text)` (Murmur3_x86_32.hashUnsafeBytes: the bytes
    after the last whole 4-byte word are mixed one by one, sign-extended)."""
    data = text.encode()
    whole = len(data) - len(data) % 4
    h = seed
    for i in range(0, whole, 4):
        h = _mix(h, int.from_bytes(data[i : i + 4], "little"))
    for byte in data[whole:]:
        h = _mix(h, (byte - 256 if byte > 127 else byte) & _MASK)
    h ^= len(data)
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & _MASK
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h - (1 << 32) if h >> 31 else h


def partition_of(key: str, partitions: int) -> int:
    """The shuffle partition of a state key (Python's % is already Spark's pmod)."""
    return spark_hash(key) % partitions


def spread_keys(space: str, cells: int, partitions: int, held: Collection[str] = ()) -> list[str]:
    """State keys for a space's cells, on consecutive partitions, keeping held ones."""
    plain = cell_keys(space, cells)
    first = partition_of(plain[0], partitions)
    names = []
    for cell, key in enumerate(plain):
        # (sorted: the plain key first, and the same choice on every start)
        own = re.compile(rf"{re.escape(key)}(?:{SALT})?", re.DOTALL)
        kept = sorted(k for k in held if own.fullmatch(k))
        want = (first + cell) % partitions
        salt = 0
        while not kept and partition_of(key, partitions) != want:
            salt += 1
            key = f"{plain[cell]}.{salt}"
        names.append(kept[0] if kept else key)
    return names


def cell_names(
    specs: Mapping[str, ShardSpec], partitions: int, held: Collection[str] = ()
) -> dict[str, list[str]]:
    """`spread_keys` for every sharded space."""
    return {space: spread_keys(space, s.cells, partitions, held) for space, s in specs.items()}
