"""The memory of requests in flight, shared by all connections (``queued.max.request.bytes``).

A connection reserves a request's memory here as its body arrives, one step (up to
1 MiB) ahead of the bytes received, and the reservation is returned when the handler
is done with the request. When the pool is exhausted, a large request waits for
memory before its next step (Kafka mutes the channel the same way), so the bytes of
requests being read or handled stay near ``capacity``: like Kafka's non-strict
``SimpleMemoryPool``, a reservation is granted whenever anything is free, even if it
is larger than what is free.

What a request has not sent reserves nothing: a client that declares 100 MiB and
sends one byte holds one step, not 100 MiB, so a few stalled connections cannot
exhaust the pool for everyone (issue #36), and the server closes a request that does
not keep a minimum byte rate (server.py). Small requests (ApiVersions, Metadata,
heartbeats, Fetch, most Produce) are counted with :meth:`take` and never wait: the
memory large ones wait for never stops them.

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
        #: bytes of finished request buffers that connections keep for their next requests
        #: (:mod:`service.network.body`), outside ``used``; bounded there, server-wide
        self.kept = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        """Reservations waiting for memory."""
        return len(self._waiters)

    def _available(self) -> bool:
        return self.capacity <= 0 or self.used < self.capacity

    def take(self, size: int) -> None:
        """Count ``size`` bytes as in use without waiting (a small request)."""
        self.used += size

    async def acquire(self, size: int) -> bool:
        """Reserve ``size`` bytes, waiting while the pool is exhausted; whether it waited."""
        if not self._waiters and self._available():
            self.used += size
            return False
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
        return True

    def release(self, size: int) -> None:
        self.used -= size
        self._grant()

    def _grant(self) -> None:
        while self._waiters and self._available():
            size, fut = self._waiters.popleft()
            if not fut.done():
                self.used += size
                fut.set_result(None)
