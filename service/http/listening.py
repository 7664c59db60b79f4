"""The HTTP listener's socket and accept loop: :class:`HttpListener`.

aiohttp's sites hand every accepted socket to the event loop, which completes a TLS
handshake before the application sees the connection; a client that opens connections
and never finishes a handshake would then hold descriptors unchecked. Here each socket
is screened right after ``accept``, before any handshake:

- at most ``http.max.connections`` (Strata) open or handshaking connections; more are
  closed at once (the HTTP listener serves operators and scrapers, not clients);
- the open-files guard (:meth:`~service.quotas.connections.ConnectionQuotas.files_allow`):
  a connection inside the second half of ``connections.reserved.fds`` is closed at once.

Refusals are counted in ``strata_connections_refused_total{listener="HTTP"}``. An admitted
socket goes to aiohttp's handler factory through ``loop.connect_accepted_socket`` (TLS
there, bounded by ``ssl.handshake.timeout.ms``), each on a task of its own so a slow
handshake never holds the accept loop.

Not thread-safe: runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

from service.network.eager import cancel_and_wait
from service.quotas.connections import ConnectionQuotas

__all__ = ["HttpListener"]

log = logging.getLogger("strata.http")

LISTENER = "HTTP"
MAX_CONNECTIONS = "max_connections"


class HttpListener:
    """See the module docstring."""

    def __init__(self, host: str, port: int, factory: Callable[[], Any], open_connections: Callable[[], int], *,
                 ssl_context: ssl.SSLContext | None, limits: ConnectionQuotas | None, max_connections: int,
                 handshake_timeout_s: float = 10.0) -> None:
        self._host, self._port = host, port
        self._factory = factory
        self._open = open_connections  # aiohttp's count of the connections it serves
        self._ssl = ssl_context
        self._limits = limits
        self._max = max_connections
        self._handshake_timeout_s = handshake_timeout_s
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._connecting: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Bind, listen and accept; the bound port."""
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._accepting = asyncio.create_task(self._accept_loop(), name="http-accept")
        return int(sock.getsockname()[1])

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        while True:
            try:
                client, addr = await loop.sock_accept(self._sock)
            except OSError as exc:  # e.g. EMFILE: the served connections go on
                log.warning("HTTP accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            if not self._admit(client, str(addr[0])):
                client.close()
                continue
            task = asyncio.create_task(self._connect(loop, client, str(addr[0])))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    def _admit(self, client: socket.socket, ip: str) -> bool:
        if self._open() + len(self._connecting) >= self._max:
            if self._limits is not None:
                self._limits.refuse(LISTENER, MAX_CONNECTIONS, "listener HTTP: refusing a connection from %s: "
                                    "%d are open (http.max.connections)", ip, self._max)
            return False
        return self._limits is None or self._limits.files_allow(LISTENER, ip, client.fileno())

    async def _connect(self, loop: asyncio.AbstractEventLoop, client: socket.socket, ip: str) -> None:
        try:
            await loop.connect_accepted_socket(self._factory, client, ssl=self._ssl,
                                               ssl_handshake_timeout=self._handshake_timeout_s if self._ssl else None)
        except (OSError, ssl.SSLError, TimeoutError) as exc:  # a failed or stalled handshake: that one only
            log.debug("HTTP connection from %s: %s", ip, exc)
            client.close()
        except asyncio.CancelledError:
            client.close()
            raise

    async def close(self) -> None:
        """Stop accepting; connections aiohttp serves are its to close (AppRunner.cleanup)."""
        for task in [self._accepting, *self._connecting]:
            if task is not None:
                await cancel_and_wait(task)
        if self._sock is not None:
            self._sock.close()
