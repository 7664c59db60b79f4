"""Listeners as Kafka names them: ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map`` and the listener brokers use between themselves.

``listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://:9093`` binds one server per
entry; a name is a security protocol (``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``,
``SASL_SSL``) or any name the protocol map gives one
(``listener.security.protocol.map=INTERNAL:SASL_SSL,EXTERNAL:SSL``). An empty host
binds every interface. ``advertised.listeners`` (default: ``listeners``) are the
addresses registered in the cluster metadata and handed to clients: Metadata,
FindCoordinator and DescribeCluster answer with the endpoints of the listener the
client connected on, as Kafka does. ``inter.broker.listener.name`` (or, exclusive
with it, ``security.inter.broker.protocol``, default ``PLAINTEXT``) names the
listener brokers connect to each other on.

The rules and messages are Kafka's (``KafkaConfig``): names unique, every name in
the protocol map, every advertised name a listener, no advertised ``0.0.0.0``, the
inter-broker listener advertised. :func:`listener_settings` raises ``ValueError``
with the reason.

Frozen values; thread-safe.
"""

from __future__ import annotations

import enum
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from common.config.broker import BrokerConfig
from controller.registrations import Endpoint

__all__ = [
    "ListenerSettings",
    "ListenerSpec",
    "SecurityProtocol",
    "listener_settings",
    "parse_listeners",
    "parse_protocol_map",
]


class SecurityProtocol(enum.IntEnum):
    """Kafka's security protocol ids (as BrokerRegistration carries them)."""

    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One listener: its (upper-case) name, address and security protocol. An empty
    ``host`` is every interface; port 0 an ephemeral port."""

    name: str
    host: str
    port: int
    protocol: SecurityProtocol

    def endpoint(self) -> Endpoint:
        return Endpoint(self.name, self.host, self.port, int(self.protocol))

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    """What a broker binds, advertises and uses between brokers."""

    listeners: tuple[ListenerSpec, ...]
    advertised: tuple[ListenerSpec, ...]
    inter_broker: str

    def advertised_endpoints(self) -> tuple[Endpoint, ...]:
        """The registration's endpoints, the inter-broker listener first (a peer that
        does not ask for a listener by name reaches that one)."""
        ordered = sorted(self.advertised, key=lambda s: s.name != self.inter_broker)
        return tuple(s.endpoint() for s in ordered)

    def with_bound_ports(self, ports: Mapping[str, int]) -> ListenerSettings:
        """Listeners on port 0 advertise the port they were given."""
        def bound(spec: ListenerSpec) -> ListenerSpec:
            port = spec.port or bound_port(spec.name)
            return ListenerSpec(spec.name, spec.host, port, spec.protocol)

        def bound_port(name: str) -> int:
            return ports.get(name, 0)

        return ListenerSettings(tuple(map(bound, self.listeners)), tuple(map(bound, self.advertised)),
                                self.inter_broker)

    def listener(self, name: str) -> ListenerSpec:
        return next(s for s in self.listeners if s.name == name)

    @property
    def inter_broker_protocol(self) -> SecurityProtocol:
        return self.listener(self.inter_broker).protocol


_ENTRY = re.compile(r"^([^:/]+)://\[?([0-9a-zA-Z\-%._:]*?)\]?:(-?[0-9]+)$")


def parse_protocol_map(value: str) -> dict[str, SecurityProtocol]:
    """``NAME:PROTOCOL,...`` → name → protocol (Kafka's ``listener.security.protocol.map``)."""
    out: dict[str, SecurityProtocol] = {}
    for item in (p.strip() for p in value.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"listener.security.protocol.map entry {item!r} is not NAME:PROTOCOL")
        try:
            out[name.strip().upper()] = SecurityProtocol[protocol.strip().upper()]
        except KeyError:
            raise ValueError(
                f"listener.security.protocol.map: unknown security protocol {protocol.strip()!r} "
                f"(one of {', '.join(p.name for p in SecurityProtocol)})"
            ) from None
    return out


def parse_listeners(
    value: str, protocols: Mapping[str, SecurityProtocol], key: str = "listeners"
) -> tuple[ListenerSpec, ...]:
    """``NAME://host:port,...`` → the listeners; ``ValueError`` saying what is wrong."""
    specs: list[ListenerSpec] = []
    for item in (p.strip() for p in value.split(",")):
        if not item:
            continue
        match = _ENTRY.match(item)
        if match is None:
            raise ValueError(
                f"{key}: {item!r} is not NAME://HOST:PORT (e.g. SASL_SSL://127.0.0.1:9093)"
            )
        name, host, port_text = match.group(1).strip().upper(), match.group(2), match.group(3)
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise ValueError(f"{key}: {item!r}: the port must be from 0 to 65535")
        protocol = protocols.get(name)
        if protocol is None:
            raise ValueError(
                f"{key}: no security protocol defined for listener {name} "
                "(add it to listener.security.protocol.map, e.g. "
                f"listener.security.protocol.map={name}:SASL_SSL)"
            )
        specs.append(ListenerSpec(name, host, port, protocol))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"{key} must not have two listeners of one name: {value}")
    ports = [s.port for s in specs if s.port != 0]
    if key == "listeners" and len(set(ports)) != len(ports):
        raise ValueError(f"{key} must not have two listeners on one port: {value}")
    return tuple(specs)


