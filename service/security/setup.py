"""The security of each listener and of the inter-broker client, built once at start
from the broker's configs: :func:`listener_securities`, :func:`inter_broker_security`.

One TLS server context serves every TLS listener. ``ssl.client.auth`` applies to
``SSL`` listeners only; a ``SASL_SSL`` listener authenticates with SASL and asks for
no client certificate (Kafka's rule since KIP-684). A TLS listener without a key
and certificate, or a bad ``ssl.principal.mapping.rules``, is a ``ValueError``
naming the config.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from controller.broker_config import BrokerConfig
from service.security.jaas import parse_jaas_credentials
from service.security.listeners import ListenerSettings, SecurityProtocol
from service.security.principal_mapping import PrincipalMapper
from service.security.session import ListenerSecurity
from service.security.tls import client_context, server_context, tls_settings

__all__ = ["InterBrokerSecurity", "inter_broker_security", "listener_securities"]


@dataclass(frozen=True, slots=True)
class InterBrokerSecurity:
    """How this broker connects to its peers: the listener it asks for, TLS, SASL."""

    listener: str
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)


def listener_securities(config: BrokerConfig, settings: ListenerSettings) -> dict[str, ListenerSecurity]:
    """listener name → its :class:`ListenerSecurity`."""
    mapper = PrincipalMapper(config.get_str("ssl.principal.mapping.rules"))
    contexts: dict[str, ssl.SSLContext] = {}

    def tls_for(protocol: SecurityProtocol) -> ssl.SSLContext:
        client_auth = config.get_str("ssl.client.auth") if protocol == SecurityProtocol.SSL else "none"
        if client_auth not in contexts:
            contexts[client_auth] = server_context(tls_settings(config, client_auth))
        return contexts[client_auth]

    mechanisms = tuple(config.get_str("sasl.enabled.mechanisms").split(","))
    out = {}
    for spec in settings.listeners:
        out[spec.name] = ListenerSecurity(
            name=spec.name,
            protocol=spec.protocol,
            tls=tls_for(spec.protocol) if spec.protocol.uses_tls else None,
            tls_handshake_timeout_s=config.get_int("ssl.handshake.timeout.ms") / 1000,
            principal_mapper=mapper,
            sasl_mechanisms=mechanisms if spec.protocol.uses_sasl else (),
            sasl_max_receive_bytes=config.get_int("sasl.server.max.receive.size"),
            failed_authentication_delay_s=config.get_int("connection.failed.authentication.delay.ms") / 1000,
            max_reauth_ms=config.get_int("connections.max.reauth.ms"),
        )
    return out


def inter_broker_security(config: BrokerConfig, settings: ListenerSettings) -> InterBrokerSecurity:
    """The client side of the inter-broker listener (``ValueError`` when SASL is needed
    and ``sasl.jaas.config`` gives no credentials)."""
    protocol = settings.inter_broker_protocol
    context = client_context(tls_settings(config)) if protocol.uses_tls else None
    if not protocol.uses_sasl:
        return InterBrokerSecurity(settings.inter_broker, protocol, context)
    mechanism = config.get_str("sasl.mechanism.inter.broker.protocol")
    jaas = config.get("sasl.jaas.config")
    if not jaas:
        raise ValueError(
            f"the inter-broker listener {settings.inter_broker} is {protocol.name}: set "
            "sasl.jaas.config to the credentials brokers authenticate with, e.g. "
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="broker" password="..."; (in a --config file, not on the command line)'
        )
    username, password = parse_jaas_credentials(jaas)
    return InterBrokerSecurity(settings.inter_broker, protocol, context, mechanism, username, password)

