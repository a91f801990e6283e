"""Forest tuning constants shrunk so that a handful of entries takes every
path the large sets take: broadcast child lists, chunked (query × child)
matrices, sorted blocks with their tails, re-sorts and removals, and the
runs that inserts sort their tails into."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from unittest.mock import patch

from matcher.forest import tuning


def lists(tiny: bool) -> AbstractContextManager:
    """Tiny tuning inside the block when `tiny`, the shipped one otherwise."""
    if not tiny:
        return nullcontext()
    return patch.multiple(
        tuning,
        WIDE=2,
        BROADCAST_CELLS=4,
        CHUNK=3,
        BLOCKED=4,
        BLOCK=2,
        FINITE_SHARE=0.2,
        SCAN_SHARE=0,
        FEW=3,
        FEW_GATHERED=2,
        SETTLED=4,
        RUN=2,
        RATIO=2,
    )


def blocked_from(children: int) -> AbstractContextManager:
    """Long child lists kept in sorted blocks from `children` on."""
    return patch.multiple(tuning, BLOCKED=children)
