"""Topic writes a broker sends to the active controller itself: auto-created topics
(Metadata with ``allow_auto_topic_creation``), the internal topics of the
coordinators (Kafka's ``AutoTopicCreationManager``), and the HTTP admin API's
topic changes, and blocks of producer ids for InitProducerId. (Clients' own
admin requests are relayed whole instead: the router's forwarding.)

A CreateTopics request (19) goes to the controller through the
:class:`~service.cluster.controller_client.ControllerClient` (this broker's own
controller when it is the active one); once answered, this broker's view is
refreshed, so the topic is in its metadata when the caller continues.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from common.errors import TopicAlreadyExistsError
from common.protocol.codec import build
from controller.errors import NotControllerError
from controller.records import TopicInfo
from controller.registrations import ProducerIdsBlock
from service.cluster.image import MetadataImage
from service.cluster.node import ClusterNode
from service.cluster.wire import raise_for, request_module

__all__ = [
    "allocate_producer_ids",
    "alter_configs_remotely",
    "create_topic_remotely",
    "delete_topic_remotely",
]

_API_CREATE_TOPICS = 19


async def create_topic_remotely(
    cluster: ClusterNode,
    image: MetadataImage,
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: Mapping[str, str],
    validate_only: bool,
) -> TopicInfo:
    """Create ``name`` on the active controller; the topic as this broker now sees it."""
    assert cluster.client is not None and cluster.controller is not None
    local_controller = cluster.controller

    def request(version: int) -> Any:
        mod = request_module(_API_CREATE_TOPICS, version)
        topic = build(
            mod.CreatableTopic,
            name=name,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            assignments=(),
            configs=tuple(build(mod.CreatableTopicConfig, name=k, value=v) for k, v in configs.items()),
        )
        return build(mod.CreateTopicsRequest, topics=(topic,), timeout=30_000, validate_only=validate_only)

    def answer(version: int, response: Any) -> None:
        for result in response.topics:
            if result.name == name:
                raise_for(result.error_code, getattr(result, "error_message", None))
                return
        raise NotControllerError(f"the controller's CreateTopics answer did not name {name!r}")

    def local() -> TopicInfo:
        return local_controller.create_topic(
            name, num_partitions, replication_factor, dict(configs), validate_only
        )

    try:
        created = await cluster.client.call(_API_CREATE_TOPICS, request, local=local, answer=answer)
    except TopicAlreadyExistsError:
        await asyncio.to_thread(cluster.view.refresh)  # the caller reads what exists
        raise
    if isinstance(created, TopicInfo):
        return created
    await asyncio.to_thread(cluster.view.refresh)
    info = image.topic(name)
    if info is None:
        raise NotControllerError(f"topic {name!r} was created but is not in the metadata yet")
    return info


async def delete_topic_remotely(cluster: ClusterNode, image: MetadataImage, name: str) -> TopicInfo:
    """Delete ``name`` on the active controller (the HTTP admin API of any broker)."""
    assert cluster.client is not None
    before = image.topic(name)

    def request(version: int) -> Any:
        mod = request_module(20, version)
        if hasattr(mod, "DeleteTopicState"):
            return build(mod.DeleteTopicsRequest, topics=(build(mod.DeleteTopicState, name=name),),
                         timeout=30_000)
        return build(mod.DeleteTopicsRequest, topic_names=(name,), timeout=30_000)

    def answer(version: int, response: Any) -> None:
        for result in response.responses:
            raise_for(result.error_code, getattr(result, "error_message", None))

    await cluster.client.call(20, request, answer=answer)
    await asyncio.to_thread(cluster.view.refresh)
    if before is None:
        raise NotControllerError(f"topic {name!r} was deleted before this broker saw it")
    return before


async def alter_configs_remotely(
    cluster: ClusterNode,
    image: MetadataImage,
    name: str,
    ops: Sequence[tuple[str, int, str | None]],
    validate_only: bool,
) -> TopicInfo:
    """IncrementalAlterConfigs of topic ``name`` on the active controller."""
    assert cluster.client is not None

    def request(version: int) -> Any:
        mod = request_module(44, version)
        resource = build(
            mod.AlterConfigsResource,
            resource_type=2,
            resource_name=name,
            configs=tuple(
                build(mod.AlterableConfig, name=k, config_operation=op, value=v) for k, op, v in ops
            ),
        )
        return build(mod.IncrementalAlterConfigsRequest, resources=(resource,), validate_only=validate_only)

    def answer(version: int, response: Any) -> None:
        for result in response.responses:
            raise_for(result.error_code, result.error_message)

    await cluster.client.call(44, request, answer=answer)
    await asyncio.to_thread(cluster.view.refresh)
    info = image.topic(name)
    if info is None:
        raise NotControllerError(f"topic {name!r} is not in the metadata")
    return info


async def allocate_producer_ids(cluster: ClusterNode) -> ProducerIdsBlock:
    """The next block of producer ids, durably taken by the active controller
    (AllocateProducerIds, 67): this broker's own controller when it is active."""
    assert cluster.client is not None and cluster.controller is not None
    controller = cluster.controller
    broker_id, broker_epoch = cluster.node_id, cluster.broker_epoch

    def answer(version: int, response: Any) -> ProducerIdsBlock:
        raise_for(response.error_code)
        return ProducerIdsBlock(broker_id, int(response.producer_id_start), int(response.producer_id_len))

    return await cluster.client.call(
        67,
        {"broker_id": broker_id, "broker_epoch": broker_epoch},
        local=lambda: controller.allocate_producer_ids(broker_id, broker_epoch),
        answer=answer,
    )
