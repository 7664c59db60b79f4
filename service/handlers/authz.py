"""Authorization of requests refused or allowed whole, before their handler runs.

For the APIs whose every answer depends on one resource (a group's JoinGroup, a
transactional id's EndTxn, the brokers' own APIs on the cluster, the cluster-wide
reads), :func:`refusal` says which error code the request gets, the same checks
Kafka's ``KafkaApis`` makes; the router then answers with that code alone
(:func:`common.protocol.codec.error_response`). Every other API checks its resources in
its handler (per topic, per group), through ``RequestContext.allowed``.

Pure functions of the request context and body; thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from service.handlers.context import RequestContext
from service.security.acls import CLUSTER_NAME, AclOperation, ResourceType

__all__ = [
    "WHOLE_REQUEST_CHECKS",
    "refusal",
    "require_cluster",
    "require_group",
    "require_topic",
    "require_transactional_id",
]

Op, Res, E = AclOperation, ResourceType, ErrorCode
Check = Callable[[RequestContext, Any], ErrorCode | None]


def _group(op: AclOperation) -> Check:
    def check(ctx: RequestContext, body: Any) -> ErrorCode | None:
        return None if ctx.allowed(op, Res.GROUP, body.group_id) else E.group_authorization_failed

    return check


def _cluster(op: AclOperation) -> Check:
    def check(ctx: RequestContext, body: Any) -> ErrorCode | None:
        return None if ctx.allowed(op, Res.CLUSTER, CLUSTER_NAME) else E.cluster_authorization_failed

    return check


def _transactional_id(ctx: RequestContext, body: Any) -> ErrorCode | None:
    if ctx.allowed(Op.WRITE, Res.TRANSACTIONAL_ID, body.transactional_id):
        return None
    return E.transactional_id_authorization_failed


def _add_offsets_to_txn(ctx: RequestContext, body: Any) -> ErrorCode | None:
    return _transactional_id(ctx, body) or _group(Op.READ)(ctx, body)


def _init_producer_id(ctx: RequestContext, body: Any) -> ErrorCode | None:
    if body.transactional_id:
        return _transactional_id(ctx, body)
    if ctx.allowed(Op.IDEMPOTENT_WRITE, Res.CLUSTER, CLUSTER_NAME) or ctx.allowed_on_some(Op.WRITE, Res.TOPIC):
        return None
    return E.cluster_authorization_failed


#: api key → the check of a request allowed or refused whole
WHOLE_REQUEST_CHECKS: dict[int, Check] = {
    11: _group(Op.READ),  # JoinGroup
    12: _group(Op.READ),  # Heartbeat
    13: _group(Op.READ),  # LeaveGroup
    14: _group(Op.READ),  # SyncGroup
    68: _group(Op.READ),  # ConsumerGroupHeartbeat
    22: _init_producer_id,
    25: _add_offsets_to_txn,
    26: _transactional_id,  # EndTxn
    29: _cluster(Op.DESCRIBE),  # DescribeAcls
    35: _cluster(Op.DESCRIBE),  # DescribeLogDirs
    43: _cluster(Op.ALTER),  # ElectLeaders
    45: _cluster(Op.ALTER),  # AlterPartitionReassignments
    46: _cluster(Op.DESCRIBE),  # ListPartitionReassignments
    48: _cluster(Op.DESCRIBE_CONFIGS),  # DescribeClientQuotas
    50: _cluster(Op.DESCRIBE),  # DescribeUserScramCredentials
    # between brokers
    56: _cluster(Op.CLUSTER_ACTION),  # AlterPartition
    58: _cluster(Op.CLUSTER_ACTION),  # Envelope
    62: _cluster(Op.CLUSTER_ACTION),  # BrokerRegistration
    63: _cluster(Op.CLUSTER_ACTION),  # BrokerHeartbeat
    67: _cluster(Op.CLUSTER_ACTION),  # AllocateProducerIds
}


def refusal(api_key: int, ctx: RequestContext, body: Any) -> ErrorCode | None:
    """The error code a request is refused with whole, or None (allowed, or checked by
    its handler)."""
    if ctx.authorizer is None:
        return None
    check = WHOLE_REQUEST_CHECKS.get(api_key)
    return None if check is None else check(ctx, body)


def require_topic(ctx: RequestContext, operation: AclOperation, name: str) -> None:
    """``TopicAuthorizationFailedError`` unless the principal may do ``operation`` on topic ``name``."""
    if not ctx.allowed(operation, Res.TOPIC, name):
        raise TopicAuthorizationFailedError(f"Not authorized to {operation.name} topic {name!r}")


def require_group(ctx: RequestContext, operation: AclOperation, name: str) -> None:
    if not ctx.allowed(operation, Res.GROUP, name):
        raise GroupAuthorizationFailedError(f"Not authorized to {operation.name} group {name!r}")


def require_cluster(ctx: RequestContext, operation: AclOperation) -> None:
    if not ctx.allowed(operation, Res.CLUSTER, CLUSTER_NAME):
        raise ClusterAuthorizationFailedError(f"Not authorized to {operation.name} the cluster")


def require_transactional_id(ctx: RequestContext, operation: AclOperation, name: str) -> None:
    if not ctx.allowed(operation, Res.TRANSACTIONAL_ID, name):
        raise TransactionalIdAuthorizationFailedError(
            f"Not authorized to {operation.name} transactional id {name!r}")
