"""Topic and config administration: CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, DescribeCluster."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

from common.config import TOPIC_CONFIGS
from common.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    UnknownTopicIdError,
)
from common.protocol.codec import build, response_module
from service.dynamic_config import SECTION as BROKER_SECTION
from service.dynamic_config import alter as alter_broker
from service.dynamic_config import describe as describe_broker
from service.group_configs import SECTION as GROUP_SECTION
from service.group_configs import alter as alter_group
from service.group_configs import describe as describe_group
from service.handlers.authz import require_cluster, require_group, require_topic
from service.handlers.context import RequestContext
from service.handlers.operations import (
    OPERATIONS_NOT_REQUESTED,
    ResourceType,
    authorized_operations,
)
from service.security.acls import CLUSTER_NAME
from service.security.acls import AclOperation as Op
from service.security.acls import ResourceType as Res

__all__ = [
    "handle_alter_configs",
    "handle_create_partitions",
    "handle_create_topics",
    "handle_delete_topics",
    "handle_describe_cluster",
    "handle_describe_configs",
    "handle_incremental_alter_configs",
]

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32  # Kafka 4's group configs (service.group_configs)
_ZERO_UUID = uuid.UUID(int=0)


def _resource_fields(res: Any) -> dict[str, Any]:
    """The fields of a config resource's result, before any error."""
    return {
        "resource_type": res.resource_type,
        "resource_name": res.resource_name,
        "error_code": ErrorCode.none,
        "error_message": None,
    }


def _require_configs(ctx: RequestContext, rtype: int, name: str, op: Op) -> None:
    """Kafka's checks of a config resource: ``op`` on the topic, or on the cluster for a broker."""
    if rtype == RESOURCE_TOPIC:
        require_topic(ctx, op, name)
    elif rtype == RESOURCE_BROKER:
        require_cluster(ctx, op)
    elif rtype == RESOURCE_GROUP:
        require_group(ctx, op, name)


def _error_fields(ctx: RequestContext, api: str, exc: KafkaError) -> dict[str, Any]:
    ctx.broker.metrics_error(api, exc.code)
    return {"error_code": exc.code, "error_message": exc.message}


async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    mod = response_module(19, ctx.version)
    counts = Counter(t.name for t in request.topics)
    validate_only = bool(getattr(request, "validate_only", False))
    results = []
    for topic in request.topics:
        fields: dict[str, Any] = {"name": topic.name, "topic_id": _ZERO_UUID}
        try:
            if counts[topic.name] > 1:
                raise InvalidRequestError(f"topic {topic.name!r} appears more than once in the request")
            if not ctx.allowed(Op.CREATE, Res.CLUSTER, CLUSTER_NAME):
                require_topic(ctx, Op.CREATE, topic.name)
            partitions = int(topic.num_partitions)
            replication = int(topic.replication_factor)
            assignments = None
            if topic.assignments:
                if partitions != -1 or replication != -1:
                    raise InvalidRequestError(
                        "give either a replica assignment or partitions and replication factor"
                    )
                assignments = {
                    int(a.partition_index): [int(b) for b in a.broker_ids] for a in topic.assignments
                }
                replication = len(topic.assignments[0].broker_ids)
            configs = {c.name: c.value for c in topic.configs}
            if any(v is None for v in configs.values()):
                raise InvalidRequestError("a topic config in CreateTopics has a null value")
            info = await broker.create_topic(
                topic.name,
                num_partitions=partitions,
                replication_factor=-1 if assignments else replication,
                configs=configs,
                validate_only=validate_only,
                assignments=assignments,
            )
            config_cls = getattr(mod, "CreatableTopicConfigs", None)  # v5+
            fields.update(topic_id=info.topic_id, error_code=ErrorCode.none, error_message=None)
            if config_cls is not None and not ctx.allowed(Op.DESCRIBE_CONFIGS, Res.TOPIC, topic.name):
                # created, but what it was created with is not the principal's to read (Kafka's
                # ReplicationControlManager: TOPIC_AUTHORIZATION_FAILED in the config error code)
                fields.update(num_partitions=-1, replication_factor=-1, configs=(),
                              topic_config_error_code=ErrorCode.topic_authorization_failed)
            else:
                # with this broker's dynamic configs, as DescribeConfigs shows them (ADR 0022)
                entries = broker.controller.broker_config().topic_entries(info.configs) if config_cls else []
                fields.update(
                    num_partitions=info.partitions,
                    replication_factor=replication if replication > 0 else broker.replication_factor(info),
                    configs=tuple(
                        build(config_cls, name=e.name, value=e.value, read_only=e.read_only,
                              config_source=e.source, is_sensitive=e.sensitive)
                        for e in entries
                    ),
                )
        except KafkaError as exc:
            fields.update(_error_fields(ctx, "CreateTopics", exc), num_partitions=-1, replication_factor=-1)
        results.append(build(mod.CreatableTopicResult, **fields))
    return build(mod.CreateTopicsResponse, throttle_time=0, topics=tuple(results))


