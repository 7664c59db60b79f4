"""The config API in one import: Kafka's config keys, validation and broker config.

The pieces live in small modules: :mod:`common.config.configdef` (how one key is
described and validated), :mod:`common.config.keys` (the topic and broker
keys with Kafka's names and defaults) and :mod:`common.config.broker`
(the broker's overrides, precedence rules and the topic defaults they imply).
"""

from __future__ import annotations

from common.config.broker import BrokerConfig
from common.config.configdef import (
    ConfigDef,
    ConfigKind,
    ConfigType,
    InvalidConfigValue,
    ParsedValue,
)
from common.config.keys import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    check_topic_config_combination,
    validate_topic_config,
)

__all__ = [
    "BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "broker_default",
    "broker_default_int",
    "BrokerConfig",
    "ConfigDef",
    "ConfigKind",
    "ConfigType",
    "InvalidConfigValue",
    "check_topic_config_combination",
    "validate_topic_config",
]


def broker_default(name: str) -> ParsedValue:
    """The default of broker config ``name``, parsed: where a setting object of the broker
    (the group and transaction coordinators' configs) takes its defaults from, so each
    default is written once, in :mod:`common.config.keys`."""
    definition = BROKER_CONFIGS[name]
    if definition.default is None:
        raise KeyError(f"broker config {name} has no default")
    return definition.parse(definition.default)


def broker_default_int(name: str) -> int:
    value = broker_default(name)
    assert isinstance(value, int) and not isinstance(value, bool), (name, value)
    return value
