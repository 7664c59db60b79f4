"""A connection's security: :class:`ListenerSecurity` (one per listener) and the
:class:`Session` of each connection on it.

A session knows its listener's name and security protocol and who is on the other
end: ``User:ANONYMOUS`` until a client certificate (SSL listeners,
``ssl.principal.mapping.rules``) or SASL (SASL listeners,
:mod:`service.security.sasl`) says otherwise. On a SASL listener a session is
*unauthenticated* until SaslAuthenticate succeeds: only ApiVersions, SaslHandshake
and SaslAuthenticate are allowed, a frame larger than
``sasl.server.max.receive.size`` closes the connection, and so does any other
request (Kafka's behaviour, :meth:`Session.admits`).

Not thread-safe: a session lives on its connection's event loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from service.security.listeners import SecurityProtocol
from service.security.principal import ANONYMOUS, KafkaPrincipal
from service.security.principal_mapping import PrincipalMapper
from service.security.tls import rfc2253_subject
from service.security.tls_reload import ReloadingTls

if TYPE_CHECKING:
    from OpenSSL import SSL

__all__ = ["API_VERSIONS", "SASL_AUTHENTICATE", "SASL_HANDSHAKE", "ListenerSecurity", "Session"]

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """What every connection of one listener shares (built once at start)."""

    name: str = "PLAINTEXT"
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    #: the listener's TLS context (service.security.tls_engine.listener_context), when fixed
    tls: SSL.Context | None = None
    tls_handshake_timeout_s: float = 10.0
    principal_mapper: PrincipalMapper | None = None
    #: SASL mechanisms offered (SaslHandshake's list)
    sasl_mechanisms: tuple[str, ...] = ()
    sasl_max_receive_bytes: int = 524288
    failed_authentication_delay_s: float = 0.1
    #: connections.max.reauth.ms (0: sessions do not expire)
    max_reauth_ms: int = 0
    #: the listener's certificate files, followed (service.security.tls_reload); over ``tls``
    tls_source: ReloadingTls | None = None

    def tls_context(self) -> SSL.Context | None:
        """The context a new connection handshakes with: the files' latest, if followed."""
        return self.tls if self.tls_source is None else self.tls_source.listener_context

    def new_session(self, peer: str) -> Session:
        return Session(self, peer)


@dataclass(slots=True)
class Session:
    """One connection's principal and authentication state (see the module docstring)."""

    listener: ListenerSecurity
    peer: str
    principal: KafkaPrincipal = ANONYMOUS
    authenticated: bool = False
    #: the mechanism a SaslHandshake chose, awaiting SaslAuthenticate (Kafka's state machine)
    mechanism: str | None = None
    #: SaslHandshake v0: the client sends bare SASL tokens next, not SaslAuthenticate
    raw_tokens: bool = False
    #: the SASL exchange in progress (a mechanism's server object)
    exchange: Any = None
    #: monotonic time the SASL session expires (connections.max.reauth.ms), or None
    expires_at: float | None = None
    #: set when the connection must close after its pending responses (failed auth; an acks=0
    #: produce with a partition error, as Kafka, so the client refreshes its metadata)
    close_after_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.authenticated = not self.listener.protocol.uses_sasl

    @property
    def listener_name(self) -> str:
        return self.listener.name

    @property
    def security_protocol(self) -> SecurityProtocol:
        return self.listener.protocol

    @property
    def client_host(self) -> str:
        host = self.peer.rpartition(":")[0]
        return host.strip("[]")

    def tls_established(self, certificate: dict[str, Any] | None) -> None:
        """The TLS handshake is done: on an SSL listener, a verified client certificate
        names the principal (``ValueError`` when no mapping rule applies)."""
        if self.listener.protocol != SecurityProtocol.SSL or certificate is None:
            return
        mapper = self.listener.principal_mapper or PrincipalMapper("DEFAULT")
        self.principal = KafkaPrincipal.user(mapper.name(rfc2253_subject(certificate)))

    def max_frame_bytes(self, authenticated_max: int) -> int:
        """The largest frame accepted now: ``sasl.server.max.receive.size`` before SASL
        authentication, ``socket.request.max.bytes`` after."""
        return authenticated_max if self.authenticated else self.listener.sasl_max_receive_bytes

    def admits(self, api_key: int) -> str | None:
        """None if a request of ``api_key`` may run now, else why the connection closes."""
        if self.expires_at is not None and time.monotonic() > self.expires_at and api_key not in (
            API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE
        ):
            return "the SASL session expired (connections.max.reauth.ms) and was not re-authenticated"
        if self.authenticated:
            return None
        if api_key in (API_VERSIONS, SASL_HANDSHAKE):
            return None
        if api_key == SASL_AUTHENTICATE and self.mechanism is not None and not self.raw_tokens:
            return None
        return f"api {api_key} before SASL authentication"
