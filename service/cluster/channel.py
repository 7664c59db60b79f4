"""One broker's connection to another: :class:`BrokerChannel`, and one per peer:
:class:`PeerChannels`.

A small asyncio Kafka client, the inter-broker half of Kafka's ``NetworkClient``:
one TCP connection per peer, opened on first use, requests pipelined on it and
answers matched by correlation id. On connect it asks ApiVersions and then
sends each API at the highest version both sides implement. Everything is
bounded: connecting (``connect_timeout_s``), each request (its timeout; the
connection is dropped when one expires, as Kafka's client does), requests in
flight (``max_in_flight``), and the size of a response frame. On a SASL
inter-broker listener it then authenticates (SaslHandshake, SaslAuthenticate) with
the broker's ``sasl.jaas.config`` credentials. A connection that
fails is closed, every request in flight on it fails with
``BrokerNotAvailableError`` (retriable), and the next request reconnects after
a backoff that doubles from 50 ms to 1 s (Kafka's ``reconnect.backoff.ms`` and
``reconnect.backoff.max.ms``).

Not thread-safe: every method runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kio.index import load_request_schema

from common.errors import (
    BrokerNotAvailableError,
    KafkaError,
    RequestTimedOutError,
    UnsupportedVersionError,
)
from common.protocol.codec import build
from service.cluster.wire import ResponseError, decode_response, encode_request, request_module
from service.security.sasl_client import sasl_client
from service.security.setup import InterBrokerSecurity

__all__ = ["BrokerChannel", "ChannelConfig", "PeerChannels"]

_log = logging.getLogger("strata.cluster.channel")
_I32 = struct.Struct(">i")
_API_VERSIONS = 18
_API_SASL_HANDSHAKE = 17
_API_SASL_AUTHENTICATE = 36
_API_VERSIONS_VERSION = 3
#: a request of Strata's own API (:meth:`BrokerChannel.request_raw`): its answer is left as bytes
_RAW = -1
_RAW_HEAD = struct.Struct(">hhih")  # api key, version 0, correlation id, client id length


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    """Bounds of every inter-broker connection (see the module docstring)."""

    client_id: str
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    max_in_flight: int = 100
    max_response_bytes: int = 128 * 1024 * 1024
    backoff_s: float = 0.05
    backoff_max_s: float = 1.0
    #: the inter-broker listener's TLS and SASL (None: plaintext)
    security: InterBrokerSecurity | None = None


@dataclass(slots=True)
class _Pending:
    api_key: int
    version: int
    future: asyncio.Future[Any]


class _FrameProtocol(asyncio.BufferedProtocol):
    """Size-prefixed response frames, each received straight into a buffer of its size
    (an asyncio stream copies every byte twice or more on the way: a follower's fetch
    answers are megabytes); flow control for the requests written."""

    def __init__(
        self,
        on_frame: Callable[[memoryview], None],
        on_lost: Callable[[str], None],
        max_frame_bytes: int,
    ) -> None:
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._max = max_frame_bytes
        self._head = memoryview(bytearray(4))
        #: frames are read into this one buffer, replaced only by a larger one: a fresh
        #: megabyte per fetch answer costs its page faults every time (kio's decoder copies
        #: what it keeps, so the buffer is free again once a frame is decoded)
        self._buffer = bytearray(0)
        self._frame: memoryview | None = None
        self._have = 0
        self.transport: asyncio.Transport | None = None
        self._paused = False
        self._drained: list[asyncio.Future[None]] = []
        self._lost: str | None = None
        self._gone = asyncio.get_running_loop().create_future()  # connection_lost was called

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def get_buffer(self, sizehint: int) -> memoryview:
        # never beyond the frame being read: the next one gets a buffer of its own
        return self._head[self._have:] if self._frame is None else self._frame[self._have:]

    def buffer_updated(self, nbytes: int) -> None:
        self._have += nbytes
        if self._frame is None:
            if self._have < 4:
                return
            (size,) = _I32.unpack(self._head)
            self._have = 0
            if not 4 <= size <= self._max:
                self._lose(f"response frame of {size} bytes is out of bounds")
                return
            if len(self._buffer) < size:
                self._buffer = bytearray(size)
            self._frame = memoryview(self._buffer)[:size]
        elif self._have == len(self._frame):
            frame, self._frame, self._have = self._frame, None, 0
            with frame.toreadonly() as payload:  # kio's decoder takes read-only buffers
                self._on_frame(payload)
            frame.release()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lose(f"connection lost: {exc}" if exc is not None else "connection closed by the peer")
        if not self._gone.done():
            self._gone.set_result(None)

    async def wait_closed(self, timeout_s: float = 1.0) -> None:
        """Until the transport has closed (the peer sees the end of the connection)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._gone), timeout_s)

    def _lose(self, why: str) -> None:
        if self._lost is not None:
            return
        self._lost = why
        if self.transport is not None:
            self.transport.close()
        self._wake_writers()
        self._on_lost(why)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writers()

    def _wake_writers(self) -> None:
        waiters, self._drained = self._drained, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def drain(self) -> None:
        """Until the transport takes more writes; ``ConnectionError`` once it is lost."""
        if self._lost is not None:
            raise ConnectionError(self._lost)
        if self._paused:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._drained.append(fut)
            await fut
            if self._lost is not None:
                raise ConnectionError(self._lost)


