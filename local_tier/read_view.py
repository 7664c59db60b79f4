"""A frozen view of a log's segments for reading on another thread: :class:`LogReadView`.

Taken on the log's owner thread (:meth:`local_tier.log.Log.read_view`), then read
anywhere: it holds the segment list and offsets as they were, and reads whole batches
from the segments' files as :meth:`~local_tier.log.Log.read` does. It never changes the
log; a segment deleted meanwhile (retention, a topic delete) ends the read early.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from local_tier.segment import FileRegion, LogSegment

__all__ = ["LogReadView"]


@dataclass(frozen=True, slots=True)
class LogReadView:
    name: str
    log_start_offset: int
    log_end_offset: int
    segments: tuple[LogSegment, ...]
    bases: tuple[int, ...]

    def read(self, start_offset: int, max_bytes: int, max_offset: int) -> FileRegion | None:
        """Whole batches from the one holding ``start_offset``, below ``max_offset``
        (None: nothing there)."""
        if start_offset >= max_offset:
            return None
        for segment in self.segments[max(0, bisect_right(self.bases, start_offset) - 1) :]:
            region = segment.read(start_offset, max_bytes, None, True, max_offset=max_offset)
            if region is not None:
                return region if region.length else None
        return None
