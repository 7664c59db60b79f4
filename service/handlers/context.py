"""What a handler is given: the request header, the broker, the connection it came on,
and who sent it: the principal, the listener's name and security protocol, the client's
host (``RequestContext.of`` reads them from the connection's session; a request with no
connection, such as one opened from an Envelope, is given them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.protocol import RequestHeader
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

    @classmethod
    def of(cls, header: RequestHeader, broker: Broker, connection: Connection | None) -> RequestContext:
        if connection is None:
            return cls(header, broker, None)
        session = connection.session
        return cls(header, broker, connection, session.principal, session.listener_name,
                   session.security_protocol, session.client_host)

    @property
    def version(self) -> int:
        return self.header.api_version


Handler = Callable[[RequestContext, Any], Any]
