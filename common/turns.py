"""Long work on the event loop in slices, with a turn of the loop between them: :func:`in_turns`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

__all__ = ["in_turns"]

T = TypeVar("T")


async def in_turns(items: Sequence[T], size: int) -> AsyncIterator[Sequence[T]]:
    """``items``, ``size`` at a time, the event loop given a turn between two slices (none
    before the first: a short request is served in the turn it arrived in). What the caller
    reads of shared state may change between slices."""
    for start in range(0, len(items), size):
        if start:
            await asyncio.sleep(0)
        yield items[start:start + size]
