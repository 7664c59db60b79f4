"""Read the partitions of one Fetch from local logs, within its byte budgets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from local_tier.errors import ErrorCode, KafkaError
from local_tier.segment import FileRegion

if TYPE_CHECKING:
    from local_tier.log import Log

__all__ = ["LogSource", "PartitionData", "PartitionFetch", "read_partitions"]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class LogSource(Protocol):
    """Where the planner finds a partition's log."""

    def log_for(self, topic: str, partition: int) -> Log:
        """The partition's log; raises ``UnknownTopicOrPartitionError`` if there is none."""
        ...


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
    regions: list[FileRegion] = field(default_factory=list)
    size: int = 0
    error_message: str | None = None


def read_partitions(
    source: LogSource,
    requests: Sequence[PartitionFetch],
    *,
    max_bytes: int,
    isolation_level: int = READ_UNCOMMITTED,
) -> tuple[list[PartitionData], int]:
    """Read every requested partition; returns the per-partition data and the total bytes.

    Partitions are read in request order. Each gets at most its own ``max_bytes``
    and what is left of the response's ``max_bytes``; until some partition has
    returned data, the first batch is returned whole even when larger than both
    limits, so a consumer can always make progress (KIP-74).
    """
    out: list[PartitionData] = []
    total = 0
    for req in requests:
        data = PartitionData(req.topic, req.partition)
        out.append(data)
        try:
            log = source.log_for(req.topic, req.partition)
            data.high_watermark = log.high_watermark
            data.last_stable_offset = log.high_watermark
            data.log_start_offset = log.log_start_offset
            budget = min(req.max_bytes, max_bytes - total)
            if budget <= 0 and total > 0:
                continue
            info = log.read(
                req.fetch_offset,
                max(budget, 0),
                max_offset=log.high_watermark,
                min_one_message=total == 0,
            )
        except KafkaError as exc:
            data.error_code = exc.code
            data.error_message = exc.message
            continue
        data.regions = list(info.regions)
        data.size = info.size
        total += info.size
    return out, total
