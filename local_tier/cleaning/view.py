"""What the cleaner sees of a local log: a snapshot taken on the log's owner thread.

:meth:`local_tier.log.Log.cleaning_view` fills a :class:`LogCleaningView`; the
cleaner threads then work from it alone (opening segment files by path, with
their own descriptors), so they never touch the log's mutable state. The
segments listed are the sealed ones, in order, contiguous; the active segment
never appears.

Frozen values (the lists are copies): thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from local_tier.cleaning.cleaner import LastRecord
from local_tier.config import LogConfig
from local_tier.segment import LogSegment
from local_tier.txn_index import AbortedTxn

__all__ = ["CleanableSegment", "LogCleaningView"]


@dataclass(frozen=True, slots=True)
class CleanableSegment:
    segment: LogSegment  # identity only: the swap checks the log still holds it
    base_offset: int
    upper: int  # the next segment's base offset (this one's end)
    size: int
    index_bytes: int
    log_path: Path
    largest_timestamp: int
    txn_entries: tuple[AbortedTxn, ...]


@dataclass(frozen=True, slots=True)
class LogCleaningView:
    topic: str
    partition: int
    dir: Path
    config: LogConfig
    log_start_offset: int
    last_stable_offset: int
    active_base_offset: int
    active_size: int
    log_end_offset: int
    #: the sealed segments, oldest first; ``segments[i].upper == segments[i+1].base_offset``
    segments: tuple[CleanableSegment, ...]
    #: aborted transactions of the active segment's index (their data may be sealed)
    active_txn_entries: tuple[AbortedTxn, ...]
    last_records: dict[int, LastRecord]

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def segments_from(self, offset: int) -> list[CleanableSegment]:
        """The sealed segments holding offsets at or after ``offset``."""
        return [s for s in self.segments if s.upper > offset]
