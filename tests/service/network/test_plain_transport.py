"""The plain transport's receives: read at once, wait on a socket that stays watched.

* Requests one round trip apart put the socket in the loop's watch list once, not once
  per request (the loop's own ``sock_recv`` added and removed it around every call).
* A socket that turns readable with nobody receiving leaves the list (level-triggered
  polling would otherwise call back on every turn), and the bytes wait for the next receive.
* ``release`` unwatches the socket and cancels a receive that waits; later receives fail.
* A peer that closes gives ``b""``, and a receive into a view gets what was sent.
* A socket that never empties still lets the loop run other tasks between receives.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import uvloop

from service.network.transport import PlainTransport


class _Counting:
    """The loop's add_reader and remove_reader, counted."""

    def __init__(self, loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch) -> None:
        self.added = self.removed = 0
        add, remove = loop.add_reader, loop.remove_reader

        def add_reader(fd: int, cb: Any, *args: Any) -> None:
            self.added += 1
            add(fd, cb, *args)

        def remove_reader(fd: int) -> bool:
            self.removed += 1
            return remove(fd)

        monkeypatch.setattr(loop, "add_reader", add_reader)
        monkeypatch.setattr(loop, "remove_reader", remove_reader)


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setblocking(False)
    return a, b


def _transport(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> PlainTransport:
    return PlainTransport(loop, sock, None, lambda _f: None)


async def _test_round_trips_watch_the_socket_once(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    counted = _Counting(loop, monkeypatch)
    ours, peer = _pair()
    t = _transport(loop, ours)
    try:
        for i in range(5):
            receive = asyncio.ensure_future(t.recv(100))
            await asyncio.sleep(0.01)
            assert not receive.done()  # nothing sent yet: it waits
            peer.send(b"request %d" % i)
            assert await asyncio.wait_for(receive, 5) == b"request %d" % i
        assert (counted.added, counted.removed) == (1, 0)
    finally:
        t.release()
        ours.close()
        peer.close()
    assert counted.removed == 1


async def _test_bytes_nobody_waits_for_unwatch_the_socket_and_wait_for_the_next_receive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    counted = _Counting(loop, monkeypatch)
    ours, peer = _pair()
    t = _transport(loop, ours)
    try:
        receive = asyncio.ensure_future(t.recv(100))
        await asyncio.sleep(0.01)
        peer.send(b"one")
        assert await asyncio.wait_for(receive, 5) == b"one"
        peer.send(b"two")  # nobody receives for a while
        for _ in range(20):
            await asyncio.sleep(0)
        await asyncio.sleep(0.02)
        assert (counted.added, counted.removed) == (1, 1)  # out of the watch list, not called each turn
        assert await asyncio.wait_for(t.recv(100), 5) == b"two"
        assert counted.added == 1  # read at once: no wait, no watch
    finally:
        t.release()
        ours.close()
        peer.close()


async def _test_release_cancels_a_waiting_receive_and_refuses_later_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    counted = _Counting(loop, monkeypatch)
    ours, peer = _pair()
    t = _transport(loop, ours)
    receive = asyncio.ensure_future(t.recv(100))
    await asyncio.sleep(0.01)
    t.release()
    with pytest.raises(asyncio.CancelledError):
        await receive
    assert (counted.added, counted.removed) == (1, 1)
    with pytest.raises(ConnectionError):
        await t.recv(100)
    t.release()  # twice is harmless
    assert counted.removed == 1
    ours.close()
    peer.close()


async def _test_a_closed_peer_gives_empty_and_recv_into_fills_a_view() -> None:
    loop = asyncio.get_running_loop()
    ours, peer = _pair()
    t = _transport(loop, ours)
    try:
        buf = bytearray(8)
        receive = asyncio.ensure_future(t.recv_into(memoryview(buf)))
        await asyncio.sleep(0.01)
        peer.send(b"abcdefgh")
        assert await asyncio.wait_for(receive, 5) == 8 and bytes(buf) == b"abcdefgh"
        peer.close()
        assert await asyncio.wait_for(t.recv(100), 5) == b""
    finally:
        t.release()
        ours.close()


async def _test_a_socket_that_stays_full_still_gives_other_tasks_turns() -> None:
    """A client that keeps its socket full (requests pipelined faster than they are handled)
    must not hold the loop: the fetches its produces wake, on other connections, are answered
    in the turns its receives give."""
    loop = asyncio.get_running_loop()
    ours, peer = _pair()
    t = _transport(loop, ours)
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    try:
        peer.send(b"x" * 1_000)
        other_task = asyncio.ensure_future(other())
        await asyncio.sleep(0)
        start = turns
        for _ in range(100):
            assert await t.recv(1) == b"x"  # there at once, every time
        assert turns - start >= 99
        other_task.cancel()
    finally:
        t.release()
        ours.close()
        peer.close()


def _run(kind: str, case: Any) -> None:
    loop = uvloop.new_event_loop() if kind == "uvloop" else asyncio.new_event_loop()
    try:
        loop.run_until_complete(case)
    finally:
        loop.close()


LOOPS = pytest.mark.parametrize("kind", ["uvloop", "asyncio"])  # the broker's, and the standard one


@LOOPS
def test_round_trips_watch_the_socket_once(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(kind, _test_round_trips_watch_the_socket_once(monkeypatch))


@LOOPS
def test_bytes_nobody_waits_for_unwatch_the_socket_and_wait_for_the_next_receive(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(kind, _test_bytes_nobody_waits_for_unwatch_the_socket_and_wait_for_the_next_receive(monkeypatch))


@LOOPS
def test_release_cancels_a_waiting_receive_and_refuses_later_ones(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(kind, _test_release_cancels_a_waiting_receive_and_refuses_later_ones(monkeypatch))


@LOOPS
def test_a_closed_peer_gives_empty_and_recv_into_fills_a_view(kind: str) -> None:
    _run(kind, _test_a_closed_peer_gives_empty_and_recv_into_fills_a_view())


@LOOPS
def test_a_socket_that_stays_full_still_gives_other_tasks_turns(kind: str) -> None:
    _run(kind, _test_a_socket_that_stays_full_still_gives_other_tasks_turns())
