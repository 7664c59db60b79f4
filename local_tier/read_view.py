"""A frozen view of a log's segments for reading on another thread: :class:`LogReadView`.

Taken on the log's owner thread (:meth:`local_tier.log.Log.read_view`), then read
anywhere: it holds the segment list and offsets as they were, and reads whole batches
from the segments' files as :meth:`~local_tier.log.Log.read` does. It never changes the
log; a segment deleted meanwhile (retention, a topic delete) ends the read early.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from local_tier.segment import FileRegion, LogSegment

__all__ = ["LogReadView", "first_region"]


def first_region(
    segments: Sequence[LogSegment],
    bases: Sequence[int],
    start_offset: int,
    max_bytes: int,
    max_offset: int,
    min_one_message: bool,
) -> FileRegion | None:
    """The region of whole batches from the segment holding ``start_offset`` on, below
    ``max_offset`` (possibly empty); None when no segment has one. The one segment walk of
    :meth:`local_tier.log.Log.read` and :meth:`LogReadView.read`."""
    for segment in segments[max(0, bisect_right(bases, start_offset) - 1) :]:
        region = segment.read(start_offset, max_bytes, None, min_one_message, max_offset=max_offset)
        if region is not None:
            return region
    return None


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
        region = first_region(self.segments, self.bases, start_offset, max_bytes, max_offset, True)
        return region if region is not None and region.length else None