def listener_settings(config: BrokerConfig, *, shorthand: str | None = None,
                      advertise: str | None = None) -> ListenerSettings:
    """The broker's listeners from its configs. ``shorthand`` (``strata up --listen
    HOST:PORT``) and ``advertise`` (``--advertise``) stand for ``PLAINTEXT://HOST:PORT``
    when ``listeners`` is not set; with it they are refused (one or the other)."""
    protocols = parse_protocol_map(config.get_str("listener.security.protocol.map"))
    explicit = "listeners" in config.overrides
    if explicit and shorthand is not None:
        raise ValueError("--listen and listeners are two ways to say one thing: give one "
                         "(listeners=PLAINTEXT://HOST:PORT,SSL://HOST:PORT for several)")
    if explicit and advertise is not None:
        raise ValueError("--advertise goes with --listen; with listeners set advertised.listeners")
    listeners: tuple[ListenerSpec, ...]
    advertised: tuple[ListenerSpec, ...]
    if explicit:
        listeners = parse_listeners(config.get_str("listeners"), protocols)
    else:
        host, port = _hostport(shorthand or "127.0.0.1:9092")
        listeners = (ListenerSpec("PLAINTEXT", host, port, SecurityProtocol.PLAINTEXT),)
    if not listeners:
        raise ValueError("listeners names no listener")
    advertised_value = config.get("advertised.listeners")
    if advertise is not None:
        host, port = _hostport(advertise)
        advertised = (ListenerSpec("PLAINTEXT", host, port, SecurityProtocol.PLAINTEXT),)
    elif advertised_value:
        advertised = parse_listeners(advertised_value, protocols, "advertised.listeners")
    else:
        advertised = listeners
    bound = {s.name: s for s in listeners}
    defaulted = advertise is None and not advertised_value
    resolved = []
    for spec in advertised:
        if spec.name not in bound:
            raise ValueError(f"advertised.listeners listener names must be equal to or a subset "
                             f"of the ones defined in listeners: {spec.name} is not a listener")
        if spec.host in ("0.0.0.0", "::") and defaulted:
            spec = ListenerSpec(spec.name, "", spec.port, spec.protocol)  # every interface: the host name
        if spec.host in ("0.0.0.0", "::"):
            raise ValueError(f"advertised.listeners cannot use the nonroutable meta-address "
                             f"{spec.host}. Use a routable IP address.")
        host = spec.host or socket.gethostname()
        resolved.append(ListenerSpec(spec.name, host, spec.port, spec.protocol))
    return ListenerSettings(listeners, tuple(resolved), _inter_broker(config, {s.name for s in resolved}))


def _inter_broker(config: BrokerConfig, advertised: set[str]) -> str:
    by_name = config.overrides.get("inter.broker.listener.name")
    by_protocol = config.overrides.get("security.inter.broker.protocol")
    if by_name and by_protocol:
        raise ValueError("Only one of inter.broker.listener.name and "
                         "security.inter.broker.protocol should be set.")
    name = (by_name or config.get_str("security.inter.broker.protocol")).upper()
    if name not in advertised:
        if not by_name and not by_protocol and len(advertised) == 1:
            return next(iter(advertised))  # one listener: brokers use it (Strata's convenience)
        raise ValueError(
            "inter.broker.listener.name must be a listener name defined in advertised.listeners. "
            f"The valid options based on currently configured listeners are "
            f"{','.join(sorted(advertised))}"
        )
    return name


def _hostport(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)
