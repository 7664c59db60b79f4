"""Dynamic broker configs: Kafka's ``kafka-configs.sh --entity-type brokers
(--entity-name N | --entity-default) --alter``, for the configs Strata can change
without a restart (:data:`DYNAMIC`: Kafka's dynamic log configs, which are the topics'
defaults, the connection limits, and KIP-956's remote-read rate).

They live in the cluster metadata's section ``broker_configs``, one object per broker id
and one for the cluster-wide default (docs/adr/0022-dynamic-broker-configs.md)::

    {"default": {"log.retention.ms": "3600000"}, "2": {"listener.name.ssl.max.connections": "5000"}}

Values are stored normalised (:meth:`ConfigDef.normalize`). Precedence is Kafka's:
this broker's dynamic value, then the cluster default's, then the static one
(``strata up --set``/``--config``), then the config's default; a listener's
``listener.name.<l>.<config>`` at any of the first three levels beats the
unprefixed config at any level.

:func:`alter` is IncrementalAlterConfigs and AlterConfigs on a broker resource (a pure
function of the stored section, run by the active controller); :class:`EffectiveConfig`
is what the broker reads; :func:`describe` answers DescribeConfigs. Pure functions and
immutable views; thread-safe.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from common.config.broker import LISTENER_PREFIX, BrokerConfig, TypedConfig, listener_key
from common.config.configdef import InvalidConfigValue, local_retention_problem
from common.config.dynamic import DEFAULT, DYNAMIC, SECTION, dynamic_levels
from common.config.entries import ConfigEntry, ConfigSource, ConfigSynonym
from common.config.keys import BROKER_CONFIGS
from common.config.security_keys import SASL_MECHANISMS
from common.errors import InvalidRequestError
from service.quotas.connections import override_pairs

__all__ = ["DEFAULT", "DYNAMIC", "SECTION", "EffectiveConfig", "alter", "describe", "validate_overrides"]

#: dynamic configs a listener may override as ``listener.name.<listener>.<config>``
LISTENER_DYNAMIC = frozenset({"max.connections", "max.connection.creation.rate"})
_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3


def _base(name: str) -> str | None:
    """The config that checks ``name`` if it may change at run time, else None."""
    if name in DYNAMIC:
        return name
    prefixed = listener_key(name)
    return prefixed[2] if prefixed is not None and prefixed[2] in LISTENER_DYNAMIC else None


def _canonical(name: str) -> str:
    """``name`` as stored: a listener's prefix with its listener in lower case (Kafka's prefix)."""
    prefixed = listener_key(name)
    return name if prefixed is None else f"{LISTENER_PREFIX}{prefixed[0]}.{prefixed[1]}"


def _key(resource: str) -> str:
    """The section key of a broker resource name: ``""`` is the cluster default."""
    if resource == "":
        return DEFAULT
    if not (resource.isascii() and resource.isdigit()):
        raise InvalidRequestError(f"broker resource name must be a broker id or empty (the cluster "
                                  f"default), not {resource!r}")
    return str(int(resource))


def validate_overrides(text: str) -> None:
    """``max.connections.per.ip.overrides`` syntax (host names are resolved where applied)."""
    try:
        override_pairs(text)
    except ValueError as exc:
        raise InvalidRequestError(f"Invalid value {text} for configuration {exc}") from None


def alter(section: Any, resource: str, ops: Sequence[tuple[str, int, str | None]], *,
          replace_all: bool, static: BrokerConfig | None = None) -> dict[str, dict[str, str]] | None:
    """The section after IncrementalAlterConfigs ``(name, op, value)`` ops on broker
    ``resource`` (``replace_all``: AlterConfigs, whose set replaces the resource's dynamic
    configs); raises InvalidRequestError, which is what Kafka answers for a broker config
    it cannot apply (KAFKA-13609 keeps it so, not INVALID_CONFIG). ``static``:
    the static configs the result is checked with (the controller's; brokers of one cluster
    normally share theirs). Deleting a config that is not set is no change, as in Kafka."""
    key = _key(resource)
    names = [name for name, _, _ in ops]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys")
    fixed = sorted(name for name, op, _ in ops if _base(name) is None and op != _DELETE)
    if fixed:
        unknown = [n for n in fixed if n not in BROKER_CONFIGS and not n.startswith(LISTENER_PREFIX)]
        if unknown:
            kerberos = next((n for n in unknown if n.startswith("sasl.kerberos.")), None)
            if kerberos is not None:  # Kafka accepts them even with no GSSAPI listener, to no effect
                raise InvalidRequestError(
                    f"Unknown broker config name: {kerberos} (this broker has no SASL/GSSAPI, Kerberos; "
                    f"its SASL mechanisms are {', '.join(SASL_MECHANISMS)})")
            raise InvalidRequestError(f"Unknown broker config name: {unknown[0]}")
        raise InvalidRequestError(
            f"Cannot update these configs dynamically: {fixed} (read only at start: set them with "
            "`strata up --set KEY=VALUE` and restart)")
    before = {k: dict(v) for k, v in (section or {}).items()}
    current = {k: dict(v) for k, v in before.items()}
    values = {} if replace_all else dict(current.get(key, {}))
    for name, op, value in ops:
        if op == _DELETE:
            values.pop(_canonical(name), None)
            continue
        if op in (_APPEND, _SUBTRACT):
            raise InvalidRequestError(f"Config value append is not allowed for config key: {name}")
        if op != _SET or value is None:
            raise InvalidRequestError(f"Unknown or null config operation for {name}")
        base = _base(name)
        assert base is not None
        name = _canonical(name)
        try:
            values[name] = BROKER_CONFIGS[base].normalize(value)
        except InvalidConfigValue as exc:
            raise InvalidRequestError(str(exc)) from None
        if base == "max.connections.per.ip.overrides":
            validate_overrides(values[name])
    if values:
        current[key] = dict(sorted(values.items()))
    else:
        current.pop(key, None)
    _check_merged(before, current, key, static or BrokerConfig())
    return current or None


def _check_merged(before: Mapping[str, Mapping[str, str]], section: Mapping[str, Mapping[str, str]], key: str,
                  static: BrokerConfig) -> None:
    """Kafka's cross-config rules on the merged configs of every broker the change reaches:
    for the cluster default, each broker with no value of its own inherits it (checked as
    broker "-1"), with the controller's static configs."""
    brokers = [key] if key != DEFAULT else ["-1", *(k for k in section if k != DEFAULT)]
    for broker in brokers:
        merged = EffectiveConfig(static, int(broker), section)
        _check_cleaner_threads(merged.get_int("log.cleaner.threads"),
                               EffectiveConfig(static, int(broker), before).get_int("log.cleaner.threads"))
        if merged.get_int("max.connections.per.ip") == 0 and not merged.get("max.connections.per.ip.overrides"):
            raise InvalidRequestError("max.connections.per.ip can be set to zero only if "
                                     "max.connections.per.ip.overrides property is set.")
        for local, total in (("log.local.retention.ms", "log.retention.ms"),
                             ("log.local.retention.bytes", "log.retention.bytes")):
            _check_local_retention(merged, local, total)


