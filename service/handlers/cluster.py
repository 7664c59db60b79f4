"""The controller's APIs between brokers: BrokerRegistration (62), BrokerHeartbeat (63),
AlterPartition (56), AllocateProducerIds (67).

Answered only by the active controller; any other broker answers NOT_CONTROLLER
and the caller looks for the controller again (the lease, the metadata). The
work is :class:`controller.ClusterController`'s, on a worker thread: it writes
the metadata in the bucket before it answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from common.errors import ErrorCode, InvalidRequestError, KafkaError
from common.protocol.codec import build, response_module
from controller.errors import NotControllerError
from controller.membership import RegistrationRequest
from controller.registrations import Endpoint, LeaderRecoveryState
from controller.replication_control import BrokerState, PartitionStateChange
from service.handlers.context import RequestContext

__all__ = [
    "handle_allocate_producer_ids",
    "handle_alter_partition",
    "handle_broker_heartbeat",
    "handle_broker_registration",
]

_T = TypeVar("_T")


async def _on_controller(ctx: RequestContext, api: str, call: Callable[[Any], _T]) -> _T:
    """Run ``call(controller)`` on a worker thread if this broker is the active controller."""
    cluster = ctx.broker.cluster
    controller = None if cluster is None else cluster.controller
    if controller is None or not controller.is_active:
        raise NotControllerError(f"broker {ctx.broker.node_id} is not the active controller")
    return await asyncio.to_thread(call, controller)


def _error(ctx: RequestContext, api: str, exc: KafkaError) -> ErrorCode:
    ctx.broker.metrics_error(api, exc.code)
    return exc.code


async def handle_broker_registration(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(62, ctx.version)
    try:
        try:  # a listener's port or protocol out of range is the request's fault: INVALID_REQUEST
            registration = RegistrationRequest(
                broker_id=int(request.broker_id),
                cluster_id=request.cluster_id,
                incarnation_id=request.incarnation_id,
                listeners=tuple(
                    Endpoint(li.name, li.host, int(li.port), int(li.security_protocol))
                    for li in request.listeners
                ),
                rack=request.rack,
                previous_broker_epoch=int(getattr(request, "previous_broker_epoch", -1)),
            )
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from exc
        result = await _on_controller(ctx, "BrokerRegistration", lambda c: c.register_broker(registration))
        return build(mod.BrokerRegistrationResponse, throttle_time=0, error_code=ErrorCode.none,
                     broker_epoch=result.broker_epoch)
    except (KafkaError, ValueError) as exc:
        error = exc if isinstance(exc, KafkaError) else InvalidRequestError(str(exc))
        return build(mod.BrokerRegistrationResponse, throttle_time=0,
                     error_code=_error(ctx, "BrokerRegistration", error), broker_epoch=-1)


async def handle_broker_heartbeat(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(63, ctx.version)
    args = (int(request.broker_id), int(request.broker_epoch), int(request.current_metadata_offset))
    # a broker whose log dir is offline holds no replica it can serve (one log dir per
    # broker): fenced, its leaderships and ISR places move (Kafka's handleDirectoriesOffline)
    offline_dirs = bool(getattr(request, "offline_log_dirs", ()))
    flags = {"want_fence": bool(request.want_fence) or offline_dirs,
             "want_shut_down": bool(request.want_shut_down)}
    try:
        cluster = ctx.broker.cluster
        controller = None if cluster is None else cluster.controller
        # the common heartbeat changes nothing: answered here, on the loop, never queued
        # behind worker threads busy with metadata writes (issue #31)
        reply = None if controller is None else controller.heartbeat_without_change(*args, **flags)
        if reply is None:
            reply = await _on_controller(
                ctx, "BrokerHeartbeat", lambda c: c.broker_heartbeat(*args, **flags)
            )
        # only a heartbeat the controller took (the broker's current epoch) makes this the
        # broker's connection: a stale or forged one closing must not cut a live broker's session
        _watch_connection(ctx, int(request.broker_id))
        return build(mod.BrokerHeartbeatResponse, throttle_time=0, error_code=ErrorCode.none,
                     is_caught_up=reply.is_caught_up, is_fenced=reply.is_fenced,
                     should_shut_down=reply.should_shut_down)
    except KafkaError as exc:
        return build(mod.BrokerHeartbeatResponse, throttle_time=0,
                     error_code=_error(ctx, "BrokerHeartbeat", exc),
                     is_caught_up=False, is_fenced=True, should_shut_down=False)


def _watch_connection(ctx: RequestContext, broker_id: int) -> None:
    """Tell the controller when the connection a broker heartbeats on closes (once per
    connection): :meth:`controller.cluster_controller.ClusterController.connection_lost`."""
    conn = ctx.connection
    cluster = ctx.broker.cluster
    controller = None if cluster is None else cluster.controller
    if conn is None or controller is None or broker_id in conn.heartbeat_brokers:
        return
    conn.heartbeat_brokers.add(broker_id)
    conn.add_close_callback(lambda: controller.connection_lost(broker_id))


def _new_isr(p: Any) -> tuple[BrokerState, ...]:
    """v3+ names each ISR member with its broker epoch (KIP-903); v2 only its id (no check)."""
    with_epochs = getattr(p, "new_isr_with_epochs", None)
    if with_epochs is None:
        return tuple(BrokerState(int(b)) for b in p.new_isr)
    return tuple(BrokerState(int(s.broker_id), int(s.broker_epoch)) for s in with_epochs)


async def handle_alter_partition(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(56, ctx.version)
    try:
        changes = [  # ValueError (an unknown leader recovery state...): INVALID_REQUEST below
            PartitionStateChange(
                topic.topic_id,
                int(p.partition_index),
                int(p.leader_epoch),
                _new_isr(p),
                int(p.partition_epoch),
                LeaderRecoveryState(int(p.leader_recovery_state)),
            )
            for topic in request.topics
            for p in topic.partitions
        ]
        results = await _on_controller(
            ctx,
            "AlterPartition",
            lambda c: c.alter_partition(int(request.broker_id), int(request.broker_epoch), changes),
        )
    except (KafkaError, ValueError) as exc:
        code = _error(ctx, "AlterPartition", exc) if isinstance(exc, KafkaError) else ErrorCode.invalid_request
        return build(mod.AlterPartitionResponse, throttle_time=0, error_code=code, topics=())
    by_topic: dict[Any, list[Any]] = {}
    for r in results:
        reg = r.registration
        fields: dict[str, Any] = {"partition_index": r.partition, "error_code": ErrorCode.none}
        if r.error is not None:
            fields.update(error_code=_error(ctx, "AlterPartition", r.error), leader_id=-1,
                          leader_epoch=-1, isr=(), leader_recovery_state=0, partition_epoch=-1)
        elif reg is not None:
            fields.update(leader_id=reg.leader, leader_epoch=reg.leader_epoch, isr=tuple(reg.isr),
                          leader_recovery_state=int(reg.leader_recovery_state),
                          partition_epoch=reg.partition_epoch)
        by_topic.setdefault(r.topic_id, []).append(build(mod.PartitionData, **fields))
    topics = tuple(build(mod.TopicData, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items())
    return build(mod.AlterPartitionResponse, throttle_time=0, error_code=ErrorCode.none, topics=topics)


async def handle_allocate_producer_ids(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(67, ctx.version)
    try:
        block = await _on_controller(
            ctx,
            "AllocateProducerIds",
            lambda c: c.allocate_producer_ids(int(request.broker_id), int(request.broker_epoch)),
        )
        return build(mod.AllocateProducerIdsResponse, throttle_time=0, error_code=ErrorCode.none,
                     producer_id_start=block.first_producer_id, producer_id_len=block.size)
    except KafkaError as exc:
        return build(mod.AllocateProducerIdsResponse, throttle_time=0,
                     error_code=_error(ctx, "AllocateProducerIds", exc),
                     producer_id_start=-1, producer_id_len=0)
