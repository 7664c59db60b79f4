"""Reads of a metadata document shared by its writer and its readers: :class:`MetadataReads`.

The active controller's :class:`controller.writer.MetadataWriter` and every
broker's :class:`service.cluster.image.MetadataImage` answer the same questions
of the :class:`~controller.document.ClusterMetadata` they hold (topics,
partitions, configs); this mixin is those answers once. A subclass provides
``metadata`` (the document now) and ``_config`` (the broker's config, for
defaults and synonyms). Thread-safety is the subclass's: each read looks at one
immutable document.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection

from common.config.broker import BrokerConfig
from controller.document import ClusterMetadata
from controller.records import ConfigEntry, TopicInfo
from controller.registrations import PartitionRegistration
from controller.topic_changes import require

__all__ = ["MetadataReads"]


class MetadataReads:
    _config: BrokerConfig

    @property
    def metadata(self) -> ClusterMetadata:
        raise NotImplementedError

    def topics(self) -> list[TopicInfo]:
        return sorted(self.metadata.topics.values(), key=lambda t: t.name)

    def topic(self, name: str) -> TopicInfo | None:
        return self.metadata.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.metadata.topic_by_id(topic_id)

    def partitions(self, name: str) -> tuple[PartitionRegistration, ...]:
        """The registrations of topic ``name``'s partitions; UnknownTopicOrPartitionError."""
        md = self.metadata
        return md.partitions[require(md, name).topic_id]

    def partition(self, name: str, index: int) -> PartitionRegistration | None:
        md = self.metadata
        info = md.topics.get(name)
        return None if info is None else md.partition(info.topic_id, index)

    def effective_topic_config(self, name: str) -> dict[str, str]:
        """Every topic config of ``name``: its override, else the broker default."""
        return {**self._config.topic_defaults(), **require(self.metadata, name).configs}

    def describe_topic_config(self, name: str, keys: Collection[str] | None = None) -> list[ConfigEntry]:
        """DescribeConfigs entries (with synonyms) of topic ``name``; unknown keys are skipped."""
        return self._config.topic_entries(require(self.metadata, name).configs, keys)

    def describe_broker_config(self, keys: Collection[str] | None = None) -> list[ConfigEntry]:
        return self._config.entries(keys)
