"""Produce (key 0): validate, append to the partition's log, answer per partition."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from local_tier.errors import CorruptRecordError, ErrorCode, InvalidRequiredAcksError, KafkaError
from service.handlers.context import RequestContext
from service.produce_codec import PartitionResult, encode_produce_response
from service.protocol import timedelta_to_ms

__all__ = ["handle_produce"]


def handle_produce(ctx: RequestContext, request: Any) -> bytes | None | Awaitable[bytes | None]:
    broker = ctx.broker
    acks = int(request.acks)
    topics: list[tuple[str, list[PartitionResult]]] = []
    waiting: list[tuple[str, list[PartitionResult], int, int]] = []  # acks=all, not on the ISR yet
    for topic in request.topic_data:
        partitions: list[PartitionResult] = []
        for pdata in topic.partition_data:
            index = int(pdata.index)
            try:
                if acks not in (0, 1, -1):
                    raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1, not {acks}")
                if pdata.records is None:
                    raise CorruptRecordError("produce request carries no record data")
                info = broker.append(topic.name, index, pdata.records)
                result = PartitionResult(index, ErrorCode.none, info.first_offset, info.log_append_time_ms,
                                         info.log_start_offset)
                if acks == -1 and not broker.replicated(topic.name, index, info.last_offset + 1):
                    waiting.append((topic.name, partitions, len(partitions), info.last_offset + 1))
            except KafkaError as exc:
                broker.metrics_error("Produce", exc.code)
                result = PartitionResult(index, int(exc.code), error_message=exc.message)
            partitions.append(result)
        topics.append((topic.name, partitions))
    if acks == 0:
        return None
    if waiting:
        return _after_replication(ctx, topics, waiting, timedelta_to_ms(request.timeout))
    return encode_produce_response(ctx.version, ctx.header.correlation_id, topics)


async def _after_replication(
    ctx: RequestContext,
    topics: list[tuple[str, list[PartitionResult]]],
    waiting: list[tuple[str, list[PartitionResult], int, int]],
    timeout_ms: int,
) -> bytes:
    """acks=all: answer once every replica in the ISR holds the appended records (Kafka's
    delayed produce); REQUEST_TIMED_OUT or NOT_LEADER_OR_FOLLOWER per partition else."""

    async def wait(topic: str, partitions: list[PartitionResult], position: int, offset: int) -> None:
        index = partitions[position].index
        try:
            await ctx.broker.wait_replicated(topic, index, offset, timeout_ms)
        except KafkaError as exc:
            ctx.broker.metrics_error("Produce", exc.code)
            partitions[position] = PartitionResult(index, int(exc.code), error_message=exc.message)

    await asyncio.gather(*(wait(*w) for w in waiting))
    return encode_produce_response(ctx.version, ctx.header.correlation_id, topics)
