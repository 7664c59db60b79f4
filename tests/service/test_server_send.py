"""How the server writes a response made of parts (service/server.py ``_send_parts``).

* Large buffers (records read from the bucket) go to the socket in slices of at
  most ``SEND_SLICE_BYTES``, with a yield to the event loop after each: another
  connection's task runs between the slices of a 16 MiB response even when the
  kernel takes every slice at once.
* Over a real socket, a response mixing small and large parts arrives whole and
  in order.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from service import server
from service.server import SEND_SLICE_BYTES, _send_parts


class _InstantLoop:
    """Stands in for the loop: ``sock_sendall`` takes everything at once, never yields."""

    def __init__(self) -> None:
        self.sends: list[bytes] = []

    async def sock_sendall(self, sock: Any, data: Any) -> None:
        self.sends.append(bytes(data))


def test_large_parts_go_out_in_slices_with_other_tasks_running_between_them() -> None:
    big = os.urandom(3 * SEND_SLICE_BYTES + 123)
    parts: list[Any] = [b"header", memoryview(big), b"trailer"]
    fake = _InstantLoop()
    ticks: list[int] = []

    async def other_connection() -> None:
        while True:
            ticks.append(len(fake.sends))
            await asyncio.sleep(0)

    async def main() -> None:
        other = asyncio.create_task(other_connection())
        await asyncio.sleep(0)
        await _send_parts(fake, None, parts)  # type: ignore[arg-type]
        other.cancel()

    asyncio.run(main())
    assert b"".join(fake.sends) == b"header" + big + b"trailer"
    assert all(len(s) <= SEND_SLICE_BYTES for s in fake.sends[1:-1])
    assert len(fake.sends) == 1 + 4 + 1
    # the other task saw the send in progress after each slice, not just before and after
    assert set(range(2, 6)) <= set(ticks)


def test_a_mixed_response_arrives_whole_and_in_order_over_a_socket() -> None:
    chunks = [os.urandom(n) for n in (100, server.SENDFILE_MIN_BYTES, 5 * SEND_SLICE_BYTES + 7, 3)]
    parts: list[Any] = [chunks[0], memoryview(chunks[1]), memoryview(chunks[2])[1:], chunks[3]]
    expected = chunks[0] + chunks[1] + chunks[2][1:] + chunks[3]

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        received = bytearray()

        async def read() -> None:
            while len(received) < len(expected):
                received.extend(await loop.sock_recv(b, 1 << 16))

        reader = asyncio.create_task(read())
        await _send_parts(loop, a, parts)
        await asyncio.wait_for(reader, 10)
        a.close()
        b.close()
        return bytes(received)

    assert asyncio.run(main()) == expected
