"""The diskless partitions of a Fetch: :func:`read_diskless` (ADR 0027, section 6).

Each sequencer holding some of the partitions is asked once for all of them
(DisklessIndex; this broker's own sequencer without the wire): their committed entries from
the fetch offsets, each partition's first unmerged offset and committed end. When nothing
is there yet and the fetch may wait, every sequencer holds its request until one of its
partitions has entries; the first to answer ends the others' waits (a ``wake`` naming the
poll), so an idle sequencer never holds up a busy one. Then, in the request's order and
within the response's ``max_bytes`` (the first batch of the first partition with data
always goes, as Kafka's ``minOneMessage``), the records: offsets below the first unmerged
one from the partition's tiered segments, the rest cut from their write-ahead objects
(cached; one GET per object however many partitions it holds).

Runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any

from common.errors import (
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from controller.metadata import TopicInfo
from fetch.planner import PartitionData
from fetch.response import frame_size
from remote_tier.log_manager import RemoteFetch
from service.diskless.node import DisklessNode
from service.diskless.reader import read_entries
from service.diskless.rpc import IndexAnswer, IndexRead

__all__ = ["DisklessFetch", "read_diskless"]

_log = logging.getLogger("strata.diskless")

#: how long sequencers woken early may take to answer before the Fetch goes on without them
_WOKEN_GRACE_S = 1.0

#: one partition of a Fetch: its topic (None: deleted meanwhile), index, offset, partition_max_bytes
DisklessFetch = tuple[TopicInfo | None, str, int, int, int]


async def read_diskless(node: DisklessNode, wants: Sequence[DisklessFetch], max_bytes: int,
                        max_wait_ms: int, interrupt: asyncio.Future[Any] | None = None,
                        min_bytes: int = 1) -> list[PartitionData]:
    """The answers to ``wants`` in their order (see the module docstring). A sequencer
    holds its poll until its partitions' entries hold ``min_bytes``. ``interrupt``
    (a Fetch's local partitions getting data) ends the wait as a first answer does: the
    sequencers answer at once with what they have."""
    answers: list[IndexAnswer | KafkaError | None] = [None] * len(wants)
    groups: dict[int, list[int]] = {}
    for i, (info, name, index, offset, part_max) in enumerate(wants):
        try:
            if info is None:
                raise UnknownTopicOrPartitionError(f"topic {name} was deleted")
            groups.setdefault(node.sequencer_of(info.topic_id, index), []).append(i)
        except KafkaError as exc:
            answers[i] = exc
    if any(isinstance(a, KafkaError) for a in answers):
        max_wait_ms = 0  # an error is answered at once, as for a local partition's
    poll = uuid.uuid4().hex
    asks = {
        sequencer: asyncio.ensure_future(node.index_at(
            sequencer, [_index_read(wants[i]) for i in members], max_wait_ms, poll, min_bytes))
        for sequencer, members in groups.items()}
    if max_wait_ms > 0 and asks and (len(asks) > 1 or interrupt is not None):
        first = [*asks.values(), *([interrupt] if interrupt is not None else [])]
        await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
        waiting = {ask for ask in asks.values() if not ask.done()}
        for sequencer, ask in asks.items():
            if ask in waiting:  # answered elsewhere: its sequencer answers now with what it has
                asyncio.ensure_future(node.wake_at(sequencer, poll))
        if waiting:  # a sequencer that does not answer its wake soon (cut off) does not hold the rest
            await asyncio.wait(waiting, timeout=_WOKEN_GRACE_S)
    elif asks:
        await asyncio.wait(asks.values())
    for (sequencer, members), ask in zip(groups.items(), asks.values(), strict=True):
        if not ask.done():
            ask.add_done_callback(_retrieved)
            late = RequestTimedOutError(f"the sequencer (broker {sequencer}) did not answer in time")
            for i in members:
                answers[i] = late
            continue
        for i, answer in zip(members, ask.result(), strict=True):
            answers[i] = answer
    out: list[PartitionData] = []
    budget = max_bytes
    for want, answer in zip(wants, answers, strict=True):
        data = await _records(node, want, answer, budget, first=budget == max_bytes)
        budget -= data.size
        out.append(data)
    return out


def _retrieved(task: asyncio.Future[object]) -> None:
    if not task.cancelled():
        task.exception()


def _index_read(want: DisklessFetch) -> IndexRead:
    info, _, index, offset, part_max = want
    assert info is not None
    return IndexRead(info.topic_id, index, offset, part_max)


async def _records(node: DisklessNode, want: DisklessFetch, answer: IndexAnswer | KafkaError | None,
                   budget: int, *, first: bool) -> PartitionData:
    info, name, index, offset, part_max = want
    try:
        if isinstance(answer, KafkaError):
            raise answer
        assert answer is not None and info is not None
        key = (info.topic_id, index)
        manifest = await node.manifest(key, newer_than=answer.start_offset)
        log_start = manifest.log_start_offset if manifest is not None else 0
        end = answer.end_offset
        data = PartitionData(name, index, high_watermark=end, last_stable_offset=end, log_start_offset=log_start)
        if offset < log_start or offset > end:
            raise OffsetOutOfRangeError(f"offset {offset} of {name}-{index} is outside the log [{log_start}, {end}]")
        room = min(part_max, budget)
        if room <= 0 and not first:
            return data
        if offset < answer.start_offset:  # merged: the tiered segments
            segment = manifest.segment_for(offset) if manifest is not None else None
            if segment is None or segment.base_offset > offset:
                raise OffsetOutOfRangeError(f"offset {offset} of {name}-{index} is in no merged segment")
            parts = await node.tiered_reads.read(RemoteFetch(segment, *key), offset, max(room, 0), first)
            data.regions, data.size = list(parts), frame_size(parts)
        elif answer.entries and (first or answer.entries[0].size <= room):
            records = await read_entries(answer.entries, node.cache, node.get_object, max(room, 1))
            data.regions, data.size = [records], len(records)
            sent = 0
            for entry in answer.entries:  # the records sent, for the metrics
                if sent >= len(records):
                    break
                sent += entry.size
                data.records += entry.record_count
        return data
    except KafkaError as exc:
        return PartitionData(name, index, exc.code, error_message=exc.message)
    except Exception as exc:  # noqa: BLE001 - the bucket (an object gone, a GET refused): retriable
        _log.warning("diskless %s-%d: a read from offset %d failed: %r", name, index, offset, exc)
        error = KafkaStorageError(f"reading {name}-{index} from the bucket failed: {exc}")
        return PartitionData(name, index, error.code, error_message=error.message)
