"""The records of cluster metadata: brokers, topics and described config entries.

All are frozen (immutable, hashable where their fields are) and therefore safe to
share between threads; a change produces a new record.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType
from typing import NamedTuple

from controller.configdef import ConfigType

__all__ = [
    "BrokerInfo",
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "TopicInfo",
]


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A registered broker endpoint; ``node_id`` is unique in the cluster."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as the controller knows it.

    Invariants: ``partitions >= 1``; ``topic_id`` never changes for the life of the
    topic (a topic deleted and created again gets a new id); ``configs`` holds the
    topic's *overrides only*, validated and normalised (see
    :meth:`controller.Controller.effective_topic_config` for the full set).
    """

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    created_ms: int = 0

    def __post_init__(self) -> None:
        # A read-only copy, so a shared TopicInfo can never be changed in place.
        object.__setattr__(self, "configs", MappingProxyType(dict(self.configs)))

    def __hash__(self) -> int:
        return hash((self.name, self.topic_id, self.partitions, self.created_ms))


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
