"""ListOffsets (key 2): earliest, latest, max timestamp, earliest local, by timestamp."""

from __future__ import annotations

from typing import Any

from local_tier.errors import ErrorCode, InvalidRequestError, KafkaError, UnsupportedVersionError
from service.handlers.context import RequestContext
from service.protocol import build, response_module

__all__ = ["handle_list_offsets"]

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # v7+
EARLIEST_LOCAL = -4  # v8+ (KIP-405)


async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(2, ctx.version)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            try:
                timestamp, offset, epoch = await _lookup(
                    ctx, topic.name, int(p.partition_index), int(p.timestamp)
                )
                fields: dict[str, Any] = {
                    "error_code": ErrorCode.none,
                    "timestamp": timestamp,
                    "offset": offset,
                    "leader_epoch": epoch,
                }
            except KafkaError as exc:
                ctx.broker.metrics_error("ListOffsets", exc.code)
                fields = {"error_code": exc.code, "timestamp": -1, "offset": -1, "leader_epoch": -1}
            partitions.append(
                build(mod.ListOffsetsPartitionResponse, partition_index=p.partition_index, **fields)
            )
        topics.append(build(mod.ListOffsetsTopicResponse, name=topic.name, partitions=tuple(partitions)))
    return build(mod.ListOffsetsResponse, throttle_time=0, topics=tuple(topics))


async def _lookup(ctx: RequestContext, topic: str, partition: int, ts: int) -> tuple[int, int, int]:
    log = ctx.broker.log_for(topic, partition)
    tiering = ctx.broker.tiering
    epoch = ctx.broker.leader_epoch
    if ts == LATEST:
        return -1, log.high_watermark, epoch
    if ts == EARLIEST:
        return -1, tiering.log_start_offset(topic, partition, log), epoch
    if ts == EARLIEST_LOCAL:
        if ctx.version < 8:
            raise UnsupportedVersionError("earliest-local (-4) needs ListOffsets v8")
        return -1, log.log_start_offset, epoch
    if ts == MAX_TIMESTAMP:
        if ctx.version < 7:
            raise UnsupportedVersionError("max-timestamp (-3) needs ListOffsets v7")
        found = log.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    elif ts < 0:
        raise InvalidRequestError(f"unknown special timestamp {ts}")
    else:
        found = None
        if tiering.enabled:
            found = await tiering.offset_for_timestamp(topic, partition, ts, log)
        if found is None:
            found = log.fetch_offset_by_timestamp(ts)
    if found is None or found[0] >= log.high_watermark:
        return -1, -1, -1
    offset, timestamp = found
    return timestamp, offset, epoch
