"""A loopback TCP proxy that cuts links between named ends, for machines without namespaces.

A :class:`PairProxy` stands in front of one server (a broker's inter-broker listener, or
the S3 server for one broker). It knows which node is calling either from the client id
of the connection's first Kafka request (the brokers' channels send ``strata-broker-N``)
or because it serves one node only (``source=N``: that broker's own S3 endpoint). A cut
(:class:`Blocks`, shared by the proxies of a run, or :meth:`PairProxy.partition`) is a
silent network: bytes of a cut link are dropped in both directions and nothing is closed;
new connections are accepted and go nowhere. Healing closes every connection that lost
bytes meanwhile (in a real partition TCP would end them) and lets new ones through.
Threads only.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading

__all__ = ["Blocks", "PairProxy"]

_CLIENT = re.compile(rb"strata-broker-(\d+)")


class Blocks:
    """The cut links of a run: unordered pairs of node ids. Thread-safe."""

    def __init__(self) -> None:
        self._pairs: set[frozenset[int]] = set()
        self._lock = threading.Lock()

    def block(self, a: int, b: int) -> None:
        with self._lock:
            self._pairs.add(frozenset((a, b)))

    def unblock(self, node: int | None) -> None:
        with self._lock:
            self._pairs = {p for p in self._pairs if node is not None and node not in p}

    def cut(self, a: int, b: int) -> bool:
        return frozenset((a, b)) in self._pairs


class _Conn:
    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.upstream: socket.socket | None = None
        self.source = 0  # 0: not known (yet)
        self.held = False


class PairProxy:
    def __init__(self, target_port: int, dest: int, port: int, blocks: Blocks | None = None,
                 source: int | None = None) -> None:
        self.target = ("127.0.0.1", target_port)
        self.dest = dest
        self.port = port
        self.blocks = blocks or Blocks()
        self.source = source
        self._partitioned = False
        self._conns: set[_Conn] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = socket.create_server(("127.0.0.1", port))
        self._server.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{port}").start()

    def _is_cut(self, conn: _Conn) -> bool:
        return self._partitioned or (conn.source != 0 and self.blocks.cut(conn.source, self.dest))

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn = _Conn(client)
            conn.source = self.source or 0
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: _Conn) -> None:
        first = b""
        try:
            if self.source is None:  # learn the caller from its first request's client id
                while len(first) < 14 or len(first) < 14 + struct.unpack(">h", first[12:14])[0]:
                    chunk = conn.client.recv(65536)
                    if not chunk:
                        raise OSError("closed")
                    first += chunk
                match = _CLIENT.search(first[:256])
                conn.source = int(match.group(1)) if match else 0
            conn.upstream = socket.create_connection(self.target, timeout=2)
            conn.upstream.settimeout(None)
        except (OSError, struct.error):
            self._close(conn)
            return
        threading.Thread(target=self._pipe, args=(conn, conn.upstream, conn.client), daemon=True).start()
        self._pipe(conn, conn.client, conn.upstream, first)

    def _pipe(self, conn: _Conn, src: socket.socket, dst: socket.socket, first: bytes = b"") -> None:
        try:
            chunk = first
            while True:
                if chunk:
                    if self._is_cut(conn):
                        conn.held = True  # the bytes never arrive
                    else:
                        dst.sendall(chunk)
                chunk = src.recv(65536)
                if not chunk:
                    break
        except OSError:
            pass
        self._close(conn)

    def _close(self, conn: _Conn) -> None:
        with self._lock:
            self._conns.discard(conn)
        for s in (conn.client, conn.upstream):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def partition(self) -> None:
        """Cut every link through this proxy (an S3 proxy: its broker from the bucket)."""
        self._partitioned = True

    def heal(self) -> None:
        self._partitioned = False
        self.heal_held()

    def heal_held(self) -> None:
        """Close the connections that lost bytes and whose link is no longer cut."""
        with self._lock:
            doomed = [c for c in self._conns if c.held and not self._is_cut(c)]
        for c in doomed:
            self._close(c)

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        with self._lock:
            doomed = list(self._conns)
        for c in doomed:
            self._close(c)
