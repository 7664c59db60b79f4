"""The consumer group protocol's APIs (KIP-848): ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69).

Each turns one version of the request into a call on the broker's
:class:`service.groups.GroupCoordinator` (which answers every error as a
Kafka error code) and the answer back into that version's response.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import Any

from common.errors import ErrorCode
from common.protocol.codec import build, response_module
from common.protocol.codec import timedelta_to_ms as _ms
from service.groups.consumer import ConsumerHeartbeat
from service.handlers.context import RequestContext
from service.handlers.operations import (
    OPERATIONS_NOT_REQUESTED,
    authorized_operations,
)
from service.security.acls import AclOperation, ResourceType

__all__ = ["handle_consumer_group_describe", "handle_consumer_group_heartbeat"]

E = ErrorCode
_NO_OPS = OPERATIONS_NOT_REQUESTED
# v1 (KIP-1099): the protocol each member speaks (classic ones inside a migrated group)
log = logging.getLogger("strata.groups")

#: errors a member meets in ordinary life (a coordinator moving or loading): logged at DEBUG
_ROUTINE = frozenset({E.not_coordinator, E.coordinator_load_in_progress, E.coordinator_not_available})

_MEMBER_TYPE_CLASSIC = 0
_MEMBER_TYPE_CONSUMER = 1


def _client_host(ctx: RequestContext) -> str:
    peer = ctx.connection.peer if ctx.connection is not None else "unknown"
    return "/" + peer.rpartition(":")[0]


def handle_consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    owned = None
    if request.topic_partitions is not None:
        owned = {}
        for tp in request.topic_partitions:
            if tp.topic_id is not None:
                owned[tp.topic_id] = tuple(sorted({int(p) for p in tp.partitions}))
    names = request.subscribed_topic_names
    heartbeat = ConsumerHeartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=_ms(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(str(n) for n in names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=owned,
        client_id=ctx.header.client_id or "",
        client_host=_client_host(ctx),
        api_version=ctx.version,
    )
    result = ctx.broker.groups.consumer_group_heartbeat(heartbeat)
    if result.error != E.none:
        ctx.broker.metrics_error("ConsumerGroupHeartbeat", result.error)
        log.log(logging.DEBUG if result.error in _ROUTINE else logging.INFO,
                "ConsumerGroupHeartbeat of group %r, member %r at epoch %d from %s (%s): %s: %s",
                heartbeat.group_id, heartbeat.member_id, heartbeat.member_epoch, heartbeat.client_id,
                heartbeat.client_host, result.error.name, result.message)
    mod = response_module(68, ctx.version)
    assignment = None
    if result.error == E.none and result.assignment is not None:
        assignment = build(mod.Assignment, topic_partitions=tuple(
            build(mod.TopicPartitions, topic_id=topic_id, partitions=tuple(parts))
            for topic_id, parts in sorted(result.assignment.items(), key=lambda kv: str(kv[0]))
        ))
    return build(
        mod.ConsumerGroupHeartbeatResponse,
        throttle_time=0,
        error_code=result.error,
        error_message=result.message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=result.heartbeat_interval_ms,
        assignment=assignment,
    )


def handle_consumer_group_describe(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(69, ctx.version)

    def assignment(named: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]) -> Any:
        return build(mod.Assignment, topic_partitions=tuple(
            build(mod.TopicPartitions, topic_id=topic_id, topic_name=name, partitions=parts)
            for topic_id, name, parts in named))

    described = []
    for group_id in request.group_ids:
        d = ctx.broker.groups.consumer_group_describe(group_id)
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            d = replace(d, error=E.group_authorization_failed, members=(),
                        message=f"Not authorized to DESCRIBE group {group_id!r}")
        if d.error != E.none:
            ctx.broker.metrics_error("ConsumerGroupDescribe", d.error)
        members = tuple(
            build(
                mod.Member,
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=assignment(m.assignment),
                target_assignment=assignment(m.target),
                member_type=_MEMBER_TYPE_CLASSIC if m.classic else _MEMBER_TYPE_CONSUMER,
            )
            for m in d.members
        )
        ops = _NO_OPS
        if bool(request.include_authorized_operations) and d.error == E.none:
            ops = authorized_operations(ctx, ResourceType.GROUP, group_id)
        described.append(build(
            mod.DescribedGroup,
            error_code=d.error,
            error_message=d.message,
            group_id=group_id,
            group_state=d.state if d.error == E.none else "",
            group_epoch=d.group_epoch,
            assignment_epoch=d.assignment_epoch,
            assignor_name=d.assignor,
            members=members,
            authorized_operations=ops,
        ))
    return build(mod.ConsumerGroupDescribeResponse, throttle_time=0, groups=tuple(described))
