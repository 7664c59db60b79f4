"""Controller errors that ``common.errors`` does not (yet) define.

All are ``KafkaError`` subclasses with their Kafka code, so request handlers
treat them like every other Kafka error::

    KafkaError (common.errors)
    ├── NotControllerError                NOT_CONTROLLER (41, retriable)
    │   └── ControllerFencedError         NOT_CONTROLLER: a higher controller epoch wrote
    ├── TopicDeletionDisabledError        TOPIC_DELETION_DISABLED (73)
    ├── InvalidReplicaAssignmentError     INVALID_REPLICA_ASSIGNMENT (39)
    ├── FencedLeaderEpochError            FENCED_LEADER_EPOCH (74; re-exported from common.errors)
    ├── StaleBrokerEpochError             STALE_BROKER_EPOCH (77)
    ├── PreferredLeaderNotAvailableError  PREFERRED_LEADER_NOT_AVAILABLE (80, retriable)
    ├── EligibleLeadersNotAvailableError  ELIGIBLE_LEADERS_NOT_AVAILABLE (83, retriable)
    ├── ElectionNotNeededError            ELECTION_NOT_NEEDED (84, retriable)
    ├── NoReassignmentInProgressError     NO_REASSIGNMENT_IN_PROGRESS (85)
    ├── InvalidUpdateVersionError         INVALID_UPDATE_VERSION (95)
    ├── DuplicateBrokerRegistrationError  DUPLICATE_BROKER_REGISTRATION (101)
    ├── BrokerIdNotRegisteredError        BROKER_ID_NOT_REGISTERED (102)
    ├── InconsistentClusterIdError        INCONSISTENT_CLUSTER_ID (104)
    ├── IneligibleReplicaError            INELIGIBLE_REPLICA (107)
    └── NewLeaderElectedError             NEW_LEADER_ELECTED (108)

``ControllerFencedError`` shares ``NOT_CONTROLLER`` with its parent (clients
retry against the new controller either way); it exists so the controller can
tell "another controller took over, step down" from "the compare-and-set kept
losing, try again".

Note: ``common.errors.for_code`` does not know these codes.
"""

from __future__ import annotations

from common.errors import ErrorCode, FencedLeaderEpochError, KafkaError

__all__ = [
    "BrokerIdNotRegisteredError",
    "ControllerFencedError",
    "DuplicateBrokerRegistrationError",
    "ElectionNotNeededError",
    "EligibleLeadersNotAvailableError",
    "FencedLeaderEpochError",
    "InconsistentClusterIdError",
    "IneligibleReplicaError",
    "InvalidReplicaAssignmentError",
    "InvalidUpdateVersionError",
    "NewLeaderElectedError",
    "NoReassignmentInProgressError",
    "NotControllerError",
    "PreferredLeaderNotAvailableError",
    "StaleBrokerEpochError",
    "TopicDeletionDisabledError",
]


class NotControllerError(KafkaError):
    """The controller could not commit a change (others kept changing the metadata
    first, or it lost the right to write); the client should retry."""

    code = ErrorCode.not_controller


class ControllerFencedError(NotControllerError):
    """The stored metadata carries a higher controller epoch than this writer's: a
    newer controller took over, and this one must stop acting."""


class TopicDeletionDisabledError(KafkaError):
    """``delete.topic.enable`` is false on this broker."""

    code = ErrorCode.topic_deletion_disabled


class InvalidReplicaAssignmentError(KafkaError):
    """A manual replica assignment names an unknown broker, a broker twice, or no broker."""

    code = ErrorCode.invalid_replica_assignment


class StaleBrokerEpochError(KafkaError):
    """The broker epoch in the request is not the one of the broker's registration."""

    code = ErrorCode.stale_broker_epoch


class PreferredLeaderNotAvailableError(KafkaError):
    """A preferred-leader election found the preferred replica unable to lead."""

    code = ErrorCode.preferred_leader_not_available


class EligibleLeadersNotAvailableError(KafkaError):
    """An election found no replica able to lead."""

    code = ErrorCode.eligible_leaders_not_available


class ElectionNotNeededError(KafkaError):
    """The partition already has the leader the election would pick."""

    code = ErrorCode.election_not_needed


class NoReassignmentInProgressError(KafkaError):
    """A cancellation for a partition that is not being reassigned."""

    code = ErrorCode.no_reassignment_in_progress


class InvalidUpdateVersionError(KafkaError):
    """An AlterPartition based on an older partition epoch than the current one."""

    code = ErrorCode.invalid_update_version


class DuplicateBrokerRegistrationError(KafkaError):
    """A live broker (another incarnation) already holds this node id."""

    code = ErrorCode.duplicate_broker_registration


class BrokerIdNotRegisteredError(KafkaError):
    """The request names a broker that has no registration."""

    code = ErrorCode.broker_id_not_registered


class InconsistentClusterIdError(KafkaError):
    """The broker belongs to another cluster than the metadata in this bucket."""

    code = ErrorCode.inconsistent_cluster_id


class IneligibleReplicaError(KafkaError):
    """A proposed ISR names a replica that is fenced, shutting down or of another epoch."""

    code = ErrorCode.ineligible_replica


class NewLeaderElectedError(KafkaError):
    """The ISR change completed a reassignment that moved the leadership elsewhere."""

    code = ErrorCode.new_leader_elected
