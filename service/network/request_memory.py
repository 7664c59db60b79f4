"""The memory of requests in flight, shared by all connections (``queued.max.request.bytes``).

A connection reserves a request's declared size here before it reads the body,
and the reservation is returned when the handler is done with the request. When
the pool is exhausted, connections stop reading new requests until memory comes
back (Kafka mutes the channel the same way), so the bytes of requests being
read or handled stay under ``capacity`` plus one request: like Kafka's
non-strict ``SimpleMemoryPool``, a reservation is granted whenever anything is
free, even if it is larger than what is free. That is also why every request
that has its reservation can be read to the end (no two half-read requests wait
for each other's memory).

The reservation is bookkeeping: bodies are still received in steps as bytes
arrive (server.py), so a client that declares 100 MiB and sends nothing holds
almost no memory, only a reservation that the idle-connection timeout ends.

Waiters are served in arrival order. Not thread-safe: lives on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

__all__ = ["RequestMemoryPool"]


class RequestMemoryPool:
    """``capacity`` bytes of requests in flight; ``capacity <= 0`` means no limit (Kafka's -1)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        """Reservations waiting for memory."""
        return len(self._waiters)

    def _available(self) -> bool:
        return self.capacity <= 0 or self.used < self.capacity

    async def acquire(self, size: int) -> None:
        """Reserve ``size`` bytes, waiting while the pool is exhausted."""
        if not self._waiters and self._available():
            self.used += size
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((size, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted, but the waiter went away
                self.release(size)
            else:
                with contextlib.suppress(ValueError):  # already dropped by _grant
                    self._waiters.remove((size, fut))
            raise

    def release(self, size: int) -> None:
        self.used -= size
        self._grant()

    def _grant(self) -> None:
        while self._waiters and self._available():
            size, fut = self._waiters.popleft()
            if not fut.done():
                self.used += size
                fut.set_result(None)
