"""Naming shard cells onto distinct Spark partitions (`streaming.placement`).

The hash is checked against values Spark 4's `hash()` gave; the
integration tests check it against a running Spark and the placement of
a real job's state.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matcher.records import Source, decode
from matcher.sharding import Sharding, ShardSpec, cell_keys
from streaming.decode_stage import DEAD_LETTER_KEY
from streaming.placement import partition_of, spark_hash, spread_keys

# (text, Spark SQL `hash(text)`): every tail length, multi-byte UTF-8, empty.
SPARK_HASHES = [
    ("uniform#0", -1370380),
    ("uniform#1", -1644998288),
    ("uniform#2", 1435629713),
    ("uniform#3", -1830192483),
    ("abc", 1322437556),
    ("a", 1485273170),
    ("abcd", -396302900),
    ("abcde", 814637928),
    ("", 142593372),
    ("é", 2119106806),
    ("日本語x", 398436580),
]


@pytest.mark.parametrize(("text", "value"), SPARK_HASHES)
def test_hash_is_sparks(text: str, value: int) -> None:
    assert spark_hash(text) == value


spaces = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@given(spaces, st.integers(1, 9), st.integers(1, 9))
def test_cells_take_consecutive_partitions(space: str, cells: int, partitions: int) -> None:
    names = spread_keys(space, cells, partitions)
    plain = cell_keys(space, cells)
    assert names[0] == plain[0]
    assert len(set(names)) == cells
    first = partition_of(plain[0], partitions)
    for cell, (name, key) in enumerate(zip(names, plain, strict=True)):
        assert name == key or name.startswith(f"{key}.")
        assert partition_of(name, partitions) == (first + cell) % partitions


def test_one_partition_keeps_plain_keys() -> None:
    assert spread_keys("uniform", 4, 1) == cell_keys("uniform", 4)


def test_held_keys_are_kept() -> None:
    # `uniform#1` shares partition 0 of 2 with `uniform#0`: a checkpoint
    # written before cells were spread holds it, and keeps it.
    assert spread_keys("uniform", 2, 2) == ["uniform#0", "uniform#1.2"]
    assert spread_keys("uniform", 2, 2, held={"uniform#1", "other#1"}) == cell_keys("uniform", 2)
    # A salted key is kept too, whatever the partition count is now.
    assert spread_keys("uniform", 2, 5, held={"uniform#1.2"})[1] == "uniform#1.2"
    # `#1` does not hold `#10`'s key.
    assert spread_keys("u", 11, 2, held={"u#10"})[1] != "u#10"


def test_named_cells_route_and_parse() -> None:
    spec = ShardSpec("x", (10.0,))
    sharding = Sharding({"v": spec}, {"v": ["v#0", "v#1.2"]})
    line = b'{"op": "subscribe", "id": "s", "space": "v", "subscriber": "u", "where": "x > 1"}'
    record = decode("subscription", line, Source(), fallback_ts=0)
    assert list(sharding.keys_for(record)) == ["v#0", "v#1.2"]
    assert sharding.cell_of("v#1.2") == (spec, 1)
    assert sharding.space_of("v#1.2") == "v"
    assert sharding.cell_of("v#1") is None  # not one of its keys
    assert sharding.space_of("w") == "w"
    assert list(Sharding({"v": spec}).keys_for(record)) == ["v#0", "v#1"]
    with pytest.raises(ValueError, match="2 distinct cell keys"):
        Sharding({"v": spec}, {"v": ["v#0", "v#0"]})


def test_a_cell_held_under_two_keys_keeps_the_plain_one() -> None:
    held = {"uniform#1.2", "uniform#1"}
    assert spread_keys("uniform", 2, 2, held=held) == ["uniform#0", "uniform#1"]


# Names a space may have that read as other keys: the cells of sharded `v`,
# salted or not, the dead letters' key, the escape itself.
TRICKY = ["v#0", "v#1", "v#1.2", "v#12", "v#1#2", "v#", "v#x", "w#1", "\x00deadletter"]
TRICKY += ["\x00space:v#1", "\x00", "", "v", "#1"]


@given(st.lists(st.sampled_from(TRICKY) | spaces, max_size=8), st.integers(1, 4))
def test_every_space_has_a_key_of_its_own(names: list[str], partitions: int) -> None:
    spec = ShardSpec("x", (10.0, 20.0))
    sharding = Sharding({"v": spec}, {"v": spread_keys("v", 3, partitions)})
    keys = {name: sharding.key_of(name) for name in set(names) - {"v"}}
    cells = set(sharding.names["v"])
    assert len(set(keys.values())) == len(keys)
    assert not (set(keys.values()) & (cells | {DEAD_LETTER_KEY}))
    assert all(sharding.space_of(key) == name for name, key in keys.items())
    assert all(sharding.cell_of(key) is None for key in keys.values())
    # A name that is no key of the job's is its own key, as in checkpoints before.
    assert sharding.key_of("v#1") != "v#1" and sharding.key_of("w#1") == "w#1"


def test_a_sharded_space_is_not_named_with_a_leading_nul() -> None:
    with pytest.raises(ValueError, match="must not start with NUL"):
        Sharding({"\x00v": ShardSpec("x", (1.0,))})


def test_a_held_space_that_reads_as_a_salted_cell_is_not_a_cell() -> None:
    # A space `uniform#1.1x` (its own key) sorts before the cell `uniform#1.2`.
    held = {"uniform#1.2", "uniform#1.1x"}
    assert spread_keys("uniform", 2, 2, held=held) == ["uniform#0", "uniform#1.2"]
