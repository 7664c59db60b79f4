"""How the server writes a response made of parts (fetch/sending.py ``send_parts``).

* Large buffers (records read from the bucket) go to the socket in slices of at
  most ``SEND_SLICE_BYTES``, with a yield to the event loop after each: another
  connection's task runs between the slices of a 16 MiB response even when the
  kernel takes every slice at once.
* Over a real socket, a response mixing small and large parts arrives whole and
  in order.
* A large file region waits for room in a full socket without a failing ``sendfile``
  first, its socket registered with the loop once for the whole region.
* :class:`HistorySender` (responses with records from the bucket, sent off the
  event loop): a response of buffers and file regions arrives whole and in order
  through a reader slower than the socket buffer; a reader that stops reading
  holds no thread and gets its send ended after the stall time; a reader that
  goes away ends the send with a connection error at once; the threads run on
  the CPUs given.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import mmap
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import uvloop

from fetch import sending as server
from fetch.sending import SEND_SLICE_BYTES, HistorySender
from fetch.sending import carries_history as _carries_history
from fetch.sending import send_parts as _send_parts
from local_tier.segment import FileRegion


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


def _slow_reader(sock: socket.socket, want: int, out: bytearray) -> threading.Thread:
    """Reads ``want`` bytes in small pieces with pauses: the sender meets a full socket often."""

    def run() -> None:
        sock.settimeout(10)
        while len(out) < want:
            got = sock.recv(1024 * 1024)
            if not got:
                return
            out.extend(got)
            time.sleep(2 * HistorySender.WAIT_MS / 1000)  # the thread hands the send back

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _send_history(sender: HistorySender, sock: socket.socket, parts: list[Any]) -> list[Any]:
    """Run ``sender.send`` on an event loop; returns the thread-side steps it took."""
    steps: list[Any] = []

    async def main() -> None:
        await sender.send(asyncio.get_running_loop(), sock, parts, steps.append)

    asyncio.run(main())
    return steps


def test_history_sender_sends_buffers_and_file_regions_whole_and_in_order(tmp_path: Path) -> None:
    file_bytes = os.urandom(3 * 1024 * 1024)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(file_bytes)
    remote = os.urandom(4 * 1024 * 1024 + 5)
    with io.FileIO(path, "r") as f:
        parts: list[Any] = [b"head", memoryview(remote)[5:], FileRegion(f, 17, 2 * 1024 * 1024, 0), b"tail"]
        expected = b"head" + remote[5:] + file_bytes[17:17 + 2 * 1024 * 1024] + b"tail"
        assert _carries_history(parts)
        a, b = socket.socketpair()
        a.setblocking(False)  # as the event loop keeps it
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        got = bytearray()
        reader = _slow_reader(b, len(expected), got)
        sender = HistorySender(threads=2)
        try:
            steps = _send_history(sender, a, parts)
            reader.join(30)
        finally:
            sender.close()
            a.close()
            b.close()
    assert bytes(got) == expected
    # the slow reader made the threads hand the send back to the loop, which resumed it
    assert len(steps) > 1 and steps[-1].result() is None
    assert all(s.result() is not None for s in steps[:-1])


def test_a_reader_that_stops_reading_holds_no_thread_and_is_cut_off_after_the_stall_time() -> None:
    a, b = socket.socketpair()
    a.setblocking(False)
    sender = HistorySender(threads=1, stall_seconds=0.5)
    try:
        big = [memoryview(os.urandom(16 * 1024 * 1024))]
        started = time.monotonic()

        async def main() -> None:
            loop = asyncio.get_running_loop()
            stalled = asyncio.create_task(sender.send(loop, a, big))
            await asyncio.sleep(0.1)
            # the one thread is free meanwhile: another client's response goes out at once
            c, d = socket.socketpair()
            c.setblocking(False)
            try:
                await asyncio.wait_for(sender.send(loop, c, [memoryview(b"x" * 100_000)]), 0.4)
                assert len(d.recv(1 << 20)) > 0
            finally:
                c.close()
                d.close()
            with pytest.raises(TimeoutError, match="read nothing for"):
                await stalled

        asyncio.run(main())
        assert time.monotonic() - started < 10
    finally:
        sender.close()
        a.close()
        b.close()


def test_history_sender_ends_with_a_connection_error_when_the_reader_goes_away() -> None:
    a, b = socket.socketpair()
    a.setblocking(False)
    sender = HistorySender(threads=1, stall_seconds=60)
    try:
        async def main() -> None:
            task = asyncio.create_task(sender.send(asyncio.get_running_loop(), a,
                                                   [memoryview(os.urandom(16 * 1024 * 1024))]))
            await asyncio.sleep(0.2)  # under way, waiting on a full socket
            b.close()
            with pytest.raises(OSError):  # BrokenPipeError / ConnectionResetError
                await asyncio.wait_for(task, 10)

        asyncio.run(main())
    finally:
        sender.close()
        a.close()


def test_small_or_local_responses_stay_on_the_event_loop(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(b"x" * (1 << 20))
    with io.FileIO(path, "r") as f:
        assert not _carries_history([b"h" * 100, FileRegion(f, 0, 1 << 20, 0), b"t"])
        assert not _carries_history([b"h" * 100, memoryview(b"r" * (server.SENDFILE_MIN_BYTES - 1))])
        assert _carries_history([b"h" * 100, memoryview(b"r" * server.SENDFILE_MIN_BYTES)])


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two CPUs")
def test_history_threads_run_on_the_cpus_given() -> None:
    from fetch.affinity import pin_current_thread

    cpu = max(os.sched_getaffinity(0))
    seen: list[set[int]] = []

    def run() -> None:
        assert pin_current_thread(frozenset({cpu}))
        seen.append(os.sched_getaffinity(0))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [{cpu}]
    assert len(os.sched_getaffinity(0)) >= 2  # the calling thread alone, not the process


def test_a_request_buffer_is_reused_only_once_nothing_views_it() -> None:
    """Large request bodies are recycled for the connection's next requests, but never while
    a view of one lives on (a Produce's records are views of its frame)."""
    from service.network.request_memory import RequestMemoryPool
    from service.network.server import Connection

    conn = object.__new__(Connection)
    conn._spare = []
    conn._memory = RequestMemoryPool(0)
    big = bytearray(2 * 1024 * 1024)
    frame = memoryview(big)[: 1024 * 1024 + 5]
    records = frame[100:200]  # still held by someone
    conn._recycle(frame)
    assert conn._spare == [big]
    assert conn._spare_body(1024 * 1024) is None  # a view of it lives: not reused
    records.release()
    assert conn._spare_body(3 * 1024 * 1024) is None  # too small for this request
    assert conn._spare_body(1024 * 1024) is big and conn._spare == []
    conn._recycle(memoryview(bytearray(1000)))  # small ones are not kept
    conn._recycle(memoryview(bytearray(64 * 1024 * 1024)))  # nor very large ones
    assert conn._spare == []


def test_a_sendfile_that_waits_keeps_sending_its_own_file_after_that_file_is_closed(tmp_path: Path) -> None:
    """Issue #32: the segment's file closed mid-send (a topic deleted, the delayed delete)
    and its descriptor number taken by another file's open: the client still gets the bytes
    of the file the response was made of, never the other file's."""
    size = 4 * 1024 * 1024
    (tmp_path / "a.log").write_bytes(b"A" * size)
    (tmp_path / "b.log").write_bytes(b"B" * size)

    async def run() -> bytes:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        segment = open(tmp_path / "a.log", "rb", buffering=0)  # noqa: SIM115 - closed below, mid-send
        number = segment.fileno()
        send = asyncio.ensure_future(_send_parts(loop, ours, [FileRegion(segment, 0, size, 0)]))
        await asyncio.sleep(0.05)  # the socket is full: the send waits for it to drain
        assert not send.done()
        segment.close()
        other = open(tmp_path / "b.log", "rb", buffering=0)  # noqa: SIM115
        assert other.fileno() == number  # the number is reused: the old code would send "B"s
        received = bytearray()
        theirs.setblocking(False)
        while len(received) < size:
            try:
                chunk = theirs.recv(1 << 20)
            except BlockingIOError:
                await asyncio.sleep(0.001)
                continue
            if not chunk:
                break
            received += chunk
        await send
        other.close()
        ours.close()
        theirs.close()
        return bytes(received)

    received = asyncio.run(run())
    assert len(received) == size and received.count(b"A") == size


def _cold_file(tmp_path: Path, size: int) -> Path:
    """A file the page cache does not hold (a segment nobody read lately): written with
    O_DIRECT, so its pages never enter the cache. (A buffered write dropped with
    POSIX_FADV_DONTNEED stayed cached now and then on a loaded machine: a false failure.)"""
    path = tmp_path / "cold.log"
    assert size % mmap.PAGESIZE == 0
    buffer = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT wants
    buffer.write(os.urandom(size))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
    try:
        assert os.write(fd, buffer) == size
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
        buffer.close()
    return path


def test_local_records_not_in_the_page_cache_go_to_the_history_threads(tmp_path: Path) -> None:
    """A sendfile of records the page cache does not hold waits for the disk; on the event
    loop every other client would wait with it (issue #32). Such a response is the
    history threads', as records read from the bucket are; once read, it is the loop's."""
    path = _cold_file(tmp_path, 4 * 1024 * 1024)
    with open(path, "rb", buffering=0) as f:
        region = FileRegion(f, 0, 4 * 1024 * 1024, 0)
        assert not server.resident(region)
        assert _carries_history([b"header", region])
        asyncio.run(server.warm_cold_regions([b"header", region]))  # the TLS path's way
        assert server.resident(region)
        assert not _carries_history([b"header", region])


def _counting(base: type[asyncio.AbstractEventLoop]) -> Any:
    """``base``, counting its writer registrations."""

    class Counting(base):  # type: ignore[valid-type, misc]
        added = removed = 0

        def add_writer(self, fd: Any, callback: Any, *args: Any) -> None:
            type(self).added += 1
            super().add_writer(fd, callback, *args)

        def remove_writer(self, fd: Any) -> Any:
            type(self).removed += 1
            return super().remove_writer(fd)

    return Counting


_CountingUvloop = _counting(uvloop.Loop)  # the broker's loop
_CountingAsyncioLoop = _counting(asyncio.SelectorEventLoop)  # the standard one


@pytest.mark.parametrize("loop_class", [_CountingUvloop, _CountingAsyncioLoop], ids=["uvloop", "asyncio"])
def test_a_large_region_waits_for_room_without_failing_sends_and_registers_its_socket_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loop_class: Any
) -> None:
    """A ``sendfile`` that sent less than asked stopped on a full socket: the next one waits
    for room rather than failing with ``EAGAIN`` first, and the socket is registered for
    writability once for the whole region (each wait was an ``epoll_ctl`` add and delete
    and a failed ``sendfile`` more). The reader gets every byte, and the registration is
    gone after the send, whether it ends whole or with the reader gone. On the standard
    loop (not the broker's), a wake-up for room already taken makes a ``sendfile`` fail
    now and then, which waits again."""
    size = 4 * 1024 * 1024
    data = os.urandom(size)
    (tmp_path / "00.log").write_bytes(data)
    failed = [0]
    real_sendfile = os.sendfile

    def counting_sendfile(*args: Any) -> int:
        try:
            return real_sendfile(*args)
        except BlockingIOError:
            failed[0] += 1
            raise

    monkeypatch.setattr(server.os, "sendfile", counting_sendfile)

    def slow_reader(sock: socket.socket, into: bytearray, stop_after: int) -> None:
        with sock:
            while len(into) < stop_after:
                chunk = sock.recv(96 * 1024)
                if not chunk:
                    return
                into += chunk
                time.sleep(0.0005)

    async def send(stop_after: int) -> tuple[bytes, BaseException | None]:
        loop = asyncio.get_running_loop()
        ours, theirs = _tcp_pair()
        ours.setblocking(False)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        received = bytearray()
        reader = threading.Thread(target=slow_reader, args=(theirs, received, stop_after))
        reader.start()
        error: BaseException | None = None
        with ours, open(tmp_path / "00.log", "rb", buffering=0) as segment:
            try:
                await _send_parts(loop, ours, [FileRegion(segment, 0, size, 0)])
            except OSError as exc:  # ConnectionError among them
                error = exc
            with contextlib.suppress(OSError):  # gone already when the reader went away
                ours.shutdown(socket.SHUT_WR)
            await asyncio.to_thread(reader.join)
        return bytes(received), error

    def run(stop_after: int) -> tuple[bytes, BaseException | None]:
        loop_class.added = loop_class.removed = 0
        failed[0] = 0
        loop = loop_class()
        try:
            return loop.run_until_complete(send(stop_after))
        finally:
            loop.close()

    received, error = run(size)
    assert error is None and received == data
    assert loop_class.added == loop_class.removed == 1
    if loop_class is _CountingUvloop:
        assert failed[0] == 0

    received, error = run(size // 4)  # the reader goes away a quarter of the way in
    assert isinstance(error, OSError) and len(received) < size and received == data[: len(received)]
    assert loop_class.added == loop_class.removed == 1

def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair over TCP on the loopback, as a client's connection is."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        theirs = socket.create_connection(listener.getsockname())
        ours, _ = listener.accept()
    return ours, theirs