def _check_cleaner_threads(threads: int, current: int) -> None:
    """Kafka's ``LogCleaner.validateReconfiguration``: at least one, and at most halved or doubled
    in one change."""
    if threads == current:
        return
    if threads < 1:
        reason = "Log cleaner threads should be at least 1"
    elif threads < current // 2:
        reason = f"Log cleaner threads cannot be reduced to less than half the current value {current}"
    elif threads > current * 2:
        reason = f"Log cleaner threads cannot be increased to more than double the current value {current}"
    else:
        return
    raise InvalidRequestError(f"Invalid value {threads} for configuration log.cleaner.threads: {reason}")


def _check_local_retention(merged: EffectiveConfig, local: str, total: str) -> None:
    """Kafka's ``DynamicLogConfig.validateReconfiguration``: the local tier keeps no more
    than the whole log."""
    local_value = merged.get_int(local)
    reason = local_retention_problem(local_value, total, merged.get_int(total))
    if reason is not None:
        raise InvalidRequestError(f"Invalid value {local_value} for configuration {local}: {reason}")


class EffectiveConfig(TypedConfig):
    """The broker's configs with the dynamic ones over the static ones (module docstring)."""

    def __init__(self, static: BrokerConfig, node_id: int, section: Any) -> None:
        self.static = static
        #: this broker's dynamic configs, then the cluster default's
        self.levels: tuple[Mapping[str, str], ...] = dynamic_levels(section, node_id)
        #: the configs Kafka's way (synonym chains, topic defaults) with the dynamic levels
        self.merged = static.with_dynamic(*self.levels)

    def sourced(self) -> zip[tuple[Mapping[str, str], ConfigSource]]:
        return zip(self.levels, (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                   strict=True)

    def get(self, name: str) -> str | None:
        return self.merged.get(name)

    def for_listener(self, listener: str) -> _ListenerView:
        return _ListenerView(self, listener.lower())

    def dynamic(self, name: str) -> tuple[str, ConfigSource] | None:
        """``name``'s dynamic value and its level, or None."""
        for level, source in self.sourced():
            if name in level:
                return level[name], source
        return None


class _ListenerView(TypedConfig):
    def __init__(self, config: EffectiveConfig, listener: str) -> None:
        self._config, self._listener = config, listener

    def get(self, name: str) -> str | None:
        prefixed = f"{LISTENER_PREFIX}{self._listener}.{name}"
        for level in self._config.levels:
            if prefixed in level:
                return level[prefixed]
        static = self._config.static.for_listener(self._listener)
        if name in static.overridden:
            return static.get(name)
        return self._config.get(name)


def describe(static: BrokerConfig, section: Any, resource: str, node_id: int,
             keys: Collection[str] | None) -> list[ConfigEntry]:
    """DescribeConfigs of broker ``resource``, as Kafka: this broker's every config with
    its source and synonyms (the dynamic ones alterable), or for ``""`` only the cluster
    default's dynamic configs."""
    key = _key(resource)
    if key == DEFAULT:
        own = (section or {}).get(DEFAULT, {})
        names = sorted(own) if keys is None else sorted(set(keys) & set(own))
        return [_dynamic_entry(n, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, None, [], own[n]) for n in names]
    if key != str(node_id):
        raise InvalidRequestError(f"Unexpected broker id, expected {node_id} or empty string, but received {resource}")
    effective = EffectiveConfig(static, node_id, section)
    entries = [replace(entry, read_only=entry.name not in DYNAMIC) for entry in effective.merged.entries(keys)]
    prefixed = sorted({n for level in effective.levels for n in level if n.startswith(LISTENER_PREFIX)})
    for name in prefixed if keys is None else sorted(set(keys) & set(prefixed)):
        found = effective.dynamic(name)
        assert found is not None
        entries.append(_dynamic_entry(name, found[1], effective, []))
    return entries


def _dynamic_entry(name: str, source: ConfigSource, effective: EffectiveConfig | None,
                   lower: list[ConfigSynonym], value: str | None = None) -> ConfigEntry:
    """An entry whose value is dynamic: its synonyms are the dynamic levels that set it,
    then ``lower`` (the static chain)."""
    synonyms = [] if effective is None else [
        ConfigSynonym(name, level[name], level_source) for level, level_source in effective.sourced() if name in level]
    if effective is None:
        synonyms.append(ConfigSynonym(name, value, source))
    definition = BROKER_CONFIGS[_base(name) or name]
    return ConfigEntry(name=name, value=synonyms[0].value, source=source, read_only=False, is_default=False,
                       sensitive=False, config_type=definition.config_type, documentation=definition.documentation,
                       synonyms=tuple(synonyms + lower))
