"""The broker's static configuration and what it implies for topics.

:class:`BrokerConfig` holds the validated overrides a broker was started with
(``--set key=value`` / ``server.properties``) and answers with Kafka's
precedence rules, e.g. ``log.retention.ms`` > ``log.retention.minutes`` >
``log.retention.hours``. It also builds DescribeConfigs entries for the broker
resource and for topics (a topic override, then its broker synonyms, then the
default).

Immutable after construction; thread-safe.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from types import MappingProxyType

from common.config.configdef import ConfigDef, InvalidConfigValue
from common.config.entries import ConfigEntry, ConfigSource, ConfigSynonym
from common.config.keys import BROKER_CONFIGS, TOPIC_CONFIGS

__all__ = ["LISTENER_PREFIX", "BrokerConfig", "ListenerConfig", "TypedConfig", "listener_key"]

#: configs a listener may override as ``listener.name.<listener>.<config>`` (Kafka's
#: listener-prefixed configs: TLS, SASL, the connection's authentication bounds and the
#: listener's connection limits);
#: ``sasl.jaas.config`` also as ``listener.name.<listener>.<mechanism>.sasl.jaas.config``
LISTENER_PREFIX = "listener.name."
_MECHANISMS = ("plain", "scram-sha-256", "scram-sha-512")
LISTENER_CONFIGS = frozenset(
    name for name in BROKER_CONFIGS
    if name.startswith(("ssl.", "sasl.")) and name != "sasl.mechanism.inter.broker.protocol"
) | {"connections.max.reauth.ms", "connection.failed.authentication.delay.ms",
   "max.connections", "max.connection.creation.rate"}


def listener_key(name: str) -> tuple[str, str, str] | None:
    """``listener.name.<listener>.<config>`` → (listener in lower case, config, the broker
    config whose definition checks it), the config possibly ``<mechanism>.sasl.jaas.config``;
    None when ``name`` is not one."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    listener, _, config = name[len(LISTENER_PREFIX):].partition(".")
    if not listener:
        return None
    if config in LISTENER_CONFIGS:
        return listener.lower(), config, config
    mechanism, _, rest = config.partition(".")
    if mechanism in _MECHANISMS and rest == "sasl.jaas.config":
        return listener.lower(), config, rest
    return None

# Broker keys whose value falls back to other keys, with each key's multiplier to
# the first key's unit; the first key that has a value (override or default) wins.
_FALLBACKS: Mapping[str, tuple[tuple[str, int], ...]] = {
    "log.retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ),
    "log.roll.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
    "log.roll.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
    "log.flush.interval.ms": (
        ("log.flush.interval.ms", 1),
        ("log.flush.scheduler.interval.ms", 1),
    ),
    "node.id": (("broker.id", 1), ("node.id", 1)),
}


