"""Cluster metadata: topics, topic ids, partitions, configs, brokers, leaders, epochs.

The metadata lives in the object store (one JSON document written with
compare-and-set, see ``docs/adr/0001-metadata-in-the-object-store.md`` and
``docs/adr/0010-cluster-metadata-v2.md``). :class:`ClusterController` is the
active-controller role of a broker in a cluster (a lease in the bucket decides
which broker, ``docs/adr/0009-controller-lease.md``); :class:`MetadataView` is
what every broker reads; :class:`Controller` is the single-node writer without
a lease. :mod:`common.config` holds the config vocabulary.
"""

from __future__ import annotations

from common.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigDef,
    InvalidConfigValue,
    validate_topic_config,
)
from controller.cluster_controller import ClusterController, Reassignment
from controller.errors import (
    BrokerIdNotRegisteredError,
    ControllerFencedError,
    DuplicateBrokerRegistrationError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FencedLeaderEpochError,
    InconsistentClusterIdError,
    IneligibleReplicaError,
    InvalidReplicaAssignmentError,
    InvalidUpdateVersionError,
    NewLeaderElectedError,
    NoReassignmentInProgressError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    StaleBrokerEpochError,
    TopicDeletionDisabledError,
)
from controller.lease import ControllerLease, LeaseEvent, LeaseRecord, LeaseTimings
from controller.membership import HeartbeatReply, RegistrationRequest
from controller.metadata import (
    NO_LEADER,
    AlterConfigOp,
    BrokerChanged,
    BrokerInfo,
    BrokerRegistration,
    ClusterMetadata,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Controller,
    Endpoint,
    LeaderRecoveryState,
    MetadataCommitter,
    MetadataConflict,
    MetadataEvent,
    MetadataListener,
    MetadataStore,
    ObjectStoreMetadataStore,
    PartitionChanged,
    PartitionRegistration,
    PartitionsCreated,
    ProducerIdsBlock,
    Snapshot,
    TopicConfigChanged,
    TopicCreated,
    TopicDeleted,
    TopicInfo,
    new_cluster_id,
)
from controller.metadata_view import ControllerInfo, MetadataView
from controller.partition_change import Election
from controller.replication_control import AlterPartitionResult, BrokerState, PartitionStateChange

__all__ = [
    "BROKER_CONFIGS",
    "NO_LEADER",
    "TOPIC_CONFIGS",
    "AlterConfigOp",
    "AlterPartitionResult",
    "BrokerChanged",
    "BrokerConfig",
    "BrokerIdNotRegisteredError",
    "BrokerInfo",
    "BrokerRegistration",
    "BrokerState",
    "ClusterController",
    "ClusterMetadata",
    "ConfigDef",
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Controller",
    "ControllerFencedError",
    "ControllerInfo",
    "ControllerLease",
    "DuplicateBrokerRegistrationError",
    "Election",
    "ElectionNotNeededError",
    "EligibleLeadersNotAvailableError",
    "Endpoint",
    "FencedLeaderEpochError",
    "HeartbeatReply",
    "InconsistentClusterIdError",
    "IneligibleReplicaError",
    "InvalidConfigValue",
    "InvalidReplicaAssignmentError",
    "InvalidUpdateVersionError",
    "LeaderRecoveryState",
    "LeaseEvent",
    "LeaseRecord",
    "LeaseTimings",
    "MetadataCommitter",
    "MetadataConflict",
    "MetadataEvent",
    "MetadataListener",
    "MetadataStore",
    "MetadataView",
    "NewLeaderElectedError",
    "NoReassignmentInProgressError",
    "NotControllerError",
    "ObjectStoreMetadataStore",
    "PartitionChanged",
    "PartitionRegistration",
    "PartitionStateChange",
    "PartitionsCreated",
    "PreferredLeaderNotAvailableError",
    "ProducerIdsBlock",
    "Reassignment",
    "RegistrationRequest",
    "Snapshot",
    "StaleBrokerEpochError",
    "TopicConfigChanged",
    "TopicCreated",
    "TopicDeleted",
    "TopicDeletionDisabledError",
    "TopicInfo",
    "new_cluster_id",
    "validate_topic_config",
]
