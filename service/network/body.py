"""How a connection receives request bodies: in steps as their bytes arrive, each step's
memory reserved in the shared :class:`~service.network.request_memory.RequestMemoryPool`
first (small requests are counted and never wait), the byte rate watched, and finished
buffers kept for the next large requests (:class:`RequestBodies`, a part of
:class:`~service.network.server.Connection`; see that module's docstring).

Not thread-safe: lives on the event loop.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from service.network.request_memory import RequestMemoryPool

if TYPE_CHECKING:
    from service.network.transport import Transport

__all__ = ["SMALL_REQUEST_BYTES", "RequestBodies"]

#: a body being received grows by at most this much beyond what has arrived
_BODY_STEP = 1024 * 1024
#: what a growing body is extended with (no fresh zero-filled allocation per step)
_ZEROS = memoryview(bytes(_BODY_STEP))
#: request buffers a connection keeps for its next requests, and the largest it keeps
_MAX_SPARES = 2
_MAX_SPARE_BYTES = 8 * _BODY_STEP
#: what all the connections of a server keep at most, together: thousands of producers
#: must not hold two buffers each between their requests
MAX_KEPT_BYTES = 64 * _BODY_STEP
#: requests up to this size are counted in the memory pool but never wait for it (what
#: large requests wait for must not stop ApiVersions, Metadata, Fetch, small Produce)
SMALL_REQUEST_BYTES = 64 * 1024


def _first_step(size: int, have: int) -> int:
    """How large a new body buffer is made: a body up to ``_BODY_STEP`` whole, rounded up to
    a sixteenth of the next power of two (less than 1/8 more than it needs), so that the next
    requests of about its size (a producer's ~1 MB batches, each a little different) fit in
    it when it is recycled; a larger body only its first step (it grows as bytes arrive)."""
    if size > _BODY_STEP:
        return max(_BODY_STEP, have)
    if size <= SMALL_REQUEST_BYTES:
        return SMALL_REQUEST_BYTES
    step = (1 << (size - 1).bit_length()) // 16
    return -(-size // step) * step


class RequestBodies:
    """The request-body half of a connection: ``transport`` and ``last_active`` are the
    connection's."""

    transport: Transport
    last_active: float

    def __init__(self, memory: RequestMemoryPool) -> None:
        self._memory = memory
        #: a request's body is being received (not waiting for memory): since when, in
        #: event-loop time, and how many bytes came since (the minimum byte rate)
        self.receiving_body = False
        self.body_since = 0.0
        self.body_bytes = 0
        #: pool memory reserved for the request being received
        self._reserved = 0
        self._spare: list[bytearray] = []  # request buffers to reuse (_recycle)

    def slow_body_rate(self, now: float, grace_s: float, min_rate: int) -> float | None:
        """The byte rate of the request being received, if it is below ``min_rate`` once
        ``grace_s`` have passed since its bytes began (or since memory was granted);
        else None."""
        if not self.receiving_body or min_rate <= 0:
            return None
        elapsed = now - self.body_since
        if elapsed <= grace_s:
            return None
        rate = self.body_bytes / elapsed
        return rate if rate < min_rate else None

    async def _read_frame(
        self, loop: asyncio.AbstractEventLoop, buf: bytearray, size: int
    ) -> bytes | memoryview | None:
        """The frame whose size prefix starts ``buf``, received in steps; None if the peer left.

        The body buffer grows by at most ``_BODY_STEP`` beyond the bytes that have
        arrived, and the pool reserves what arrived plus the step being received, so a
        declared size costs memory only as its bytes come in.
        """
        if len(buf) >= 4 + size:
            await self._reserve(loop, size)
            frame = bytearray(memoryview(buf)[4 : 4 + size])
            del buf[: 4 + size]
            return memoryview(frame)
        # a buffer an earlier request is done with, else the first step at once (zero-filled
        # once: growing by += copies what arrived)
        have = len(buf) - 4
        body = self._spare_body(size) or bytearray(_first_step(size, have))
        body[:have] = memoryview(buf)[4:]
        buf.clear()
        self._receiving(loop)
        try:
            while have < size:
                # received only into reserved memory, a step at a time: at the end, ``size``
                if have >= self._reserved:
                    await self._reserve(loop, min(size, have + _BODY_STEP))
                if have == len(body):
                    grow = min(size - have, max(_BODY_STEP, have))
                    while grow > 0:
                        body += _ZEROS[: min(grow, _BODY_STEP)]
                        grow -= _BODY_STEP
                with memoryview(body) as view, view[have : min(self._reserved, len(body))] as free:
                    got = await self.transport.recv_into(free)
                if not got:
                    return None
                have += got
                self.body_bytes += got
                self.last_active = loop.time()
        finally:
            self.receiving_body = False
        # writable: a Produce's batches get their offsets and leader epoch stamped in place
        # (Log.append_as_leader), so a megabyte of records is not copied to be stamped
        return memoryview(body)[:size]

    async def _reserve(self, loop: asyncio.AbstractEventLoop, total: int) -> None:
        """Reserve pool memory for this request up to ``total`` bytes, waiting while the
        pool is exhausted; time spent waiting does not count against the client's byte
        rate."""
        if total <= self._reserved:
            return
        was_receiving, self.receiving_body = self.receiving_body, False
        need = total - self._reserved
        waited = await self._memory.acquire(need)
        self._reserved += need
        self.receiving_body = was_receiving
        if was_receiving and waited:
            self._receiving(loop)

    def _receiving(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bytes of the body are awaited from here on (the byte rate's window starts)."""
        self.receiving_body = True
        self.body_since = loop.time()
        self.body_bytes = 0

    def _request_done(self, size: int, frame: memoryview) -> None:
        """A handler is done with its request: its memory is returned, its buffer kept."""
        self._memory.release(size)
        self._recycle(frame)

    def _recycle(self, frame: memoryview) -> None:
        """A request is done: its body buffer may serve a later one (a fresh megabyte is
        zero-filled and page-faulted in for every produce request otherwise)."""
        body = frame.obj
        frame.release()
        if not isinstance(body, bytearray) or not SMALL_REQUEST_BYTES <= len(body) <= _MAX_SPARE_BYTES:
            return
        if len(self._spare) == _MAX_SPARES:  # the oldest goes
            self._memory.kept -= len(self._spare.pop(0))
        if self._memory.kept + len(body) <= MAX_KEPT_BYTES:
            self._spare.append(body)
            self._memory.kept += len(body)

    def _drop_spares(self) -> None:
        """The connection is closing: the buffers it kept no longer count."""
        self._memory.kept -= sum(len(body) for body in self._spare)
        self._spare.clear()

    def _spare_body(self, size: int) -> bytearray | None:
        """A recycled buffer of at least ``size`` bytes that nothing views any more."""
        for i, body in enumerate(self._spare):
            if len(body) < size:
                continue
            try:  # a bytearray with live views cannot be resized: this one is still in use
                body.append(0)
            except BufferError:
                continue
            del body[-1]
            del self._spare[i]
            self._memory.kept -= len(body)
            return body
        return None