class TypedConfig:
    """``get_str``/``get_int``/``get_bool`` over a ``get(name) -> str | None``."""

    def get(self, name: str) -> str | None:
        raise NotImplementedError

    def get_str(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise ValueError(f"Broker config {name} has no value")
        return value

    def get_int(self, name: str) -> int:
        return int(self.get_str(name))

    def get_bool(self, name: str) -> bool:
        return self.get_str(name) == "true"


class BrokerConfig(TypedConfig):
    """Validated broker overrides on top of Kafka's defaults.

    Invariant: every key of ``overrides`` is in ``BROKER_CONFIGS`` and its value is
    normalised. Construction raises ``ValueError`` naming the bad key or value.
    """

    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        normalized: dict[str, str] = {}
        by_listener: dict[tuple[str, str], str] = {}
        for name, value in (overrides or {}).items():
            prefixed = listener_key(name)
            if prefixed is not None:
                listener, config, base = prefixed
                try:
                    by_listener[listener, config] = BROKER_CONFIGS[base].normalize(str(value))
                except InvalidConfigValue as err:
                    raise ValueError(f"{name}: {err}") from None
                continue
            definition = BROKER_CONFIGS.get(name)
            if definition is None:
                if name.startswith(LISTENER_PREFIX):
                    raise ValueError(
                        f"Unknown broker config name: {name} (a listener may override "
                        "listener.name.<listener>.ssl.*, .sasl.*, .<mechanism>.sasl.jaas.config, "
                        ".max.connections and .max.connection.creation.rate)")
                raise ValueError(f"Unknown broker config name: {name}")
            try:
                normalized[name] = definition.normalize(str(value))
            except InvalidConfigValue as err:
                raise ValueError(str(err)) from None
        node_id, broker_id = normalized.get("node.id"), normalized.get("broker.id")
        if node_id is not None and broker_id is not None and node_id != broker_id:
            raise ValueError(
                f"broker.id ({broker_id}) must equal node.id ({node_id}) if both are set"
            )
        self._overrides: Mapping[str, str] = MappingProxyType(normalized)
        self._by_listener: Mapping[tuple[str, str], str] = MappingProxyType(by_listener)
        #: dynamic levels over the static overrides (:meth:`with_dynamic`), highest first
        self._dynamic: tuple[tuple[Mapping[str, str], ConfigSource], ...] = ()
        queued, request_max = self.get_int("queued.max.request.bytes"), self.get_int("socket.request.max.bytes")
        if 0 < queued < request_max:
            raise ValueError(
                f"queued.max.request.bytes ({queued}) must be at least socket.request.max.bytes "
                f"({request_max}), or -1 for no limit"
            )
        self._topic_defaults: Mapping[str, str] = MappingProxyType(
            {name: self._topic_default(d) for name, d in TOPIC_CONFIGS.items()}
        )

    def __repr__(self) -> str:
        return f"BrokerConfig({dict(self._overrides)!r})"

    def with_dynamic(self, own: Mapping[str, str], default: Mapping[str, str]) -> BrokerConfig:
        """These configs under a broker's dynamic ones (``own``) and the cluster default's
        (``default``), Kafka's precedence: own, default, static, the config's default.
        The values are the cluster metadata's, already normalised; listener-prefixed
        names are left to the listener's view (service.dynamic_config)."""
        merged = copy.copy(self)
        merged._dynamic = tuple(
            (MappingProxyType({k: v for k, v in level.items() if k in BROKER_CONFIGS}), source)
            for level, source in ((own, ConfigSource.DYNAMIC_BROKER_CONFIG),
                                  (default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        )
        merged._topic_defaults = MappingProxyType(
            {name: merged._topic_default(d) for name, d in TOPIC_CONFIGS.items()})
        return merged

    @property
    def overrides(self) -> Mapping[str, str]:
        return self._overrides

    @property
    def node_id(self) -> int:
        """``node.id``, or ``broker.id`` where only that one is set."""
        return int(self._resolve("node.id") or "1")

    def get(self, name: str) -> str | None:
        """The value of ``name`` after precedence rules; None if it has none."""
        if name not in BROKER_CONFIGS:
            raise KeyError(f"Unknown broker config name: {name}")
        return self._resolve(name)

    def for_listener(self, listener: str) -> ListenerConfig:
        """The configs as the listener ``listener`` sees them: its
        ``listener.name.<listener>.*`` overrides first (names in any case, as Kafka)."""
        return ListenerConfig(self, listener.lower(), self._by_listener)

    def topic_defaults(self) -> dict[str, str]:
        """The effective default of every topic config, from its broker synonym."""
        return dict(self._topic_defaults)

    def entries(self, keys: Collection[str] | None = None) -> list[ConfigEntry]:
        """DescribeConfigs entries of the broker resource (all static: read-only).

        Like Kafka, an entry's value is that key's own value (``log.retention.ms`` is
        None unless set) while its source and synonyms follow the precedence chain.
        """
        names = sorted(BROKER_CONFIGS) if keys is None else sorted(set(keys) & set(BROKER_CONFIGS))
        entries: list[ConfigEntry] = []
        for name in names:
            definition = BROKER_CONFIGS[name]
            synonyms = self.synonyms(name)
            own = self._own(name, definition.default)
            source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
            entries.append(_entry(definition, own, source, synonyms, read_only=True))
        return entries

    def topic_entries(
        self, overrides: Mapping[str, str], keys: Collection[str] | None = None
    ) -> list[ConfigEntry]:
        """DescribeConfigs entries of a topic with these overrides (all alterable)."""
        names = sorted(TOPIC_CONFIGS) if keys is None else sorted(set(keys) & set(TOPIC_CONFIGS))
        entries: list[ConfigEntry] = []
        for name in names:
            definition = TOPIC_CONFIGS[name]
            synonyms: list[ConfigSynonym] = []
            if name in overrides:
                synonyms.append(ConfigSynonym(name, overrides[name], ConfigSource.TOPIC_CONFIG))
            if definition.broker_synonym is not None:
                synonyms.extend(self.synonyms(definition.broker_synonym))
            else:
                synonyms.append(
                    ConfigSynonym(name, definition.default, ConfigSource.DEFAULT_CONFIG)
                )
            value = overrides.get(name, self._topic_defaults[name])
            entries.append(_entry(definition, value, synonyms[0].source, synonyms, read_only=False))
        return entries

    def synonyms(self, name: str) -> list[ConfigSynonym]:
        """Where broker config ``name`` gets its value: every overridden key of its
        precedence chain, then the default of the first key that has one."""
        chain = [key for key, _ in _FALLBACKS.get(name, ((name, 1),))]
        found = [
            ConfigSynonym(key, level[key], source)
            for level, source in self._levels()
            for key in chain
            if key in level
        ]
        for key in chain:
            default = BROKER_CONFIGS[key].default
            if default is not None:
                found.append(ConfigSynonym(key, default, ConfigSource.DEFAULT_CONFIG))
                break
        return found

    def _levels(self) -> tuple[tuple[Mapping[str, str], ConfigSource], ...]:
        """Where values come from before the configs' defaults, highest precedence first."""
        return (*self._dynamic, (self._overrides, ConfigSource.STATIC_BROKER_CONFIG))

    def _own(self, key: str, default: str | None) -> str | None:
        """``key``'s own value (no fallback to its synonyms)."""
        for level, _ in self._levels():
            if key in level:
                return level[key]
        return default

    def _resolve(self, name: str) -> str | None:
        for key, factor in _FALLBACKS.get(name, ((name, 1),)):
            value = self._own(key, BROKER_CONFIGS[key].default)
            if value is None:
                continue
            if factor == 1:
                return value
            number = int(value)
            return "-1" if number < 0 else str(number * factor)
        return None

    def _topic_default(self, definition: ConfigDef) -> str:
        value = None
        if definition.broker_synonym is not None:
            value = self._resolve(definition.broker_synonym)
        if value is None:
            value = definition.default
        assert value is not None, f"topic config {definition.name} has no default"
        return value


def _entry(
    definition: ConfigDef,
    value: str | None,
    source: ConfigSource,
    synonyms: list[ConfigSynonym],
    *,
    read_only: bool,
) -> ConfigEntry:
    hidden = definition.sensitive
    return ConfigEntry(
        name=definition.name,
        value=None if hidden else value,
        source=source,
        read_only=read_only,
        is_default=source == ConfigSource.DEFAULT_CONFIG,
        sensitive=hidden,
        config_type=definition.config_type,
        documentation=definition.documentation,
        synonyms=tuple(
            ConfigSynonym(s.name, None if hidden else s.value, s.source) for s in synonyms
        ),
    )


class ListenerConfig(TypedConfig):
    """A :class:`BrokerConfig` as one listener sees it: ``get`` answers the listener's
    ``listener.name.<listener>.<config>`` override where there is one, else the broker's
    value. Immutable; thread-safe."""

    def __init__(self, broker: BrokerConfig, listener: str,
                 overrides: Mapping[tuple[str, str], str]) -> None:
        self.broker, self.listener, self._overrides = broker, listener, overrides

    def get(self, name: str) -> str | None:
        own = self._overrides.get((self.listener, name))
        return own if own is not None else self.broker.get(name)

    def jaas(self, mechanism: str) -> str | None:
        """``sasl.jaas.config`` for ``mechanism``, Kafka's order: the listener's
        mechanism-prefixed one, the listener's, the broker's."""
        own = self._overrides.get((self.listener, f"{mechanism.lower()}.sasl.jaas.config"))
        return own if own is not None else self.get("sasl.jaas.config")

    @property
    def overridden(self) -> frozenset[str]:
        """The configs this listener overrides."""
        return frozenset(config for listener, config in self._overrides if listener == self.listener)
