"""Metadata (key 3): brokers, cluster id, controller, topics and partitions.

Any broker answers from its view of the cluster metadata: every live broker,
and for each partition its leader (``LEADER_NOT_AVAILABLE`` while it has none),
leader epoch, replicas, ISR and the replicas whose broker is down. The
``controller_id`` is the answering broker itself (DescribeCluster names the
active controller).
Unknown topics are created here when the request allows it (v4+, always before)
and ``auto.create.topics.enable`` is on, as in Kafka (through the controller).
"""

from __future__ import annotations

import uuid
from typing import Any

from local_tier.errors import (
    ErrorCode,
    KafkaError,
    LeaderNotAvailableError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from service.groups.records import OFFSETS_TOPIC
from service.handlers.context import RequestContext
from service.protocol import build, response_module

__all__ = ["handle_metadata"]

_NO_OPS = -2147483648  # authorized operations not requested
_ZERO_UUID = uuid.UUID(int=0)


async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    controller = broker.controller
    mod = response_module(3, ctx.version)
    allow_create = bool(getattr(request, "allow_auto_topic_creation", True))
    if request.topics is None or (ctx.version == 0 and not request.topics):
        requested: list[tuple[str | None, uuid.UUID | None]] = [
            (t.name, None) for t in controller.topics()
        ]
    else:
        requested = [(t.name, getattr(t, "topic_id", None)) for t in request.topics]

    topics = []
    for name, topic_id in requested:
        try:
            info = await _resolve(ctx, name, topic_id, allow_create)
        except KafkaError as exc:
            topics.append(
                build(
                    mod.MetadataResponseTopic,
                    error_code=exc.code,
                    name=name,
                    topic_id=topic_id or _ZERO_UUID,
                    is_internal=False,
                    partitions=(),
                    topic_authorized_operations=_NO_OPS,
                )
            )
            continue
        md = controller.metadata
        partitions = tuple(
            build(
                mod.MetadataResponsePartition,
                error_code=ErrorCode.none if reg.has_leader else ErrorCode.leader_not_available,
                partition_index=p,
                leader_id=reg.leader,
                leader_epoch=reg.leader_epoch,
                replica_nodes=tuple(reg.replicas),
                isr_nodes=tuple(reg.isr),
                offline_replicas=tuple(r for r in reg.replicas if not md.is_active(r)),
            )
            for p, reg in enumerate(md.partitions.get(info.topic_id, ()))
        )
        topics.append(
            build(
                mod.MetadataResponseTopic,
                error_code=ErrorCode.none,
                name=info.name,
                topic_id=info.topic_id,
                is_internal=info.name == OFFSETS_TOPIC,
                partitions=partitions,
                topic_authorized_operations=_NO_OPS,
            )
        )
    brokers = tuple(
        build(mod.MetadataResponseBroker, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in controller.brokers()
    )
    return build(
        mod.MetadataResponse,
        throttle_time=0,
        brokers=brokers,
        cluster_id=controller.cluster_id,
        # Any broker takes admin writes (it relays them to the active controller), so,
        # as a KRaft broker names a live broker, this one names itself: a client is never
        # sent to a controller that just died (docs/adr/0016-inter-broker-protocol.md).
        controller_id=broker.node_id,
        topics=tuple(topics),
        cluster_authorized_operations=_NO_OPS,
    )


async def _resolve(
    ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None, allow_create: bool
) -> Any:
    controller = ctx.broker.controller
    if name is None:
        info = controller.topic_by_id(topic_id) if topic_id else None
        if info is None:
            raise UnknownTopicIdError(f"unknown topic id {topic_id}")
        return info
    info = controller.topic(name)
    if info is not None:
        return info
    if allow_create and ctx.broker.auto_create_topics:
        try:
            return await ctx.broker.create_topic(name)
        except TopicAlreadyExistsError:  # another client's request created it meanwhile
            info = controller.topic(name)
            if info is not None:
                return info
            raise LeaderNotAvailableError(f"topic {name!r} is being created") from None
    raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
