"""What a handler is given: the request header, the broker, the connection it came on,
and who sent it: the principal, the listener's name and security protocol, the client's
host (``RequestContext.of`` reads them from the connection's session; a request with no
connection, such as one opened from an Envelope, is given them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.protocol import RequestHeader
from service.quotas.manager import QuotaManager
from service.security.acls import AclOperation, ResourceType
from service.security.authorizer import Authorizer
from service.security.listeners import SecurityProtocol
from service.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from service.broker import Broker
    from service.server import Connection

__all__ = ["Handler", "RequestContext"]


@dataclass(frozen=True, slots=True)
class RequestContext:
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

    @classmethod
    def of(cls, header: RequestHeader, broker: Broker, connection: Connection | None,
           authorizer: Authorizer | None = None, quotas: QuotaManager | None = None) -> RequestContext:
        if connection is None:
            return cls(header, broker, None, authorizer=authorizer, quotas=quotas)
        session = connection.session
        return cls(header, broker, connection, session.principal, session.listener_name,
                   session.security_protocol, session.client_host, authorizer, quotas)

    def throttle(self, key: str, value: float) -> int:
        """Record ``value`` against the client's quota ``key``; the throttle time (ms), for
        which the connection is also muted (KIP-219)."""
        if self.quotas is None:
            return 0
        ms = self.quotas.record(key, self.principal.name, self.header.client_id or "", value)
        if ms > 0 and self.connection is not None:
            self.connection.mute(ms)
        return ms

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
