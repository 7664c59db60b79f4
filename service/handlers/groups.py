"""Consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete.

Each handler turns one version of the request into a call on the broker's
:class:`service.groups.GroupCoordinator` and the answer back into that version's
response. JoinGroup and SyncGroup are coroutines: the coordinator answers them
when the rebalance gets there (the server keeps the connection's other
responses in order meanwhile).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from common.errors import ErrorCode, KafkaError
from common.protocol.codec import build, response_module
from common.protocol.codec import timedelta_to_ms as _ms
from controller.records import BrokerInfo
from service.groups import GroupSummary, JoinRequest, JoinResult, SyncRequest, SyncResult
from service.groups.group import MAX_GROUP_ID_LENGTH, OffsetAndMetadata, TopicPartition
from service.groups.records import partition_for
from service.groups.runtime import ensure_offsets_topic
from service.handlers.context import RequestContext
from service.handlers.operations import (
    OPERATIONS_NOT_REQUESTED,
    ResourceType,
    authorized_operations,
)
from service.security.acls import CLUSTER_NAME
from service.security.acls import AclOperation as Op
from service.transactions.runtime import ensure_transaction_state_topic

__all__ = [
    "codes_by_topic",
    "handle_delete_groups",
    "handle_describe_groups",
    "handle_find_coordinator",
    "handle_heartbeat",
    "handle_join_group",
    "handle_leave_group",
    "handle_list_groups",
    "handle_offset_commit",
    "handle_offset_delete",
    "handle_offset_fetch",
    "handle_sync_group",
    "offsets_to_commit",
]

E = ErrorCode
_NO_OPS = OPERATIONS_NOT_REQUESTED
_KEY_TYPE_GROUP = 0
_KEY_TYPE_TRANSACTION = 1
_T = TypeVar("_T")


def _count_error(ctx: RequestContext, api: str, code: ErrorCode) -> None:
    if code != E.none:
        ctx.broker.metrics_error(api, code)


def codes_by_topic(
    results: Mapping[TopicPartition, ErrorCode], topic_cls: type, partition_cls: type,
    partitions: str = "partitions", code: str = "error_code",
) -> tuple[Any, ...]:
    """Per-partition error codes as a response's topics, in the results' order (the
    entity classes and, where a schema names them otherwise, its two field names)."""
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for (name, index), error in results.items():
        by_topic[name].append(build(partition_cls, partition_index=index, **{code: error}))
    return tuple(build(topic_cls, name=name, **{partitions: tuple(parts)}) for name, parts in by_topic.items())


def offsets_to_commit(topics: Any) -> dict[TopicPartition, tuple[int, int, str | None]]:
    """OffsetCommit's and TxnOffsetCommit's ``(offset, leader epoch, metadata)`` per partition."""
    return {
        (topic.name, int(p.partition_index)): (
            int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata,
        )
        for topic in topics
        for p in topic.partitions
    }


def _unauthorized(ctx: RequestContext, group_id: str, group_op: Op, offsets: Any,
                  topic_op: Op) -> dict[TopicPartition, ErrorCode]:
    """The partitions refused: every one without ``group_op`` on the group
    (GROUP_AUTHORIZATION_FAILED), else those without ``topic_op`` on their topic."""
    if not ctx.allowed(group_op, ResourceType.GROUP, group_id):
        return dict.fromkeys(offsets, E.group_authorization_failed)
    return {tp: E.topic_authorization_failed for tp in offsets if not ctx.allowed(topic_op, ResourceType.TOPIC, tp[0])}


def _client_host(ctx: RequestContext) -> str:
    peer = ctx.connection.peer if ctx.connection is not None else "unknown"
    return "/" + peer.rpartition(":")[0]


async def _answer(register: Callable[[Callable[[_T], None]], None]) -> _T:
    """Await the single answer the coordinator gives through a callback."""
    future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()

    def respond(result: _T) -> None:
        if not future.done():
            future.set_result(result)

    register(respond)
    return await future


# --------------------------------------------------------------------------- FindCoordinator


async def handle_find_coordinator(ctx: RequestContext, request: Any) -> Any:
    """The coordinator of a group is the leader of its ``__consumer_offsets`` partition, that
    of a transactional id the leader of its ``__transaction_state`` partition (each topic
    created through the controller the first time one is looked for). Both topics hash keys
    alike (Kafka's ``abs(hashCode) % partitions``)."""
    broker = ctx.broker
    mod = response_module(10, ctx.version)
    key_type = int(getattr(request, "key_type", _KEY_TYPE_GROUP))

    async def lookup(key: str) -> dict[str, Any]:
        error, message = E.none, None
        node: BrokerInfo | None = None
        if key_type not in (_KEY_TYPE_GROUP, _KEY_TYPE_TRANSACTION):
            error, message = E.invalid_request, f"unknown coordinator key type {key_type}"
        elif key_type == _KEY_TYPE_TRANSACTION and not key:
            error, message = E.invalid_request, "the transactional id is empty"
        elif len(key) > MAX_GROUP_ID_LENGTH:
            error, message = E.invalid_group_id, f"group ids are at most {MAX_GROUP_ID_LENGTH} characters"
        elif key_type == _KEY_TYPE_GROUP and not ctx.allowed(Op.DESCRIBE, ResourceType.GROUP, key):
            error, message = E.group_authorization_failed, f"Not authorized to DESCRIBE group {key!r}"
        elif key_type == _KEY_TYPE_TRANSACTION and not ctx.allowed(Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            error, message = (E.transactional_id_authorization_failed,
                              f"Not authorized to DESCRIBE transactional id {key!r}")
        else:
            try:
                if key_type == _KEY_TYPE_TRANSACTION:
                    info = await ensure_transaction_state_topic(broker)
                else:
                    info = await ensure_offsets_topic(broker)
                registration = broker.controller.partition(info.name, partition_for(key, info.partitions))
                leader = -1 if registration is None else registration.leader
                node = broker.controller.broker(leader, ctx.listener_name) if leader >= 0 else None
                if node is None or not broker.controller.is_live(leader):
                    error, message = E.coordinator_not_available, "its partition has no leader right now"
                    node = None
                elif leader == broker.node_id and not broker.may_lead():  # paused, cut off: maybe replaced
                    error, message = E.coordinator_not_available, "this broker cannot confirm it still leads"
                    node = None
            except KafkaError as exc:
                error, message = E.coordinator_not_available, f"coordinator topic: {exc.message}"
        _count_error(ctx, "FindCoordinator", error)
        if error != E.none or node is None:
            return {"error_code": error, "error_message": message, "node_id": -1, "host": "", "port": -1}
        return {
            "error_code": error,
            "error_message": None,
            "node_id": node.node_id,
            "host": node.host,
            "port": node.port,
        }

    if ctx.version >= 4:
        coordinators = tuple(
            [build(mod.Coordinator, key=key, **await lookup(key)) for key in request.coordinator_keys]
        )
        return build(mod.FindCoordinatorResponse, throttle_time=0, coordinators=coordinators)
    return build(mod.FindCoordinatorResponse, throttle_time=0, **await lookup(request.key))


# --------------------------------------------------------------------------- JoinGroup, SyncGroup


async def handle_join_group(ctx: RequestContext, request: Any) -> Any:
    version = ctx.version
    session = _ms(request.session_timeout)
    join = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.header.client_id or "",
        client_host=_client_host(ctx),
        session_timeout_ms=session,
        rebalance_timeout_ms=_ms(getattr(request, "rebalance_timeout", session)),
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )
    result: JoinResult = await _answer(lambda respond: ctx.broker.groups.join_group(join, respond))
    _count_error(ctx, "JoinGroup", result.error)
    mod = response_module(11, version)
    nullable = version >= 7
    return build(
        mod.JoinGroupResponse,
        throttle_time=0,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type if nullable else None,
        protocol_name=result.protocol_name if nullable else (result.protocol_name or ""),
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=tuple(
            build(mod.JoinGroupResponseMember, member_id=m, group_instance_id=i, metadata=md)
            for m, i, md in result.members
        ),
    )


async def handle_sync_group(ctx: RequestContext, request: Any) -> Any:
    sync = SyncRequest(
        group_id=request.group_id,
        generation_id=int(request.generation_id),
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    result: SyncResult = await _answer(lambda respond: ctx.broker.groups.sync_group(sync, respond))
    _count_error(ctx, "SyncGroup", result.error)
    mod = response_module(14, ctx.version)
    return build(
        mod.SyncGroupResponse,
        throttle_time=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


# --------------------------------------------------------------------------- Heartbeat, LeaveGroup


def handle_heartbeat(ctx: RequestContext, request: Any) -> Any:
    error = ctx.broker.groups.heartbeat(
        request.group_id,
        int(request.generation_id),
        request.member_id,
        getattr(request, "group_instance_id", None),
    )
    _count_error(ctx, "Heartbeat", error)
    return build(response_module(12, ctx.version).HeartbeatResponse, throttle_time=0, error_code=error)


def handle_leave_group(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(13, ctx.version)
    if ctx.version < 3:
        leaving = [(request.member_id, None)]
    else:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    error, per_member = ctx.broker.groups.leave_group(request.group_id, leaving)
    if ctx.version < 3:
        code = error if error != E.none else per_member[0]
        _count_error(ctx, "LeaveGroup", code)
        return build(mod.LeaveGroupResponse, throttle_time=0, error_code=code)
    _count_error(ctx, "LeaveGroup", error)
    members = tuple(
        build(mod.MemberResponse, member_id=m, group_instance_id=i, error_code=code)
        for (m, i), code in zip(leaving, per_member)
    )
    return build(mod.LeaveGroupResponse, throttle_time=0, error_code=error, members=members)


# --------------------------------------------------------------------------- offsets


def handle_offset_commit(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    mod = response_module(8, ctx.version)
    offsets = offsets_to_commit(request.topics)
    denied = _unauthorized(ctx, request.group_id, Op.READ, offsets, Op.READ)
    committed = broker.groups.commit_offsets(
        request.group_id,
        int(request.generation_id_or_member_epoch),
        request.member_id,
        getattr(request, "group_instance_id", None),
        {tp: v for tp, v in offsets.items() if tp not in denied},
        lambda name: broker.controller.topic(name) is not None,
        api_version=ctx.version,
    ) if len(denied) < len(offsets) else {}
    results = {tp: denied.get(tp) or committed[tp] for tp in offsets if tp in denied or tp in committed}
    for code in results.values():
        _count_error(ctx, "OffsetCommit", code)
    topics = codes_by_topic(results, mod.OffsetCommitResponseTopic, mod.OffsetCommitResponsePartition)
    return build(mod.OffsetCommitResponse, throttle_time=0, topics=topics)


def handle_offset_fetch(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(9, ctx.version)
    if ctx.version >= 8:
        groups = tuple(
            build(
                mod.OffsetFetchResponseGroup,
                group_id=g.group_id,
                **_fetch_group(ctx, mod, g.group_id, g.topics, "OffsetFetchResponseTopics",
                               "OffsetFetchResponsePartitions", getattr(g, "member_id", None),
                               int(getattr(g, "member_epoch", -1)), bool(request.require_stable)),
            )
            for g in request.groups
        )
        return build(mod.OffsetFetchResponse, throttle_time=0, groups=groups)
    fields = _fetch_group(ctx, mod, request.group_id, request.topics, "OffsetFetchResponseTopic",
                          "OffsetFetchResponsePartition",
                          require_stable=bool(getattr(request, "require_stable", False)))
    return build(mod.OffsetFetchResponse, throttle_time=0, **fields)


def _fetch_group(ctx: RequestContext, mod: Any, group_id: str, topics: Any, topic_cls: str,
                 partition_cls: str, member_id: str | None = None,
                 member_epoch: int = -1, require_stable: bool = False) -> dict[str, Any]:
    wanted: list[TopicPartition] | None = None
    if topics is not None:
        wanted = [(t.name, int(p)) for t in topics for p in t.partition_indexes]
    denied: dict[TopicPartition, ErrorCode] = {}
    found: dict[TopicPartition, OffsetAndMetadata | None]
    if not ctx.allowed(Op.DESCRIBE, ResourceType.GROUP, group_id):
        error, found = E.group_authorization_failed, {}
    else:
        error, found = ctx.broker.groups.fetch_offsets(group_id, wanted, member_id, member_epoch)
        readable = {name: ctx.allowed(Op.DESCRIBE, ResourceType.TOPIC, name) for name, _ in [*(wanted or ()), *found]}
        found = {tp: v for tp, v in found.items() if readable[tp[0]]}  # all topics: only those it may see
        denied = {tp: E.topic_authorization_failed for tp in wanted or () if not readable[tp[0]]}
    if error != E.none and ctx.version >= 2:
        wanted = []  # a group-level error (STALE_MEMBER_EPOCH, ...) answers no partitions
    _count_error(ctx, "OffsetFetch", error)
    if wanted is None:
        wanted = sorted(found)
    # KIP-447 (v7+): offsets an open transaction holds are not answered until it ends
    unstable = ctx.broker.groups.unstable_offsets(group_id, wanted) if require_stable else set()
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for name, index in wanted:
        committed: OffsetAndMetadata | None = None if (name, index) in unstable else found.get((name, index))
        code = E.unstable_offset_commit if (name, index) in unstable else denied.get((name, index), E.none)
        _count_error(ctx, "OffsetFetch", code)
        by_topic[name].append(
            build(
                getattr(mod, partition_cls),
                partition_index=index,
                committed_offset=-1 if committed is None else committed.offset,
                committed_leader_epoch=-1 if committed is None else committed.leader_epoch,
                metadata="" if committed is None else committed.metadata,
                # v1 has no group-level error: it goes on every partition
                error_code=error if ctx.version < 2 else code,
            )
        )
    return {
        "error_code": error,
        "topics": tuple(
            build(getattr(mod, topic_cls), name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    }


def handle_offset_delete(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(47, ctx.version)
    wanted = [(t.name, int(p.partition_index)) for t in request.topics for p in t.partitions]
    if not ctx.allowed(Op.DELETE, ResourceType.GROUP, request.group_id):
        error, results = E.group_authorization_failed, {}
    else:
        denied = {tp: E.topic_authorization_failed for tp in wanted
                  if not ctx.allowed(Op.READ, ResourceType.TOPIC, tp[0])}
        error, deleted = ctx.broker.groups.delete_offsets(request.group_id, [tp for tp in wanted if tp not in denied])
        results = {tp: denied.get(tp) or deleted[tp] for tp in wanted if tp in denied or tp in deleted}
    _count_error(ctx, "OffsetDelete", error)
    topics = codes_by_topic(results, mod.OffsetDeleteResponseTopic, mod.OffsetDeleteResponsePartition)
    return build(mod.OffsetDeleteResponse, error_code=error, throttle_time=0, topics=topics)


# --------------------------------------------------------------------------- administration


def handle_describe_groups(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(15, ctx.version)
    want_ops = bool(getattr(request, "include_authorized_operations", False))  # v3+
    described = []
    for group_id in request.groups:
        error, summary = ctx.broker.groups.describe_group(group_id)
        message = None
        if not ctx.allowed(Op.DESCRIBE, ResourceType.GROUP, group_id):
            error, summary = E.group_authorization_failed, GroupSummary(group_id, "", "", "", -1, ())
            message = f"Not authorized to DESCRIBE group {group_id!r}"
        group = ctx.broker.groups.group(group_id)
        if error == E.none and ctx.version >= 6 and (group is None or group.consumer is not None):
            # v6+ (KIP-1043): a group DescribeGroups does not know (unknown, or of the
            # consumer protocol) is an error, no longer a Dead group
            error = E.group_id_not_found
            message = (f"Group {group_id} not found." if group is None
                       else f"Group {group_id} is not a classic group.")
        _count_error(ctx, "DescribeGroups", error)
        ops = _NO_OPS
        if want_ops and error == E.none:
            ops = authorized_operations(ctx, ResourceType.GROUP, group_id)
        members = tuple(
            build(
                mod.DescribedGroupMember,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in summary.members
        )
        described.append(
            build(
                mod.DescribedGroup,
                error_code=error,
                error_message=message,
                group_id=group_id,
                group_state=summary.state,
                protocol_type=summary.protocol_type,
                protocol_data=summary.protocol_name,
                members=members,
                authorized_operations=ops,
            )
        )
    return build(mod.DescribeGroupsResponse, throttle_time=0, groups=tuple(described))


def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(16, ctx.version)
    types = getattr(request, "types_filter", None) or ()
    states = getattr(request, "states_filter", None) or ()
    if not ctx.broker.groups.may_lead():  # its groups may have moved (a pause): admin clients retry this
        _count_error(ctx, "ListGroups", E.coordinator_load_in_progress)
        return build(mod.ListGroupsResponse, throttle_time=0, error_code=E.coordinator_load_in_progress, groups=())
    everything = ctx.allowed(Op.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)  # else the groups it may see
    listed = [
        build(
            mod.ListedGroup,
            group_id=group_id,
            protocol_type=protocol_type,
            group_state=state,
            group_type=group_type,
        )
        for group_id, protocol_type, state, group_type in ctx.broker.groups.list_groups_by_type(
            states, types)
        if everything or ctx.allowed(Op.DESCRIBE, ResourceType.GROUP, group_id)
    ]
    return build(mod.ListGroupsResponse, throttle_time=0, error_code=E.none, groups=tuple(listed))


def handle_delete_groups(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(42, ctx.version)
    names = list(request.groups_names)
    denied = {g: E.group_authorization_failed for g in names if not ctx.allowed(Op.DELETE, ResourceType.GROUP, g)}
    deleted = ctx.broker.groups.delete_groups([g for g in names if g not in denied])
    results = {g: denied.get(g) or deleted[g] for g in names if g in denied or g in deleted}
    out = []
    for group_id, code in results.items():
        _count_error(ctx, "DeleteGroups", code)
        out.append(build(mod.DeletableGroupResult, group_id=group_id, error_code=code))
    return build(mod.DeleteGroupsResponse, throttle_time=0, results=tuple(out))
