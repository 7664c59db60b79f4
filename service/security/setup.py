"""The security of each listener and of the inter-broker client, built at start from
the broker's configs: :func:`listener_securities`, :func:`inter_broker_security`.
Their TLS contexts come from one :class:`~service.security.tls_reload.TlsSources`, which
follows the certificate files afterwards.

Listeners with the same TLS settings share one server context; a listener's own
``listener.name.<listener>.ssl.*`` configs give it its own. ``ssl.client.auth`` applies to
``SSL`` listeners only; a ``SASL_SSL`` listener authenticates with SASL and asks for
no client certificate (Kafka's rule since KIP-684). A TLS listener without a key
and certificate, or a bad ``ssl.principal.mapping.rules``, is a ``ValueError``
naming the config.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from common.config.broker import BrokerConfig, ListenerConfig
from service.security.jaas import parse_jaas_credentials
from service.security.listeners import ListenerSettings, SecurityProtocol
from service.security.principal_mapping import PrincipalMapper
from service.security.session import ListenerSecurity
from service.security.tls import tls_settings
from service.security.tls_reload import ReloadingTls, TlsSources

__all__ = ["InterBrokerSecurity", "inter_broker_security", "listener_securities"]


@dataclass(frozen=True, slots=True)
class InterBrokerSecurity:
    """How this broker connects to its peers: the listener it asks for, TLS, SASL."""

    listener: str
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    tls: ReloadingTls | None = None
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The context a new connection to a peer uses (the files' latest)."""
        return None if self.tls is None else self.tls.context


def listener_securities(config: BrokerConfig, settings: ListenerSettings,
                        sources: TlsSources | None = None) -> dict[str, ListenerSecurity]:
    """listener name → its :class:`ListenerSecurity`, each from the configs as that
    listener sees them (``listener.name.<listener>.*`` first, Kafka's listener-prefixed
    configs). Listeners with the same TLS settings share one context of ``sources``."""
    sources = sources or TlsSources()

    def tls_for(own: ListenerConfig, spec_name: str, protocol: SecurityProtocol) -> ReloadingTls:
        client_auth = own.get_str("ssl.client.auth") if protocol == SecurityProtocol.SSL else "none"
        return sources.get(f"listener {spec_name}", tls_settings(own, client_auth), server=True)

    out = {}
    for spec in settings.listeners:
        own = config.for_listener(spec.name)
        try:
            out[spec.name] = ListenerSecurity(
                name=spec.name,
                protocol=spec.protocol,
                tls_source=tls_for(own, spec.name, spec.protocol) if spec.protocol.uses_tls else None,
                tls_handshake_timeout_s=own.get_int("ssl.handshake.timeout.ms") / 1000,
                principal_mapper=PrincipalMapper(own.get_str("ssl.principal.mapping.rules")),
                sasl_mechanisms=tuple(own.get_str("sasl.enabled.mechanisms").split(","))
                if spec.protocol.uses_sasl else (),
                sasl_max_receive_bytes=own.get_int("sasl.server.max.receive.size"),
                failed_authentication_delay_s=own.get_int("connection.failed.authentication.delay.ms") / 1000,
                max_reauth_ms=own.get_int("connections.max.reauth.ms"),
            )
        except ValueError as exc:
            raise ValueError(f"listener {spec.name}: {exc}") from None
    return out


def inter_broker_security(config: BrokerConfig, settings: ListenerSettings,
                          sources: TlsSources | None = None) -> InterBrokerSecurity:
    """The client side of the inter-broker listener (``ValueError`` when SASL is needed
    and ``sasl.jaas.config`` gives no credentials)."""
    protocol = settings.inter_broker_protocol
    own = config.for_listener(settings.inter_broker)  # the inter-broker listener's own TLS and SASL
    context = (sources or TlsSources()).get("inter-broker client", tls_settings(own), server=False) \
        if protocol.uses_tls else None
    if not protocol.uses_sasl:
        return InterBrokerSecurity(settings.inter_broker, protocol, context)
    mechanism = config.get_str("sasl.mechanism.inter.broker.protocol")
    jaas = own.jaas(mechanism)
    if not jaas:
        raise ValueError(
            f"the inter-broker listener {settings.inter_broker} is {protocol.name}: set "
            "sasl.jaas.config to the credentials brokers authenticate with, e.g. "
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="broker" password="..."; (in a --config file, not on the command line)'
        )
    username, password = parse_jaas_credentials(jaas)
    return InterBrokerSecurity(settings.inter_broker, protocol, context, mechanism, username, password)