async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    mod = response_module(20, ctx.version)
    if hasattr(request, "topics"):
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        fields: dict[str, Any] = {"name": name, "topic_id": topic_id or _ZERO_UUID}
        try:
            if name is None:
                info = broker.controller.topic_by_id(topic_id) if topic_id else None
                if info is None:
                    raise UnknownTopicIdError(f"unknown topic id {topic_id}")
                name = info.name
            require_topic(ctx, Op.DELETE, name)
            info = await broker.delete_topic(name)
            fields.update(name=info.name, topic_id=info.topic_id, error_code=ErrorCode.none)
        except KafkaError as exc:
            fields.update(_error_fields(ctx, "DeleteTopics", exc))
        results.append(build(mod.DeletableTopicResult, **fields))
    return build(mod.DeleteTopicsResponse, throttle_time=0, responses=tuple(results))


def _new_partition_replicas(topic: Any) -> list[list[int]] | None:
    """The replicas a CreatePartitions topic asks for, one list per new partition in order;
    None leaves the placement to the controller (Kafka's null ``Assignments``)."""
    if not topic.assignments:
        return None
    return [[int(b) for b in a.broker_ids] for a in topic.assignments]


async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    mod = response_module(37, ctx.version)
    results = []
    for topic in request.topics:
        fields: dict[str, Any] = {"name": topic.name, "error_code": ErrorCode.none}
        try:
            require_topic(ctx, Op.ALTER, topic.name)
            await broker.create_partitions(topic.name, int(topic.count), bool(request.validate_only),
                                           _new_partition_replicas(topic))
        except KafkaError as exc:
            fields.update(_error_fields(ctx, "CreatePartitions", exc))
        results.append(build(mod.CreatePartitionsTopicResult, **fields))
    return build(mod.CreatePartitionsResponse, throttle_time=0, results=tuple(results))


