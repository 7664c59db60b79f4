"""Reads of a metadata document shared by its writer and its readers: :class:`MetadataReads`.

The active controller's :class:`controller.writer.MetadataWriter` and every
broker's :class:`service.cluster.image.MetadataImage` answer the same questions
of the :class:`~controller.document.ClusterMetadata` they hold (topics,
partitions, configs); this mixin is those answers once. A subclass provides
``metadata`` (the document now) and ``_config`` (the broker's config, for
defaults and synonyms). Thread-safety is the subclass's: each read
looks at one immutable document.

Topic defaults come from the broker's configs with the dynamic ones of the
document (``kafka-configs.sh --entity-type brokers``; docs/adr/0022-dynamic-broker-configs.md)
over the static ones: a topic without ``retention.ms`` of its own follows a dynamic
``log.retention.ms`` as soon as the document that holds it is read.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection

from common.config.broker import BrokerConfig
from common.config.dynamic import SECTION, dynamic_levels
from controller.document import ClusterMetadata
from controller.records import ConfigEntry, TopicInfo
from controller.registrations import PartitionRegistration
from controller.topic_changes import require

__all__ = ["MetadataReads"]


class MetadataReads:
    _config: BrokerConfig
    #: (the dynamic configs' section as stored, the configs it makes): made again only when it changes
    _with_dynamic: tuple[str | None, BrokerConfig] | None = None

    @property
    def metadata(self) -> ClusterMetadata:
        raise NotImplementedError

    def broker_config(self, md: ClusterMetadata | None = None) -> BrokerConfig:
        """This broker's configs with the dynamic ones of ``md`` (the document now by default)."""
        md = self.metadata if md is None else md
        text = md.sections.get(SECTION)
        cached = self._with_dynamic
        if cached is None or cached[0] != text:
            cached = (text, self._config.with_dynamic(*dynamic_levels(md.section(SECTION), self._config.node_id)))
            self._with_dynamic = cached  # one assignment: a racing reader sees either whole pair
        return cached[1]

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
        md = self.metadata
        return {**self.broker_config(md).topic_defaults(), **require(md, name).configs}

    def describe_topic_config(self, name: str, keys: Collection[str] | None = None) -> list[ConfigEntry]:
        """DescribeConfigs entries (with synonyms) of topic ``name``; unknown keys are skipped."""
        md = self.metadata
        return self.broker_config(md).topic_entries(require(md, name).configs, keys)

    def describe_broker_config(self, keys: Collection[str] | None = None) -> list[ConfigEntry]:
        return self._config.entries(keys)
