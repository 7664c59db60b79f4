"""A connection's request bodies: received into buffers it keeps and reuses (service.network.body).

A producer's requests are each a little under its batch size (about 1 MB for librdkafka's
1 MiB ``batch.size``) and no two the same: every one of them used to get a fresh,
zero-filled buffer of its exact size, which the connection then would not keep (only
buffers of 1 MiB and more were kept)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from service.network.body import MAX_KEPT_BYTES, SMALL_REQUEST_BYTES, RequestBodies
from service.network.request_memory import RequestMemoryPool


class _Feed:
    """A transport that hands out the given bytes, at most ``step`` per receive."""

    def __init__(self, data: bytes, step: int = 64 * 1024) -> None:
        self.data, self.pos, self.step = data, 0, step

    async def recv_into(self, view: memoryview) -> int:
        n = min(len(view), self.step, len(self.data) - self.pos)
        view[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


def _receive(bodies: RequestBodies, payload: bytes, first: int) -> memoryview:
    """Receive one frame whose size prefix and first ``first`` body bytes are already read
    (what the connection's reader holds when it sees a frame larger than what it read)."""
    frame = struct.pack(">i", len(payload)) + payload
    buf = bytearray(frame[: 4 + first])
    bodies.transport = _Feed(frame[4 + first :])  # type: ignore[assignment]

    async def run() -> memoryview:
        bodies._reserved = 0
        got = await bodies._read_frame(asyncio.get_running_loop(), buf, len(payload))
        assert got is not None
        return got

    return asyncio.run(run())


def test_bodies_of_about_a_megabyte_reuse_one_buffer() -> None:
    bodies = RequestBodies(RequestMemoryPool(0))
    bodies.last_active = 0.0
    sizes = [1_000_123, 998_001, 1_040_000, 700_000, 1_048_576]
    buffers = []
    for i, size in enumerate(sizes):
        payload = bytes([i + 1]) * size
        frame = _receive(bodies, payload, first=1000)
        assert bytes(frame) == payload  # every byte where it belongs, nothing past the frame
        buffers.append(frame.obj)
        bodies._request_done(0, frame)
    assert all(b is buffers[0] for b in buffers)  # one zero-filled allocation for all five
    assert len(buffers[0]) == 1024 * 1024


def test_a_body_is_never_received_past_its_frame() -> None:
    """A recycled buffer larger than the next frame takes only that frame's bytes: what follows
    on the socket is the next request's."""
    bodies = RequestBodies(RequestMemoryPool(0))
    bodies.last_active = 0.0
    first = _receive(bodies, b"a" * 900_000, first=10)
    kept = first.obj
    bodies._request_done(0, first)
    payload = b"b" * 200_000
    frame = struct.pack(">i", len(payload)) + payload
    bodies.transport = feed = _Feed(frame[14:] + b"NEXT REQUEST")  # type: ignore[assignment]
    buf = bytearray(frame[:14])

    async def run() -> memoryview | None:
        bodies._reserved = 0
        return await bodies._read_frame(asyncio.get_running_loop(), buf, len(payload))

    got = asyncio.run(run())
    assert got is not None and bytes(got) == payload and got.obj is kept
    assert feed.data[feed.pos :] == b"NEXT REQUEST"


def test_small_and_very_large_bodies_are_not_kept() -> None:
    bodies = RequestBodies(RequestMemoryPool(0))
    bodies._recycle(memoryview(bytearray(SMALL_REQUEST_BYTES - 1)))
    bodies._recycle(memoryview(bytearray(64 * 1024 * 1024)))
    assert bodies._spare == []
    bodies._recycle(memoryview(bytearray(SMALL_REQUEST_BYTES)))
    assert len(bodies._spare) == 1


def test_what_the_connections_keep_is_bounded_server_wide() -> None:
    """Every connection keeps at most two buffers, and all of a server's connections together
    at most MAX_KEPT_BYTES: thousands of producers do not each hold two between requests."""
    pool = RequestMemoryPool(0)
    conns = [RequestBodies(pool) for _ in range(MAX_KEPT_BYTES // (1024 * 1024) + 5)]
    for conn in conns:
        conn._recycle(memoryview(bytearray(1024 * 1024)))
    assert pool.kept == MAX_KEPT_BYTES
    assert sum(len(c._spare) for c in conns) == MAX_KEPT_BYTES // (1024 * 1024)
    first = conns[0]
    first._recycle(memoryview(bytearray(1024 * 1024)))  # over the budget: not kept
    assert len(first._spare) == 1 and pool.kept == MAX_KEPT_BYTES
    assert first._spare_body(1000) is not None and pool.kept == MAX_KEPT_BYTES - 1024 * 1024
    for _ in range(3):  # two at most per connection: the oldest goes
        conns[-1]._recycle(memoryview(bytearray(128 * 1024)))
    assert len(conns[-1]._spare) == 2
    conns[1]._drop_spares()  # a closed connection's buffers no longer count
    assert conns[1]._spare == []
    assert pool.kept == sum(len(b) for c in conns for b in c._spare)


@pytest.mark.parametrize("size", [65_537, 100_000, 520_000, 700_000, 917_505, 1_000_123, 1_048_576])
def test_a_new_body_is_at_most_an_eighth_larger_than_its_frame(size: int) -> None:
    """What the memory pool counts is the frame: the buffer around it may not be much more."""
    bodies = RequestBodies(RequestMemoryPool(0))
    bodies.last_active = 0.0
    frame = _receive(bodies, b"z" * size, first=100)
    assert size <= len(frame.obj) <= size * 9 // 8 + 1