class BrokerChannel:
    """The connection to one peer broker (see the module docstring).

    ``versions`` is what this broker implements (api key -> highest version);
    a request goes at ``min(ours, the peer's)``.
    """

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        config: ChannelConfig,
        versions: Mapping[int, int],
        on_drop: Callable[[int], None] | None = None,
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self._config = config
        self._on_drop = on_drop
        self._ours = dict(versions)
        self._peer_versions: dict[int, tuple[int, int]] = {}
        self._transport: asyncio.Transport | None = None
        self._protocol: _FrameProtocol | None = None
        self._pending: dict[int, _Pending] = {}
        self._correlation = itertools.count(1)
        self._connect_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(config.max_in_flight)
        self._failures = 0
        self._retry_at = 0.0
        self._closed = False

    def __repr__(self) -> str:
        return f"BrokerChannel(node {self.node_id} at {self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    # -- requests ---------------------------------------------------------------------

    def version_for(self, api_key: int) -> int:
        """The version a request of ``api_key`` goes at on this connection (connect first)."""
        ours = self._ours.get(api_key)
        if ours is None or (self._peer_versions and api_key not in self._peer_versions):
            raise UnsupportedVersionError(
                f"api {api_key} is not implemented by {'this broker' if ours is None else f'broker {self.node_id}'}"
            )
        low, high = self._peer_versions.get(api_key, (0, ours))
        version = min(ours, high)
        if version < low:
            raise KafkaError(
                f"broker {self.node_id} implements api {api_key} v{low}-v{high}, this one up to "
                f"v{ours}: upgrade the older broker"
            )
        return version

    async def request(
        self,
        api_key: int,
        fields: Mapping[str, Any] | Callable[[int], Any],
        *,
        timeout_s: float | None = None,
    ) -> tuple[int, Any]:
        """Send one request and return ``(version, response body)``.

        ``fields`` are the request's fields (built into the negotiated version's
        entity; fields that version lacks are dropped), or a function of the version
        returning the entity. Raises ``BrokerNotAvailableError`` (connection failed or
        lost) or ``RequestTimedOutError``; both retriable.
        """
        timeout = self._config.request_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        async with self._slots:
            await self._ensure_connected(deadline)
            version = self.version_for(api_key)
            if callable(fields):
                body = fields(version)
            else:
                body = build(getattr(request_module(api_key, version), _entity_name(api_key, version)),
                             **fields)
            return version, await self._send(api_key, version, body, deadline)

    async def request_raw(self, api_key: int, body: bytes, *, timeout_s: float | None = None) -> bytes:
        """One request of an API of Strata's own between brokers (ADR 0027: version 0, not
        negotiated, never in ApiVersions) whose body is ``body``; the response's bytes after
        its correlation id. Raises as :meth:`request` does."""
        timeout = self._config.request_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        client_id = self._config.client_id.encode()
        async with self._slots:
            await self._ensure_connected(deadline)
            return await self._send_frame(api_key, _RAW, lambda corr: b"".join((
                _I32.pack(_RAW_HEAD.size + len(client_id) + len(body)), _RAW_HEAD.pack(api_key, 0, corr, len(client_id)),
                client_id, body)), deadline)

    def _send(self, api_key: int, version: int, body: Any, deadline: float) -> Any:
        client_id = self._config.client_id
        return self._send_frame(
            api_key, version, lambda corr: encode_request(api_key, version, corr, client_id, body), deadline)

    async def _send_frame(self, api_key: int, version: int, encode: Callable[[int], bytes], deadline: float) -> Any:
        transport, protocol = self._transport, self._protocol
        if transport is None or protocol is None or transport.is_closing():
            # (closing: the peer went away between the connect and this request)
            raise BrokerNotAvailableError(f"no connection to broker {self.node_id}")
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        frame = encode(correlation_id)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = _Pending(api_key, version, future)
        try:
            transport.write(frame)
            await protocol.drain()
            return await asyncio.wait_for(asyncio.shield(future), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self._pending.pop(correlation_id, None)  # its failure is raised here, not set
            self._drop(f"request api {api_key} timed out")
            raise RequestTimedOutError(
                f"broker {self.node_id} did not answer api {api_key} in time"
            ) from None
        except (ConnectionError, OSError, RuntimeError) as exc:  # RuntimeError: uvloop's closed handle
            self._pending.pop(correlation_id, None)
            self._drop(str(exc))
            raise BrokerNotAvailableError(f"connection to broker {self.node_id} failed: {exc}") from exc
        finally:
            self._pending.pop(correlation_id, None)
            if not future.done():
                future.cancel()

    # -- connection ---------------------------------------------------------------------

    async def _ensure_connected(self, deadline: float) -> None:
        if self.connected:
            return
        async with self._connect_lock:
            if self.connected:
                return
            if self._closed:
                raise BrokerNotAvailableError(f"the channel to broker {self.node_id} is closed")
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                if time.monotonic() + wait > deadline:
                    raise BrokerNotAvailableError(
                        f"broker {self.node_id} at {self.host}:{self.port} is unreachable"
                    )
                await asyncio.sleep(wait)
            try:
                budget = min(self._config.connect_timeout_s, max(0.0, deadline - time.monotonic()))
                tls = None if self._config.security is None else self._config.security.ssl_context
                transport, protocol = await asyncio.wait_for(
                    asyncio.get_running_loop().create_connection(
                        lambda: _FrameProtocol(self._on_frame, self._on_lost,
                                               self._config.max_response_bytes),
                        self.host, self.port, ssl=tls, server_hostname=self.host if tls else None,
                    ),
                    budget,
                )
            except (OSError, TimeoutError, ssl.SSLError) as exc:
                self._note_failure()
                raise BrokerNotAvailableError(
                    f"cannot connect to broker {self.node_id} at {self.host}:{self.port}: {exc}"
                ) from exc
            self._transport, self._protocol = cast(asyncio.Transport, transport), protocol
            try:
                await self._negotiate(deadline)
                await self._authenticate(deadline)
            except KafkaError:
                self._drop("ApiVersions or SASL authentication failed")
                self._note_failure()
                raise
            self._failures = 0

    async def _negotiate(self, deadline: float) -> None:
        mod = request_module(_API_VERSIONS, _API_VERSIONS_VERSION)
        body = build(
            mod.ApiVersionsRequest,
            client_software_name="strata-broker",
            client_software_version="1",
        )
        answer = await self._send(_API_VERSIONS, _API_VERSIONS_VERSION, body, deadline)
        if int(answer.error_code) != 0:
            raise BrokerNotAvailableError(f"broker {self.node_id} refused ApiVersions")
        self._peer_versions = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys
        }

    async def _authenticate(self, deadline: float) -> None:
        """SaslHandshake then SaslAuthenticate with the inter-broker credentials, when the
        inter-broker listener is a SASL one (``BrokerNotAvailableError`` on failure)."""
        security = self._config.security
        if security is None or not security.sasl_mechanism:
            return
        mechanism = security.sasl_mechanism
        assert security.username is not None and security.password is not None
        hs = request_module(_API_SASL_HANDSHAKE, 1)
        answer = await self._send(_API_SASL_HANDSHAKE, 1, build(hs.SaslHandshakeRequest, mechanism=mechanism),
                                  deadline)
        if int(answer.error_code) != 0:
            raise BrokerNotAvailableError(
                f"broker {self.node_id} does not offer SASL {mechanism} (it offers {list(answer.mechanisms)})")
        client = sasl_client(mechanism, security.username, security.password)
        token: bytes | None = client.first()
        version = min(1, self._peer_versions.get(_API_SASL_AUTHENTICATE, (0, 1))[1])
        auth = request_module(_API_SASL_AUTHENTICATE, version)
        while token is not None:
            answer = await self._send(_API_SASL_AUTHENTICATE, version,
                                      build(auth.SaslAuthenticateRequest, auth_bytes=token), deadline)
            if int(answer.error_code) != 0:
                raise BrokerNotAvailableError(
                    f"SASL {mechanism} authentication to broker {self.node_id} as {security.username!r} "
                    f"failed: {answer.error_message}")
            try:
                token = client.respond(bytes(answer.auth_bytes))
            except ValueError as exc:
                raise BrokerNotAvailableError(f"SASL {mechanism} with broker {self.node_id}: {exc}") from None

    def _note_failure(self) -> None:
        self._failures += 1
        backoff = min(self._config.backoff_max_s, self._config.backoff_s * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + backoff

    def _on_frame(self, payload: memoryview) -> None:
        """A response frame arrived (on the loop, from the protocol): its request's answer."""
        (correlation_id,) = _I32.unpack_from(payload, 0)
        pending = self._pending.pop(correlation_id, None)
        if pending is None or pending.future.done():
            return  # its request timed out meanwhile
        if pending.version == _RAW:
            pending.future.set_result(bytes(payload[4:]))
            return
        try:
            pending.future.set_result(decode_response(pending.api_key, pending.version, payload))
        except ResponseError as exc:
            pending.future.set_exception(BrokerNotAvailableError(str(exc)))

    def _on_lost(self, why: str) -> None:
        self._drop(why, from_reader=True)

    def _drop(self, why: str, *, from_reader: bool = False) -> None:
        transport, self._transport, self._protocol = self._transport, None, None
        if transport is not None:
            _log.info("connection to broker %d %s: %s", self.node_id,
                      "lost" if from_reader else "dropped", why)
            transport.close()
            if self._on_drop is not None:
                self._on_drop(self.node_id)
        pending, self._pending = self._pending, {}
        for p in pending.values():
            if not p.future.done():
                p.future.set_exception(
                    BrokerNotAvailableError(f"connection to broker {self.node_id} lost: {why}")
                )

    async def close(self) -> None:
        self._closed = True
        protocol = self._protocol
        self._drop("channel closed")
        if protocol is not None:
            await protocol.wait_closed()


def _entity_name(api_key: int, version: int) -> str:
    return str(load_request_schema(api_key, version).__name__)


class PeerChannels:
    """One :class:`BrokerChannel` per peer, addressed by node id; endpoints come from
    ``resolve(node_id) -> (host, port) | None`` (the metadata's registrations), and a
    channel is replaced when its peer's endpoint changes."""

    def __init__(
        self,
        config: ChannelConfig,
        versions: Mapping[int, int],
        resolve: Callable[[int], tuple[str, int] | None],
        on_drop: Callable[[int], None] | None = None,
    ) -> None:
        self._config = config
        self._versions = dict(versions)
        self._resolve = resolve
        #: told the node id whenever a channel's connection drops
        self._on_drop = on_drop
        self._channels: dict[int, BrokerChannel] = {}

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        """Where ``node_id`` is registered (None: nowhere)."""
        return self._resolve(node_id)

    def channel(self, node_id: int) -> BrokerChannel:
        """The channel to ``node_id``; ``BrokerNotAvailableError`` if it has no endpoint."""
        address = self._resolve(node_id)
        if address is None:
            raise BrokerNotAvailableError(f"broker {node_id} is not registered with an endpoint")
        current = self._channels.get(node_id)
        if current is not None and (current.host, current.port) == address:
            return current
        if current is not None:
            asyncio.ensure_future(current.close())
        fresh = BrokerChannel(node_id, address[0], address[1], self._config, self._versions, self._on_drop)
        self._channels[node_id] = fresh
        return fresh

    async def request(
        self,
        node_id: int,
        api_key: int,
        fields: Mapping[str, Any] | Callable[[int], Any],
        *,
        timeout_s: float | None = None,
    ) -> tuple[int, Any]:
        return await self.channel(node_id).request(api_key, fields, timeout_s=timeout_s)

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.close()
