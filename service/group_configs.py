"""Per-group configs (Kafka 4's ``GROUP`` config resource, KIP-848): what
``kafka-configs.sh --entity-type groups --entity-name G --alter`` and the Admin clients'
Incremental/AlterConfigs and DescribeConfigs of resource type 32 read and write.

A consumer-protocol group may have its own ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms``; without one it follows the broker's
``group.consumer.*`` config. The values live in the cluster metadata's section
:data:`SECTION`, one object per group id, so every coordinator reads the same ones
and they survive restarts::

    {"payments": {"consumer.session.timeout.ms": "50000"}}

Kafka's bounds are checked as Kafka checks them (``GroupConfig.validateValues``, with
its default ``group.consumer.{min,max}.*`` bounds): a session timeout of 45-60 s, a
heartbeat interval of 5-15 s, and the interval below the timeout. Kafka's share-group
and streams-group keys are refused with what Strata lacks (it has neither kind of group).
Errors are INVALID_CONFIG, as Kafka's ``InvalidConfigurationException``.

Pure functions over the parsed section; thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from common.config.broker import BrokerConfig
from common.config.configdef import ConfigType
from common.config.entries import ConfigEntry, ConfigSource, ConfigSynonym
from common.errors import InvalidConfigError

__all__ = ["KEYS", "SECTION", "alter", "describe", "overrides_of"]

SECTION = "group_configs"

#: group config → (the broker config it overrides, Kafka's lower and upper bounds)
KEYS: dict[str, tuple[str, int, int]] = {
    "consumer.session.timeout.ms": ("group.consumer.session.timeout.ms", 45_000, 60_000),
    "consumer.heartbeat.interval.ms": ("group.consumer.heartbeat.interval.ms", 5_000, 15_000),
}
_DOCS = {
    "consumer.session.timeout.ms": "The timeout to detect client failures of this consumer group.",
    "consumer.heartbeat.interval.ms": "The heartbeat interval given to the members of this consumer group.",
}
#: Kafka's group configs of kinds of group Strata does not have
_ABSENT = {"share.": "share groups (KIP-932)", "streams.": "streams groups (KIP-1071)"}
_SET, _DELETE = 0, 1


def alter(section: Any, group: str, ops: Sequence[tuple[str, int, str | None]], static: BrokerConfig, *,
          replace_all: bool = False) -> dict[str, dict[str, str]] | None:
    """The section after ``ops`` (``(name, operation, value)``, IncrementalAlterConfigs'
    operations; ``replace_all``: AlterConfigs, the set replaces the group's configs) on
    ``group``'s configs; raises InvalidConfigError, changing nothing."""
    if not group:
        raise InvalidConfigError("a group config needs a group id")
    names = [name for name, _, _ in ops]
    if len(set(names)) != len(names):
        raise InvalidConfigError("Error due to duplicate config keys")
    current = {k: dict(v) for k, v in (section or {}).items()}
    values = {} if replace_all else dict(current.get(group, {}))
    for name, op, value in ops:
        if name not in KEYS:
            absent = next((what for prefix, what in _ABSENT.items() if name.startswith(prefix)), None)
            raise InvalidConfigError(f"Unknown group config name: {name}" + (
                f" (this broker has no {absent})" if absent else ""))
        if op == _DELETE:
            values.pop(name, None)
        elif op == _SET and value is not None:
            values[name] = _checked(name, value)
        else:
            raise InvalidConfigError(f"Config value append is not allowed for config key: {name}")
    timeout = int(values.get("consumer.session.timeout.ms", static.get_int(KEYS["consumer.session.timeout.ms"][0])))
    interval = int(values.get("consumer.heartbeat.interval.ms",
                              static.get_int(KEYS["consumer.heartbeat.interval.ms"][0])))
    if interval >= timeout:
        raise InvalidConfigError("consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
    if values:
        current[group] = dict(sorted(values.items()))
    else:
        current.pop(group, None)
    return current or None


def _checked(name: str, value: str) -> str:
    _, low, high = KEYS[name]
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {value} for configuration {name}: Not a number of type INT") from None
    if number < low:
        raise InvalidConfigError(f"{name} must be greater than or equal to {low}")
    if number > high:
        raise InvalidConfigError(f"{name} must be less than or equal to {high}")
    return str(number)


def overrides_of(section: Callable[[], Any]) -> Callable[[str], Mapping[str, str]]:
    """A group id → its own configs, read from ``section()`` (the cluster metadata's) each time."""
    return lambda group: (section() or {}).get(group, {})


def describe(section: Any, group: str, static: BrokerConfig, keys: Sequence[str] | None) -> list[ConfigEntry]:
    """DescribeConfigs of a group: every group config (or ``keys``), its own value or the
    broker's it follows."""
    if not group:
        raise InvalidConfigError("a group config needs a group id")
    own = (section or {}).get(group, {})
    unknown = [k for k in keys or () if k not in KEYS]
    if unknown:
        raise InvalidConfigError(f"Unknown group config name: {unknown[0]}")
    entries = []
    for name in keys or KEYS:
        broker_key = KEYS[name][0]
        broker_value = str(static.get_int(broker_key))
        broker_source = (ConfigSource.STATIC_BROKER_CONFIG if broker_key in static.overrides
                         else ConfigSource.DEFAULT_CONFIG)
        synonyms = [ConfigSynonym(broker_key, broker_value, broker_source)]
        if name in own:
            synonyms.insert(0, ConfigSynonym(name, own[name], ConfigSource.GROUP_CONFIG))
        entries.append(ConfigEntry(
            name=name, value=own.get(name, broker_value), source=synonyms[0].source,
            read_only=False, is_default=synonyms[0].source == ConfigSource.DEFAULT_CONFIG,
            sensitive=False, config_type=ConfigType.INT, documentation=_DOCS[name], synonyms=tuple(synonyms),
        ))
    return entries
