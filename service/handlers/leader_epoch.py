"""OffsetForLeaderEpoch (key 23): where a leader epoch ends, from the leader-epoch cache.

Consumers (librdkafka, the Java client) call it to validate their position after
a leader change or a restart (KIP-320): the answer ``(epoch, end offset)`` tells
them whether the records they have read still exist on the leader, or where the
log diverged. Followers will call it the same way to truncate (replication).

The answer comes from the partition's :class:`local_tier.epoch.LeaderEpochCache`
(Kafka's ``LeaderEpochFileCache.endOffsetFor``). A partition that has had no
append under this leader has an empty cache; Kafka records the leader's epoch at
the log end when it becomes leader, so it is answered here as if the cache held
``(current epoch, log start offset)``.
"""

from __future__ import annotations

from typing import Any

from common.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    KafkaError,
    UnknownLeaderEpochError,
)
from common.protocol.codec import build, response_module
from local_tier.epoch import UNDEFINED_EPOCH_OFFSET
from local_tier.log import Log
from service.handlers.authz import require_cluster, require_topic
from service.handlers.context import RequestContext
from service.security.acls import AclOperation

__all__ = ["check_current_leader_epoch", "end_offset_for_epoch", "handle_offset_for_leader_epoch"]

NO_EPOCH = -1


def check_current_leader_epoch(current: int, leader_epoch: int, partition: str) -> None:
    """Kafka's fencing of a request that names the leader epoch its sender knows.

    -1: the sender does not know (no check); older than ours: FENCED_LEADER_EPOCH
    (the sender's metadata is stale); newer: UNKNOWN_LEADER_EPOCH (ours is).
    """
    if current == NO_EPOCH or current == leader_epoch:
        return
    if current < leader_epoch:
        raise FencedLeaderEpochError(
            f"{partition}: the request's leader epoch {current} is older than the current {leader_epoch}"
        )
    raise UnknownLeaderEpochError(
        f"{partition}: the request's leader epoch {current} is newer than the current {leader_epoch}"
    )


def end_offset_for_epoch(log: Log, epoch: int, leader_epoch: int) -> tuple[int, int]:
    """``(epoch, end offset)``: the largest known epoch ≤ ``epoch`` and where it ends.

    ``(-1, -1)`` for an epoch newer than any known (or -1 itself).
    """
    if epoch == NO_EPOCH:
        return UNDEFINED_EPOCH_OFFSET
    cache = log.leader_epoch_cache
    if cache.entries:
        return cache.end_offset_for(epoch)
    if epoch > leader_epoch:
        return UNDEFINED_EPOCH_OFFSET
    if epoch == leader_epoch:
        return epoch, log.log_end_offset
    return epoch, log.log_start_offset


def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    mod = response_module(23, ctx.version)
    topics = []
    follower = int(getattr(request, "replica_id", -1)) >= 0  # v3+: a follower (CLUSTER_ACTION)
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            fields: dict[str, Any]
            try:
                if follower:
                    require_cluster(ctx, AclOperation.CLUSTER_ACTION)
                else:
                    require_topic(ctx, AclOperation.DESCRIBE, topic.topic)
                # the leadership and the request's current leader epoch are checked here
                log = broker.log_for(topic.topic, int(p.partition), int(p.current_leader_epoch))
                leader_epoch = broker.leader_epoch(topic.topic, int(p.partition))
                epoch, end = end_offset_for_epoch(log, int(p.leader_epoch), leader_epoch)
                fields = {"error_code": ErrorCode.none, "leader_epoch": epoch, "end_offset": end}
            except KafkaError as exc:
                broker.metrics_error("OffsetForLeaderEpoch", exc.code)
                fields = {"error_code": exc.code, "leader_epoch": -1, "end_offset": -1}
            partitions.append(build(mod.EpochEndOffset, partition=p.partition, **fields))
        topics.append(
            build(mod.OffsetForLeaderTopicResult, topic=topic.topic, partitions=tuple(partitions))
        )
    return build(mod.OffsetForLeaderEpochResponse, throttle_time=0, topics=tuple(topics))
