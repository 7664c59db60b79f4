"""Metadata (key 3): brokers, cluster id, controller, topics and partitions.

Unknown topics are created here when the request allows it (v4+, always before)
and ``auto.create.topics.enable`` is on, as in Kafka.
"""

from __future__ import annotations

import uuid
from typing import Any

from local_tier.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from service.groups.records import OFFSETS_TOPIC
from service.handlers.context import RequestContext
from service.protocol import build, response_module

__all__ = ["handle_metadata"]

_NO_OPS = -2147483648  # authorized operations not requested
_ZERO_UUID = uuid.UUID(int=0)


def handle_metadata(ctx: RequestContext, request: Any) -> Any:
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

    node = broker.node_id
    topics = []
    for name, topic_id in requested:
        try:
            info = _resolve(ctx, name, topic_id, allow_create)
        except KafkaError as exc:
            topics.append(
                build(
                    mod.MetadataResponseTopic,
                    error_code=exc.code,
                    name=name if name is not None or ctx.version >= 12 else "",  # null only from v12
                    topic_id=topic_id or _ZERO_UUID,
                    is_internal=False,
                    partitions=(),
                    topic_authorized_operations=_NO_OPS,
                )
            )
            continue
        partitions = tuple(
            build(
                mod.MetadataResponsePartition,
                error_code=ErrorCode.none,
                partition_index=p,
                leader_id=node,
                leader_epoch=broker.leader_epoch,
                replica_nodes=(node,),
                isr_nodes=(node,),
                offline_replicas=(),
            )
            for p in range(info.partitions)
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
        controller_id=controller.controller_id,
        topics=tuple(topics),
        cluster_authorized_operations=_NO_OPS,
    )


def _resolve(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None, allow_create: bool) -> Any:
    controller = ctx.broker.controller
    if ctx.version < 12 and (name is None or topic_id):  # as Kafka: ids are for v12+
        raise InvalidRequestError(f"Metadata v{ctx.version} needs topic names; topic ids need v12")
    if name is None:
        info = controller.topic_by_id(topic_id) if topic_id else None
        if info is None:
            raise UnknownTopicIdError(f"unknown topic id {topic_id}")
        return info
    info = controller.topic(name)
    if info is not None:
        return info
    if allow_create and ctx.broker.auto_create_topics:
        return ctx.broker.create_topic(name)
    raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
