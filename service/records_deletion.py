"""DeleteRecords on a broker: :func:`delete_records` moves each partition's log start
offset, in the bucket first for a tiered partition, and checkpoints them before answering,
once for the whole request.

A request names many partitions (``kafka-delete-records.sh`` with an offsets file, the
AdminClient's ``deleteRecords`` for a whole topic). Each checkpoint is a write and an
fsync on the flush thread, and each tiered partition's manifest a write to the bucket;
taken one partition after another, one request for 600 partitions took 5.9 s against a
``file://`` bucket (and would take 600 PUTs' time against S3). Now the partitions move
together, :data:`AT_ONCE` at a time (the manifests on the tiering copier threads), and
a single checkpoint makes every moved start durable; a partition whose start moved is
answered KAFKA_STORAGE_ERROR if that checkpoint fails (600 partitions: 3.0 s, most of it
the ``file://`` bucket's manifest writes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from common.errors import KafkaError, KafkaStorageError, OffsetOutOfRangeError, PolicyViolationError

if TYPE_CHECKING:
    from service.broker import Broker

__all__ = ["AT_ONCE", "delete_records"]

#: partitions of one request moved at once: more would not write manifests faster (the
#: copier threads are fewer) and would start all of their work in one turn of the loop
AT_ONCE = 16


async def delete_records(
    broker: Broker, wanted: Sequence[tuple[str, int, int]]
) -> list[int | KafkaError]:
    """DeleteRecords of every ``(topic, partition, offset)``: for each, the partition's new
    log start offset, or the error that partition is answered with.

    ``-1`` means the high watermark. Beyond it (or below 0): OFFSET_OUT_OF_RANGE; on a topic
    compacted and not also deleted: POLICY_VIOLATION, as in Kafka. On a tiered partition the
    manifest moves first (its remote segments wholly below are deleted), then the local log;
    the log start offsets are checkpointed before this returns, so an answered DeleteRecords
    survives a crash. Local segments wholly below the new start go at the next retention pass.
    """
    done: list[tuple[int, bool] | KafkaError] = [(-1, False)] * len(wanted)
    todo = iter(enumerate(wanted))

    async def mover() -> None:  # AT_ONCE of them, not a task per partition in one turn
        for position, (topic, partition, offset) in todo:
            try:
                done[position] = await _move_start(broker, topic, partition, offset)
            except KafkaError as exc:
                done[position] = exc

    await asyncio.gather(*(mover() for _ in range(min(AT_ONCE, len(wanted)))))
    results: list[int | KafkaError] = [d if isinstance(d, KafkaError) else d[0] for d in done]
    moved = [i for i, d in enumerate(done) if not isinstance(d, KafkaError) and d[1]]
    if moved and not await asyncio.wrap_future(broker.logs.checkpoint()):
        for position in moved:
            topic, partition, _ = wanted[position]
            results[position] = KafkaStorageError(
                f"the log start offset of {topic}-{partition} could not be checkpointed")
    return results


async def _move_start(broker: Broker, topic: str, partition: int, offset: int) -> tuple[int, bool]:
    """The partition's log start offset once moved up to ``offset``, and whether its local
    log's start moved (to be checkpointed)."""
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
        return broker.tiering.log_start_offset(topic, partition, log_), False
    info = broker.controller.topic(topic)
    if log_.config.remote_storage_enable and broker.tiering.enabled and info is not None:
        await broker.tiering.delete_records(
            topic, info.topic_id, partition, target, broker.leader_epoch(topic, partition)
        )
        log_ = broker.log_for(topic, partition)  # the topic may have been deleted meanwhile
    changed = log_.maybe_increment_log_start_offset(target)
    return broker.tiering.log_start_offset(topic, partition, log_), changed
