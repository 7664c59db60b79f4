"""Remote segment indexes, and ListOffsets by timestamp over them (Kafka's lookup).

A tiered segment's ``.index`` and ``.timeindex`` objects are Kafka's formats
(:mod:`local_tier.index`), decoded here into ``array`` columns that
:class:`fetch.remote_reader.RemoteReader` caches per upload. A timestamp lookup
starts where the two indexes say the answer's index interval begins
(:func:`time_scan_start`) and walks batch headers from there with ranged GETs of
the ``.log`` object, at most a budget of bytes per lookup (:class:`BoundedScan`).

Everything here is blocking and runs on a tiered-fetch thread; nothing is shared
between lookups but the immutable decoded indexes.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Hashable
from typing import NamedTuple, Protocol

from common.errors import CorruptRecordError, KafkaStorageError
from common.record.batch import BATCH_OVERHEAD, decode_batch, read_batch_header

__all__ = [
    "OFFSET_ENTRY",
    "TIME_ENTRY",
    "BoundedScan",
    "IndexEntries",
    "IndexMismatch",
    "TimestampMatch",
    "decode_index",
    "first_at_or_after",
    "time_scan_start",
]

#: ``relative_offset int32 | position int32``
OFFSET_ENTRY = struct.Struct(">ii")
#: ``timestamp int64 | relative_offset int32``
TIME_ENTRY = struct.Struct(">qi")
#: the smallest ranged GET of a lookup: an index interval (4 KiB) and its batches
SCAN_STEP = 64 * 1024
#: the largest first GET: where the indexes say the answer ends, unless absurdly far
FIRST_READ_MAX = 4 * 1024 * 1024


class RangeSource(Protocol):
    def cache_key(self, segment: object) -> Hashable: ...

    def get_range(self, segment: object, start: int, end: int) -> bytes: ...


class TimestampMatch(NamedTuple):
    """ListOffsets' answer from a remote segment: the record and its batch's leader epoch."""

    offset: int
    timestamp: int
    leader_epoch: int


class IndexEntries(NamedTuple):
    """A decoded index: ``keys`` strictly increasing, ``values`` never decreasing (offset
    index: relative offsets and positions; time index: timestamps and relative offsets)."""

    keys: array
    values: array
    #: False when the object held more, out of order: only this prefix is trusted
    whole: bool


def decode_index(raw: bytes, entry: struct.Struct) -> IndexEntries:
    """The index's entries up to the first out of order one: keys strictly increasing,
    values never decreasing. What follows is not trusted (an index is only a hint)."""
    keys, values = array("q"), array("q")
    usable = len(raw) - len(raw) % entry.size
    for key, value in entry.iter_unpack(memoryview(raw)[:usable]):
        if keys and (key <= keys[-1] or value < values[-1]):
            return IndexEntries(keys, values, whole=False)
        keys.append(key)
        values.append(value)
    return IndexEntries(keys, values, whole=True)


def time_scan_start(
    times: IndexEntries, offsets: IndexEntries, base: int, size: int, timestamp: int, start_offset: int
) -> tuple[int, int | None, int | None]:
    """Where a timestamp lookup starts reading: ``(position, offset the index names
    there or None at 0, position the answer's batch surely ends by or None)``.

    Kafka's indexes get their entries at the same batches: the offset index every
    ``index.interval.bytes``, the time index there too when the maximum timestamp so far
    grew (and once more when the segment rolls). Let ``(T, O)`` be the first time entry
    with ``T >= timestamp``. At every offset-index entry below ``O`` the maximum so far
    was below ``timestamp`` (else a time entry with it would come first), so the batches
    up to the last such entry are all older, and ``O``'s batch holds ``T``: the answer
    lies between them. With no such time entry, every indexed batch is older and the
    answer lies past the last entry. Never before the batch of ``start_offset``.
    A time index that is empty or out of order tells nothing: the scan starts there.
    """
    stamps, stamp_offsets, whole = times
    rels, positions, _ = offsets
    k = bisect.bisect_left(stamps, timestamp)
    i, end = -1, None
    if k < len(stamps):
        i = bisect.bisect_left(rels, stamp_offsets[k]) - 1
        end = positions[i + 2] if i + 2 < len(positions) else size
    elif stamps and whole:
        i, end = len(rels) - 1, size
    i = max(i, bisect.bisect_right(rels, start_offset - base) - 1)
    if i < 0:
        return 0, None, end
    return positions[i], base + rels[i], end


class IndexMismatch(Exception):
    """The batch at an offset-index entry's position is not the one it names."""


class BoundedScan:
    """Forward reads of one ``.log`` object with ranged GETs, at most ``budget`` bytes in all.

    The first GET reaches ``first_end`` (where the indexes say the answer ends; at most
    :data:`FIRST_READ_MAX` ahead), each at least :data:`SCAN_STEP`; a read past
    ``budget`` is KAFKA_STORAGE_ERROR.
    """

    def __init__(
        self, source: RangeSource, segment: object, size: int, budget: int, first_end: int | None
    ) -> None:
        self._source, self._segment, self.size = source, segment, size
        self._budget, self._first_end = budget, first_end or 0
        self._buf, self._buf_start = b"", 0
        self.bytes_read = 0

    def read(self, start: int, end: int) -> memoryview:
        """Bytes ``[start, end)`` of the object (``end`` within it)."""
        lo = start - self._buf_start
        if not (0 <= lo and end - self._buf_start <= len(self._buf)):
            wanted = max(end, start + SCAN_STEP, min(self._first_end, start + FIRST_READ_MAX))
            wanted = min(wanted, self.size, start + self._budget - self.bytes_read)
            if wanted < end:
                raise KafkaStorageError(
                    f"ListOffsets by timestamp would read more than {self._budget} bytes "
                    f"of remote segment {self._source.cache_key(self._segment)}"
                )
            self._buf = self._source.get_range(self._segment, start, wanted)
            self._buf_start, lo = start, 0
            self.bytes_read += len(self._buf)
        return memoryview(self._buf)[lo : lo + end - start]


def first_at_or_after(
    scan: BoundedScan, position: int, named: int | None, timestamp: int, start_offset: int
) -> TimestampMatch | None:
    """Walk the batches from ``position``; decode only the first whose max timestamp qualifies."""
    if named is not None:
        _check_named(scan, position, named)
    pos = position
    while pos + BATCH_OVERHEAD <= scan.size:
        header = read_batch_header(scan.read(pos, pos + BATCH_OVERHEAD))
        if pos + header.size > scan.size:
            break
        if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
            _, records = decode_batch(scan.read(pos, pos + header.size))
            for record in records:
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    return TimestampMatch(record.offset, record.timestamp, header.partition_leader_epoch)
        pos += header.size
    return None


def _check_named(scan: BoundedScan, position: int, named: int) -> None:
    """IndexMismatch unless a batch whose last offset is ``named`` starts at ``position``."""
    if position + BATCH_OVERHEAD > scan.size:
        raise IndexMismatch
    try:
        header = read_batch_header(scan.read(position, position + BATCH_OVERHEAD))
    except CorruptRecordError as exc:
        raise IndexMismatch from exc
    if header.last_offset != named:
        raise IndexMismatch
