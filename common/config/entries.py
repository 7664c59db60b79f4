"""A described config: DescribeConfigs' rows, their sources and synonyms (Kafka's names).

Frozen and shared between threads, as the metadata records that carry them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from common.config.configdef import ConfigType

__all__ = ["ConfigEntry", "ConfigSource", "ConfigSynonym"]


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigs ``config_source`` ids (``TOPIC_CONFIG`` is an alias of 1)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigSynonym(NamedTuple):
    """One place a config's value may come from, in precedence order."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of a DescribeConfigs answer.

    ``value`` is None for a sensitive config or a config without a value.
    ``synonyms`` lists where the value could come from, highest precedence first;
    ``source`` is that of the first one.
    """

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    is_default: bool
    sensitive: bool
    config_type: ConfigType
    documentation: str
    synonyms: tuple[ConfigSynonym, ...] = ()
