"""DeleteRecords on a broker: :func:`delete_records` moves a partition's log start offset,
in the bucket first for a tiered partition, and checkpoints it before answering."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from common.errors import KafkaStorageError, OffsetOutOfRangeError, PolicyViolationError

if TYPE_CHECKING:
    from service.broker import Broker

__all__ = ["delete_records"]


async def delete_records(broker: Broker, topic: str, partition: int, offset: int) -> int:
    """DeleteRecords: move the partition's log start offset up to ``offset``; the new start.

    ``-1`` means the high watermark. Beyond it (or below 0): OFFSET_OUT_OF_RANGE;
    on a topic compacted and not also deleted: POLICY_VIOLATION, as in Kafka. On a tiered partition
    the manifest moves first (its remote segments wholly below are deleted),
    then the local log; the log start offsets are checkpointed before this
    returns, so an answered DeleteRecords survives a crash. Local segments wholly
    below the new start go at the next retention pass.
    """
    log_ = broker.log_for(topic, partition)
    if log_.config.compact and not log_.config.delete:
        raise PolicyViolationError(
            f"records of {topic} can be deleted only if its cleanup.policy includes delete"
        )
    target = log_.high_watermark if offset == -1 else offset
    if not 0 <= target <= log_.high_watermark:
        raise OffsetOutOfRangeError(
            f"cannot delete records of {topic}-{partition} before offset {offset}: "
            f"the high watermark is {log_.high_watermark}"
        )
    await broker.tiering.wait_for_manifest(topic, partition, log_)
    if target <= broker.tiering.log_start_offset(topic, partition, log_):
        return broker.tiering.log_start_offset(topic, partition, log_)
    info = broker.controller.topic(topic)
    if log_.config.remote_storage_enable and broker.tiering.enabled and info is not None:
        await broker.tiering.delete_records(
            topic, info.topic_id, partition, target, broker.leader_epoch(topic, partition)
        )
        log_ = broker.log_for(topic, partition)  # the topic may have been deleted meanwhile
    if log_.maybe_increment_log_start_offset(target) and not await asyncio.wrap_future(
        broker.logs.checkpoint()
    ):
        raise KafkaStorageError(f"the log start offset of {topic}-{partition} could not be checkpointed")
    return broker.tiering.log_start_offset(topic, partition, log_)
