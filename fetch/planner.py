"""Read the partitions of one Fetch from local logs, within its byte budgets."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from common.errors import ErrorCode, KafkaError
from local_tier.segment import FileRegion

if TYPE_CHECKING:
    from local_tier.log import Log

__all__ = [
    "LogSource",
    "PartitionData",
    "PartitionFetch",
    "RemotePlanner",
    "RemoteRead",
    "read_partitions",
    "read_partitions_in_turns",
]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
#: partitions read per turn of the event loop by :func:`read_partitions_in_turns`: the first
#: Fetch of 600 partitions, each read's first look scanning its segment from the index,
#: held the loop 43 ms in one go (about 70 us a partition)
PARTITIONS_PER_TURN = 64


class LogSource(Protocol):
    """Where the planner finds a partition's log."""

    def log_for(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Log:
        """The log of a partition this broker leads; raises the KafkaError a fetch of it
        gets otherwise (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
        FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH)."""
        ...


class RemotePlanner(Protocol):
    """The tiered part of a partition (see ``remote_tier.log_manager``)."""

    def log_start_offset(self, topic: str, partition: int, local: Log, *, exact: bool = True) -> int:
        """The whole log's start offset (the bucket's, when it holds older data).

        ``exact=False``: a best guess (the local start) while the remote tier is not
        loaded, instead of REPLICA_NOT_AVAILABLE.
        """
        ...

    def plan_remote_read(self, topic: str, partition: int, offset: int, local: Log) -> Any:
        """What to read from the bucket for ``offset``; ``OffsetOutOfRangeError`` if nothing.

        REPLICA_NOT_AVAILABLE (retriable) while the remote tier is not loaded.
        """
        ...


@dataclass(frozen=True, slots=True)
class RemoteRead:
    """A partition whose data must come from the bucket, with its reserved byte budget."""

    target: Any
    offset: int
    max_bytes: int
    min_one_message: bool


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One partition of a Fetch request."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1


@dataclass(slots=True)
class PartitionData:
    """What the response says about one partition."""

    topic: str
    partition: int
    error_code: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    regions: list[FileRegion | bytes | memoryview] = field(default_factory=list)
    size: int = 0
    records: int = 0  # records in the regions (whole batches), for the records-out metric
    error_message: str | None = None
    remote: RemoteRead | None = None
    #: read_committed: ``(producer id, first offset)`` of the aborted transactions
    #: overlapping the records returned
    aborted: list[tuple[int, int]] = field(default_factory=list)
    #: a follower whose log diverged: ``(epoch, end offset)`` to truncate to (Fetch v12+)
    diverging_epoch: tuple[int, int] | None = None
    #: KIP-392: the replica a consumer should fetch this partition from (-1: this broker)
    preferred_read_replica: int = -1


def read_partitions(
    source: LogSource,
    requests: Sequence[PartitionFetch],
    *,
    max_bytes: int,
    isolation_level: int = READ_UNCOMMITTED,
    remote: RemotePlanner | None = None,
    already: int = 0,
) -> tuple[list[PartitionData], int]:
    """Read every requested partition; returns the per-partition data and the total bytes.

    Partitions are read in request order. Each gets at most its own ``max_bytes``
    and what is left of the response's ``max_bytes``; until some partition has
    returned data, the first batch is returned whole even when larger than both
    limits, so a consumer can always make progress (KIP-74).

    An offset below the local log start is planned as a :class:`RemoteRead`
    (``remote`` given): its budget is reserved from the response's ``max_bytes``
    now, so bytes read from the bucket later still respect ``fetch.max.bytes``
    (the failure of KAFKA-20019). The total counts reserved remote budgets.

    ``READ_COMMITTED`` reads stop at the last stable offset and list the aborted
    transactions overlapping what they return (from the segments' ``.txnindex``);
    a remote read's list is filled in when its records arrive.

    ``already``: bytes the response carries before these partitions (a Fetch's diskless
    partitions, read first): they count in the total and use up the first-batch allowance.
    """
    committed = isolation_level == READ_COMMITTED
    out: list[PartitionData] = []
    total = already
    for req in requests:
        data = PartitionData(req.topic, req.partition)
        out.append(data)
        try:
            log = source.log_for(req.topic, req.partition, req.current_leader_epoch)
            data.high_watermark = log.high_watermark
            data.last_stable_offset = log.last_stable_offset
            data.log_start_offset = (
                # informational here: a read at the live tail needs no manifest
                remote.log_start_offset(req.topic, req.partition, log, exact=False)
                if remote is not None
                else log.log_start_offset
            )
            budget = min(req.max_bytes, max_bytes - total)
            if budget <= 0 and total > 0:
                continue
            # (a negative offset is out of range whatever the bucket holds: never a remote read,
            # which would wait for the partition's manifest first)
            if remote is not None and 0 <= req.fetch_offset < log.log_start_offset:
                target = remote.plan_remote_read(req.topic, req.partition, req.fetch_offset, log)
                data.remote = RemoteRead(target, req.fetch_offset, max(budget, 0), total == 0)
                total += max(budget, 0)
                continue
            info = log.read(
                req.fetch_offset,
                max(budget, 0),
                max_offset=data.last_stable_offset if committed else log.high_watermark,
                min_one_message=total == 0,
            )
            if committed and info.regions and info.regions[-1].next_offset > req.fetch_offset:
                upper = info.regions[-1].next_offset
                data.aborted = [(t.producer_id, t.first_offset) for t in log.aborted_txns(req.fetch_offset, upper)]
        except KafkaError as exc:
            data.error_code = exc.code
            data.error_message = exc.message
            continue
        data.regions = list(info.regions)
        data.size = info.size
        data.records = sum(r.next_offset - r.first_offset for r in info.regions if r.next_offset >= 0)
        total += info.size
    return out, total


async def read_partitions_in_turns(
    source: LogSource,
    requests: Sequence[PartitionFetch],
    *,
    max_bytes: int,
    isolation_level: int = READ_UNCOMMITTED,
    remote: RemotePlanner | None = None,
    already: int = 0,
) -> tuple[list[PartitionData], int]:
    """:func:`read_partitions`, :data:`PARTITIONS_PER_TURN` partitions per turn of the loop
    (one budget for all: each slice goes on from the bytes the ones before took). A
    partition changed between slices is read as it is then, as one appended to while
    the slices before it were read."""
    out: list[PartitionData] = []
    total = already
    for start in range(0, len(requests), PARTITIONS_PER_TURN):
        if start:
            await asyncio.sleep(0)
        data, total = read_partitions(source, requests[start:start + PARTITIONS_PER_TURN], max_bytes=max_bytes,
                                      isolation_level=isolation_level, remote=remote, already=total)
        out += data
    return out, total
