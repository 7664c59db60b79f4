"""ListOffsets of a diskless partition: :func:`list_offset` (ADR 0027, section 6).

Any broker answers: the partition's sequencer gives its first unmerged offset, its
committed end and its unmerged entries (DisklessIndex), the manifest its merged segments.
Runs on the event loop; reads of the bucket go to the tiered-fetch threads and the
diskless cache.
"""

from __future__ import annotations

import asyncio

from common.errors import InvalidRequestError
from common.record.batch import decode_batch
from controller.metadata import TopicInfo
from remote_tier.log_manager import RemoteFetch
from service.diskless.node import DisklessNode
from service.diskless.reader import read_entries
from service.diskless.rpc import IndexRead

__all__ = ["list_offset"]


async def list_offset(node: DisklessNode, info: TopicInfo, index: int, timestamp: int) -> tuple[int, int, int]:
    """ListOffsets of one partition: ``(timestamp, offset, leader epoch)``, Kafka's answers
    to its special timestamps (-1 latest, -2 earliest, -3 max timestamp, -4 earliest
    local: the first unmerged offset, -5 latest tiered: the last merged one) and to a
    time (the first record at or after it: in the merged segments, then the unmerged
    batches)."""
    lookup = timestamp if timestamp >= 0 or timestamp == -3 else -1  # the sequencer finds the batch
    answer = await node.index(info.topic_id, index, IndexRead(info.topic_id, index, -1, 0, lookup))
    manifest = await node.manifest((info.topic_id, index), newer_than=answer.start_offset)
    log_start = manifest.log_start_offset if manifest is not None else 0
    merged = manifest.segments if manifest is not None else ()
    if timestamp == -1:
        return -1, answer.end_offset, -1
    if timestamp == -2:
        return -1, log_start, -1
    if timestamp == -4:
        return -1, max(log_start, answer.start_offset), -1
    if timestamp == -5:
        return (-1, merged[-1].last_offset, merged[-1].leader_epoch) if merged else (-1, -1, -1)
    if timestamp == -3:
        newest = max([*(s.max_timestamp for s in merged), *(e.max_timestamp for e in answer.entries)], default=-1)
        if newest < 0:
            return -1, -1, -1
        timestamp = newest
    elif timestamp < 0:
        raise InvalidRequestError(f"unknown special timestamp {timestamp}")
    for segment in manifest.segments_for_timestamp(timestamp, log_start) if manifest is not None else ():
        found = await asyncio.wrap_future(node.tiered_reads.reader.submit_time_lookup(
            RemoteFetch(segment, info.topic_id, index), segment.size_bytes, timestamp, log_start))
        if found is not None:
            return found.timestamp, found.offset, found.leader_epoch
    for entry in answer.entries:
        if entry.max_timestamp < timestamp:
            continue
        if entry.last_offset < log_start:
            continue
        batch = await read_entries([entry], node.cache, node.get_object, entry.size)
        for record in decode_batch(batch)[1]:
            if record.timestamp >= timestamp:
                return record.timestamp, record.offset, entry.leader_epoch
    return -1, -1, -1

