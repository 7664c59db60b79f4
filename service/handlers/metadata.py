"""Metadata (key 3): brokers, cluster id, controller, topics and partitions.

Any broker answers from its view of the cluster metadata: every live broker,
and for each partition its leader (``LEADER_NOT_AVAILABLE`` while it has none),
leader epoch, replicas, ISR and the replicas whose broker is down. The
``controller_id`` is the active controller, the lease holder, as DescribeCluster
names it (:func:`named_controller`).

A topic this broker does not know is looked up again after a read of the stored
metadata (:meth:`~service.cluster.metadata_poller.MetadataPoller.refresh`): a topic
created through another broker a moment ago is not answered "unknown", which would
make a consumer group's leader assign nothing until its next metadata refresh.

Topics are looked up by id whenever the request carries a non-zero topic id (v12+;
the names of that request are then ignored, as in Kafka), else by name. Unknown
topics named in the request are created here (through the controller) when it
allows it (v4+, always before) and ``auto.create.topics.enable`` is on, as in
Kafka, except internal topics (``__consumer_offsets``, ``__transaction_state``):
their coordinators create them, with their own partition counts and configs,
when first needed.

Authorized operations are filled in when the request asks for them
(:mod:`service.handlers.operations`). With ACLs, a topic the principal may not
DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED when named and left out of an
all-topics answer, and an unknown topic is created only with CREATE on the cluster
or the topic (Kafka's checks).
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from common.errors import (
    ErrorCode,
    InvalidRequestError,
    KafkaError,
    LeaderNotAvailableError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from common.protocol.codec import SplicedResponse, build, encode_entity, response_module
from service.groups.records import OFFSETS_TOPIC
from service.handlers.authz import require_topic
from service.handlers.context import RequestContext
from service.handlers.metadata_topic import FIRST_VERSION, LAST_VERSION, encode_topic
from service.handlers.operations import (
    OPERATIONS_NOT_REQUESTED,
    ResourceType,
    authorized_operations,
)
from service.security.acls import CLUSTER_NAME, AclOperation

__all__ = ["INTERNAL_TOPICS", "handle_metadata", "is_internal_topic"]

TRANSACTION_STATE_TOPIC = "__transaction_state"
#: Topics a coordinator owns (Kafka's ``Topic.isInternal``).
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
_ZERO_UUID = uuid.UUID(int=0)

log = logging.getLogger("strata.metadata")


def is_internal_topic(name: str | None) -> bool:
    return name in INTERNAL_TOPICS


async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    controller = broker.controller
    mod = response_module(3, ctx.version)
    allow_create = bool(getattr(request, "allow_auto_topic_creation", True))
    want_topic_ops = bool(getattr(request, "include_topic_authorized_operations", False))
    requested = _requested(ctx, request)
    # a broker that cannot confirm it still leads (its heartbeats unanswered, or the bucket
    # out of reach: its view may be stale) names no leader where it would name itself, so
    # clients look elsewhere instead of coming back to it (issue #31)
    unsure = broker.node_id if not broker.replicas.may_lead() else None

    image, active = None, frozenset[int]()
    writers: tuple[int, ...] | None = None  # diskless partitions' brokers in the client's rack
    topics: list[bytes] = []
    for name, topic_id in requested:
        try:
            if name is not None:  # a topic the principal may not DESCRIBE is not even looked up
                require_topic(ctx, AclOperation.DESCRIBE, name)
            info = await _resolve(ctx, name, topic_id, allow_create)
            if name is None:
                require_topic(ctx, AclOperation.DESCRIBE, info.name)
        except KafkaError as exc:
            broker.metrics_error("Metadata", exc.code)
            topics.append(encode_entity(
                build(
                    mod.MetadataResponseTopic,
                    error_code=exc.code,
                    name=name if name is not None or ctx.version >= 12 else "",  # null only from v12
                    topic_id=topic_id or _ZERO_UUID,
                    is_internal=is_internal_topic(name),
                    partitions=(),
                    topic_authorized_operations=_topic_ops(ctx, want_topic_ops, name),
                )
            ))
            continue
        md = controller.metadata  # a topic created meanwhile is in the newer image
        if md is not image:
            image, active = md, frozenset(n for n, b in md.brokers.items() if b.is_active)
        if info.diskless and writers is None:
            writers = _rack_writers(ctx, md)
        topics.append(_topic_bytes(ctx.version, mod, md, info, unsure, active,
                                   _topic_ops(ctx, want_topic_ops, info.name), broker.node_id, writers or ()))
    brokers = tuple(
        build(mod.MetadataResponseBroker, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in controller.brokers(ctx.listener_name)
    )
    cluster_ops = OPERATIONS_NOT_REQUESTED
    if getattr(request, "include_cluster_authorized_operations", False):  # v8-v10
        cluster_ops = authorized_operations(ctx, ResourceType.CLUSTER, "kafka-cluster")
    body = build(
        mod.MetadataResponse,
        throttle_time=0,
        brokers=brokers,
        cluster_id=controller.cluster_id,
        controller_id=named_controller(controller.controller_id, broker.node_id, brokers),
        topics=(),
        cluster_authorized_operations=cluster_ops,
    )
    # after the topics: cluster_authorized_operations (v8-v10), then tagged fields (v9+)
    suffix = (4 if 8 <= ctx.version <= 10 else 0) + (1 if ctx.version >= 9 else 0)
    return SplicedResponse(body, tuple(topics), flexible=ctx.version >= 9, suffix=suffix)


#: (version, topic id) -> (its partition registrations, active brokers, the broker not sure it
#: leads, authorized operations, name, the topic's encoded bytes): a Metadata answer re-encodes
#: only the topics whose registrations changed (an image shares unchanged ones by identity)
_TOPIC_BYTES: dict[tuple[int, uuid.UUID], tuple[Any, frozenset[int], int | None, int, str, bytes]] = {}


def _topic_bytes(version: int, mod: Any, md: Any, info: Any, unsure: int | None,
                 active: frozenset[int], topic_ops: int, here: int = -1, writers: tuple[int, ...] = ()) -> bytes:
    """The encoded MetadataResponseTopic of ``info``, from the cache when nothing it says changed."""
    registrations = md.partitions.get(info.topic_id, ())
    key = (version, info.topic_id)
    hit = _TOPIC_BYTES.get(key) if not info.diskless else None  # a diskless topic's answer is per client
    if (hit is not None and hit[0] is registrations and hit[1] == active and hit[2] == unsure
            and hit[3] == topic_ops and hit[4] == info.name):
        return hit[5]
    fields = [  # (error_code, index, leader, leader epoch, replicas, isr, offline replicas)
        (ErrorCode.none if reg.has_leader and reg.leader != unsure else ErrorCode.leader_not_available,
         p, reg.leader if reg.leader != unsure else -1, reg.leader_epoch, reg.replicas, reg.isr,
         tuple(r for r in reg.replicas if r not in active))
        for p, reg in enumerate(registrations)
    ] if not info.diskless else [
        (ErrorCode.none if w >= 0 else ErrorCode.leader_not_available, p, w, -1, reg.replicas, reg.isr,
         tuple(r for r in reg.replicas if r not in active))
        for p, reg in enumerate(registrations)
        for w in (_diskless_writer(p, reg, active, here, unsure, writers),)
    ]
    if FIRST_VERSION <= version <= LAST_VERSION:  # the layout clients send today: without kio
        data = encode_topic(ErrorCode.none, info.name, info.topic_id, is_internal_topic(info.name), fields,
                            topic_ops)
        if info.diskless:
            return data
        return _cached(key, md, (registrations, active, unsure, topic_ops, info.name, data))
    partitions = tuple(
        build(mod.MetadataResponsePartition, error_code=code, partition_index=p, leader_id=leader,
              leader_epoch=epoch, replica_nodes=replicas, isr_nodes=isr, offline_replicas=offline)
        for code, p, leader, epoch, replicas, isr, offline in fields
    )
    data = encode_entity(build(
        mod.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=is_internal_topic(info.name),
        partitions=partitions,
        topic_authorized_operations=topic_ops,
    ))
    if info.diskless:
        return data
    return _cached(key, md, (registrations, active, unsure, topic_ops, info.name, data))


#: a client names its rack in its client.id for zone-local diskless writes (WarpStream's
#: ``warpstream_az=`` convention): ``...strata_rack=us-east-1a...``
_CLIENT_RACK = re.compile(r"strata_rack=([A-Za-z0-9._-]+)")


def _rack_writers(ctx: RequestContext, md: Any) -> tuple[int, ...]:
    """The live brokers of the rack the client's ``client.id`` names (none: no rack named)."""
    found = _CLIENT_RACK.search(ctx.header.client_id or "")
    if found is None:
        return ()
    rack = found.group(1)
    return tuple(b.node_id for b in md.active_brokers() if b.rack == rack)


