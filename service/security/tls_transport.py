"""TLS under the connection loop: :class:`TlsTransport`, a pyOpenSSL connection over two
memory BIOs on the non-blocking socket, in the OpenSSL of :mod:`service.security.tls_engine`.

The connection loop is unchanged: it reads frames and writes responses in order
through the :class:`service.network.transport.Transport` calls; this class encrypts and
decrypts in between. The handshake goes through pyOpenSSL; records go through
``cryptography``'s C bindings (``SSL_read``/``SSL_write``/``BIO_*``), one call per record
and none of pyOpenSSL's per-call buffers.

Receiving: ciphertext is read from the socket into the connection's buffer (64 KiB,
grown to 1 MiB once a read fills it: on loopback each read that opens the window sends the
client's queued segments from the broker's own system call, so fewer, larger reads cost
the broker less, as a plaintext body read whole does), handed to OpenSSL 64 KiB at a
time, and decrypted straight into the request body, as many TLS records per call as are
at hand (librdkafka sends about one record per buffer piece, so this loop is the hot path
of a TLS produce). The loop over slices and records is in C when
``service.security._tlsread`` is built (``_tlsread.c``), in Python otherwise.

Sending: ``sendfile`` cannot encrypt, so a response's file regions are read (those not in
the page cache first read through it on a worker thread) with
``preadv`` into a buffer of ``CHUNK_BYTES`` shared by the thread's connections (small
parts are copied beside them; large in-memory parts, history from the bucket, are
encrypted where they lie). A chunk is encrypted a record at a time into the
connection's ciphertext buffer and sent, one chunk per event-loop step. The shared
buffer is filled and encrypted with no ``await`` in between, so no other connection
touches it meanwhile; the memory BIOs never hold more than a record or a slice.

The handshake is bounded: at most ``max_handshake_bytes`` from the client and
``timeout_s`` in all, else the connection is closed (a client that stalls or sends
garbage costs one connection, nothing else).

Not thread-safe: lives on the event loop of its connection. Ciphertext leaves in the
order OpenSSL wrote it: taking it from the outgoing BIO and sending happen under one
asyncio lock (the reader takes it too, for what a read makes OpenSSL write, as TLS 1.3
key updates).
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import threading
from collections.abc import Callable, Generator
from typing import Any

from OpenSSL import SSL

from fetch.sending import warm_cold_regions
from local_tier.segment import FileRegion
from service.network.transport import Parts
from service.security.tls_engine import (
    address,
    c_record_loop,
    ffi,
    lib,
    peer_certificate,
    ssl_error_reason,
)

__all__ = ["CHUNK_BYTES", "TlsHandshakeError", "TlsTransport", "record_step"]

#: plaintext encrypted and sent per event-loop step
CHUNK_BYTES = 256 * 1024
_RECORD = 16 * 1024  # TLS's largest plaintext record
_CIPHERTEXT_BYTES = CHUNK_BYTES + 16 * 1024  # a chunk's records with their overhead, and slack
_RECV_FIRST, _RECV_MOST = 64 * 1024, 1024 * 1024
_SLICE = 64 * 1024  # ciphertext handed to OpenSSL at a time
_WANT_READ, _ZERO_RETURN = lib.SSL_ERROR_WANT_READ, lib.SSL_ERROR_ZERO_RETURN

_shared = threading.local()  # the plaintext chunk buffer of this thread's connections


class TlsHandshakeError(ConnectionError):
    """The TLS handshake failed, stalled or was too large: the connection is closed."""


def _chunk_buffer() -> tuple[memoryview, Any]:
    """This thread's plaintext chunk buffer and its C pointer."""
    pair = getattr(_shared, "chunk", None)
    if pair is None:
        buffer = bytearray(CHUNK_BYTES)
        pair = _shared.chunk = (memoryview(buffer), ffi.from_buffer(buffer))
    return pair


