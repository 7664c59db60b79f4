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

__all__ = ["LogReadView", "first_region", "regions_from"]

#: the most segments one read walks (a compacted log may hold long runs of tiny ones)
MAX_REGIONS = 256


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


def regions_from(
    segments: Sequence[LogSegment],
    bases: Sequence[int],
    start_offset: int,
    max_bytes: int,
    max_offset: int,
    min_one_message: bool,
) -> list[FileRegion]:
    """Whole batches from ``start_offset`` on, up to ``max_bytes`` in all, going on into
    the next segments when the first ends before the budget does (Kafka reads one
    segment). A cleaned log may keep segments of one empty batch each; a response of
    nothing but empty batches makes librdkafka double its fetch size until it gives up
    with MSG_SIZE_TOO_LARGE (issue #36), so a read carries what follows them too."""
    region = first_region(segments, bases, start_offset, max_bytes, max_offset, min_one_message)
    if region is None or not region.length:
        return []
    regions, total = [region], region.length
    while total < max_bytes and len(regions) < MAX_REGIONS and 0 <= region.next_offset < max_offset:
        nxt = first_region(segments, bases, region.next_offset, max_bytes - total, max_offset, False)
        if nxt is None or not nxt.length or nxt.first_offset < region.next_offset:
            break
        regions.append(nxt)
        total += nxt.length
        region = nxt
    return regions


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
