"""Memory of requests in flight: the shared pool (``queued.max.request.bytes``) and the server's use of it.

* :class:`RequestMemoryPool` grants while anything is free (Kafka's non-strict pool),
  serves waiters in order, and forgets waiters that went away.
* A server whose pool holds three 1 MiB requests reads no fourth one until a handler
  finishes, over real sockets; the reservations all come back.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from service.network.request_memory import RequestMemoryPool
from service.network.server import KafkaServer


def test_pool_grants_while_anything_is_free_and_serves_waiters_in_order() -> None:
    async def main() -> None:
        pool = RequestMemoryPool(100)
        await pool.acquire(60)
        await pool.acquire(60)  # 40 free: granted, the pool goes over (non-strict)
        assert pool.used == 120
        order: list[str] = []

        async def wait(name: str, size: int) -> None:
            await pool.acquire(size)
            order.append(name)

        first = asyncio.create_task(wait("first", 10))
        gone = asyncio.create_task(wait("gone", 10))
        last = asyncio.create_task(wait("last", 10))
        await asyncio.sleep(0)
        assert pool.waiting == 3 and not order
        gone.cancel()
        await asyncio.sleep(0)
        assert pool.waiting == 2
        pool.release(60)  # 60 used: both waiters fit
        await asyncio.gather(first, last)
        assert order == ["first", "last"] and pool.used == 80

    asyncio.run(main())


def test_unlimited_pool_never_waits() -> None:
    async def main() -> None:
        pool = RequestMemoryPool(-1)
        for _ in range(10):
            await asyncio.wait_for(pool.acquire(1 << 30), 1)

    asyncio.run(main())


class _HeldDispatcher:
    """Handles a request only when the test says so."""

    def __init__(self) -> None:
        self.seen: list[asyncio.Future[Any]] = []

    def dispatch(self, frame: Any, conn: Any) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.seen.append(fut)
        return fut


async def _wait_for(condition: Any, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def test_server_reads_no_more_requests_than_the_pool_holds() -> None:
    mib = 1024 * 1024

    async def main() -> None:
        dispatcher = _HeldDispatcher()
        server = KafkaServer(dispatcher, "127.0.0.1", 0, max_request_bytes=mib,
                             queued_max_request_bytes=3 * mib)
        await server.start()
        writers = []
        try:
            for _ in range(6):
                _, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(struct.pack(">ihhi", mib, 18, 0, 1) + bytes(mib - 8))
                writers.append(writer)
            await _wait_for(lambda: len(dispatcher.seen) == 3)
            await asyncio.sleep(0.3)
            assert len(dispatcher.seen) == 3 and server.memory.used == 3 * mib
            dispatcher.seen[0].set_result(None)  # one handler done (acks=0: nothing to send)
            await _wait_for(lambda: len(dispatcher.seen) == 4)
            for fut in dispatcher.seen:
                if not fut.done():
                    fut.set_result(None)
            await _wait_for(lambda: len(dispatcher.seen) == 6)
            for fut in dispatcher.seen:
                if not fut.done():
                    fut.set_result(None)
            await _wait_for(lambda: server.memory.used == 0)
        finally:
            for writer in writers:
                writer.close()
            await server.close()

    asyncio.run(main())


def test_a_client_that_leaves_mid_request_gives_its_memory_back() -> None:
    mib = 1024 * 1024

    async def main() -> None:
        dispatcher = _HeldDispatcher()
        server = KafkaServer(dispatcher, "127.0.0.1", 0, max_request_bytes=mib, queued_max_request_bytes=mib)
        await server.start()
        try:
            for _ in range(5):  # each would exhaust the pool if its reservation stayed
                _, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(struct.pack(">ihhi", mib, 18, 0, 1) + bytes(1000))
                await writer.drain()
                await _wait_for(lambda: server.memory.used == mib)
                writer.close()
                await _wait_for(lambda: server.memory.used == 0)
        finally:
            await server.close()

    asyncio.run(main())


def test_stalled_large_requests_never_stop_small_ones() -> None:
    """Three clients declare large requests and stall after a few bytes (issue #36): they
    hold a step of memory each, not what they declared, and a small request on another
    connection is read at once. The old pool reserved the declared size up front, so
    the fourth connection waited until a stalled one was closed."""
    mib = 1024 * 1024

    async def main() -> None:
        dispatcher = _HeldDispatcher()
        server = KafkaServer(dispatcher, "127.0.0.1", 0, max_request_bytes=8 * mib,
                             queued_max_request_bytes=8 * mib)
        await server.start()
        writers = []
        try:
            for _ in range(3):
                _, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(struct.pack(">ihhi", 8 * mib, 0, 9, 1) + bytes(100))
                writers.append(writer)
            await _wait_for(lambda: sum(c.receiving_body for c in server._connections) == 3)
            assert server.memory.used < 4 * mib  # what came and a step each, not 3 x 8 MiB
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writers.append(writer)
            writer.write(struct.pack(">ihhi", 12, 18, 0, 7) + bytes(4))  # ApiVersions-sized
            await _wait_for(lambda: len(dispatcher.seen) == 1, timeout=1.0)
            # and a large request that arrives whole is read too: memory is left for it
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writers.append(writer)
            writer.write(struct.pack(">ihhi", 2 * mib, 0, 9, 8) + bytes(2 * mib - 8))
            await _wait_for(lambda: len(dispatcher.seen) == 2, timeout=2.0)
            for fut in dispatcher.seen:
                fut.set_result(None)
        finally:
            for writer in writers:
                writer.close()
            await server.close()
        assert server.memory.used == 0

    asyncio.run(main())


def test_a_request_that_trickles_in_is_closed() -> None:
    """A client that sends a byte every 0.2 s never lets its request finish; it is closed
    once the grace has passed at a rate under the minimum, with no memory shortage
    needed. The old server kept it open as long as a byte came every 10 s."""
    async def main() -> None:
        dispatcher = _HeldDispatcher()
        server = KafkaServer(dispatcher, "127.0.0.1", 0, max_request_bytes=1 << 20,
                             request_min_rate_bytes=1000, request_receive_grace_ms=600)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(struct.pack(">ihhi", 4096, 0, 9, 1))
            loop = asyncio.get_running_loop()
            started = loop.time()
            closed_after = None
            while loop.time() - started < 5:
                writer.write(b"\x00")
                try:
                    await writer.drain()
                    if await asyncio.wait_for(reader.read(1), 0.2) == b"":
                        closed_after = loop.time() - started
                        break
                except TimeoutError:
                    continue
                except ConnectionError:
                    closed_after = loop.time() - started
                    break
            writer.close()
            assert closed_after is not None, "the trickling request was never closed"
            assert closed_after < 3
            assert not dispatcher.seen and server.memory.used == 0
            # a request that keeps the rate is read whole
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(struct.pack(">ihhi", 200_000, 0, 9, 2) + bytes(200_000 - 8))
            await _wait_for(lambda: len(dispatcher.seen) == 1)
            dispatcher.seen[0].set_result(None)
            writer.close()
        finally:
            await server.close()

    asyncio.run(main())
