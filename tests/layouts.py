"""Forest tuning constants shrunk so that a handful of entries takes every
path the large sets take: broadcast child lists, chunked (query × child)
matrices, sorted blocks with their tails, re-sorts and removals, and the
runs that inserts sort their tails into."""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack, nullcontext
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


def preload(on: bool, *, budget_bytes: int = 1 << 30) -> AbstractContextManager:
    """Inside the block when `on`: preloaded cells on even for a handful of
    entries (a grid as soon as anything is asked, every cell filled at its first
    visit, the cells answering whatever they can, unmeasured), and thresholds
    small enough that re-sorts, log cuts and (with a small budget) evictions
    happen; preloading off otherwise, the forest answering everything."""
    from matcher.preload import grid, settings, subscription_cells

    stack = ExitStack()
    if not on:
        stack.enter_context(settings.configured(enabled=False))
        return stack
    stack.enter_context(
        settings.configured(
            enabled=True, min_entries=1, fill_after=1, measured=False, budget_bytes=budget_bytes
        )
    )
    stack.enter_context(
        patch.multiple(grid, MAX_CANDIDATE_SHARE=1.0, PRESENT_SHARE=0.0, SORTED_SHARE=0.0)
    )
    stack.enter_context(
        patch.multiple(subscription_cells, RESORT_MIN=2, RESORT_SHARE=2, LOG_MIN=4, LOG_SHARE=1)
    )
    return stack