def _diskless_writer(index: int, reg: Any, active: frozenset[int], here: int, unsure: int | None,
                     writers: tuple[int, ...]) -> int:
    """The broker Metadata names for a diskless partition (ADR 0027, "As built"): a broker of
    the client's rack when it named one (writes stay in its zone), else the partition's
    sequencer (its commits need no other broker), else, while it has none alive, this
    broker (any broker takes the writes). -1 where that is a broker unsure it may serve."""
    writers = tuple(w for w in writers if w != unsure)
    if writers:
        chosen = writers[index % len(writers)]
    elif reg.leader >= 0 and reg.leader in active:
        chosen = reg.leader
    else:
        chosen = here
    return -1 if chosen == unsure else chosen


def _cached(key: tuple[int, uuid.UUID], md: Any,
            entry: tuple[Any, frozenset[int], int | None, int, str, bytes]) -> bytes:
    if len(_TOPIC_BYTES) > 4 * len(md.topics) + 64:  # deleted topics' entries: start over
        _TOPIC_BYTES.clear()
    _TOPIC_BYTES[key] = entry
    return entry[5]


def _requested(ctx: RequestContext, request: Any) -> list[tuple[str | None, uuid.UUID | None]]:
    """``(name, topic id)`` of each topic asked for, in request order, without repeats."""
    if request.topics is None or (ctx.version == 0 and not request.topics):  # all the principal may DESCRIBE
        return [(t.name, None) for t in ctx.broker.controller.topics()
                if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)]
    pairs = [(t.name, getattr(t, "topic_id", None)) for t in request.topics]
    if any(topic_id not in (None, _ZERO_UUID) for _, topic_id in pairs):
        # Kafka: any topic id makes this a request by id; names are not looked at.
        pairs = [(None, topic_id) for _, topic_id in pairs if topic_id not in (None, _ZERO_UUID)]
    return list(dict.fromkeys(pairs))


