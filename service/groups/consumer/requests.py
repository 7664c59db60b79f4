"""What a ConsumerGroupHeartbeat asks and is answered, and the checks Kafka makes of it first.

:func:`validate` is Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``
(INVALID_REQUEST, UNSUPPORTED_ASSIGNOR) and :func:`check_epoch` its
``throwIfConsumerGroupMemberEpochIsInvalid`` (FENCED_MEMBER_EPOCH). Pure.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from common.errors import ErrorCode, InvalidRequestError
from service.groups.consumer.reconcile import Assignment, ConsumerMember
from service.groups.errors import FencedMemberEpochError, UnsupportedAssignorError

__all__ = ["LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "ConsumerHeartbeat", "HeartbeatResult", "check_epoch",
           "validate"]

E = ErrorCode
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeat:
    """One ConsumerGroupHeartbeat request (None: the field did not change / was not sent)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Mapping[uuid.UUID, tuple[int, ...]] | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode = E.none
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged, not sent



def validate(req: ConsumerHeartbeat, assignors: Sequence[str]) -> None:
    """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``."""
    if (req.api_version >= 1 or req.member_epoch > 0 or req.member_epoch == LEAVE_EPOCH) \
            and req.member_id == "":
        raise InvalidRequestError("MemberId can't be empty.")
    if req.group_id == "":
        raise InvalidRequestError("GroupId can't be empty.")
    if req.instance_id == "":
        raise InvalidRequestError("InstanceId can't be empty.")
    if req.rack_id == "":
        raise InvalidRequestError("RackId can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise InvalidRequestError("RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or any(req.owned.values()):
            raise InvalidRequestError("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise InvalidRequestError(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    elif req.member_epoch == STATIC_LEAVE_EPOCH:
        if req.instance_id is None:
            raise InvalidRequestError("InstanceId can't be null.")
    elif req.member_epoch < STATIC_LEAVE_EPOCH:
        raise InvalidRequestError("MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in assignors:
        raise UnsupportedAssignorError(
            f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
            f"{', '.join(assignors)}.")


def check_epoch(member: ConsumerMember, req: ConsumerHeartbeat) -> None:
    """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``."""
    if req.member_epoch > member.member_epoch:
        raise FencedMemberEpochError(
            f"The consumer group member has a greater member epoch ({req.member_epoch}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon all its "
            "partitions and rejoin.")
    if req.member_epoch < member.member_epoch and (
            req.member_epoch != member.previous_member_epoch or not member.owns_only_assigned(req.owned)):
        raise FencedMemberEpochError(
            f"The consumer group member has a smaller member epoch ({req.member_epoch}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon all its "
            "partitions and rejoin.")
