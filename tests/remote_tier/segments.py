"""Small real segments for the remote_tier tests, written by local_tier.Log."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from common.record.batch import build_batch
from local_tier.log import Log
from tests.local_tier.batches import small_config

__all__ = ["LocalSegment", "write_segments"]

RECORDS_PER_BATCH = 4


class LocalSegment(NamedTuple):
    base_offset: int
    log_path: Path
    index_path: Path
    timeindex_path: Path

    def files(self) -> dict[str, Path]:
        return {
            "log_path": self.log_path,
            "index_path": self.index_path,
            "timeindex_path": self.timeindex_path,
        }


def write_segments(
    directory: Path,
    *,
    segments: int = 3,
    batches_per_segment: int = 3,
    first_timestamp: int = 1_000_000,
    leader_epoch: int = 0,
) -> list[LocalSegment]:
    """A partition log of ``segments`` sealed segments (plus an empty active one).

    Batch ``i`` holds offsets ``4i..4i+3`` with timestamps ``first_timestamp + 1000*i + j``,
    so segment ``s`` spans timestamps of batches ``s*batches_per_segment ...``.
    """
    batch = _batch(0, first_timestamp)
    config = small_config(segment_bytes=len(batch) * batches_per_segment)
    log = Log(directory, "t", 0, config, needs_recovery=False)
    try:
        for i in range(segments * batches_per_segment):
            log.append_as_leader(_batch(i, first_timestamp + 1000 * i), leader_epoch)
        log.roll()
        log.flush()
        sealed = log.segments[:-1]
    finally:
        log.close()
    return [
        LocalSegment(
            s.base_offset,
            s.log_path,
            s.log_path.with_suffix(".index"),
            s.log_path.with_suffix(".timeindex"),
        )
        for s in sealed
    ]


def _batch(i: int, timestamp: int) -> bytes:
    return build_batch(
        [
            (f"k{i}-{j}".encode(), f"value-{i}-{j}".encode() * 3, [], timestamp + j)
            for j in range(RECORDS_PER_BATCH)
        ]
    )
