"""Writing responses to client sockets: parts, ``sendfile`` and the history sender threads.

Record data goes out with ``os.sendfile`` straight from the page cache; small
file regions are read and sent with the bytes around them. Large in-memory
buffers go out in slices, one event-loop step each.

Responses that carry records read from the bucket (views of cached chunks, or
regions of a file:// bucket's objects to ``sendfile``) are sent by a
:class:`HistorySender` thread instead: copying hundreds of MB/s of history into
sockets on the event loop would make every live producer and consumer wait
behind it (docs/adr/0005-history-off-the-event-loop.md). So are responses whose local
records are not in the page cache (:func:`resident`): a ``sendfile`` or ``pread`` of
them would wait for the disk on the event loop (issue #32). The TLS path, which must
read to encrypt, reads such regions through the page cache on a worker thread first
(:func:`warm_cold_regions`).
"""

from __future__ import annotations

import asyncio
import os
import select
import socket
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeGuard

from fetch.affinity import pin_current_thread
from fetch.remote_reader import BucketRegion
from local_tier.segment import FileRegion

__all__ = [
    "SENDFILE_MIN_BYTES",
    "SEND_SLICE_BYTES",
    "HistorySender",
    "carries_history",
    "resident",
    "send_parts",
    "warm_cold_regions",
]


#: File regions smaller than this are read and sent with the bytes around them in
#: one ``send``: for small fetches three syscalls cost more than one copy.
SENDFILE_MIN_BYTES = 64 * 1024

#: Large buffers go out at most this many bytes per event-loop step. A reader that
#: keeps up (kcat on loopback) lets the kernel take a 16 MiB fetch response at
#: once: sent whole, that is one step of over 10 ms of copying in ``send``
#: (and, on loopback, the receiver's side of TCP too), which every other
#: connection, the live tail included, waits out.
SEND_SLICE_BYTES = 256 * 1024


async def send_parts(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, parts: list[bytes | memoryview | FileRegion]
) -> None:
    pending: list[bytes | memoryview] = []
    for part in parts:
        if _large_buffer(part):
            # large buffers (records read from the bucket, views of cached chunks):
            # sent as they are, no joined copy
            if pending:
                await loop.sock_sendall(sock, b"".join(pending))
                pending = []
            await _send_buffer(loop, sock, part)
        elif not isinstance(part, FileRegion):
            pending.append(part)
        elif part.length < SENDFILE_MIN_BYTES:
            pending.append(part.read_bytes())
        else:
            if pending:
                await loop.sock_sendall(sock, b"".join(pending))
                pending = []
            await _sendfile(loop, sock, part)
    if pending:
        await loop.sock_sendall(sock, b"".join(pending) if len(pending) > 1 else pending[0])


async def _send_buffer(loop: asyncio.AbstractEventLoop, sock: socket.socket, data: bytes | memoryview) -> None:
    """Send a large buffer in slices of ``SEND_SLICE_BYTES``, one event-loop step each.

    ``sock_sendall`` returns without yielding when the kernel takes a slice at once,
    so each slice is followed by an explicit yield to the other connections.
    """
    view = memoryview(data)
    for start in range(0, len(view), SEND_SLICE_BYTES):
        await loop.sock_sendall(sock, view[start : start + SEND_SLICE_BYTES])
        await asyncio.sleep(0)


def held_fd(region: FileRegion) -> int:
    """A descriptor of its own on the region's file, for as long as a send uses it (the
    caller closes it): the segment's file may be closed meanwhile (a topic deleted, a
    replica moved, the delayed delete), and its descriptor number reused by another open,
    but this one keeps the same file (issue #32). ConnectionError when it is already gone."""
    try:
        return os.dup(region.file.fileno())
    except (ValueError, OSError) as exc:  # closed before the send began
        raise ConnectionError(f"the segment file of this response is gone: {exc}") from exc


async def _sendfile(loop: asyncio.AbstractEventLoop, sock: socket.socket, region: FileRegion) -> None:
    """Zero-copy send of a file region (page cache → socket), waiting when the socket is full.

    What the first ``sendfile`` leaves is sent by :class:`_RegionSend` from the loop's
    writability callback, a ``sendfile`` per wake-up, and this coroutine resumes once,
    when the region is out (or the send failed)."""
    fd_in = held_fd(region)
    try:
        await _RegionSend(loop, sock.fileno(), fd_in, region.position, region.length).done
    finally:
        os.close(fd_in)


