"""TLS under the connection loop: :class:`TlsTransport` (``ssl.SSLObject`` over two
``MemoryBIO``\\s on the non-blocking socket).

The connection loop is unchanged: it reads frames and writes responses in order
through the :class:`service.transport.Transport` calls; this class encrypts and
decrypts in between. ``sendfile`` cannot encrypt, so a response's file regions are
read with ``preadv`` straight into one reused buffer of ``CHUNK_BYTES`` (small
parts are copied beside them), each full buffer is encrypted in one ``SSLObject.write``
and its ciphertext sent, one event-loop step each: large reads, three copies of a
record's bytes (read, encrypt, hand to the kernel), and other connections get the
loop between chunks.

The handshake is bounded: at most ``max_handshake_bytes`` from the client and
``timeout_s`` in all, else the connection is closed (a client that stalls or sends
garbage costs one connection, nothing else).

Ciphertext leaves in the order ``SSLObject`` made it: every flush takes all pending
ciphertext under one lock (the reader may have to send too: TLS 1.3 key updates).

Not thread-safe: lives on the event loop of its connection.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from typing import Any, cast

from local_tier.segment import FileRegion
from service.transport import Parts

__all__ = ["CHUNK_BYTES", "TlsHandshakeError", "TlsTransport"]

#: plaintext encrypted and sent per event-loop step
CHUNK_BYTES = 256 * 1024
_RECV_BYTES = 256 * 1024


class TlsHandshakeError(ConnectionError):
    """The TLS handshake failed, stalled or was too large: the connection is closed."""


class TlsTransport:
    """See the module docstring."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        context: ssl.SSLContext,
        *,
        timeout_s: float = 10.0,
        max_handshake_bytes: int = 256 * 1024,
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._in, self._out, server_side=True)
        self._timeout_s = timeout_s
        self._max_handshake_bytes = max_handshake_bytes
        self._send_lock = asyncio.Lock()
        self._buffer: bytearray | None = None

    async def handshake(self) -> None:
        try:
            await asyncio.wait_for(self._handshake(), self._timeout_s)
        except TimeoutError:
            raise TlsHandshakeError(f"TLS handshake not done in {self._timeout_s:.0f} s") from None

    async def _handshake(self) -> None:
        received = 0
        while True:
            try:
                self._ssl.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                data = await self._loop.sock_recv(self._sock, 64 * 1024)
                if not data:
                    raise TlsHandshakeError("the client left during the TLS handshake") from None
                received += len(data)
                if received > self._max_handshake_bytes:
                    raise TlsHandshakeError(
                        f"TLS handshake larger than {self._max_handshake_bytes} bytes"
                    ) from None
                self._in.write(data)
            except ssl.SSLError as exc:
                await self._flush_quietly()  # the alert, so the client sees why
                raise TlsHandshakeError(f"TLS handshake failed: {exc.reason or exc}") from None
        await self._flush()

    def peer_certificate(self) -> dict[str, Any] | None:
        cert = self._ssl.getpeercert()
        return cert or None

    @property
    def version(self) -> str | None:
        return self._ssl.version()

    # -- receiving ----------------------------------------------------------------------

    async def recv(self, size: int) -> bytes:
        while True:
            try:
                data = self._ssl.read(size)
            except ssl.SSLWantReadError:
                if not await self._fill():
                    return b""
                continue
            except ssl.SSLZeroReturnError:
                return b""
            except ssl.SSLError as exc:
                raise ConnectionError(f"TLS: {exc.reason or exc}") from None
            if self._out.pending:
                await self._flush()
            return data

    async def recv_into(self, view: memoryview) -> int:
        while True:
            try:
                got = cast(int, self._ssl.read(len(view), view))  # with a buffer: a count
            except ssl.SSLWantReadError:
                if not await self._fill():
                    return 0
                continue
            except ssl.SSLZeroReturnError:
                return 0
            except ssl.SSLError as exc:
                raise ConnectionError(f"TLS: {exc.reason or exc}") from None
            if self._out.pending:
                await self._flush()
            return got

    async def _fill(self) -> bool:
        """More ciphertext from the socket into the SSL object; False at end of stream."""
        if self._out.pending:
            await self._flush()
        data = await self._loop.sock_recv(self._sock, _RECV_BYTES)
        if not data:
            return False
        self._in.write(data)
        return True

    # -- sending ------------------------------------------------------------------------

    async def send(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        for start in range(0, len(view), CHUNK_BYTES):
            self._ssl.write(view[start : start + CHUNK_BYTES])
            await self._flush()

    async def send_parts(self, parts: Parts) -> None:
        """Regions read into one buffer beside the small parts, encrypted a chunk at a time."""
        if self._buffer is None:
            self._buffer = bytearray(CHUNK_BYTES)
        buffer = memoryview(self._buffer)
        fill = 0
        for part in parts:
            if isinstance(part, FileRegion):
                fd, position, left = part.file.fileno(), part.position, part.length
                while left:
                    if fill == CHUNK_BYTES:
                        await self._encrypt(buffer[:fill])
                        fill = 0
                    want = min(left, CHUNK_BYTES - fill)
                    got = os.preadv(fd, [buffer[fill : fill + want]], position)
                    if got <= 0:  # the file is shorter than the region: never send a short frame
                        raise ConnectionError(f"file region ended early ({left} bytes missing)")
                    fill, position, left = fill + got, position + got, left - got
                continue
            view = memoryview(part)
            if len(view) >= CHUNK_BYTES:  # large buffers (history) are encrypted where they are
                if fill:
                    await self._encrypt(buffer[:fill])
                    fill = 0
                for start in range(0, len(view), CHUNK_BYTES):
                    await self._encrypt(view[start : start + CHUNK_BYTES])
                continue
            while len(view):
                if fill == CHUNK_BYTES:
                    await self._encrypt(buffer[:fill])
                    fill = 0
                take = min(len(view), CHUNK_BYTES - fill)
                buffer[fill : fill + take] = view[:take]
                fill += take
                view = view[take:]
        if fill:
            await self._encrypt(buffer[:fill], last=True)

    async def _encrypt(self, plaintext: memoryview, last: bool = False) -> None:
        self._ssl.write(plaintext)
        await self._flush()
        if not last:
            await asyncio.sleep(0)  # one chunk per event-loop step: other connections go on

    async def _flush(self) -> None:
        async with self._send_lock:
            while self._out.pending:
                await self._loop.sock_sendall(self._sock, self._out.read())

    async def _flush_quietly(self) -> None:
        try:
            await asyncio.wait_for(self._flush(), 1.0)
        except (OSError, TimeoutError):
            pass