def _errors() -> str:
    """OpenSSL's error queue as text, emptied (a stale entry would confuse the next call)."""
    reasons = []
    while code := lib.ERR_get_error():
        text = lib.ERR_reason_error_string(code)
        reasons.append(ffi.string(text).decode() if text != ffi.NULL else f"error {code:#x}")
    return "; ".join(reasons) or "the connection failed"


def _read_records_in_python(ssl_: Any, rbio: Any, source: bytearray, start: int, end: int, slice_: int,
                            target: memoryview, got: int) -> tuple[int, int, int]:
    """``service.security._tlsread.read_records`` in Python (its docstring), for a broker
    built without a C compiler: a cffi call per record. The C views of the buffers live only
    for this call, which has no ``await`` (one left on a memoryview after an error crashed
    the process once the collector freed the two)."""
    size = len(target)
    with ffi.from_buffer(target) as out, ffi.from_buffer(source) as src:
        while True:
            lib.ERR_clear_error()  # the thread's queue: only this read's errors may be in it
            n = 0
            while got < size:
                n = lib.SSL_read(ssl_, out + got, size - got)
                if n <= 0:
                    break
                got += n
            if got == size:
                return got, start, 0
            error = lib.SSL_get_error(ssl_, n)
            if error != _WANT_READ or start == end:
                return got, start, error
            give = min(end - start, slice_)
            if lib.BIO_write(rbio, src + start, give) != give:
                return got, start, -1
            start += give


def record_step(conn: SSL.Connection) -> Callable[..., tuple[int, int, int]]:
    """``step(source, start, end, slice, target, got) -> (got, start, error)`` for a
    memory-BIO connection: ``_tlsread.read_records`` bound to it, or its Python twin."""
    c_read = c_record_loop()  # the record loop in C (service/security/_tlsread.c), if built
    if c_read is not None:
        return functools.partial(c_read, address(conn._ssl), address(conn._into_ssl))
    return functools.partial(_read_records_in_python, conn._ssl, conn._into_ssl)


