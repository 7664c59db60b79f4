"""Cluster metadata API in one import: records, events, the store seam, the Controller.

The pieces live in small modules: :mod:`controller.records` (``BrokerInfo``,
``TopicInfo``, ``ConfigEntry``), :mod:`controller.events`,
:mod:`controller.metadata_store` (``MetadataStore`` and its object-store
implementation), :mod:`controller.document` (the JSON document) and
:mod:`controller.controller` (``Controller``).
"""

from __future__ import annotations

from controller.controller import AlterConfigOp, Controller, new_cluster_id
from controller.document import ClusterMetadata
from controller.events import (
    MetadataEvent,
    MetadataListener,
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

__all__ = [
    "AlterConfigOp",
    "BrokerInfo",
    "ClusterMetadata",
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Controller",
    "MetadataConflict",
    "MetadataEvent",
    "MetadataListener",
    "MetadataStore",
    "ObjectStoreMetadataStore",
    "PartitionsCreated",
    "TopicConfigChanged",
    "TopicCreated",
    "TopicDeleted",
    "TopicInfo",
    "new_cluster_id",
]
