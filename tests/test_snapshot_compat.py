"""Snapshots in checkpoints written by an earlier version of the code (the
fixtures of `tests/snapshot_workloads.py`) load, and the loaded matcher
matches the same as one built afresh from the same records.

The snapshots load through `_Unpickler`, which finds the classes and their
attributes that have moved or been renamed since (`matcher.snapshot_names`),
as the snapshot codec must, and also gives every filter and profile the hash
of its content in this process: a `Conjunction` and a
`Profile` keep their hash in a slot, and a `Conjunction`'s hash depends on
`hash(None)`, which Python 3.11 takes from None's address, so it differs from
one process to the next. Loaded as it was pickled, an equal filter sent after
the restore misses its node in `Forest.by_key` and gets a second node.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import pytest
import zstandard

from matcher.constraints import Conjunction
from matcher.double_forest import DoubleForest
from matcher.forest import ROOT, Forest
from matcher.forest.list_store import ListStore
from matcher.forest.point_columns import PointColumns
from matcher.forest.wide_list import WideList
from matcher.profiles import Profile
from matcher.snapshot_names import PICKLED_ATTRIBUTE_RENAMES, PICKLED_RENAMES
from tests import layouts
from tests.snapshot_workloads import BLOCKED_FROM, WORKLOADS, build, steps

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"


def _migrating(cls: type, renames: dict[str, str | None], *, rehash: bool) -> type:
    """A subclass of `cls` that pickle builds instead: it renames the
    attributes of the state it is given, becomes a `cls`, sets the state as
    `cls` would, and with `rehash` takes its hash from its content."""

    def __setstate__(self, state: Any) -> None:
        self.__class__ = cls
        if isinstance(state, tuple):  # (instance dict or None, slots)
            state = tuple(_renamed(part, renames) if part else part for part in state)
        else:
            state = _renamed(state, renames)
        if hasattr(cls, "__setstate__"):
            cls.__setstate__(self, state)
        else:
            own, slots = state if isinstance(state, tuple) else (state, None)
            if own:
                self.__dict__.update(own)
            for slot, value in (slots or {}).items():
                setattr(self, slot, value)
        if rehash:
            self._hash = hash(self._key)

    return type(cls.__name__, (cls,), {"__slots__": (), "__setstate__": __setstate__})


def _renamed(state: dict, renames: dict[str, str | None]) -> dict:
    named = ((renames.get(old, old), value) for old, value in state.items())
    return {new: value for new, value in named if new is not None}


class _Unpickler(pickle.Unpickler):
    """Loads a snapshot of an earlier version: `PICKLED_RENAMES` and
    `PICKLED_ATTRIBUTE_RENAMES` applied, filters and profiles rehashed."""

    def find_class(self, module: str, name: str) -> Any:
        module, name = PICKLED_RENAMES.get((module, name), (module, name))
        cls = super().find_class(module, name)
        renames = PICKLED_ATTRIBUTE_RENAMES.get((module, name), {})
        rehash = cls in (Conjunction, Profile)
        if not (renames or rehash):
            return cls
        if cls not in _SHIMS:
            _SHIMS[cls] = _migrating(cls, renames, rehash=rehash)
        return _SHIMS[cls]


_SHIMS: dict[type, type] = {}


def _load(name: str):
    blob = zstandard.ZstdDecompressor().decompress((FIXTURES / f"{name}.pickle.zst").read_bytes())
    return _Unpickler(io.BytesIO(blob)).load()


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_a_snapshot_of_an_earlier_version_matches_like_a_fresh_matcher(name):
    with layouts.blocked_from(BLOCKED_FROM):
        loaded, fresh = _load(name), build(name)
        assert loaded.subs.keys() == fresh.subs.keys()
        assert loaded.profiles.keys() == fresh.profiles.keys()
        _holds_what_it_stands_for(name, loaded.forest)
        _, after = steps(name)
        for batch in after:
            events = loaded.apply_batch(batch)
            assert events == fresh.apply_batch(batch)
        assert events, "the last batch changed no pair: the comparison proves little"
        assert loaded.drain_changes() == fresh.drain_changes()
        assert loaded.expire(float("inf")) == fresh.expire(float("inf"))
        for side in ("sub_forest", "profile_forest"):  # (one node per distinct key)
            assert len(getattr(loaded.forest, side)) == len(getattr(fresh.forest, side))
        if name != "uniform":  # (its 1,400 roots take 10 s to check pair by pair)
            loaded.forest.check_invariants()


def _holds_what_it_stands_for(name: str, loaded: DoubleForest) -> None:
    """The loaded state has the parts whose layout changed (so the comparison
    after it reads them), each of its class as this version names it."""
    forests = (loaded.sub_forest, loaded._profile_forest)
    assert all(type(forest) is Forest for forest in forests)
    assert all(type(forest.children) is ListStore for forest in forests)
    wide = loaded.sub_forest.wide_lists[ROOT]
    assert type(wide) is WideList
    if name == "uniform":  # a root list in blocks, with removals' widenings pending
        assert wide.block_count and wide.moved and loaded.sub_forest._stale
    if name == "siena":  # a list of point profiles with its sorted columns
        points = loaded._profile_forest.wide_lists[ROOT].point_columns
        assert type(points) is PointColumns
    if name == "nested":  # profiles not yet in the profile forest
        assert loaded._unindexed
