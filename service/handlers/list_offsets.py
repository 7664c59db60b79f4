"""ListOffsets (key 2): earliest, latest, max timestamp, earliest local, latest tiered, by timestamp.

v1+ answer one offset per partition (kio entities); v0, which Kafka 4 dropped
but Sarama-based tools still send, answers a list of offsets in Kafka's legacy
manner (:func:`legacy_offsets`, encoded by :mod:`service.handlers.list_offsets_v0`).
"""

from __future__ import annotations

import bisect
import itertools
import time
from typing import Any

from common.errors import ErrorCode, InvalidRequestError, KafkaError, UnsupportedVersionError
from common.protocol.codec import build, response_module
from local_tier.log import Log
from service.diskless.offsets import list_offset
from service.handlers import list_offsets_v0
from service.handlers.authz import require_topic
from service.handlers.context import RequestContext
from service.security.acls import AclOperation

__all__ = ["handle_list_offsets", "legacy_offsets"]

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # v7+ (KIP-734)
EARLIEST_LOCAL = -4  # v8+ (KIP-405)
LATEST_TIERED = -5  # v9+ (KIP-1005)
_NEEDS_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}


async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    if isinstance(request, list_offsets_v0.ListOffsetsV0Request):
        return _handle_v0(ctx, request)
    mod = response_module(2, ctx.version)
    committed = int(getattr(request, "isolation_level", 0)) == 1
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            try:
                timestamp, offset, epoch = await _lookup(
                    ctx,
                    topic.name,
                    int(p.partition_index),
                    int(p.timestamp),
                    int(getattr(p, "current_leader_epoch", -1)),  # v4+
                    committed,
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


async def _lookup(
    ctx: RequestContext, topic: str, partition: int, ts: int, current_epoch: int, committed: bool
) -> tuple[int, int, int]:
    """read_committed (``committed``) answers only offsets below the last stable offset."""
    require_topic(ctx, AclOperation.DESCRIBE, topic)
    info = ctx.broker.controller.topic(topic)
    if info is not None and info.diskless:  # any broker answers (ADR 0027, section 6)
        if ctx.version < _NEEDS_VERSION.get(ts, 0):
            raise UnsupportedVersionError(f"timestamp {ts} needs ListOffsets v{_NEEDS_VERSION[ts]}")
        return await list_offset(ctx.broker.diskless, info, partition, ts)
    log = ctx.broker.log_for(topic, partition, current_epoch)  # leadership and epoch checks
    tiering = ctx.broker.tiering
    epoch = ctx.broker.leader_epoch(topic, partition)
    if ctx.version < _NEEDS_VERSION.get(ts, 0):
        raise UnsupportedVersionError(
            f"timestamp {ts} needs ListOffsets v{_NEEDS_VERSION[ts]} (this request is v{ctx.version})"
        )
    limit = log.last_stable_offset if committed else log.high_watermark
    if ts in (EARLIEST, LATEST_TIERED) or ts >= 0:  # answers that may need the manifest
        await tiering.wait_for_manifest(topic, partition, log)
    if ts == LATEST:
        return -1, limit, epoch
    if ts == EARLIEST:
        return -1, tiering.log_start_offset(topic, partition, log), epoch
    if ts == EARLIEST_LOCAL:
        return -1, log.log_start_offset, epoch
    if ts == LATEST_TIERED:
        # Kafka's highestOffsetInRemoteStorage: -1 (and epoch -1) while nothing is tiered
        tiering.require_manifest(topic, partition, log)
        boundary = tiering.remote_boundary(topic, partition) if log.config.remote_storage_enable else None
        if boundary is None:
            return -1, -1, -1
        return -1, boundary - 1, epoch
    if ts < 0 and ts != MAX_TIMESTAMP:
        raise InvalidRequestError(f"unknown special timestamp {ts}")
    if ts >= 0 and tiering.enabled:
        remote = await ctx.broker.tiered_reads.offset_for_timestamp(topic, partition, ts, log)
        if remote is not None:
            if remote.offset >= limit:
                return -1, -1, -1
            return remote.timestamp, remote.offset, remote.leader_epoch
    found = log.fetch_offset_by_timestamp(ts)
    if found is None or found[0] >= limit:
        return -1, -1, -1
    offset, timestamp = found
    return timestamp, offset, _epoch_at(log, offset)


def _epoch_at(log: Log, offset: int) -> int:
    """The leader epoch of the batch holding ``offset`` (Kafka answers a record's epoch
    for a timestamp, not the current one); -1 when the log knows none."""
    entries = log.leader_epoch_cache.entries
    i = bisect.bisect_right([start for _, start in entries], offset) - 1
    return entries[i][0] if i >= 0 else -1


# --------------------------------------------------------------------------- v0


def _handle_v0(ctx: RequestContext, request: list_offsets_v0.ListOffsetsV0Request) -> bytes:
    broker = ctx.broker
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            try:
                require_topic(ctx, AclOperation.DESCRIBE, topic.name)
                log = broker.log_for(topic.name, p.partition_index)
                start = broker.tiering.log_start_offset(topic.name, p.partition_index, log)
                offsets = legacy_offsets(log, start, p.timestamp, p.max_num_offsets)
                if request.replica_id == -1:  # a consumer sees nothing past the high watermark
                    offsets = _capped(offsets, log.high_watermark)
                partitions.append((p.partition_index, int(ErrorCode.none), offsets))
            except KafkaError as exc:
                broker.metrics_error("ListOffsets", exc.code)
                partitions.append((p.partition_index, int(exc.code), []))
        topics.append((topic.name, partitions))
    return list_offsets_v0.encode_response(ctx.header.correlation_id, topics)


def _capped(offsets: list[int], hw: int) -> list[int]:
    """Kafka's v0 answer to a consumer: the high watermark instead of offsets above it."""
    if not any(o > hw for o in offsets):
        return offsets
    return [hw, *itertools.dropwhile(lambda o: o > hw, offsets)]


def legacy_offsets(log: Log, log_start_offset: int, timestamp: int, max_num_offsets: int) -> list[int]:
    """Kafka's ``legacyFetchOffsetsBefore``: up to ``max_num_offsets`` offsets, newest first.

    The candidates are each segment's base offset (at least the log start offset),
    paired with the segment's largest timestamp, then the log end offset (now)
    when the active segment holds data. -1 (latest) starts from the last
    candidate, -2 (earliest) from the first, a timestamp from the last candidate
    whose time is at or before it; offsets are taken from there back to the first.
    """
    segments = log.segments
    candidates = [(max(s.base_offset, log_start_offset), s.largest_timestamp) for s in segments]
    if log_start_offset < log.log_start_offset:  # older data in the bucket
        candidates.insert(0, (log_start_offset, -1))
    if segments[-1].size > 0:
        candidates.append((log.log_end_offset, int(time.time() * 1000)))
    if timestamp == LATEST:
        start = len(candidates) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = len(candidates) - 1
        while start >= 0 and candidates[start][1] > timestamp:
            start -= 1
    count = max(0, min(max_num_offsets, start + 1))
    offsets = [candidates[start - i][0] for i in range(count)]
    return sorted(offsets, reverse=True)
