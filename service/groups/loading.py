"""The bytes of a ``__consumer_offsets`` partition, fixed on the event loop and read anywhere.

A coordinator's load reads its partition from the log start to the log end: blocking
reads of a few segments' files, which must not run on the event loop. The
:class:`~local_tier.log.Log` and its segments (their sizes, their indexes) belong to
the loop (``local_tier/ownership.py``), so they are not what the worker thread reads:
:func:`take_snapshot`, on the loop, takes a descriptor of its own (``os.dup``) on each
segment's file and the length that holds whole batches at that moment, and
:meth:`PartitionSnapshot.batches` reads only those bytes, on any thread. They do not
change under it: appends go after them, a cleaning or a deletion swaps or unlinks
files without rewriting them, and a truncation (this broker becoming a follower)
also ends its leadership, so the load is dropped anyway.

Every batch is checked whole (framing and CRC) before its records are used: a damaged
byte fails the load, which is retried (``runtime.OffsetsLeadership``), instead of
becoming a group's committed offset.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from common.errors import CorruptRecordError
from common.record.batch import (
    BATCH_OVERHEAD,
    BatchHeader,
    Record,
    check_batch,
    decode_batch,
    read_batch_header,
)
from local_tier.log import Log

__all__ = ["PartitionSnapshot", "SegmentBytes", "take_snapshot"]

#: bytes read at a time; a larger batch is read whole on its own
_CHUNK = 1024 * 1024
#: stored batches are checked against the bytes left in the file, not max.message.bytes:
#: a lowered limit must not make batches that were valid when appended unreadable
_NO_SIZE_LIMIT = 2**31


@dataclass(frozen=True, slots=True)
class SegmentBytes:
    """The first ``length`` bytes of one segment's ``.log``, through a descriptor of its own."""

    fd: int
    base_offset: int
    length: int


@dataclass(slots=True)
class PartitionSnapshot:
    """Offsets ``[start_offset, end_offset)`` of a partition as its segment files hold them."""

    name: str
    start_offset: int
    end_offset: int
    segments: list[SegmentBytes]

    def batches(self) -> Iterator[tuple[BatchHeader, list[Record]]]:
        """Every batch overlapping the range, checked, with its records inside the range.

        Blocking reads: call it off the event loop. Raises
        :class:`~common.errors.CorruptRecordError` at the first damaged batch.
        """
        for segment in self.segments:
            for header, buf, at in _checked_batches(segment):
                if header.next_offset <= self.start_offset:
                    continue
                if header.base_offset >= self.end_offset:
                    return
                records = [
                    r for r in decode_batch(buf, at)[1] if self.start_offset <= r.offset < self.end_offset
                ]
                yield header, records

    def close(self) -> None:
        """Close the descriptors (once the read is over, on whatever thread it ran)."""
        segments, self.segments = self.segments, []
        for segment in segments:
            os.close(segment.fd)


def take_snapshot(log: Log | None, name: str) -> PartitionSnapshot:
    """The partition's bytes as of now (an empty snapshot without a local log). On the loop:
    it reads the log's segment list and sizes; no file is read."""
    if log is None:
        return PartitionSnapshot(name, 0, 0, [])
    view = log.read_view()
    snapshot = PartitionSnapshot(name, view.log_start_offset, view.log_end_offset, [])
    try:
        for segment in view.segments:
            if segment.size:
                snapshot.segments.append(
                    SegmentBytes(os.dup(segment.file.fileno()), segment.base_offset, segment.size)
                )
    except BaseException:
        snapshot.close()
        raise
    return snapshot


def _checked_batches(segment: SegmentBytes) -> Iterator[tuple[BatchHeader, bytes, int]]:
    """``(header, buffer, position in the buffer)`` of each batch of the segment's bytes,
    framing and CRC checked; the bytes end on a batch boundary (they were taken so), so
    anything cut short there is damage, not a torn tail."""
    buf, buf_start, position = b"", 0, 0
    while position < segment.length:
        at = position - buf_start
        if at + BATCH_OVERHEAD > len(buf):
            buf, buf_start, at = _read(segment, position, _CHUNK), position, 0
        header = read_batch_header(buf, at)
        if position + header.size > segment.length:
            raise CorruptRecordError(
                f"batch at position {position} of segment {segment.base_offset} runs "
                f"{position + header.size - segment.length} bytes past its end"
            )
        if at + header.size > len(buf):
            buf, buf_start, at = _read(segment, position, max(_CHUNK, header.size)), position, 0
        check_batch(buf, at, max_message_bytes=_NO_SIZE_LIMIT, file_position=position, stored=True)
        yield header, buf, at
        position += header.size


def _read(segment: SegmentBytes, position: int, size: int) -> bytes:
    """Up to ``size`` bytes at ``position`` within the segment's length, all of them or
    CorruptRecordError (the file is shorter than when the snapshot was taken)."""
    size = min(size, segment.length - position)
    chunks: list[bytes] = []
    done = 0
    while done < size:
        chunk = os.pread(segment.fd, size - done, position + done)
        if not chunk:
            raise CorruptRecordError(
                f"segment {segment.base_offset} ends at {position + done} bytes, "
                f"{segment.length} were there when the load began"
            )
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)
