"""The sharding a checkpoint's state was built with, kept beside it, so that a
changed `[sharding]` is refused at start instead of matching wrongly.

A cell's state (its snapshot, and the matcher cached from it) was indexed
for the cell's range of the sharding it was written under; SEMANTICS §8
reports a pair from the cell that holds the lower end of its intersection.
Under other cuts, the cells' ranges, and even their number, change while
their state does not: pairs are then reported twice or never. So the cuts
are part of the checkpoint, as Spark's own shuffle partition count is.

A network site's checkpoint keeps the network's quenching producers the same
way (`check_producers`): a site's state is its `SiteJob`, which keeps the
network of its first batch, so a producer added to the file, removed or moved
would not take effect there (nor at the sites that run it: its leaf and its
link topics would be known to some sites and not others). A changed set is
refused at start with one line naming the change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from matcher.routing.network import Network
from matcher.sharding import Sharding
from streaming.state.reader import has_commits

FILE = "tsm-sharding.json"
PRODUCERS_FILE = "tsm-producers.json"


class ShardingChanged(ValueError):
    """The configured sharding is not the one the checkpoint's state was built with."""


class ProducersChanged(ValueError):
    """The network file's producers are not those the site's checkpoint was built with."""


def sharding_of(sharding: Sharding) -> dict[str, Any]:
    """The cuts of each sharded space, as kept in the checkpoint (JSON)."""
    return {
        space: {"attribute": spec.attribute, "cuts": list(spec.cuts)}
        for space, spec in sorted(sharding.config.items())
    }


def check_sharding(checkpoint: str, sharding: Sharding) -> None:
    """Raise `ShardingChanged` if the checkpoint's state was built under other
    cuts; else record these as the checkpoint's (a checkpoint with no committed
    batch holds no state yet and takes any)."""
    wanted = sharding_of(sharding)
    kept = _kept_otherwise(checkpoint, FILE, wanted)
    if kept is not None:
        raise ShardingChanged(
            f"checkpoint {checkpoint} holds state sharded as {_describe(kept)}, "
            f"but the configuration says {_describe(wanted)}; a cell's state is "
            "indexed for its own range, so other cuts would report some matches "
            "twice and others never. Keep the [sharding] tables the checkpoint was "
            "started with, or start a new checkpoint (--checkpoint or `checkpoint` "
            "in tsm.toml), which reads the topics from the beginning."
        )


def check_producers(checkpoint: str, net: Network, site: str) -> None:
    """Raise `ProducersChanged` if site `site`'s checkpoint was built with other
    quenching producers than `net`'s (`[producers.NAME]`, any site's); else record
    these as the checkpoint's (one with no committed batch takes any)."""
    wanted = [list(pair) for pair in net.producers]  # (in file order: it numbers them)
    kept = _kept_otherwise(checkpoint, PRODUCERS_FILE, wanted)
    if kept is not None:
        raise ProducersChanged(
            f"site {site!r}: producers changed: {_changes(kept, wanted)}; its checkpoint "
            f"{checkpoint} keeps the network of its first batch. Keep the producers it "
            "was started with, or start the whole network afresh (every site from a "
            "new checkpoint, with empty link, control and interest topics; see "
            "DESIGN.md, adding a producer)"
        )


def _kept_otherwise(checkpoint: str, file: str, wanted: Any) -> Any:
    """What the checkpoint's `file` keeps where its state (a committed batch) was
    built with other than `wanted`; else None, `wanted` now kept there (a
    checkpoint of a version before the file is taken to have been built with it)."""
    path = Path(checkpoint, file)
    if has_commits(checkpoint) and path.exists():
        kept = json.loads(path.read_text(encoding="utf-8"))
        return kept if kept != wanted else None
    partial = path.with_suffix(".tmp")
    try:  # (the first write to the checkpoint: a path that cannot be one fails here)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(wanted, sort_keys=True) + "\n", encoding="utf-8")
        partial.replace(path)
    except OSError as exc:
        raise ValueError(f"cannot use {checkpoint} as the checkpoint: {exc.strerror}") from None
    return None


def _changes(kept_pairs: list[list[str]], wanted_pairs: list[list[str]]) -> str:
    kept, wanted = dict(kept_pairs), dict(wanted_pairs)
    said = [f"{p!r} added (at site {wanted[p]!r})" for p in wanted if p not in kept]
    said += [f"{p!r} removed" for p in kept if p not in wanted]
    said += [
        f"{p!r} moved from site {kept[p]!r} to {wanted[p]!r}"
        for p in wanted
        if p in kept and kept[p] != wanted[p]
    ]
    return ", ".join(said) or "their order in the file (it numbers them)"


def _describe(tables: dict[str, Any]) -> str:
    if not tables:
        return "no space sharded"
    return "; ".join(
        f"{space} on {t['attribute']} at {', '.join(f'{c:g}' for c in t['cuts'])}"
        for space, t in sorted(tables.items())
    )
