"""How a connection's bytes reach the socket: the :class:`Transport` seam.

:class:`PlainTransport` is the socket itself: received with ``recv`` as it comes (the
socket stays in the loop's watch list between receives), responses sent by
:mod:`fetch.sending` (``sendfile`` from the page cache, history on sender threads).
:class:`service.security.tls_transport.TlsTransport` puts TLS under the same calls.
The connection loop (:mod:`service.network.server`) sees only this interface, so
framing, ordering and memory bounds are the same for both.

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

    def release(self) -> None:
        """Stop watching the socket: called once, before the connection closes it."""


class PlainTransport:
    """The socket as it is: see the module docstring.

    A receive reads the socket at once and waits only when it is empty. The wait keeps the
    socket in the event loop's watch list from one receive to the next: the loop's own
    ``sock_recv`` adds and removes it around every call, eight system calls and two poll
    handles per request that a connection at one request per round trip paid for nothing.
    The socket leaves the list when it turns readable with nobody waiting (level-triggered
    polling would call back on every turn until someone reads), and at :meth:`release`.
    A call with nobody waiting and nothing to read (a readiness polled before the woken
    receive read, which loops without uvloop deliver) leaves it watched. A receive after
    one that got bytes yields one turn of the loop first; a receive just woken reads at once.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        history: HistorySender | None,
        track: Callable[[Future[tuple[int, int] | None]], None],
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._history = history
        self._track = track
        self._waiter: asyncio.Future[None] | None = None
        self._watched = False
        #: a receive that got bytes gives the other connections a turn before the next one
        #: (as ``sock_recv`` did): a client that keeps its socket full would otherwise hold
        #: the loop, and the fetches its produces wake on other connections would wait (at
        #: 20,000 one-record produces/s, seconds). After a request, that turn is when the
        #: fetches it woke are answered.
        self._owes_turn = False

    async def handshake(self) -> None:
        return None

    async def recv(self, size: int) -> bytes:
        return await self._receive(self._sock.recv, size)

    async def recv_into(self, view: memoryview) -> int:
        return await self._receive(self._sock.recv_into, view)

    async def _receive(self, receive: Callable[[Any], Any], arg: Any) -> Any:
        while True:
            if self._owes_turn:
                self._owes_turn = False
                await asyncio.sleep(0)
            try:
                got = receive(arg)
            except (BlockingIOError, InterruptedError):
                await self._readable()
                continue
            self._owes_turn = True
            return got

    def _readable(self) -> asyncio.Future[None]:
        if self._fd < 0:
            raise ConnectionError("the connection is closing")
        waiter = self._waiter = self._loop.create_future()
        if not self._watched:
            self._loop.add_reader(self._fd, self._on_readable)
            self._watched = True
        return waiter

    def _on_readable(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        elif self._unread():  # nobody reads now: unwatched until someone waits
            self._unwatch()

    def _unread(self) -> bool:
        """Bytes (or the peer's close, or an error) the socket holds for a receive."""
        try:
            self._sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        return True

    def _unwatch(self) -> None:
        if self._watched:
            self._watched = False
            self._loop.remove_reader(self._fd)

    def release(self) -> None:
        self._unwatch()
        self._fd = -1
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.cancel()  # its reader is being cancelled by the close

    async def send(self, data: bytes | memoryview) -> None:
        await self._loop.sock_sendall(self._sock, data)

    async def send_parts(self, parts: Parts) -> None:
        if self._history is not None and carries_history(parts):
            await self._history.send(self._loop, self._sock, parts, self._track)
        else:
            await send_parts(self._loop, self._sock, parts)

    def peer_certificate(self) -> dict[str, Any] | None:
        return None
