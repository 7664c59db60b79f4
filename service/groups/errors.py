"""Errors of the group coordinator, one class per Kafka error code.

They extend :class:`common.errors.KafkaError` (the hierarchy is drawn there)
with the codes that only consumer groups use::

    KafkaError
    ├── CoordinatorNotAvailableError   COORDINATOR_NOT_AVAILABLE (15)
    ├── IllegalGenerationError         ILLEGAL_GENERATION (22)
    ├── InconsistentGroupProtocolError INCONSISTENT_GROUP_PROTOCOL (23)
    ├── InvalidGroupIdError            INVALID_GROUP_ID (24)
    ├── UnknownMemberIdError           UNKNOWN_MEMBER_ID (25)
    ├── InvalidSessionTimeoutError     INVALID_SESSION_TIMEOUT (26)
    ├── RebalanceInProgressError       REBALANCE_IN_PROGRESS (27)
    ├── GroupIdNotFoundError           GROUP_ID_NOT_FOUND (69)
    ├── NonEmptyGroupError             NON_EMPTY_GROUP (68)
    ├── MemberIdRequiredError          MEMBER_ID_REQUIRED (79)
    ├── GroupMaxSizeReachedError       GROUP_MAX_SIZE_REACHED (81)
    ├── FencedInstanceIdError          FENCED_INSTANCE_ID (82)
    ├── FencedMemberEpochError         FENCED_MEMBER_EPOCH (110)
    ├── UnreleasedInstanceIdError      UNRELEASED_INSTANCE_ID (111)
    ├── UnsupportedAssignorError       UNSUPPORTED_ASSIGNOR (112)
    ├── StaleMemberEpochError          STALE_MEMBER_EPOCH (113)
    └── InvalidRegularExpressionError  INVALID_REGULAR_EXPRESSION (128)

The last five are the consumer group protocol's (KIP-848,
:mod:`service.groups.consumer`).

The coordinator mostly answers with bare :class:`ErrorCode` values (a rebalance
outcome is data, not an exception); these classes serve the places where
raising reads better, and :func:`group_error` maps a code back to its class.
:func:`storage_error` is Kafka's mapping of a failed ``__consumer_offsets``
append to the code a client sees.
"""

from __future__ import annotations

from common.errors import ErrorCode, KafkaError, RecordBatchTooLargeError, RecordTooLargeError

__all__ = [
    "CoordinatorNotAvailableError",
    "FencedInstanceIdError",
    "FencedMemberEpochError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "IllegalGenerationError",
    "InconsistentGroupProtocolError",
    "InvalidGroupIdError",
    "InvalidRegularExpressionError",
    "InvalidSessionTimeoutError",
    "MemberIdRequiredError",
    "NonEmptyGroupError",
    "RebalanceInProgressError",
    "StaleMemberEpochError",
    "UnknownMemberIdError",
    "UnreleasedInstanceIdError",
    "UnsupportedAssignorError",
    "group_error",
    "storage_error",
]


class CoordinatorNotAvailableError(KafkaError):
    code = ErrorCode.coordinator_not_available


class IllegalGenerationError(KafkaError):
    code = ErrorCode.illegal_generation


class InconsistentGroupProtocolError(KafkaError):
    code = ErrorCode.inconsistent_group_protocol


class InvalidGroupIdError(KafkaError):
    code = ErrorCode.invalid_group_id


class UnknownMemberIdError(KafkaError):
    code = ErrorCode.unknown_member_id


class InvalidSessionTimeoutError(KafkaError):
    code = ErrorCode.invalid_session_timeout


class RebalanceInProgressError(KafkaError):
    code = ErrorCode.rebalance_in_progress


class GroupIdNotFoundError(KafkaError):
    code = ErrorCode.group_id_not_found


class NonEmptyGroupError(KafkaError):
    code = ErrorCode.non_empty_group


class MemberIdRequiredError(KafkaError):
    code = ErrorCode.member_id_required


class FencedInstanceIdError(KafkaError):
    code = ErrorCode.fenced_instance_id


class GroupMaxSizeReachedError(KafkaError):
    code = ErrorCode.group_max_size_reached


class FencedMemberEpochError(KafkaError):
    code = ErrorCode.fenced_member_epoch


class UnreleasedInstanceIdError(KafkaError):
    code = ErrorCode.unreleased_instance_id


class UnsupportedAssignorError(KafkaError):
    code = ErrorCode.unsupported_assignor


class StaleMemberEpochError(KafkaError):
    code = ErrorCode.stale_member_epoch


class InvalidRegularExpressionError(KafkaError):
    code = ErrorCode.invalid_regular_expression


_BY_CODE: dict[ErrorCode, type[KafkaError]] = {
    cls.code: cls for cls in KafkaError.__subclasses__() if cls.__module__ == __name__
}


def group_error(code: ErrorCode, message: str = "") -> KafkaError:
    """An exception carrying ``code`` (a :class:`KafkaError` when no class is specific)."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(message)
    err = KafkaError(message)
    err.code = code
    return err


def storage_error(exc: KafkaError) -> ErrorCode:
    """Kafka's mapping of a failed ``__consumer_offsets`` append to what a client sees."""
    if isinstance(exc, (RecordTooLargeError, RecordBatchTooLargeError)):
        return ErrorCode.invalid_commit_offset_size
    return ErrorCode.coordinator_not_available