class _RegionSend:
    """A file region sent with ``sendfile``: once at once, then from the loop's
    writability callback until it is out.

    A ``sendfile`` that sends less than it was asked stopped because the socket's buffer is
    full, so the next one waits for room instead of failing with ``EAGAIN`` first. The
    socket is registered for writability once for the region (``add_writer`` and
    ``remove_writer`` are one ``epoll_ctl`` each), and each wake-up sends from the callback
    itself: no future, task step or coroutine resumption per ~250 KB (a 16 MiB response is
    about 70 wake-ups with ``socket.send.buffer.bytes`` of 100 KiB). Other connections run
    between two wake-ups as before. ``done`` resolves when the region is sent or the send
    failed; cancelling it (the connection closing) unregisters the socket."""

    __slots__ = ("_loop", "_fd_out", "_fd_in", "_offset", "_remaining", "done")

    def __init__(self, loop: asyncio.AbstractEventLoop, fd_out: int, fd_in: int, offset: int, remaining: int) -> None:
        self._loop = loop
        self._fd_out = fd_out
        self._fd_in = fd_in
        self._offset = offset
        self._remaining = remaining
        self.done: asyncio.Future[None] = loop.create_future()
        if remaining <= 0:
            self.done.set_result(None)
            return
        self._send()
        if not self.done.done():  # the socket is full: the rest as it drains
            loop.add_writer(fd_out, self._send)
            self.done.add_done_callback(self._unregister)

    def _unregister(self, _: asyncio.Future[None]) -> None:
        self._loop.remove_writer(self._fd_out)

    def _send(self) -> None:
        if self.done.done():  # cancelled: its callback unregisters the socket
            return
        try:
            sent = os.sendfile(self._fd_out, self._fd_in, self._offset, self._remaining)
        except BlockingIOError:  # a full socket; or woken for room another send took (the standard loop)
            return
        except Exception as exc:  # an OSError: the client went away
            self.done.set_exception(exc)
            return
        if sent == 0:  # the file is shorter than the region: never send a short frame
            self.done.set_exception(ConnectionError(f"file region ended early ({self._remaining} bytes missing)"))
            return
        self._offset += sent
        self._remaining -= sent
        if self._remaining == 0:
            self.done.set_result(None)


def _writable(loop: asyncio.AbstractEventLoop, fd: int) -> asyncio.Future[None]:
    fut: asyncio.Future[None] = loop.create_future()

    def _ready() -> None:
        loop.remove_writer(fd)
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(fd, _ready)
    fut.add_done_callback(lambda _: loop.remove_writer(fd))
    return fut


def carries_history(parts: list[bytes | memoryview | FileRegion]) -> bool:
    """Whether a response is for the history sender threads: it holds records read from
    the bucket (large in-memory parts: views of cached chunks; regions of a file://
    bucket's objects), or local records that are not in the page cache
    (:class:`FileRegion` parts a send would read from disk)."""
    return any(
        _large_buffer(p) or isinstance(p, BucketRegion) or (isinstance(p, FileRegion) and not resident(p))
        for p in parts
    )


#: one byte a page-cache probe reads into (its value is never used; threads may share it)
_PROBE = bytearray(1)
#: what a cold region is read through in, on a worker thread
_WARM_CHUNK = 1024 * 1024


def resident(region: FileRegion) -> bool:
    """Whether the first and the last byte of ``region`` are in the page cache: a read
    of them with ``RWF_NOWAIT`` does not wait for the disk. A region the probe cannot
    tell about (a file system without ``RWF_NOWAIT``, a file closed meanwhile) counts
    as resident: its send goes on as before."""
    if region.length <= 0 or region.data is not None:  # held in memory: the send reads no file
        return True
    try:
        fd = region.file.fileno()
        for position in (region.position, region.position + region.length - 1):
            os.preadv(fd, [_PROBE], position, os.RWF_NOWAIT)
    except BlockingIOError:
        return False
    except (OSError, ValueError):
        return True
    return True


async def warm_cold_regions(parts: list[bytes | memoryview | FileRegion]) -> None:
    """Read the regions of ``parts`` that are not in the page cache through it on a
    worker thread, so the event loop's reads of them then find them there."""
    for part in parts:
        if isinstance(part, FileRegion) and not resident(part):
            await asyncio.to_thread(_read_through, part)


