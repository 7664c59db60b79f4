"""Strata's exception hierarchy, drawn once.

Every error that can reach a Kafka client is a :class:`KafkaError` subclass that
carries the Kafka error code (``code``, a :class:`kio.schema.errors.ErrorCode`,
which knows its ``retriable`` flag). Request handlers catch ``KafkaError`` and
turn it into the per-partition or per-topic error code of the response; any
other exception is a bug and becomes ``UNKNOWN_SERVER_ERROR`` for that request
only, never a dead broker.

::

    KafkaError
    ├── OffsetOutOfRangeError          OFFSET_OUT_OF_RANGE (1)
    ├── CorruptRecordError             CORRUPT_MESSAGE (2)
    ├── UnknownTopicOrPartitionError   UNKNOWN_TOPIC_OR_PARTITION (3)
    ├── ReplicaNotAvailableError       REPLICA_NOT_AVAILABLE (9)
    ├── RecordTooLargeError            MESSAGE_TOO_LARGE (10)
    ├── InvalidTopicError              INVALID_TOPIC_EXCEPTION (17)
    ├── RecordBatchTooLargeError       RECORD_LIST_TOO_LARGE (18)
    ├── NotEnoughReplicasError         NOT_ENOUGH_REPLICAS (19)
    ├── NotEnoughReplicasAfterAppendError NOT_ENOUGH_REPLICAS_AFTER_APPEND (20)
    ├── InvalidRequiredAcksError       INVALID_REQUIRED_ACKS (21)
    ├── InvalidTimestampError          INVALID_TIMESTAMP (32)
    ├── UnsupportedVersionError        UNSUPPORTED_VERSION (35)
    ├── TopicAlreadyExistsError        TOPIC_ALREADY_EXISTS (36)
    ├── InvalidPartitionsError         INVALID_PARTITIONS (37)
    ├── InvalidReplicationFactorError  INVALID_REPLICATION_FACTOR (38)
    ├── InvalidRequestError            INVALID_REQUEST (42)
    ├── UnsupportedForMessageFormatError UNSUPPORTED_FOR_MESSAGE_FORMAT (43)
    ├── PolicyViolationError           POLICY_VIOLATION (44)
    ├── InvalidConfigError             INVALID_CONFIG (40)
    ├── OutOfOrderSequenceError        OUT_OF_ORDER_SEQUENCE_NUMBER (45)
    ├── DuplicateSequenceError         DUPLICATE_SEQUENCE_NUMBER (46)
    ├── InvalidProducerEpochError      INVALID_PRODUCER_EPOCH (47)
    ├── InvalidTxnStateError           INVALID_TXN_STATE (48)
    ├── InvalidProducerIdMappingError  INVALID_PRODUCER_ID_MAPPING (49)
    ├── TransactionCoordinatorFencedError TRANSACTION_COORDINATOR_FENCED (52)
    ├── KafkaStorageError              KAFKA_STORAGE_ERROR (56)
    ├── UnknownProducerIdError         UNKNOWN_PRODUCER_ID (59)
    ├── UnsupportedCompressionTypeError UNSUPPORTED_COMPRESSION_TYPE (76)
    ├── FetchSessionIdNotFoundError    FETCH_SESSION_ID_NOT_FOUND (70)
    ├── InvalidFetchSessionEpochError  INVALID_FETCH_SESSION_EPOCH (71)
    ├── FencedLeaderEpochError         FENCED_LEADER_EPOCH (74)
    ├── UnknownLeaderEpochError        UNKNOWN_LEADER_EPOCH (75)
    ├── InvalidRecordError             INVALID_RECORD (87)
    ├── ProducerFencedError            PRODUCER_FENCED (90)
    ├── UnknownTopicIdError            UNKNOWN_TOPIC_ID (100)
    │   (a cluster: leadership, coordinators, the wire between brokers)
    ├── LeaderNotAvailableError        LEADER_NOT_AVAILABLE (5)
    ├── NotLeaderOrFollowerError       NOT_LEADER_OR_FOLLOWER (6)
    ├── RequestTimedOutError           REQUEST_TIMED_OUT (7)
    ├── BrokerNotAvailableError        BROKER_NOT_AVAILABLE (8)
    ├── CoordinatorLoadInProgressError COORDINATOR_LOAD_IN_PROGRESS (14)
    ├── NotCoordinatorError            NOT_COORDINATOR (16)
    │   (security: who may do what, service/security/)
    ├── TopicAuthorizationFailedError  TOPIC_AUTHORIZATION_FAILED (29)
    ├── GroupAuthorizationFailedError  GROUP_AUTHORIZATION_FAILED (30)
    ├── ClusterAuthorizationFailedError CLUSTER_AUTHORIZATION_FAILED (31)
    ├── TransactionalIdAuthorizationFailedError TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53)
    └── SecurityDisabledError          SECURITY_DISABLED (54)

Foreign exceptions (``OSError``, botocore errors) are translated at the edge
where they are raised, once.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = [
    "BrokerNotAvailableError",
    "ClusterAuthorizationFailedError",
    "GroupAuthorizationFailedError",
    "SecurityDisabledError",
    "TopicAuthorizationFailedError",
    "TransactionalIdAuthorizationFailedError",
    "CoordinatorLoadInProgressError",
    "CorruptRecordError",
    "DuplicateSequenceError",
    "ErrorCode",
    "FencedLeaderEpochError",
    "FetchSessionIdNotFoundError",
    "InvalidConfigError",
    "InvalidFetchSessionEpochError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTxnStateError",
    "KafkaError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "NotCoordinatorError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PolicyViolationError",
    "ProducerFencedError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "ReplicaNotAvailableError",
    "RequestTimedOutError",
    "TopicAlreadyExistsError",
    "TransactionCoordinatorFencedError",
    "UnknownLeaderEpochError",
    "UnknownProducerIdError",
    "UnknownTopicIdError",
    "UnknownTopicOrPartitionError",
    "UnsupportedCompressionTypeError",
    "UnsupportedForMessageFormatError",
    "UnsupportedVersionError",
    "for_code",
]


class KafkaError(Exception):
    """An error with a Kafka error code; ``str(err)`` is the message sent to clients."""

    code: ErrorCode = ErrorCode.unknown_server_error

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)

    @property
    def kafka_name(self) -> str:
        return self.code.name.upper()

    @property
    def message(self) -> str:
        return str(self) or self.kafka_name


class OffsetOutOfRangeError(KafkaError):
    code = ErrorCode.offset_out_of_range


class CorruptRecordError(KafkaError):
    code = ErrorCode.corrupt_message


class UnknownTopicOrPartitionError(KafkaError):
    code = ErrorCode.unknown_topic_or_partition


class ReplicaNotAvailableError(KafkaError):
    """Retriable: the partition is here but cannot answer yet (its remote tier's
    manifest is not read since start, as Kafka's uninitialised remote log metadata, or
    its bucket part is still being read after a change of leader: RemoteStorageNotReady)."""

    code = ErrorCode.replica_not_available


class RecordTooLargeError(KafkaError):
    code = ErrorCode.message_too_large


class InvalidTopicError(KafkaError):
    code = ErrorCode.invalid_topic_exception


class RecordBatchTooLargeError(KafkaError):
    code = ErrorCode.record_list_too_large


class InvalidRequiredAcksError(KafkaError):
    code = ErrorCode.invalid_required_acks


class InvalidTimestampError(KafkaError):
    code = ErrorCode.invalid_timestamp


class UnsupportedVersionError(KafkaError):
    code = ErrorCode.unsupported_version


class TopicAlreadyExistsError(KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidConfigError(KafkaError):
    code = ErrorCode.invalid_config


class InvalidRequestError(KafkaError):
    code = ErrorCode.invalid_request


class UnsupportedForMessageFormatError(KafkaError):
    code = ErrorCode.unsupported_for_message_format


class PolicyViolationError(KafkaError):
    code = ErrorCode.policy_violation


class KafkaStorageError(KafkaError):
    code = ErrorCode.kafka_storage_error


class UnsupportedCompressionTypeError(KafkaError):
    code = ErrorCode.unsupported_compression_type


class FetchSessionIdNotFoundError(KafkaError):
    code = ErrorCode.fetch_session_id_not_found


class InvalidFetchSessionEpochError(KafkaError):
    code = ErrorCode.invalid_fetch_session_epoch


class FencedLeaderEpochError(KafkaError):
    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(KafkaError):
    code = ErrorCode.unknown_leader_epoch


class InvalidRecordError(KafkaError):
    """``record_errors``: ``(index of the record in its batch, message)`` pairs, for
    Produce v8+'s per-record errors."""

    code = ErrorCode.invalid_record

    def __init__(self, message: str = "", record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class UnknownTopicIdError(KafkaError):
    code = ErrorCode.unknown_topic_id


class OutOfOrderSequenceError(KafkaError):
    code = ErrorCode.out_of_order_sequence_number


class DuplicateSequenceError(KafkaError):
    code = ErrorCode.duplicate_sequence_number


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.invalid_producer_epoch


class InvalidTxnStateError(KafkaError):
    code = ErrorCode.invalid_txn_state


class InvalidProducerIdMappingError(KafkaError):
    code = ErrorCode.invalid_producer_id_mapping


class TransactionCoordinatorFencedError(KafkaError):
    code = ErrorCode.transaction_coordinator_fenced


class UnknownProducerIdError(KafkaError):
    code = ErrorCode.unknown_producer_id


class ProducerFencedError(KafkaError):
    code = ErrorCode.producer_fenced


# -- a cluster of brokers: partition leadership and the wire between brokers ----------------


class LeaderNotAvailableError(KafkaError):
    """The partition has no leader right now (its broker is down or an election runs)."""

    code = ErrorCode.leader_not_available


class NotLeaderOrFollowerError(KafkaError):
    """This broker does not lead the partition (or host it, for a follower's fetch)."""

    code = ErrorCode.not_leader_or_follower


class NotEnoughReplicasError(KafkaError):
    """acks=all with fewer in-sync replicas than ``min.insync.replicas``: nothing appended."""

    code = ErrorCode.not_enough_replicas


class NotEnoughReplicasAfterAppendError(KafkaError):
    """acks=all: appended and replicated, but the ISR shrank below ``min.insync.replicas``."""

    code = ErrorCode.not_enough_replicas_after_append


class RequestTimedOutError(KafkaError):
    code = ErrorCode.request_timed_out


class BrokerNotAvailableError(KafkaError):
    """Another broker could not be reached (connection refused, reset, timed out)."""

    code = ErrorCode.broker_not_available


class NotCoordinatorError(KafkaError):
    """This broker does not lead the coordinator's partition of the group or transaction."""

    code = ErrorCode.not_coordinator


class CoordinatorLoadInProgressError(KafkaError):
    code = ErrorCode.coordinator_load_in_progress


class TopicAuthorizationFailedError(KafkaError):
    code = ErrorCode.topic_authorization_failed


class GroupAuthorizationFailedError(KafkaError):
    code = ErrorCode.group_authorization_failed


class ClusterAuthorizationFailedError(KafkaError):
    code = ErrorCode.cluster_authorization_failed


class TransactionalIdAuthorizationFailedError(KafkaError):
    code = ErrorCode.transactional_id_authorization_failed


class SecurityDisabledError(KafkaError):
    code = ErrorCode.security_disabled


_BY_CODE: dict[int, type[KafkaError]] = {
    cls.code.value: cls
    for cls in list(KafkaError.__subclasses__())
}


def for_code(code: int) -> type[KafkaError]:
    """The exception class for a Kafka error code (``KafkaError`` if none is specific)."""
    return _BY_CODE.get(code, KafkaError)