def handle_describe_configs(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.broker.controller
    mod = response_module(32, ctx.version)
    synonyms = bool(getattr(request, "include_synonyms", False))
    docs = bool(getattr(request, "include_documentation", False))
    results = []
    for res in request.resources:
        keys = list(res.configuration_keys) if res.configuration_keys is not None else None
        fields = _resource_fields(res)
        try:
            rtype = int(res.resource_type)
            _require_configs(ctx, rtype, res.resource_name, Op.DESCRIBE_CONFIGS)
            if rtype == RESOURCE_TOPIC:
                entries = controller.describe_topic_config(res.resource_name, keys)
            elif rtype == RESOURCE_BROKER:  # static and dynamic configs (service.dynamic_config)
                entries = describe_broker(ctx.broker.config, controller.metadata.section(BROKER_SECTION),
                                          res.resource_name, ctx.broker.node_id, keys)
            elif rtype == RESOURCE_GROUP:
                entries = describe_group(controller.metadata.section(GROUP_SECTION), res.resource_name,
                                         ctx.broker.config, keys)
            else:
                raise InvalidRequestError(f"resource type {rtype} is not supported")
            fields["configs"] = tuple(
                build(
                    mod.DescribeConfigsResourceResult,
                    name=e.name,
                    value=e.value,
                    read_only=e.read_only,
                    config_source=e.source,
                    is_sensitive=e.sensitive,
                    synonyms=tuple(
                        build(mod.DescribeConfigsSynonym, name=n, value=v, source=s)
                        for n, v, s in e.synonyms
                    )
                    if synonyms
                    else (),
                    config_type=e.config_type,
                    documentation=e.documentation if docs else None,
                )
                for e in entries
            )
        except KafkaError as exc:
            fields.update(_error_fields(ctx, "DescribeConfigs", exc), configs=())
        results.append(build(mod.DescribeConfigsResult, **fields))
    return build(mod.DescribeConfigsResponse, throttle_time=0, results=tuple(results))


async def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    mod = response_module(44, ctx.version)
    seen = Counter((int(r.resource_type), r.resource_name) for r in request.resources)
    results = []
    for res in request.resources:
        fields = _resource_fields(res)
        try:
            rtype = int(res.resource_type)
            if rtype == RESOURCE_BROKER and seen[(rtype, res.resource_name)] > 1:
                raise InvalidRequestError("Each resource must appear at most once.")
            _require_configs(ctx, rtype, res.resource_name, Op.ALTER_CONFIGS)
            ops = [(c.name, int(c.config_operation), c.value) for c in res.configs]
            if rtype == RESOURCE_BROKER:
                await _alter_broker(ctx, res.resource_name, ops, bool(request.validate_only), replace_all=False)
            elif rtype == RESOURCE_TOPIC:
                await broker.alter_topic_configs(res.resource_name, ops, bool(request.validate_only))
            elif rtype == RESOURCE_GROUP:
                await _alter_group(ctx, res.resource_name, ops, bool(request.validate_only), replace_all=False)
            else:
                raise InvalidRequestError(f"Unknown resource type {rtype}")
        except KafkaError as exc:
            fields.update(_error_fields(ctx, "IncrementalAlterConfigs", exc))
        results.append(build(mod.AlterConfigsResourceResponse, **fields))
    return build(mod.IncrementalAlterConfigsResponse, throttle_time=0, responses=tuple(results))


_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations


async def handle_alter_configs(ctx: RequestContext, request: Any) -> Any:
    """AlterConfigs (key 33), the non-incremental one: the given set replaces the overrides.

    A topic's configs not in the request return to their defaults (Kafka's
    semantics; KafkaJS's ``alterConfigs`` and ``kafka-configs.sh`` before 2.3 use
    it). On a broker resource (a broker id, or "" for the cluster default) the set
    replaces that resource's dynamic configs (:mod:`service.dynamic_config`); a config
    Strata cannot change at run time is INVALID_REQUEST.
    """
    broker = ctx.broker
    mod = response_module(33, ctx.version)
    seen = Counter((int(r.resource_type), r.resource_name) for r in request.resources)
    validate_only = bool(request.validate_only)
    results = []
    for res in request.resources:
        rtype = int(res.resource_type)
        fields = _resource_fields(res)
        try:
            _require_configs(ctx, rtype, res.resource_name, Op.ALTER_CONFIGS)
            if seen[(rtype, res.resource_name)] > 1:
                raise InvalidRequestError("Each resource must appear at most once.")
            configs = {c.name: c.value for c in res.configs}
            if len(configs) != len(res.configs):
                raise InvalidRequestError("Error due to duplicate config keys")
            nulls = sorted(k for k, v in configs.items() if v is None)
            if nulls:
                raise InvalidRequestError(f"Null value not supported for : {', '.join(nulls)}")
            if rtype == RESOURCE_TOPIC:
                ops: list[tuple[str, int, str | None]] = [
                    (key, _DELETE, None) for key in TOPIC_CONFIGS if key not in configs
                ]
                ops += [(key, _SET, value) for key, value in configs.items()]
                await broker.alter_topic_configs(res.resource_name, ops, validate_only)
            elif rtype == RESOURCE_BROKER:
                await _alter_broker(ctx, res.resource_name, [(k, _SET, v) for k, v in configs.items()],
                                    validate_only, replace_all=True)
            elif rtype == RESOURCE_GROUP:
                await _alter_group(ctx, res.resource_name, [(k, _SET, v) for k, v in configs.items()],
                                   validate_only, replace_all=True)
            else:
                raise InvalidRequestError(f"Unknown resource type {rtype}")
        except KafkaError as exc:
            fields.update(_error_fields(ctx, "AlterConfigs", exc))
        results.append(build(mod.AlterConfigsResourceResponse, **fields))
    return build(mod.AlterConfigsResponse, throttle_time=0, responses=tuple(results))


async def _alter_broker(ctx: RequestContext, resource: str, ops: list[tuple[str, int, str | None]],
                        validate_only: bool, *, replace_all: bool) -> None:
    """Dynamic broker configs, a controller write (the request was forwarded to it)."""

    def change(current: Any) -> tuple[Any, None]:
        updated = alter_broker(current, resource, ops, replace_all=replace_all, static=ctx.broker.config)
        return (current if validate_only else updated), None

    await asyncio.to_thread(ctx.broker.active_controller().alter_section, BROKER_SECTION, change)


async def _alter_group(ctx: RequestContext, group: str, ops: list[tuple[str, int, str | None]],
                       validate_only: bool, *, replace_all: bool) -> None:
    """A group's own configs, a controller write (the request was forwarded to it)."""

    def change(current: Any) -> tuple[Any, None]:
        updated = alter_group(current, group, ops, ctx.broker.config, replace_all=replace_all)
        return (current if validate_only else updated), None

    await asyncio.to_thread(ctx.broker.active_controller().alter_section, GROUP_SECTION, change)


#: DescribeCluster v1's endpoint types (Kafka's ``EndpointType``): a broker's listener serves BROKER
_BROKER_ENDPOINT, _CONTROLLER_ENDPOINT = 1, 2


def handle_describe_cluster(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.broker.controller
    mod = response_module(60, ctx.version)
    asked = getattr(request, "endpoint_type", _BROKER_ENDPOINT)  # v0 has none: the brokers
    if asked != _BROKER_ENDPOINT:  # as Kafka's AuthHelper; v0 cannot ask for another type
        unknown = asked != _CONTROLLER_ENDPOINT
        return build(
            mod.DescribeClusterResponse, throttle_time=0,
            error_code=ErrorCode.unsupported_endpoint_type if unknown else ErrorCode.mismatched_endpoint_type,
            error_message=(f"Unsupported endpoint type {asked}" if unknown else
                           "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of "
                           "type CONTROLLER"),
            endpoint_type=_BROKER_ENDPOINT, cluster_id="", controller_id=-1, brokers=(),  # Kafka: the defaults
            cluster_authorized_operations=OPERATIONS_NOT_REQUESTED,
        )
    brokers = tuple(
        build(mod.DescribeClusterBroker, broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in controller.brokers(ctx.listener_name)
    )
    return build(
        mod.DescribeClusterResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=_BROKER_ENDPOINT,
        cluster_id=controller.cluster_id,
        controller_id=controller.controller_id,
        brokers=brokers,
        cluster_authorized_operations=(
            authorized_operations(ctx, ResourceType.CLUSTER, "kafka-cluster")
            if request.include_cluster_authorized_operations
            else OPERATIONS_NOT_REQUESTED
        ),
    )