def _read_through(region: FileRegion) -> None:
    fd = held_fd(region)
    try:
        scratch = bytearray(min(_WARM_CHUNK, region.length))
        done = 0
        while done < region.length:
            with memoryview(scratch)[: min(len(scratch), region.length - done)] as view:
                got = os.preadv(fd, [view], region.position + done)
            if got <= 0:
                return
            done += got
    finally:
        os.close(fd)


def _large_buffer(part: bytes | memoryview | FileRegion) -> TypeGuard[bytes | memoryview]:
    """Records read from the bucket (views of cached chunks), or any buffer too big to join."""
    return not isinstance(part, FileRegion) and len(part) >= SENDFILE_MIN_BYTES


class HistorySender:
    """Threads that send responses carrying records read from the bucket.

    The event loop hands such a response over and waits (without blocking) for
    it to be sent: responses still leave each connection in request order, and
    the loop is free for live traffic while the kernel copies history. The
    threads release the GIL in ``send``/``sendfile``/``poll``; with
    ``remote.log.reader.cpus`` they run on those CPUs, like the tiered-fetch pool.

    A thread never waits long on one client: when the socket stays full for
    ``WAIT_MS`` it hands the rest back (:meth:`_submit` resolves to where it
    stopped), and the connection waits for the socket on the event loop before
    submitting the rest. A consumer that reads slowly or not at all therefore
    holds no thread, only its own response; after ``stall_seconds`` without
    progress its connection is closed.
    """

    #: how long a thread waits for a full socket before handing the send back
    WAIT_MS = 50

    def __init__(self, threads: int, cpus: frozenset[int] = frozenset(), stall_seconds: float = 120.0) -> None:
        self._pool = ThreadPoolExecutor(
            max_workers=threads,
            thread_name_prefix="strata-history-send",
            initializer=pin_current_thread,
            initargs=(cpus,),
        )
        self.stall_seconds = stall_seconds

    def _submit(
        self, sock: socket.socket, parts: list[bytes | memoryview | FileRegion], resume: tuple[int, int] = (0, 0)
    ) -> Future[tuple[int, int] | None]:
        """Send ``parts`` from ``resume`` (part index, bytes of it already sent).

        Resolves to ``None`` once all is sent, or to the position to resume from
        when the socket stayed full.
        """
        return self._pool.submit(self._send, sock, parts, resume)

    async def send(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
        parts: list[bytes | memoryview | FileRegion], track: Any = None,
    ) -> None:
        """Send ``parts`` whole, on the threads, waiting for a full socket on ``loop``.

        ``track(future)`` is told of each thread-side step (the connection keeps
        it to close its socket only when no thread is using it).
        """
        resume: tuple[int, int] | None = (0, 0)
        while resume is not None:
            fut = self._submit(sock, parts, resume)
            if track is not None:
                track(fut)
            resume = await asyncio.wrap_future(fut)
            if resume is not None:
                try:
                    await asyncio.wait_for(_writable(loop, sock.fileno()), self.stall_seconds)
                except TimeoutError:
                    raise TimeoutError(f"client read nothing for {self.stall_seconds:.0f} s") from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _send(
        self, sock: socket.socket, parts: list[bytes | memoryview | FileRegion], resume: tuple[int, int]
    ) -> tuple[int, int] | None:
        fd = sock.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)

        def writable() -> bool:
            events = poller.poll(self.WAIT_MS)
            if events and events[0][1] & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                raise ConnectionResetError("connection closed during a history send")
            return bool(events)

        index, done = resume
        while index < len(parts):
            part = parts[index]
            if isinstance(part, FileRegion):
                fd_in = held_fd(part)
                try:
                    while done < part.length:
                        try:
                            sent = os.sendfile(fd, fd_in, part.position + done, part.length - done)
                        except BlockingIOError:
                            sent = -1
                        if sent == 0:  # never send a short frame
                            raise ConnectionError(
                                f"file region ended early ({part.length - done} bytes missing)"
                            )
                        if sent > 0:
                            done += sent
                        # a short send stopped on a full socket, as _sendfile knows
                        if done < part.length and not writable():
                            return index, done
                finally:
                    os.close(fd_in)
            else:
                view = memoryview(part)
                while done < view.nbytes:
                    try:
                        done += sock.send(view[done:])
                    except BlockingIOError:
                        pass
                    if done < view.nbytes and not writable():
                        return index, done
            index, done = index + 1, 0
        return None
