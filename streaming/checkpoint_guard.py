"""The sharding a checkpoint's state was built with, kept beside it, so that a
changed `[sharding]` is refused at start instead of matching wrongly.

A cell's state (its snapshot, and the matcher cached from it) was indexed
for the cell's range of the sharding it was written under; SEMANTICS §8
reports a pair from the cell that holds the lower end of its intersection.
Under other cuts, the cells' ranges, and even their number, change while
their state does not: pairs are then reported twice or never. So the cuts
are part of the checkpoint, as Spark's own shuffle partition count is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from matcher.sharding import Sharding
from streaming.state.reader import has_commits

FILE = "tsm-sharding.json"


class ShardingChanged(ValueError):
    """The configured sharding is not the one the checkpoint's state was built with."""


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
    path = Path(checkpoint, FILE)
    wanted = sharding_of(sharding)
    if has_commits(checkpoint) and path.exists():
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept != wanted:
            raise ShardingChanged(
                f"checkpoint {checkpoint} holds state sharded as {_describe(kept)}, "
                f"but the configuration says {_describe(wanted)}; a cell's state is "
                "indexed for its own range, so other cuts would report some matches "
                "twice and others never. Keep the [sharding] tables the checkpoint was "
                "started with, or start a new checkpoint (--checkpoint or `checkpoint` "
                "in tsm.toml), which reads the topics from the beginning."
            )
        return
    # (a checkpoint of a version before this file: its cuts are unknown, these are kept)
    partial = path.with_suffix(".tmp")
    try:  # (the first write to the checkpoint: a path that cannot be one fails here)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(wanted, sort_keys=True) + "\n", encoding="utf-8")
        partial.replace(path)
    except OSError as exc:
        raise ValueError(f"cannot use {checkpoint} as the checkpoint: {exc.strerror}") from None


def _describe(tables: dict[str, Any]) -> str:
    if not tables:
        return "no space sharded"
    return "; ".join(
        f"{space} on {t['attribute']} at {', '.join(f'{c:g}' for c in t['cuts'])}"
        for space, t in sorted(tables.items())
    )
