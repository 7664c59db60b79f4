"""Produce (key 0): validate, append to the partition's log, answer per partition."""

from __future__ import annotations

from typing import Any

from local_tier.errors import CorruptRecordError, ErrorCode, InvalidRequiredAcksError, KafkaError
from service.handlers.router import RequestContext
from service.protocol import build, response_module

__all__ = ["handle_produce"]


def handle_produce(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    mod = response_module(0, ctx.version)
    acks = int(request.acks)
    topics = []
    for topic in request.topic_data:
        partitions = []
        for pdata in topic.partition_data:
            fields: dict[str, Any]
            try:
                if acks not in (0, 1, -1):
                    raise InvalidRequiredAcksError(f"acks must be 0, 1 or -1, not {acks}")
                if request.transactional_id is not None:
                    raise KafkaError("transactions are not supported by this broker yet")
                if pdata.records is None:
                    raise CorruptRecordError("produce request carries no record data")
                info = broker.append(topic.name, int(pdata.index), pdata.records)
                fields = {
                    "error_code": ErrorCode.none,
                    "base_offset": info.first_offset,
                    "log_append_time": info.log_append_time_ms,
                    "log_start_offset": info.log_start_offset,
                }
            except KafkaError as exc:
                broker.metrics_error("Produce", exc.code)
                fields = {
                    "error_code": exc.code,
                    "base_offset": -1,
                    "log_append_time": -1,
                    "log_start_offset": -1,
                    "error_message": exc.message,
                }
            partitions.append(build(mod.PartitionProduceResponse, index=pdata.index, **fields))
        topics.append(
            build(mod.TopicProduceResponse, name=topic.name, partition_responses=tuple(partitions))
        )
    if acks == 0:
        return None
    return build(mod.ProduceResponse, responses=tuple(topics), throttle_time=0)