class TlsTransport:
    """See the module docstring."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        context: SSL.Context,
        *,
        timeout_s: float = 10.0,
        max_handshake_bytes: int = 256 * 1024,
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._conn = SSL.Connection(context, None)
        self._conn.set_accept_state()
        self._ssl, self._in, self._out = self._conn._ssl, self._conn._into_ssl, self._conn._from_ssl
        self._timeout_s = timeout_s
        self._max_handshake_bytes = max_handshake_bytes
        self._send_lock = asyncio.Lock()
        # ciphertext from the socket, handed over a slice at a time (made at the first read
        # after the handshake: a connection that never gets there costs no buffers)
        self._recv_buffer = bytearray()
        self._held_from = self._held_to = 0  # what of it OpenSSL has not been given yet
        #: the most the receive and ciphertext buffers held at once (what a busy moment cost)
        self.peak_buffer_bytes = 0
        self._grow_recv = False  # the last read filled the buffer: the next one gets 1 MiB
        self._quiet = True  # the last read brought less than 64 KiB: buffers go back to small
        self._small: memoryview | None = None  # recv(): a frame's first bytes
        self._cipher = bytearray()  # ciphertext on its way to the socket (sent under the lock)
        self._cipher_ptr: Any = None
        self._failure: str | None = None  # a bad record after good ones: raised at the next read
        self._step = record_step(self._conn)

    async def handshake(self) -> None:
        try:
            await asyncio.wait_for(self._handshake(), self._timeout_s)
        except TimeoutError:
            raise TlsHandshakeError(f"TLS handshake not done in {self._timeout_s:.0f} s") from None

    async def _handshake(self) -> None:
        received = 0
        while True:
            try:
                lib.ERR_clear_error()  # the thread's queue: another connection may have left an entry
                self._conn.do_handshake()
                break
            except SSL.WantReadError:
                await self._flush()
                data = await self._loop.sock_recv(self._sock, 64 * 1024)
                if not data:
                    raise TlsHandshakeError("the client left during the TLS handshake") from None
                received += len(data)
                if received > self._max_handshake_bytes:
                    raise TlsHandshakeError(
                        f"TLS handshake larger than {self._max_handshake_bytes} bytes"
                    ) from None
                self._conn.bio_write(data)
            except SSL.Error as exc:
                await self._flush_quietly()  # the alert, so the client sees why
                raise TlsHandshakeError(f"TLS handshake failed: {ssl_error_reason(exc)}") from None
        await self._flush()

    def peer_certificate(self) -> dict[str, Any] | None:
        return peer_certificate(self._conn)

    def release(self) -> None:
        return None  # its receives are the loop's own (sock_recv): nothing stays watched

    @property
    def buffer_bytes(self) -> int:
        """What the receive and ciphertext buffers hold now (OpenSSL's own not counted)."""
        return len(self._recv_buffer) + len(self._cipher)

    @property
    def version(self) -> str | None:
        return self._conn.get_protocol_version_name()

    # -- receiving ----------------------------------------------------------------------

    async def recv(self, size: int) -> bytes:
        if self._small is None:
            self._small = memoryview(bytearray(_RECORD))
        view = self._small[: min(size, _RECORD)]
        got = await self.recv_into(view)
        return bytes(view[:got])

    async def recv_into(self, view: memoryview) -> int:
        """As many whole TLS records as are at hand, decrypted straight into ``view``."""
        size = len(view)
        if not size:
            return 0
        if self._failure is not None:
            raise ConnectionError(f"TLS: {self._failure}")
        got = await self._read_records(view, size)
        if self._pending_out():
            await self._flush()
        return got

    async def _read_records(self, view: memoryview, size: int) -> int:
        """Records into ``view`` by :attr:`_step` (the C loop or its Python twin), reading the
        socket when the ciphertext at hand is used up."""
        got = 0
        while True:
            got, self._held_from, error = self._step(self._recv_buffer, self._held_from, self._held_to,
                                                     _SLICE, view, got)
            if got == size:
                return got
            if error == _WANT_READ:  # the ciphertext at hand is used up
                if got:
                    return got
                if not await self._receive():
                    return 0
                continue
            if error == _ZERO_RETURN:
                return got
            if got:  # what was decrypted before the bad record is handed over; the failure next
                self._failure = _errors()
                return got
            raise ConnectionError(f"TLS: {_errors()}")

    async def _receive(self) -> bool:
        """A read from the socket into the receive buffer, all of which OpenSSL has had;
        False at end of stream.

        A connection whose read filled its buffer reads 1 MiB at a time from then on; one
        whose read brought less than 64 KiB goes back to 64 KiB, and gives up its ciphertext
        buffer when no response is on its way: an idle connection holds no large buffer."""
        if self._pending_out():
            await self._flush()
        if self._quiet and not self._send_lock.locked() and len(self._cipher) > _RECORD + 1024:
            self._cipher, self._cipher_ptr = bytearray(), None  # made again by the next response
        want = _RECV_MOST if self._grow_recv else _RECV_FIRST if self._quiet else len(self._recv_buffer)
        if want != len(self._recv_buffer):
            self._recv_buffer = bytearray(want)
            self.peak_buffer_bytes = max(self.peak_buffer_bytes, self.buffer_bytes)
        got = await self._loop.sock_recv_into(self._sock, self._recv_buffer)
        if not got:
            return False
        self._held_from, self._held_to = 0, got
        self._grow_recv = got == len(self._recv_buffer) and got < _RECV_MOST
        self._quiet = got < _RECV_FIRST
        return True

    # -- sending ------------------------------------------------------------------------

    async def send(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        async with self._send_lock:
            for start in range(0, len(view), CHUNK_BYTES):
                with ffi.from_buffer(view[start : start + CHUNK_BYTES]) as piece:
                    length = self._encrypt(piece, len(piece))
                await self._send_encrypted(length)

    async def send_parts(self, parts: Parts) -> None:
        """A response chunk by chunk, one chunk per event-loop step (module docstring)."""
        await warm_cold_regions(parts)  # the reads below then never wait for the disk
        async with self._send_lock:
            chunks = self._chunks(parts)
            try:
                first = True
                while True:
                    if not first:
                        await asyncio.sleep(0)  # other connections go on between chunks
                    first = False
                    # filled and encrypted with no await between: the thread's buffer is free again after
                    chunk = next(chunks, None)
                    if chunk is None:
                        return
                    ptr, length = chunk
                    await self._send_encrypted(self._encrypt(ptr, length))
            finally:
                chunks.close()  # lets go of the C view of a large part now, not when collected

    def _chunks(self, parts: Parts) -> Generator[tuple[Any, int], None, None]:
        """The plaintext of ``parts`` in pieces of at most ``CHUNK_BYTES``, as (C pointer,
        length): of the thread's buffer, or of a large part where it lies. The buffer is
        filled only when the caller advances this generator, and holds nothing across it."""
        buffer, base = _chunk_buffer()
        fill = 0
        for part in parts:
            if isinstance(part, FileRegion):
                fd, position, left = part.file.fileno(), part.position, part.length
                while left:
                    if fill == CHUNK_BYTES:
                        yield base, fill
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
                    yield base, fill
                    fill = 0
                with ffi.from_buffer(view) as where:
                    for start in range(0, len(view), CHUNK_BYTES):
                        yield where + start, min(CHUNK_BYTES, len(view) - start)
                continue
            while len(view):
                if fill == CHUNK_BYTES:
                    yield base, fill
                    fill = 0
                take = min(len(view), CHUNK_BYTES - fill)
                buffer[fill : fill + take] = view[:take]
                fill += take
                view = view[take:]
        if fill:
            yield base, fill

    def _encrypt(self, ptr: Any, length: int) -> int:
        """Encrypt ``length`` bytes at ``ptr`` into the ciphertext buffer, after whatever
        OpenSSL had written before them; the ciphertext's length. Callers hold the send lock."""
        self._cipher_room(length)
        out = 0
        write, take, ssl_, bio = lib.SSL_write, lib.BIO_read, self._ssl, self._out
        lib.ERR_clear_error()
        done = 0
        while done < length:  # a record per call (pyOpenSSL's partial writes): the BIO holds one
            n = write(ssl_, ptr + done, min(length - done, _RECORD))
            if n <= 0:
                raise ConnectionError(f"TLS: {_errors()}")
            done += n
            while (got := take(bio, self._cipher_ptr + out, len(self._cipher) - out)) > 0:
                out += got
                if out == len(self._cipher):
                    self._grow_cipher()
        return out

    def _cipher_room(self, length: int) -> None:
        """A ciphertext buffer for ``length`` bytes of plaintext (grown, never shrunk)."""
        need = min(_CIPHERTEXT_BYTES, length + length // 512 + 1024)
        if len(self._cipher) < need:
            self._cipher = bytearray(need)
            self._cipher_ptr = ffi.from_buffer(self._cipher)
            self.peak_buffer_bytes = max(self.peak_buffer_bytes, self.buffer_bytes)

    def _grow_cipher(self) -> None:
        bigger = bytearray(len(self._cipher) * 2)
        bigger[: len(self._cipher)] = self._cipher
        self._cipher, self._cipher_ptr = bigger, ffi.from_buffer(bigger)

    async def _send_encrypted(self, length: int) -> None:
        if length:
            await self._loop.sock_sendall(self._sock, memoryview(self._cipher)[:length])

    def _pending_out(self) -> bool:
        return bool(lib.BIO_get_mem_data(self._out, ffi.NULL) > 0)

    async def _flush(self) -> None:
        async with self._send_lock:
            while self._pending_out():
                self._cipher_room(_RECORD)
                got = lib.BIO_read(self._out, self._cipher_ptr, len(self._cipher))
                if got <= 0:
                    return
                await self._send_encrypted(got)

    async def _flush_quietly(self) -> None:
        try:
            await asyncio.wait_for(self._flush(), 1.0)
        except (OSError, TimeoutError):
            pass

