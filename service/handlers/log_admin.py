"""Partition logs: DeleteRecords (key 21) and DescribeLogDirs (key 35).

DeleteRecords moves a partition's log start offset (``kafka-delete-records.sh``,
the Java AdminClient's ``deleteRecords``); the broker does the work
(:func:`service.records_deletion.delete_records`, which also moves the remote tier's
start, and checkpoints the new starts once for the whole request). DescribeLogDirs
reports this broker's log directory: its partitions with their local size (for a
tiered partition, only what is on disk) and offset lag (0 on the leader, as in
Kafka), and the file system's total and usable bytes.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

from common.errors import ErrorCode, KafkaError, OffsetOutOfRangeError
from common.protocol.codec import build, response_module
from service.handlers.authz import require_topic
from service.handlers.context import RequestContext
from service.records_deletion import delete_records
from service.security.acls import AclOperation

__all__ = ["handle_delete_records", "handle_describe_log_dirs"]

_INT64_MAX = 2**63 - 1


async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    mod = response_module(21, ctx.version)
    answers: list[list[tuple[int, KafkaError | None]]] = []  # per topic: (partition, refused with)
    wanted: list[tuple[str, int, int]] = []
    for topic in request.topics:
        answers.append([])
        for p in topic.partitions:
            refused: KafkaError | None = None
            try:
                require_topic(ctx, AclOperation.DELETE, topic.name)
                if int(p.offset) < -1:
                    raise OffsetOutOfRangeError(f"cannot delete records before offset {p.offset}")
                wanted.append((topic.name, int(p.partition_index), int(p.offset)))
            except KafkaError as exc:
                refused = exc
            answers[-1].append((int(p.partition_index), refused))
    results = iter(await delete_records(broker, wanted))  # in the order of ``wanted``
    topics = []
    for topic, partitions in zip(request.topics, answers):
        built = []
        for index, refused in partitions:
            result = refused if refused is not None else next(results)
            fields: dict[str, Any]
            if isinstance(result, KafkaError):
                broker.metrics_error("DeleteRecords", result.code)
                fields = {"error_code": result.code, "low_watermark": -1}
            else:
                fields = {"error_code": ErrorCode.none, "low_watermark": result}
            built.append(build(mod.DeleteRecordsPartitionResult, partition_index=index, **fields))
        topics.append(build(mod.DeleteRecordsTopicResult, name=topic.name, partitions=tuple(built)))
    return build(mod.DeleteRecordsResponse, throttle_time=0, topics=tuple(topics))


def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    mod = response_module(35, ctx.version)
    logs = broker.logs.all_logs()
    if request.topics is None:
        wanted = set(logs)
    else:
        wanted = {(t.topic, int(p)) for t in request.topics for p in t.partitions}
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for (topic, partition), log in sorted(logs.items()):
        if (topic, partition) not in wanted:
            continue
        by_topic[topic].append(
            build(
                mod.DescribeLogDirsPartition,
                partition_index=partition,
                partition_size=log.size_in_bytes,
                offset_lag=max(log.high_watermark - log.log_end_offset, 0),
                is_future_key=False,
            )
        )
    log_dir = os.path.abspath(broker.logs.log_dir)
    fields: dict[str, Any] = {"error_code": ErrorCode.none, "log_dir": log_dir}
    try:
        fs = os.statvfs(log_dir)
        fields.update(
            total_bytes=min(fs.f_blocks * fs.f_frsize, _INT64_MAX),
            usable_bytes=min(fs.f_bavail * fs.f_frsize, _INT64_MAX),
        )
    except OSError:
        fields.update(error_code=ErrorCode.kafka_storage_error, total_bytes=-1, usable_bytes=-1)
    result = build(
        mod.DescribeLogDirsResult,
        topics=tuple(
            build(mod.DescribeLogDirsTopic, name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
        **fields,
    )
    return build(
        mod.DescribeLogDirsResponse, throttle_time=0, error_code=ErrorCode.none, results=(result,)
    )
