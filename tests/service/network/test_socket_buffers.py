"""Socket buffers of client connections: ``socket.send.buffer.bytes`` and ``socket.receive.buffer.bytes``.

* The server sets ``SO_SNDBUF`` and ``SO_RCVBUF`` of each accepted connection to the sizes
  given, and leaves the OS's own (which grow with the traffic) for -1.
* A broker process started with its defaults has a 100 KiB send buffer on a client's
  connection (Linux reports it doubled) and the OS's receive buffer, seen from outside with
  ``ss``; a broker given -1 keeps the OS's send buffer too.
* The configs refuse sizes below -1.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import subprocess
from typing import Any

import pytest

from common.config.broker import BrokerConfig
from service.network.server import KafkaServer
from tests.e2e.helpers import wait_until

KIB = 1024


class _Silent:
    def dispatch(self, frame: Any, conn: Any) -> Any:
        return asyncio.get_running_loop().create_future()


async def _accepted(server: KafkaServer) -> socket.socket:
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not server._connections:
        assert loop.time() < deadline, "connection not accepted"
        await asyncio.sleep(0.01)
    writer.close()
    return next(iter(server._connections)).sock


def test_accepted_connections_get_the_buffer_sizes_given_and_the_os_default_for_minus_one() -> None:
    async def main() -> tuple[tuple[int, int], tuple[int, int]]:
        sizes = []
        for send, receive in ((100 * KIB, 96 * KIB), (-1, -1)):
            server = KafkaServer(_Silent(), "127.0.0.1", 0, send_buffer_bytes=send, receive_buffer_bytes=receive)
            await server.start()
            try:
                sock = await _accepted(server)
                sizes.append((sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                              sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)))
            finally:
                await server.close()
        return sizes[0], sizes[1]

    (send, receive), (default_send, default_receive) = asyncio.run(main())
    assert (send, receive) == (2 * 100 * KIB, 2 * 96 * KIB)  # Linux doubles what is set
    assert default_send != send and default_receive != receive  # the kernel's, untouched


def test_the_buffer_configs_default_to_kafkas_send_size_and_the_os_receive_size() -> None:
    config = BrokerConfig({})
    assert config.get_int("socket.send.buffer.bytes") == 102400
    assert config.get_int("socket.receive.buffer.bytes") == -1
    for key in ("socket.send.buffer.bytes", "socket.receive.buffer.bytes"):
        with pytest.raises(ValueError, match=key):
            BrokerConfig({key: "-2"})


def _send_buffers(port: int) -> list[int]:
    """``tb`` (the send buffer) of every established connection whose local port is ``port``."""
    out = subprocess.run(["ss", "-tmnH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    return [int(m) for m in re.findall(r"\btb(\d+)", out)]


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_a_broker_gives_client_connections_a_100_kib_send_buffer(start_broker: Any) -> None:
    for sets, expected in (({}, 2 * 102400), ({"socket.send.buffer.bytes": "-1"}, None)):
        broker = start_broker(sets=sets)
        with socket.create_connection((broker.host, broker.port)):
            wait_until(lambda: _send_buffers(broker.port), timeout=10, what="the connection in ss")
            buffers = _send_buffers(broker.port)
            if expected is None:
                assert all(b != 2 * 102400 for b in buffers), buffers
            else:
                assert buffers == [expected]
