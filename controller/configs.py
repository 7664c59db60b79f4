"""The config API in one import: Kafka's config keys, validation and broker config.

The pieces live in small modules: :mod:`controller.configdef` (how one key is
described and validated), :mod:`controller.config_keys` (the topic and broker
keys with Kafka's names and defaults) and :mod:`controller.broker_config`
(the broker's overrides, precedence rules and the topic defaults they imply).
"""

from __future__ import annotations

from controller.broker_config import BrokerConfig
from controller.config_keys import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    check_topic_config_combination,
    validate_topic_config,
)
from controller.configdef import ConfigDef, ConfigKind, ConfigType, InvalidConfigValue

__all__ = [
    "BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "ConfigDef",
    "ConfigKind",
    "ConfigType",
    "InvalidConfigValue",
    "check_topic_config_combination",
    "validate_topic_config",
]
