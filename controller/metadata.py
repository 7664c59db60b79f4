"""Cluster metadata API in one import: records, events, the store seam, the controllers.

The pieces live in small modules: :mod:`controller.records` (``BrokerInfo``,
``TopicInfo``, ``ConfigEntry``), :mod:`controller.registrations` (broker and
partition registrations), :mod:`controller.events`,
:mod:`controller.metadata_store` (``MetadataStore`` and its object-store
implementation), :mod:`controller.document` and :mod:`controller.document_codec`
(the document and its bytes), :mod:`controller.controller` (``Controller``,
single node) and :mod:`controller.cluster_controller` (``ClusterController``).
"""

from __future__ import annotations

from controller.commit import MetadataCommitter, Snapshot
from controller.controller import AlterConfigOp, Controller, new_cluster_id
from controller.document import ClusterMetadata
from controller.events import (
    BrokerChanged,
    MetadataEvent,
    MetadataListener,
    PartitionChanged,
    PartitionsCreated,
    TopicConfigChanged,
    TopicCreated,
    TopicDeleted,
)
from controller.metadata_store import MetadataConflict, MetadataStore, ObjectStoreMetadataStore
from controller.records import (
    BrokerInfo,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    TopicInfo,
)
from controller.registrations import (
    NO_LEADER,
    BrokerRegistration,
    Endpoint,
    LeaderRecoveryState,
    PartitionRegistration,
    ProducerIdsBlock,
)

__all__ = [
    "NO_LEADER",
    "AlterConfigOp",
    "BrokerChanged",
    "BrokerInfo",
    "BrokerRegistration",
    "ClusterMetadata",
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Controller",
    "Endpoint",
    "LeaderRecoveryState",
    "MetadataCommitter",
    "MetadataConflict",
    "MetadataEvent",
    "MetadataListener",
    "MetadataStore",
    "ObjectStoreMetadataStore",
    "PartitionChanged",
    "PartitionRegistration",
    "PartitionsCreated",
    "ProducerIdsBlock",
    "Snapshot",
    "TopicConfigChanged",
    "TopicCreated",
    "TopicDeleted",
    "TopicInfo",
    "new_cluster_id",
]