async def _resolve(
    ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None, allow_create: bool
) -> Any:
    controller = ctx.broker.controller
    if topic_id is not None and topic_id != _ZERO_UUID:
        if ctx.version < 12:
            raise InvalidRequestError(f"topic ids are not supported in Metadata v{ctx.version}")
        info = controller.topic_by_id(topic_id)
        if info is None:
            await _refresh(ctx)
            info = controller.topic_by_id(topic_id)
        if info is None:
            raise UnknownTopicIdError(f"unknown topic id {topic_id}")
        return info
    if name is None:
        raise InvalidRequestError("a topic needs a name or a topic id")
    info = controller.topic(name)
    if info is None:
        await _refresh(ctx)
        info = controller.topic(name)
    if info is not None:
        return info
    may_create = ctx.allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or ctx.allowed(
        AclOperation.CREATE, ResourceType.TOPIC, name)
    if allow_create and may_create and ctx.broker.auto_create_topics and not is_internal_topic(name):
        try:
            created = await ctx.broker.create_topic(name)
            log.info("auto-created topic %r for a Metadata request of %s (%s) (auto.create.topics.enable)",
                     name, ctx.header.client_id, ctx.client_host)
            return created
        except TopicAlreadyExistsError:  # another client's request created it meanwhile
            info = controller.topic(name)
            if info is not None:
                return info
            raise LeaderNotAvailableError(f"topic {name!r} is being created") from None
    raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")


async def _refresh(ctx: RequestContext) -> None:
    """The store's newest metadata applied: a topic created a moment ago through another
    broker is found (see the module docstring)."""
    if ctx.broker.cluster is not None:
        await ctx.broker.cluster.refresh_metadata()


def _topic_ops(ctx: RequestContext, wanted: bool, name: str | None) -> int:
    if not wanted:
        return OPERATIONS_NOT_REQUESTED
    return authorized_operations(ctx, ResourceType.TOPIC, name or "")


def named_controller(holder: int, node_id: int, brokers: tuple[Any, ...]) -> int:
    """Metadata's ``controller_id``: the lease holder, as DescribeCluster names it, when it is
    one of the live ``brokers`` answered; else (a failover: the lease is free, or its holder
    was fenced a moment ago) this broker, which relays admin writes to whichever controller
    takes over, so a client is never pointed at a node the answer does not list
    (docs/adr/0016-inter-broker-protocol.md)."""
    return holder if any(b.node_id == holder for b in brokers) else node_id
