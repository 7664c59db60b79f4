"""What a handler is given: the request header, the broker, the connection it came on,
and who sent it: the principal, the listener's name and security protocol, the client's
host (``RequestContext.of`` reads them from the connection's session; a request with no
connection, such as one opened from an Envelope, is given them)."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from common.protocol.codec import RequestHeader
from service.quotas.manager import REQUEST, QuotaManager
from service.security.acls import AclOperation, ResourceType
from service.security.authorizer import Authorizer
from service.security.listeners import SecurityProtocol
from service.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from service.broker import Broker
    from service.network.server import Connection

__all__ = ["Handler", "RequestClock", "RequestContext"]

T = TypeVar("T")


class RequestClock:
    """The time a request spends running on the event loop, not the time it waits:
    Kafka's request-time quota (``request_percentage``) counts the time a request holds
    a network or handler thread, never its time in purgatory (an acks=all wait for the
    ISR, a Fetch long poll, a JoinGroup waiting for the group). The clock runs from its
    creation until :meth:`pause`; :meth:`timed` runs a coroutine with the clock running
    only while one of its steps does."""

    __slots__ = ("_busy", "_since", "throttle_ms")

    def __init__(self) -> None:
        self._busy = 0.0
        self._since: float | None = time.perf_counter()
        #: the request-quota throttle once recorded (a request is recorded once)
        self.throttle_ms: int | None = None

    def busy_ms(self) -> float:
        running = time.perf_counter() - self._since if self._since is not None else 0.0
        return (self._busy + running) * 1000

    def pause(self) -> None:
        if self._since is not None:
            self._busy += time.perf_counter() - self._since
            self._since = None

    def timed(self, coroutine: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
        return _Timed(self, coroutine)


class _Timed(Coroutine[Any, Any, T]):
    """A coroutine run with the clock running only while one of its steps does (the
    event loop's task calls :meth:`send` and :meth:`throw` once per step): what the loop
    does between steps is another request's."""

    __slots__ = ("_clock", "_inner")

    def __init__(self, clock: RequestClock, inner: Coroutine[Any, Any, T]) -> None:
        self._clock, self._inner = clock, inner

    def send(self, value: Any) -> Any:
        self._clock._since = time.perf_counter()
        try:
            return self._inner.send(value)
        finally:
            self._clock.pause()

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._clock._since = time.perf_counter()
        try:
            return self._inner.throw(typ, val, tb) if val is not None else self._inner.throw(typ)
        finally:
            self._clock.pause()

    def close(self) -> None:
        self._inner.close()

    def __await__(self) -> Generator[Any, Any, T]:
        return self  # an iterator of its steps, as a generator is

    def __iter__(self) -> _Timed[T]:
        return self

    def __next__(self) -> Any:
        return self.send(None)


@dataclass(slots=True, eq=False)  # not frozen: one per request, and a frozen __init__ costs 3 µs
class RequestContext:
    """What a handler knows of its request. Read-only by convention: derive another with
    ``dataclasses.replace``."""

    header: RequestHeader
    broker: Broker
    connection: Connection | None
    principal: KafkaPrincipal = ANONYMOUS
    listener_name: str = ""
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    client_host: str = ""
    #: None: no authorizer configured (authorizer.class.name empty), everything is allowed
    authorizer: Authorizer | None = None
    #: client quotas and the remote-read rate (None: none measured)
    quotas: QuotaManager | None = None
    #: a throttle decided when the request was read (Produce: its bytes, before the
    #: connection's next request is read, so pipelined requests cannot outrun it)
    throttle_ms: int = 0
    #: the request's own time on the event loop (None: not measured)
    clock: RequestClock | None = None

    @classmethod
    def of(cls, header: RequestHeader, broker: Broker, connection: Connection | None,
           authorizer: Authorizer | None = None, quotas: QuotaManager | None = None,
           clock: RequestClock | None = None) -> RequestContext:
        if connection is None:
            return cls(header, broker, None, authorizer=authorizer, quotas=quotas, clock=clock)
        session = connection.session
        return cls(header, broker, connection, session.principal, session.listener_name,
                   session.security_protocol, session.client_host, authorizer, quotas, clock=clock)

    def throttle(self, key: str, value: float) -> int:
        """Record ``value`` against the client's quota ``key``; the throttle time (ms), for
        which the connection is also muted (KIP-219)."""
        if self.quotas is None or not self.quotas.has(key):
            return 0
        ms = self.quotas.record(key, self.principal.name, self.header.client_id or "", value)
        if ms > 0 and self.connection is not None:
            self.connection.mute(ms)
        return ms

    def request_throttle(self) -> int:
        """Record the request's time on the event loop so far against the client's
        ``request_percentage`` quota, once; the throttle (ms). Produce and Fetch call it
        as they encode their answer, so the throttle is in the response (as Kafka's
        ``max(byte-rate throttle, request throttle)``); the router records every other
        request when its handler returns."""
        clock = self.clock
        if clock is None:
            return 0
        if clock.throttle_ms is None:
            clock.throttle_ms = self.throttle(REQUEST, clock.busy_ms())
        return clock.throttle_ms

    def allowed(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Whether this request's principal may do ``operation`` on the resource (Kafka's
        ``AuthHelper.authorize``)."""
        authorizer = self.authorizer
        return authorizer is None or authorizer.authorize(
            self.principal, self.client_host, operation, resource_type, name)

    def allowed_on_some(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type."""
        authorizer = self.authorizer
        return authorizer is None or authorizer.authorize_by_resource_type(
            self.principal, self.client_host, operation, resource_type)

    @property
    def version(self) -> int:
        return self.header.api_version


Handler = Callable[[RequestContext, Any], Any]
