"""TLS under the connection loop: :class:`TlsTransport` (``ssl.SSLObject`` over two
``MemoryBIO``\\s on the non-blocking socket).

The connection loop is unchanged: it reads frames and writes responses in order
through the :class:`service.transport.Transport` calls; this class encrypts and
decrypts in between.

Sending: ``sendfile`` cannot encrypt, so a response's file regions are read with
``preadv`` into one reused buffer of ``CHUNK_BYTES`` (small parts are copied beside
them; large in-memory parts, history from the bucket, are encrypted where they lie),
each chunk encrypted in one ``SSLObject.write`` and its ciphertext sent, one chunk per
event-loop step. (Encrypting on a thread pool, pipelined with the reads and sends, was
measured slower on 2 cores: more CPU for the broker and the client, bench/tls.py.)

Receiving: ciphertext is read into one reused buffer and decrypted straight into the
request body, as many TLS records per call as are at hand (librdkafka sends about
one record per message, so this loop is the hot path of a TLS produce).

The handshake is bounded: at most ``max_handshake_bytes`` from the client and
``timeout_s`` in all, else the connection is closed (a client that stalls or sends
garbage costs one connection, nothing else).

Not thread-safe: lives on the event loop of its connection. Ciphertext leaves in the
order it was taken from the outgoing BIO: taking and sending happen under one asyncio
lock (the reader takes it too, for TLS 1.3 key updates).
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Iterator
from typing import Any

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
        self._read: Any = self._ssl._sslobj.read  # type: ignore[attr-defined]  # skips ssl.py's wrapper
        self._timeout_s = timeout_s
        self._max_handshake_bytes = max_handshake_bytes
        self._send_lock = asyncio.Lock()
        self._buffer: memoryview | None = None
        self._recv_buffer: memoryview | None = None

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
        """As many whole TLS records as are at hand, decrypted straight into ``view``."""
        got, size = 0, len(view)
        read = self._read  # the C method: clients like librdkafka send a record per message,
        while True:        # so this loop runs about once per KiB received
            try:
                while got < size:
                    got += read(size - got, view[got:])
            except ssl.SSLWantReadError:
                if got:
                    break
                if not await self._fill():
                    return 0
                continue
            except ssl.SSLZeroReturnError:
                return got
            except ssl.SSLError as exc:
                raise ConnectionError(f"TLS: {exc.reason or exc}") from None
            break
        if self._out.pending:
            await self._flush()
        return got

    async def _fill(self) -> bool:
        """More ciphertext from the socket into the SSL object; False at end of stream."""
        if self._out.pending:
            await self._flush()
        if self._recv_buffer is None:
            self._recv_buffer = memoryview(bytearray(_RECV_BYTES))
        got = await self._loop.sock_recv_into(self._sock, self._recv_buffer)
        if not got:
            return False
        self._in.write(self._recv_buffer[:got])
        return True

    # -- sending ------------------------------------------------------------------------

    async def send(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        async with self._send_lock:
            for start in range(0, len(view), CHUNK_BYTES):
                await self._loop.sock_sendall(self._sock, self._encrypt_now(view[start : start + CHUNK_BYTES]))

    async def send_parts(self, parts: Parts) -> None:
        """A response chunk by chunk, one chunk per event-loop step (module docstring)."""
        if self._buffer is None:
            self._buffer = memoryview(bytearray(CHUNK_BYTES))
        async with self._send_lock:
            for count, chunk in enumerate(self._chunks(parts)):
                if count:
                    await asyncio.sleep(0)  # other connections go on between chunks
                await self._loop.sock_sendall(self._sock, self._encrypt_now(chunk))

    def _chunks(self, parts: Parts) -> Iterator[memoryview]:
        """The plaintext of ``parts`` in views of at most ``CHUNK_BYTES`` (of the one buffer,
        filled again only when the caller advances this generator: after encrypting)."""
        assert self._buffer is not None
        buffer, fill = self._buffer, 0
        for part in parts:
            if isinstance(part, FileRegion):
                fd, position, left = part.file.fileno(), part.position, part.length
                while left:
                    if fill == CHUNK_BYTES:
                        yield buffer[:fill]
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
                    yield buffer[:fill]
                    fill = 0
                for start in range(0, len(view), CHUNK_BYTES):
                    yield view[start : start + CHUNK_BYTES]
                continue
            while len(view):
                if fill == CHUNK_BYTES:
                    yield buffer[:fill]
                    fill = 0
                take = min(len(view), CHUNK_BYTES - fill)
                buffer[fill : fill + take] = view[:take]
                fill += take
                view = view[take:]
        if fill:
            yield buffer[:fill]

    def _encrypt_now(self, plaintext: memoryview) -> bytes:
        """The ciphertext of ``plaintext``, with anything else pending before it (callers hold
        the send lock, so it leaves in this order)."""
        self._ssl.write(plaintext)
        return self._out.read()

    async def _flush(self) -> None:
        async with self._send_lock:
            while True:
                pending = self._out.read()
                if not pending:
                    return
                await self._loop.sock_sendall(self._sock, pending)

    async def _flush_quietly(self) -> None:
        try:
            await asyncio.wait_for(self._flush(), 1.0)
        except (OSError, TimeoutError):
            pass
