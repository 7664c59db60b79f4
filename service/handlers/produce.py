"""Produce (key 0): validate, append to the partition's log, answer per partition."""

from __future__ import annotations

from typing import Any

from local_tier.errors import CorruptRecordError, ErrorCode, InvalidRequiredAcksError, KafkaError
from service.handlers.context import RequestContext
from service.produce_codec import PartitionResult, encode_produce_response

__all__ = ["handle_produce"]


def handle_produce(ctx: RequestContext, request: Any) -> bytes | None:
    broker = ctx.broker
    acks = int(request.acks)
    topics: list[tuple[str, list[PartitionResult]]] = []
    for topic in request.topic_data:
        partitions = []
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
            except KafkaError as exc:
                broker.metrics_error("Produce", exc.code)
                result = PartitionResult(index, int(exc.code), error_message=exc.message)
            partitions.append(result)
        topics.append((topic.name, partitions))
    if acks == 0:
        return None
    return encode_produce_response(ctx.version, ctx.header.correlation_id, topics)
