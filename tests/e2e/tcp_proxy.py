"""A loopback TCP proxy whose connections a test can cut at any moment, or partition.

Cutting first swallows the broker's responses for a moment (requests still go
through and are written), then closes both sides of every open connection: the
client never hears of requests the broker took, and retries them.

Stalling takes the connections opened during a window and never answers them, nor closes
them (a server that never responds, a path that black-holes packets): the requests sent
on them wait for their client's timeout. Connections opened later go through.

Delaying holds back the next answer (or, with ``slow_s``, the first bytes of every answer)
for a while: the request is executed, the answer comes after the client's timeout, as
from a slow but healthy server.

Partitioning is a network partition as the two ends see it: nothing more gets
through in either direction, and nothing closes; new connections are accepted
and go nowhere. Healing closes every connection held meanwhile (their streams
lost bytes; in a real partition their TCP timers would end them) and lets new
ones through. Threads only; listens on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from tests.conftest import free_port


class CuttingProxy:
    def __init__(self, target_port: int, port: int | None = None) -> None:
        self.target = ("127.0.0.1", target_port)
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._server.settimeout(0.2)
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._swallow = threading.Event()
        self._partitioned = threading.Event()
        self._stall_until = 0.0  # connections accepted before then are held, unanswered
        self.stalled = 0
        self._delay_next = 0.0
        #: the first bytes of every answer wait this long (a slow but healthy server)
        self.slow_s = 0.0
        self.delayed = 0
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._partitioned.is_set() or time.monotonic() < self._stall_until:  # held, going nowhere
                self.stalled += not self._partitioned.is_set()
                with self._lock:
                    self._open.add(client)
                threading.Thread(target=self._pipe, args=(client, None, False), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()  # the broker is down: the client reconnects later
                continue
            with self._lock:
                self._open.update((client, upstream))
            for src, dst, answers in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pipe, args=(src, dst, answers), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket | None, answers: bool) -> None:
        try:
            while chunk := src.recv(65536):
                if dst is None or self._partitioned.is_set():
                    continue  # partitioned: the bytes never arrive
                if answers and self._swallow.is_set():
                    continue  # the response is lost
                if answers and not chunk.startswith(b"HTTP/1.1 100 Continue"):
                    self._hold_answer(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            self._close(src, *(() if dst is None else (dst,)))

    def _close(self, *socks: socket.socket) -> None:
        for s in socks:
            with self._lock:
                self._open.discard(s)
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def cut(self, swallow_s: float = 0.05) -> None:
        """Drop the broker's responses for ``swallow_s``, then close every open connection."""
        self._swallow.set()
        time.sleep(swallow_s)
        with self._lock:
            doomed = list(self._open)
        self._close(*doomed)
        self._swallow.clear()
        self.cuts += 1

    def delay_next_response(self, seconds: float) -> None:
        """The next answer (not an HTTP ``100 Continue``) reaches the client ``seconds`` late."""
        with self._lock:
            self._delay_next = seconds

    def _hold_answer(self, chunk: bytes) -> None:
        with self._lock:
            delay, self._delay_next = self._delay_next, 0.0
        if not delay and chunk.startswith(b"HTTP/1."):  # the first bytes of an answer
            delay = self.slow_s
        if delay:
            self.delayed += 1
            time.sleep(delay)

    def stall_new(self, seconds: float) -> None:
        """For ``seconds``, new connections are accepted and held: what is sent on them goes
        nowhere and nothing closes them (until :meth:`heal` or :meth:`close`)."""
        self._stall_until = time.monotonic() + seconds

    def partition(self) -> None:
        """Let nothing more through, in either direction, closing nothing."""
        self._partitioned.set()

    def heal(self) -> None:
        """End the partition: close what it held, let new connections through."""
        with self._lock:
            doomed = list(self._open)
        self._close(*doomed)
        self._partitioned.clear()

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        self.cut(0)
