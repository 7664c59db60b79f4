"""Reading a chain of numbered slots forward: :func:`read_forward`.

Two logs in the bucket are chains of objects at consecutive slot numbers, each created
once with ``put_if_absent``: the cluster metadata log (ADR 0025) and the commit chains of
diskless topics (ADR 0027). A reader catching up fetches the next slot, and when there is
one, the following ones in windows of parallel GETs until the first missing slot.

Blocking I/O through the caller's ``read_slot``; thread-safe when it is.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

__all__ = ["read_forward"]

_T = TypeVar("_T")


def read_forward(read_slot: Callable[[int], _T | None], first: int, pool: Executor, window: int) -> list[_T]:
    """The slots from ``first`` up to the first missing one: one read when there is
    nothing new (the idle probe), then windows of ``window`` parallel reads (a window
    costs at most ``window - 1`` reads of missing slots)."""
    head = read_slot(first)
    if head is None:
        return []
    found = [head]
    start = first + 1
    while True:
        for item in pool.map(read_slot, range(start, start + window)):
            if item is None:
                return found
            found.append(item)
        start += window
