"""The Kafka-protocol TCP server: read frames, dispatch, write responses in order.

Each connection has a reader (frames in, one handler call each, in arrival order) and a
writer (responses out in request order). Handlers may run concurrently (a long-polling Fetch
does not stop the reader), but responses leave in the order the requests came, as Kafka
requires. How responses reach the socket (``sendfile`` from the page cache, history on
sender threads) is :mod:`fetch.sending`.

A malformed frame, an unknown API key or an unsupported version closes that one connection
with a log line; so does any failure of a handler, and any error of the reader itself (a
connection never keeps a dead reader). The broker and other connections carry on.

Memory: a request's body is received in steps as its bytes arrive, never allocated whole
up front, and each step is reserved in the shared
:class:`~service.network.request_memory.RequestMemoryPool` (``queued.max.request.bytes``) before it is
received; small requests are counted and never wait. It all returns when the handler is
done. A request whose bytes do not keep ``request.receive.min.rate.bytes`` per second
once ``request.receive.grace.ms`` have passed is closed, so a client that trickles a
large request holds neither memory nor other clients up (issue #36). A connection keeps up to two request buffers
of 1-8 MiB its finished requests no longer view, for its next large requests (a fresh buffer
costs its zero-fill and page faults on every produce request); they are outside that pool.
Connections with no traffic and no request in progress for ``connections.max.idle.ms`` are
closed.

Security: each server is one listener (``listeners``); its
:class:`~service.security.session.ListenerSecurity` says whether connections speak TLS (a
:class:`~service.security.tls_transport.TlsTransport` under the same loop, the handshake
first) and SASL. Each connection has a :class:`~service.security.session.Session`
(principal, authentication state) that the dispatcher reads; before SASL authentication a
frame is bounded by ``sasl.server.max.receive.size``, and after a failed authentication the
connection closes once its answer is sent and ``connection.failed.authentication.delay.ms``
has passed.

Limits: a :class:`~service.quotas.connections.ConnectionQuotas` shared by the broker's
listeners decides which accepted connections are served (``max.connections`` and friends)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import resource
import socket
import struct
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from common.protocol.codec import FrameError
from fetch.sending import HistorySender
from local_tier.segment import FileRegion
from service.network.backlog import ReceiveBacklog
from service.network.body import SMALL_REQUEST_BYTES, RequestBodies
from service.network.eager import cancel_and_wait, start_eagerly
from service.network.request_memory import RequestMemoryPool
from service.network.transport import PlainTransport, Transport
from service.quotas.connections import ConnectionQuotas
from service.security.session import ListenerSecurity, Session
from service.security.tls_transport import TlsHandshakeError, TlsTransport

__all__ = ["HistorySender", "KafkaServer", "Response"]  # HistorySender: see fetch.sending

#: a listening socket is moved to a descriptor this far below the open-files limit (and at
#: most :data:`LISTENER_FD_CEILING`): see :func:`_closed_first`
LISTENER_FD_MARGIN = 64
LISTENER_FD_CEILING = 16384

log = logging.getLogger("strata.server")

_I32 = struct.Struct(">i")
#: what the reader takes before it knows a request's size: what it holds of a large body is
#: copied twice (its buffer, the body), so it stays small (256 KiB was half of a 1 MB produce)
_READ_CHUNK = 64 * 1024

#: What a handler gives the connection: a whole frame, parts to send, or nothing (acks=0).
Response = bytes | list[bytes | memoryview | FileRegion] | None


class KafkaServer:
    """Accepts connections on one listener; ``dispatcher`` turns frames into responses."""

    def __init__(
        self,
        dispatcher: Any,
        host: str,
        port: int,
        *,
        max_request_bytes: int = 100 * 1024 * 1024,
        max_inflight_per_connection: int = 100,
        receive_backlog_buffer_bytes: int = 0,
        queued_max_request_bytes: int = -1,
        connections_max_idle_ms: int = -1,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        request_min_rate_bytes: int = 16384,
        request_receive_grace_ms: int = 5000,
        history: HistorySender | None = None,
        security: ListenerSecurity | None = None,
        listener: str = "PLAINTEXT",
        limits: ConnectionQuotas | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        #: what to await before dispatching a frame, when the dispatcher says (``prepare``)
        self._prepare = getattr(dispatcher, "prepare", None)
        self.listener = listener
        self._limits = limits
        self._history = history
        self.security = security or ListenerSecurity()
        self._host = host
        self._port = port
        self._max_request_bytes = max_request_bytes
        #: SO_SNDBUF and SO_RCVBUF of accepted connections, where set (> 0); else the OS's own
        self._buffer_sizes = [(opt, n) for opt, n in ((socket.SO_SNDBUF, send_buffer_bytes),
                                                      (socket.SO_RCVBUF, receive_buffer_bytes)) if n > 0]
        self._max_inflight = max_inflight_per_connection
        #: SO_RCVBUF for a connection whose small requests back up (service.network.backlog); none
        #: when socket.receive.buffer.bytes already fixes every connection's
        self._backlog_buffer = receive_backlog_buffer_bytes if receive_buffer_bytes <= 0 else 0
        self.memory = RequestMemoryPool(queued_max_request_bytes)
        self._max_idle_s = connections_max_idle_ms / 1000 if connections_max_idle_ms > 0 else None
        self._min_rate = request_min_rate_bytes
        self._grace_s = request_receive_grace_ms / 1000
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._sweep_task: asyncio.Task[None] | None = None
        self._connections: set[Connection] = set()

    @property
    def port(self) -> int:
        assert self._sock is not None
        return int(self._sock.getsockname()[1])

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def backlog_clamped(self, peer: str) -> None:
        log.info("connection %s: its small requests back up in the kernel; receive buffer set to %d bytes "
                 "so that the client gathers records into fewer requests", peer, self._backlog_buffer)
        if self._limits is not None:
            self._limits.receive_backlogs[self.listener] += 1

    async def start(self, *, serve: bool = True) -> None:
        """Bind and listen; with ``serve`` False, connections wait in the backlog until
        :meth:`serve` (a broker binds first to know its port, and serves once it has
        joined the cluster)."""
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, self._port))
        sock.listen(1024)
        sock = _closed_first(sock)
        sock.setblocking(False)
        self._sock = sock
        if self._limits is not None:
            self._limits.register(self.listener, self.close_least_recent)
        if serve:
            self.serve()

    def serve(self) -> None:
        """Start accepting connections, and sweeping idle ones (idempotent)."""
        if self._accept_task is None:
            self._accept_task = asyncio.create_task(self._accept_loop(), name="kafka-accept")
            self._sweep_task = asyncio.create_task(self._sweep_loop(), name="kafka-idle-sweep")

    async def _sweep_loop(self) -> None:
        """Close idle connections, and requests whose bytes come too slowly."""
        loop = asyncio.get_running_loop()
        limits = [self._grace_s] + ([self._max_idle_s] if self._max_idle_s else [])
        interval = max(0.05, min(5.0, min(limits) / 4))
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for conn in list(self._connections):
                quiet = now - conn.last_active
                if self._max_idle_s is not None and quiet > self._max_idle_s and conn.idle:
                    log.info("closing connection %s: idle for %.0f s (connections.max.idle.ms)",
                             conn.peer, quiet)
                    await conn.close()
                elif (rate := conn.slow_body_rate(now, self._grace_s, self._min_rate)) is not None:
                    log.warning("closing connection %s: its request arrives at %.0f bytes/s, below "
                                "request.receive.min.rate.bytes (%d)", conn.peer, rate, self._min_rate)
                    await conn.close()

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        limits = self._limits
        while True:
            if limits is not None:
                await limits.before_accept(self.listener)  # room, and the creation rates
            try:
                client, addr = await loop.sock_accept(self._sock)
            except OSError as exc:  # e.g. EMFILE: keep serving the connections we have
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            admitted = False
            try:
                if limits and not (admitted := await limits.screen(self.listener, client, addr[0])):
                    continue
                client.setblocking(False)
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for option, size in self._buffer_sizes:
                    client.setsockopt(socket.SOL_SOCKET, option, size)
                conn = Connection(self, client, f"{addr[0]}:{addr[1]}")
            except Exception:  # noqa: BLE001 - one connection must not stop the listener
                log.exception("cannot set up connection %s:%s; closed", addr[0], addr[1])
                client.close()
                if admitted and limits is not None:
                    limits.release(self.listener, addr[0])
                continue
            self._connections.add(conn)
            conn.start()

    def close_least_recent(self) -> bool:
        """Close the connection with the oldest traffic (a broker needs its slot); False: none."""
        if (old := min(self._connections, key=lambda c: c.last_active, default=None)) is not None:
            start_eagerly(asyncio.get_running_loop(), old.close())  # closed in its first step
        return old is not None

    async def close(self) -> None:
        for task in (self._accept_task, self._sweep_task):
            if task is not None:
                await cancel_and_wait(task)
        if self._sock is not None:
            self._sock.close()
        for conn in list(self._connections):
            await conn.close()


class Connection(RequestBodies):
    """One client connection. Not thread-safe: lives on the event loop."""

    def __init__(self, server: KafkaServer, sock: socket.socket, peer: str) -> None:
        RequestBodies.__init__(self, server.memory)
        self.server = server
        self.sock = sock
        self.peer = peer
        self.address = peer.rpartition(":")[0]  # the client's IP (its connection limits)
        self.session: Session = server.security.new_session(peer)
        loop = asyncio.get_running_loop()
        #: the last history send started on a sender thread: the socket is closed only after it
        #: ends (no write to a reused descriptor); its append, not a method: no reference cycle
        self._history_sends: deque[Future[tuple[int, int] | None]] = deque(maxlen=1)
        self.transport: Transport
        tls = server.security.tls_context()
        if tls is not None:
            self.transport = TlsTransport(loop, sock, tls,
                                          timeout_s=server.security.tls_handshake_timeout_s)
        else:
            self.transport = PlainTransport(loop, sock, server._history, self._history_sends.append)
        self._queue: asyncio.Queue[asyncio.Future[Response] | None] = asyncio.Queue(
            server._max_inflight
        )
        self._backlog = ReceiveBacklog(sock, server._backlog_buffer)
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        #: event-loop time of the last bytes in or out (idle-connection timeout)
        self.last_active = asyncio.get_running_loop().time()
        #: requests read and not yet answered (a connection waiting on one is not idle)
        self.inflight = 0
        #: event-loop time until which no request is read (a client over its quota, KIP-219)
        self.muted_until = 0.0
        #: turns of the loop the reader gives before sending the answer at hand, set by a
        #: handler whose request woke others (a Produce's parked fetches answer first)
        self.turns_before_answer = 0
        #: brokers that heartbeat the controller on this connection
        self.heartbeat_brokers: set[int] = set()
        self._close_callbacks: list[Callable[[], None]] = []

    def add_close_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the loop, errors logged) when this connection closes."""
        self._close_callbacks.append(callback)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._read_loop(), name=f"kafka-read-{self.peer}"),
            asyncio.create_task(self._write_loop(), name=f"kafka-write-{self.peer}"),
        ]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.transport.release()
        self._drop_spares()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        sending = self._history_sends[0] if self._history_sends else None
        if sending is not None and not sending.done():
            # wake the sender thread (its send fails at once), close when it is out
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            loop, sock = asyncio.get_running_loop(), self.sock  # the socket, not self: no cycle
            sending.add_done_callback(lambda _: _call_soon(loop, lambda: _close_quietly(sock)))
        else:
            _close_quietly(self.sock)
        self.server._connections.discard(self)
        if self.server._limits is not None:
            self.server._limits.release(self.server.listener, self.address)
        callbacks, self._close_callbacks = self._close_callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # noqa: BLE001 - one callback must not stop the others
                log.exception("a close callback of connection %s failed", self.peer)
        self._tasks = []  # their frames hold this connection: no cycle (service/gc_policy.py)

    @property
    def idle(self) -> bool:
        """No request being handled (a half-received one counts: its bytes stopped coming)."""
        return self.inflight == 0

    def mute(self, ms: int) -> None:
        """Read no request for ``ms`` (the client was throttled; its answer goes out now)."""
        self.muted_until = max(self.muted_until, asyncio.get_running_loop().time() + ms / 1000)

    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        server = self.server
        buf = bytearray()
        transport = self.transport
        try:
            await transport.handshake()
            self.session.tls_established(transport.peer_certificate())
            while True:
                if self.muted_until > loop.time():
                    await asyncio.sleep(self.muted_until - loop.time())
                while len(buf) < 4:
                    chunk = await transport.recv(_READ_CHUNK)
                    if not chunk:
                        if buf:
                            log.info("connection %s closed mid-frame", self.peer)
                        await self._finish_reading()
                        return
                    self.last_active = loop.time()
                    buf += chunk
                (size,) = _I32.unpack_from(buf, 0)
                limit = self.session.max_frame_bytes(server._max_request_bytes)
                if size < 8 or size > limit:
                    log.warning(
                        "closing connection %s: request size %d outside [8, %d]%s",
                        self.peer,
                        size,
                        limit,
                        "" if self.session.authenticated else " (sasl.server.max.receive.size)",
                    )
                    await self.close()
                    return
                if size <= SMALL_REQUEST_BYTES:
                    server.memory.take(size)
                    self._reserved = size
                handed_over = False  # to the handler's future, which releases the memory when done
                try:
                    frame = await self._read_frame(loop, buf, size)
                    if frame is None:
                        log.info("connection %s closed mid-frame", self.peer)
                        await self._finish_reading()
                        return
                    if self._backlog.read(size):
                        server.backlog_clamped(self.peer)
                    if server._prepare is not None and (ready := server._prepare(frame)) is not None:
                        await ready
                    fut = start_eagerly(loop, server._dispatcher.dispatch(frame, self))
                    handed_over = True
                    self._reserved = 0  # all of ``size``, the handler's now
                    if fut.done():  # answered in its first step: no task was needed
                        self._request_done(size, frame)
                    else:
                        fut.add_done_callback(lambda _, n=size, f=frame: self._request_done(n, f))
                finally:
                    if not handed_over:
                        server.memory.release(self._reserved)
                        self._reserved = 0
                frame = None  # its buffer may be recycled once the request is done with it
                self.inflight += 1
                turns, self.turns_before_answer = self.turns_before_answer, 0
                if self._answered_now(fut):  # the common case: sent from here
                    response, fut = fut.result(), None
                    for _ in range(turns):
                        await asyncio.sleep(0)
                    await self._send_now(loop, response)
                    response = None
                    continue
                await self._queue.put(fut)
        except FrameError as exc:
            log.warning("closing connection %s: %s", self.peer, exc)
            await self._finish_reading()
        except TlsHandshakeError as exc:
            log.info("closing connection %s: %s", self.peer, exc)
            await self.close()
        except ValueError as exc:  # a client certificate no principal mapping rule applies to
            log.warning("closing connection %s: %s", self.peer, exc)
            await self.close()
        except (ConnectionError, OSError) as exc:
            log.debug("connection %s: %s", self.peer, exc)
            await self.close()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("request reader failed; closing connection %s", self.peer)
            await self.close()

    def _answered_now(self, fut: asyncio.Future[Response]) -> bool:
        """Whether the reader sends this answer itself: it is ready (a whole frame, or none
        for acks=0), it is the one request in flight (nothing queued for the writer or
        being sent by it), and the connection is not closing after it (a failed
        authentication)."""
        if self.inflight != 1 or not fut.done() or fut.cancelled() or fut.exception() is not None:
            return False
        return isinstance(fut.result(), bytes | None) and self.session.close_after_s is None

    async def _send_now(self, loop: asyncio.AbstractEventLoop, response: bytes | None) -> None:
        """Send an answer from the reader, which reads the next request once it is sent:
        no queue and no turn of the writer. Answers keep their order, as nothing else is
        queued or being sent; a client that does not read its answers stops the reading
        of its requests, as Kafka mutes such a channel."""
        try:
            if response is not None:
                await self.transport.send(response)
                self.last_active = loop.time()
        finally:
            self.inflight -= 1

    async def _finish_reading(self) -> None:
        """No more requests: let the writer send what is pending, then close."""
        await self._queue.put(None)

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                fut = await self._queue.get()
                if fut is None:
                    break
                try:
                    response = await fut
                except FrameError as exc:
                    log.warning("closing connection %s: %s", self.peer, exc)
                    break
                except Exception:
                    log.exception("handler failed; closing connection %s", self.peer)
                    break
                if response is not None:  # None: acks=0
                    if isinstance(response, bytes):
                        await self.transport.send(response)
                    else:
                        await self.transport.send_parts(response)
                    self.last_active = loop.time()
                self.inflight -= 1
                if self.session.close_after_s is not None:  # failed auth; a failed acks=0 write
                    await asyncio.sleep(self.session.close_after_s)
                    break
                # release the response now, not when the next one (maybe a long
                # poll) is ready: memory per connection stays one response
                response = fut = None
        except (ConnectionError, OSError) as exc:
            log.debug("connection %s: %s", self.peer, exc)
        finally:
            await self.close()


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is already closed (shutdown)
        loop.call_soon_threadsafe(callback)


def _closed_first(sock: socket.socket) -> socket.socket:
    """``sock`` on a descriptor above every other this process will likely open, so that when
    the process is killed its kernel closes the listener before the logs and connections.

    Linux closes a dead process's files highest descriptor first (its exit queues their
    releases in descriptor order, and runs the queue last in, first out). A listener bound at start sat on a low
    descriptor, under thousands of log files: at 10,000 partitions a killed broker's
    connections dropped 8-17 ms before its listener refused connections (releasing a written
    ext4 file costs tens of microseconds), and the controller's probe, which fences a broker
    whose listener refuses (``controller.liveness``), waited for it. On top it refuses at once.
    Where the descriptor cannot move (a low limit, any error) it stays where it is."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        ceiling = LISTENER_FD_CEILING if soft == resource.RLIM_INFINITY else min(soft, LISTENER_FD_CEILING)
        floor = ceiling - LISTENER_FD_MARGIN
        if floor <= sock.fileno():
            return sock
        moved = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, floor)
    except OSError:
        return sock
    high = socket.socket(sock.family, sock.type, sock.proto, fileno=moved)
    sock.close()
    return high
