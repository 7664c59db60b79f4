"""Cluster metadata: topics, topic ids, partitions, configs and brokers.

The metadata lives in the object store (one JSON document written with
compare-and-set, see ``docs/adr/0001-metadata-in-the-object-store.md``);
:class:`Controller` is the only writer API, :mod:`controller.configs` the config
vocabulary.
"""

from __future__ import annotations

from controller.configs import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigDef,
    InvalidConfigValue,
    validate_topic_config,
)
from controller.errors import NotControllerError, TopicDeletionDisabledError
from controller.metadata import (
    AlterConfigOp,
    BrokerInfo,
    ClusterMetadata,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Controller,
    MetadataConflict,
    MetadataEvent,
    MetadataListener,
    MetadataStore,
    ObjectStoreMetadataStore,
    PartitionsCreated,
    TopicConfigChanged,
    TopicCreated,
    TopicDeleted,
    TopicInfo,
    new_cluster_id,
)

__all__ = [
    "BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "AlterConfigOp",
    "BrokerConfig",
    "BrokerInfo",
    "ClusterMetadata",
    "ConfigDef",
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Controller",
    "InvalidConfigValue",
    "MetadataConflict",
    "MetadataEvent",
    "MetadataListener",
    "MetadataStore",
    "NotControllerError",
    "ObjectStoreMetadataStore",
    "PartitionsCreated",
    "TopicConfigChanged",
    "TopicCreated",
    "TopicDeleted",
    "TopicDeletionDisabledError",
    "TopicInfo",
    "new_cluster_id",
    "validate_topic_config",
]
