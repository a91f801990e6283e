"""Every upgrade of state written by an earlier tsm, in one place.

A snapshot carries the format version it was written in (`streaming.state.codec`;
an unversioned snapshot is format 1). Loading it, the codec asks here, for each
class the pickle names:

- `renamed(module, name)`: where the class lives now. `RENAMES` maps a class's
  `(module, name)` as a snapshot of any format wrote it to its `(module, name)`
  today, for every class moved or renamed since (an old name is never reused;
  a snapshot of the current format that names a moved class is read through
  here too);
- `upgrades(module, name, version)`: the functions that bring the state of one
  of its instances from that format to today's, in order. Each takes the
  instance's attributes (a dict, whether the class keeps a `__dict__` or
  `__slots__`) and returns them upgraded; `upgrading(cls, steps)` is the class
  the unpickler makes such an instance with, which applies them before the
  attributes are set.

An upgrade is registered with `@upgrade(module, name, before=V)`: it applies to
snapshots of format versions below V, and names the class as those snapshots
wrote it (so a later rename needs only a line in `RENAMES`). When a class's
pickled state changes, raise `codec.FORMAT_VERSION` to V and register the
upgrade here: a snapshot of the current format is read as pickle reads it. The
classes themselves keep no `__setstate__`.

The change log's entries are JSON and `matcher.records.from_state` reads every
record form a held record has had; what the log itself held before its
per-batch entries is read by `per_change_entry`.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from matcher.delivery.layer import Changed, is_settled
from matcher.engines.gated import GatedFilters
from matcher.routing.cover_set import CoverSet
from matcher.routing.local import LocalSource
from matcher.routing.members import Hosted, MemberDesk
from matcher.routing.site import NEVER, InterestPort
from matcher.snapshot_names import PICKLED_ATTRIBUTE_RENAMES, PICKLED_RENAMES

Attributes = dict[str, Any]
Upgrade = Callable[[Attributes], Attributes]

# (module, name) as a snapshot wrote it -> (module, name) now. A module split in
# two adds its table: RENAMES.update(PICKLED_RENAMES).
RENAMES: dict[tuple[str, str], tuple[str, str]] = dict(PICKLED_RENAMES)

# (module, name) as written -> [(the first format version without it, upgrade)], in order.
_UPGRADES: dict[tuple[str, str], list[tuple[int, Upgrade]]] = {}


def upgrade(module: str, name: str, *, before: int) -> Callable[[Upgrade], Upgrade]:
    """Register the decorated function as the upgrade of `module.name`'s state in
    snapshots of format versions below `before`."""

    def register(step: Upgrade) -> Upgrade:
        steps = _UPGRADES.setdefault((module, name), [])
        steps.append((before, step))
        steps.sort(key=lambda pair: pair[0])
        return step

    return register


def renamed(module: str, name: str) -> tuple[str, str]:
    """Where the class a snapshot names `module.name` lives now."""
    return RENAMES.get((module, name), (module, name))


def upgrades(module: str, name: str, version: int) -> tuple[Upgrade, ...]:
    """The upgrades, oldest first, of the state of a `module.name` (as written) in a
    snapshot of format `version`."""
    return tuple(step for before, step in _UPGRADES.get((module, name), ()) if version < before)


def upgraded_classes() -> list[tuple[str, str]]:
    """Every class (as written) that has an upgrade."""
    return list(_UPGRADES)


_UPGRADING: dict[tuple[type, tuple[Upgrade, ...]], type] = {}


def upgrading(cls: type, steps: tuple[Upgrade, ...]) -> type:
    """A stand-in for `cls` for the unpickler: it makes the instance, upgrades the
    state pickle hands it (`steps`, in order), makes the instance a `cls` again
    and sets the upgraded attributes. (A subclass adding no slots, so that
    `__class__` can be set back; `cls` must restore its state the default way,
    with no `__setstate__` of its own, or be a slotted dataclass, whose state is
    its fields' values in order.)"""
    made = _UPGRADING.get((cls, steps))
    if made is not None:
        return made
    fields = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else None
    if fields is None and hasattr(cls, "__setstate__"):
        raise TypeError(f"{cls.__qualname__} restores its own state: upgrade it there")

    def __setstate__(self: Any, state: Any) -> None:  # noqa: N807 (pickle's name)
        if isinstance(state, tuple):  # (a class with __slots__, a dataclass too: (dict, slots))
            attributes = {**(state[0] or {}), **(state[1] or {})}
        elif fields is not None:  # (a frozen slotted dataclass: its fields' values)
            attributes = dict(zip(fields, state, strict=False))
        else:
            attributes = dict(state)
        for step in steps:
            attributes = step(attributes)
        object.__setattr__(self, "__class__", cls)
        for attribute, value in attributes.items():
            object.__setattr__(self, attribute, value)

    def __new__(stand_in: type, *args: Any) -> Any:  # noqa: N807 (Python's name)
        # (a dataclass pickled as a constructor call is made as `cls` itself)
        return cls(*args) if args else object.__new__(stand_in)

    methods = {"__slots__": (), "__setstate__": __setstate__}
    if fields is not None:
        methods["__new__"] = __new__
    made = type(cls.__name__, (cls,), methods)
    _UPGRADING[cls, steps] = made
    return made


# -- format 1 (tsm before the versioned snapshot: the `__setstate__` shims of 1603d57) --


@upgrade("matcher.engine", "SpaceMatcher", before=2)
def _drops_per_side(state: Attributes) -> Attributes:
    """`_drops` was one count of dropped records (or, before any drop, a class
    attribute and not in the state); now one per side. It only tells whether a
    prefetched answer is still current, and a loaded matcher has none."""
    state["_drops"] = [0, 0]
    return state


@upgrade("matcher.double_forest", "DoubleForest", before=2)
def _lazy_profile_forest(state: Attributes) -> Attributes:
    """The profile forest was `profile_forest` and held every profile (none waited
    in `_unindexed`); both forests shared one set of columns (`dims`)."""
    if "profile_forest" in state:
        state["_profile_forest"] = state.pop("profile_forest")
    state.setdefault("_unindexed", {})
    state.setdefault("profile_dims", state["dims"])
    return state


@upgrade("matcher.forest", "Forest", before=2)
def _no_stale_bounds(state: Attributes) -> Attributes:
    """A removal widened its ancestors' subtree bounds at once: none is stale."""
    state.setdefault("_stale", set())
    return state


@upgrade("matcher.forest", "_Mirror", before=2)
def _moved_into_blocks(state: Attributes) -> Attributes:
    """A removal widened the block it moved a child into at once (no `moved`), or
    marked the block `dirty`, its box to be recomputed. A dirty block's box may
    miss the child moved in (and still hold the one removed, which is only
    looser): widening it by every child it holds makes it right, so each of its
    positions counts as moved."""
    dirty = state.pop("dirty", None) or ()
    block = state["block"]
    moved = state.get("moved") or []
    state["moved"] = moved + [p for b in sorted(dirty) for p in range(b * block, (b + 1) * block)]
    return state


def _renaming(renames: dict[str, str | None]) -> Upgrade:
    """An upgrade that renames attributes (`None`: the attribute is dropped)."""

    def rename(state: Attributes) -> Attributes:
        for old, new in renames.items():
            if old in state:
                value = state.pop(old)
                if new is not None:
                    state[new] = value
        return state

    return rename


# The forest's split into `matcher.forest` (`matcher.snapshot_names`): after the
# upgrades above, which read the attributes by their old names.
_WRITTEN_AS = {now: written for written, now in PICKLED_RENAMES.items()}
for _class, _renames in PICKLED_ATTRIBUTE_RENAMES.items():
    upgrade(*_WRITTEN_AS.get(_class, _class), before=2)(_renaming(_renames))


# -- format 3: residual tests ---------------------------------------------------------


@upgrade("matcher.constraints", "Conjunction", before=3)
def _without_residual_tests(state: Attributes) -> Attributes:
    """A filter of a snapshot from before IS NULL and computed tests has neither."""
    state.setdefault("absent", frozenset())
    state.setdefault("computed", ())
    return state


@upgrade("matcher.constraints", "Constraint", before=3)
def _without_like_patterns(state: Attributes) -> Attributes:
    """A constraint of a snapshot from before general LIKE and JMS's NOT has none."""
    for field in ("likes", "not_likes", "none_of"):
        state.setdefault(field, ())
    return state


# -- format 4: pattern tests ---------------------------------------------------------


@upgrade("matcher.double_forest", "DoubleForest", before=4)
def _without_pattern_tests(state: Attributes) -> Attributes:
    """A forest of a snapshot from before pattern tests (MATCHES, TOPIC, HAS,
    XPATH) holds no filter with one: its `gated` filters are none."""
    state.setdefault("gated", GatedFilters(state["dims"].codes))
    return state


# -- format 5: delivery policies ------------------------------------------------------


@upgrade("matcher.records", "Subscribe", before=5)
def _without_delivery_fields(state: Attributes) -> Attributes:
    """A subscription of a snapshot from before delivery policies has none
    (docs/DELIVERY.md); the matcher's own new attributes are class defaults."""
    state.setdefault("options", None)
    return state


# -- format 6: delivery groups across a network's sites ----------------------------


@upgrade("matcher.routing.local", "LocalSource", before=6)
def _without_members(state: Attributes) -> Attributes:
    """A site's source from before members were relayed to their space's selecting
    site (docs/DELIVERY.md §9) has relayed none; its site sets `selecting`."""
    state.setdefault("selecting", None)
    state.setdefault("relayed", [])
    state.setdefault("_relocated", {})
    state.setdefault("_relocated_by", {})
    return state


@upgrade("matcher.routing.site", "Site", before=6)
def _without_hosted(state: Attributes) -> Attributes:
    """A site from before it hosted members: it relays them from now on, and holds
    those of the spaces it selects for in a `Hosted` of its own, whose items its
    matcher and interest ports take in inboxes of their own. (Its subscriptions
    with delivery fields held until then stay its own.)"""
    name, net = state["name"], state["net"]
    state["local"].selecting = net.selecting_site
    state["hosted"] = Hosted(LocalSource(name, advertisements=False))
    state["members"] = MemberDesk(name, net)
    state["delivered_wm"] = NEVER
    routes = state["routes"]
    routes[("hosted", "sub")] = [state["matcher"].inbox()]
    interest = [
        p for ports in state["ports"].values() for p in ports if isinstance(p, InterestPort)
    ]
    interest += [s for s in state["stages"] if isinstance(s, InterestPort) and s not in interest]
    routes[("hosted", "interest")] = [port.inbox() for port in interest]
    return state


# -- format 7: delivery timers per due time ------------------------------------------


@upgrade("matcher.delivery.layer", "Delivery", before=7)
def _timers_per_due_time(state: Attributes) -> Attributes:
    """A delivery state of a snapshot from before timers kept per due time holds a
    heap of `(due, subscription id, profile id)`, one a pair: now a heap of the due
    times and the pairs due at each (`Delivery._due`)."""
    due_at: dict[int, list[tuple[str, str]]] = {}
    for due, sid, pid in state["_timers"]:
        due_at.setdefault(due, []).append((sid, pid))
    state["_timers"] = sorted(due_at)  # (a sorted list is a heap)
    state["_due"] = due_at
    return state


# -- format 8: settled delivery pairs without a `Pair` ------------------------------


@upgrade("matcher.engine", "SpaceMatcher", before=8)
def _settled_pairs_without_pair(state: Attributes) -> Attributes:
    """A delivery state of a snapshot from before settled pairs kept a `Pair` for each:
    those that are settled (on and told as their held versions say,
    `matcher.delivery.layer`) keep none now, as the layer leaves them."""
    delivery = state.get("delivery")
    if delivery is not None:
        subs, profiles = state["subs"], state["profiles"]
        delivery.pairs = {
            key: pair
            for key, pair in delivery.pairs.items()
            if not is_settled(pair, subs.get(key[0]), profiles.get(key[1]))
        }
    return state


@upgrade("matcher.delivery.layer", "Delivery", before=8)
def _changes_logged_apart(state: Attributes) -> Attributes:
    """A delivery state of a snapshot from before it kept its changed items apart
    (`Delivery._changed`; a snapshot holds none)."""
    state.pop("_dirty", None)
    state["_changed"] = Changed()
    return state


# -- format 9: waiting delivery pairs without a `Pair` ------------------------------


@upgrade("matcher.delivery.layer", "Delivery", before=9)
def _no_waiting_pairs(state: Attributes) -> Attributes:
    """A delivery state of a snapshot from before waiting pairs (pending since their
    profile's first version, `Delivery._waiting`) keeps a `Pair` for each, as a
    touched one keeps now: none wait. Its `Changed` (empty in a snapshot) lacks the
    waiting pairs' list: a new one."""
    state["_waiting"] = {}
    state["_changed"] = Changed()
    return state


# -- format 10: the bit rows of a wide list's blocks ------------------------------


@upgrade("matcher.forest", "_Mirror", before=10)
@upgrade("matcher.forest.wide_list", "WideList", before=10)
def _without_block_bits(state: Attributes) -> Attributes:
    """A wide list of a snapshot from before its blocks kept bit rows has none:
    they are made from its blocks when they are next read."""
    state.setdefault("bits", None)
    return state


# -- format 11: a delivery state's chosen sets per profile -------------------------


@upgrade("matcher.delivery.layer", "Delivery", before=11)
def _chosen_per_profile(state: Attributes) -> Attributes:
    """A delivery state of a snapshot from before it kept the chosen sets per profile
    holds them keyed by `(group, profile)`: now profile -> group -> members."""
    chosen: dict[str, dict[str, set[str]]] = {}
    for (group, pid), members in state["chosen"].items():
        chosen.setdefault(pid, {})[group] = members
    state["chosen"] = chosen
    return state


# -- format 12: a delivery state's pairs indexed by subscription lazily -------------


@upgrade("matcher.delivery.layer", "Delivery", before=12)
def _every_pair_indexed_by_sub(state: Attributes) -> Attributes:
    """A delivery state of a snapshot from before it indexed first versions' pairs by
    subscription lazily has every pair indexed: none left to do."""
    state["_unindexed"] = []
    return state


# -- every format ----------------------------------------------------------------

# An upgrade registered `before=EVERY_FORMAT` applies to snapshots of the current
# format too.
EVERY_FORMAT = sys.maxsize


@upgrade("matcher.constraints", "Conjunction", before=EVERY_FORMAT)
@upgrade("matcher.profiles", "Profile", before=EVERY_FORMAT)
def _rehash(state: Attributes) -> Attributes:
    """A filter's or profile's hash, taken again in this process: a pickled one was
    taken in the writer's, and `hash(None)`, part of many filters' hashes, differs
    between processes. A stale hash would give a filter sent again after the load a
    second forest node."""
    state["_hash"] = hash(state["_key"])
    return state


# -- the change log ------------------------------------------------------------------


def per_change_entry(kind: str, ident: str, rec: str | None) -> tuple[str, str, str | None]:
    """A `log` entry of the first layout, one per change, `(kind, id) → record state
    or null` (the latest change per id): the change it is, to replay before the
    per-batch entries (which came later)."""
    return kind, ident, rec


# -- format 7: a cover set's members in one table -------------------------------------


class RetiredCoverGroup:
    """What a cover set of format 6 or older kept per set of columns: read, then
    dropped (the cover set is rebuilt from its members)."""


RENAMES[("matcher.routing.cover_set", "_Group")] = (__name__, "RetiredCoverGroup")


@upgrade("matcher.routing.cover_set", "CoverSet", before=7)
def _cover_set_in_one_table(state: Attributes) -> Attributes:
    """A cover set of format 6 or older kept its members' bounds in a table per set
    of columns; it is made again from its members and their counts, in their order."""
    fresh = CoverSet(state["boxes"])
    for conj, n in state["counts"].items():
        fresh.add(conj, n)
    return vars(fresh)
