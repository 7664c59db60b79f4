"""How a connection's bytes reach the socket: the :class:`Transport` seam.

:class:`PlainTransport` is the socket itself: received with ``sock_recv``, responses
sent by :mod:`fetch.sending` (``sendfile`` from the page cache, history on
sender threads). :class:`service.security.tls_transport.TlsTransport` puts TLS
under the same five calls. The connection loop (:mod:`service.network.server`) sees only
this interface, so framing, ordering and memory bounds are the same for both.

Not thread-safe: a transport lives on the event loop of its connection.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from fetch.sending import HistorySender, carries_history, send_parts
from local_tier.segment import FileRegion

__all__ = ["Parts", "PlainTransport", "Transport"]

Parts = list[bytes | memoryview | FileRegion]


class Transport(Protocol):
    """One connection's byte stream (see the module docstring)."""

    async def handshake(self) -> None:
        """Whatever must happen before the first request (nothing, or TLS's handshake)."""

    async def recv(self, size: int) -> bytes:
        """Up to ``size`` bytes; ``b""`` when the peer closed."""

    async def recv_into(self, view: memoryview) -> int:
        """Bytes received into ``view``; 0 when the peer closed."""

    async def send(self, data: bytes | memoryview) -> None:
        """All of ``data``."""

    async def send_parts(self, parts: Parts) -> None:
        """A response as parts (bytes, views, file regions), all of it, in order."""

    def peer_certificate(self) -> dict[str, Any] | None:
        """The client's verified certificate (``SSLSocket.getpeercert()``), if any."""


class PlainTransport:
    """The socket as it is: see the module docstring."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        history: HistorySender | None,
        track: Callable[[Future[tuple[int, int] | None]], None],
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._history = history
        self._track = track

    async def handshake(self) -> None:
        return None

    async def recv(self, size: int) -> bytes:
        return await self._loop.sock_recv(self._sock, size)

    async def recv_into(self, view: memoryview) -> int:
        return await self._loop.sock_recv_into(self._sock, view)

    async def send(self, data: bytes | memoryview) -> None:
        await self._loop.sock_sendall(self._sock, data)

    async def send_parts(self, parts: Parts) -> None:
        if self._history is not None and carries_history(parts):
            await self._history.send(self._loop, self._sock, parts, self._track)
        else:
            await send_parts(self._loop, self._sock, parts)

    def peer_certificate(self) -> dict[str, Any] | None:
        return None
