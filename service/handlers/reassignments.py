"""Moving partitions and their leadership: AlterPartitionReassignments (45),
ListPartitionReassignments (46), ElectLeaders (43).

AlterPartitionReassignments and ElectLeaders are controller writes: a broker
that is not the active controller relays them (the router's forwarding), so
here they run on the controller. ListPartitionReassignments is answered by any
broker from its metadata, where a reassignment in progress is recorded
(``adding_replicas`` / ``removing_replicas``, ADR 0010).

A reassignment completes by itself: the new replicas copy the partition
(:mod:`service.replication`), its leader asks the controller to add them to the
ISR once caught up (AlterPartition), and that change drops the old replicas and
moves the leadership when the old leader is among them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from common.errors import ErrorCode, InvalidRequestError, KafkaError
from common.protocol.codec import build, response_module
from controller.errors import NotControllerError
from controller.partition_change import Election
from service.handlers.context import RequestContext

__all__ = [
    "handle_alter_partition_reassignments",
    "handle_elect_leaders",
    "handle_list_partition_reassignments",
]


def _active_controller(ctx: RequestContext) -> Any:
    cluster = ctx.broker.cluster
    controller = None if cluster is None else cluster.controller
    if controller is None or not controller.is_active:
        raise NotControllerError(f"broker {ctx.broker.node_id} is not the active controller")
    return controller


async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(45, ctx.version)
    wanted = [
        (topic.name, int(p.partition_index), None if p.replicas is None else [int(r) for r in p.replicas])
        for topic in request.topics
        for p in topic.partitions
    ]
    try:
        controller = _active_controller(ctx)
        errors: list[KafkaError | None] = await asyncio.to_thread(
            controller.alter_partition_reassignments, wanted
        )
    except KafkaError as exc:
        ctx.broker.metrics_error("AlterPartitionReassignments", exc.code)
        return build(mod.AlterPartitionReassignmentsResponse, throttle_time=0, error_code=exc.code,
                     error_message=exc.message, responses=())
    by_topic: dict[str, list[Any]] = {}
    for (name, index, _), error in zip(wanted, errors, strict=True):
        if error is not None:
            ctx.broker.metrics_error("AlterPartitionReassignments", error.code)
        by_topic.setdefault(name, []).append(
            build(
                mod.ReassignablePartitionResponse,
                partition_index=index,
                error_code=ErrorCode.none if error is None else error.code,
                error_message=None if error is None else error.message,
            )
        )
    return build(
        mod.AlterPartitionReassignmentsResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        responses=tuple(
            build(mod.ReassignableTopicResponse, name=n, partitions=tuple(ps)) for n, ps in by_topic.items()
        ),
    )


def handle_list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(46, ctx.version)
    md = ctx.broker.controller.metadata
    wanted = None
    if request.topics is not None:
        wanted = {t.name: {int(p) for p in t.partition_indexes} for t in request.topics}
    topics: dict[str, list[Any]] = {}
    for topic, index, reg in md.iter_partitions():
        if not reg.is_reassigning:
            continue
        if wanted is not None and index not in wanted.get(topic.name, ()):
            continue
        topics.setdefault(topic.name, []).append(
            build(
                mod.OngoingPartitionReassignment,
                partition_index=index,
                replicas=tuple(reg.replicas),
                adding_replicas=tuple(reg.adding_replicas),
                removing_replicas=tuple(reg.removing_replicas),
            )
        )
    return build(
        mod.ListPartitionReassignmentsResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        topics=tuple(build(mod.OngoingTopicReassignment, name=n, partitions=tuple(ps)) for n, ps in topics.items()),
    )


async def handle_elect_leaders(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(43, ctx.version)
    election_type = int(getattr(request, "election_type", 0))
    partitions = None
    if request.topic_partitions is not None:
        partitions = [(t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]
    try:
        if election_type not in (0, 1):
            raise InvalidRequestError(f"unknown election type {election_type}")
        controller = _active_controller(ctx)
        election = Election.PREFERRED if election_type == 0 else Election.UNCLEAN
        results: dict[tuple[str, int], KafkaError | None] = await asyncio.to_thread(
            controller.elect_leaders, election, partitions
        )
    except KafkaError as exc:
        ctx.broker.metrics_error("ElectLeaders", exc.code)
        return build(mod.ElectLeadersResponse, throttle_time=0, error_code=exc.code,
                     replica_election_results=())
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), error in results.items():
        by_topic.setdefault(topic, []).append(
            build(
                mod.PartitionResult,
                partition_id=index,
                error_code=ErrorCode.none if error is None else error.code,
                error_message=None if error is None else error.message,
            )
        )
    return build(
        mod.ElectLeadersResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        replica_election_results=tuple(
            build(mod.ReplicaElectionResult, topic=t, partition_result=tuple(ps)) for t, ps in by_topic.items()
        ),
    )
