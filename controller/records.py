"""The records of cluster metadata: brokers and topics (described config entries re-exported
from :mod:`common.config.entries`).

All are frozen (immutable, hashable where their fields are) and therefore safe to
share between threads; a change produces a new record.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from common.config.configdef import ConfigType
from common.config.entries import ConfigEntry, ConfigSource, ConfigSynonym

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

    @property
    def diskless(self) -> bool:
        """A diskless topic (ADR 0027): set at creation, never changed."""
        return self.configs.get("diskless.enable") == "true"
