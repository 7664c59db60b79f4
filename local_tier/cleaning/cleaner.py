"""One cleaning pass over a log's segments, wherever they are (Kafka's ``Cleaner``).

The pass is Kafka's:

1. **The key map** (:func:`build_offset_map`): every key of the *dirty section*
   ``[first dirty offset, first uncleanable offset)`` with the last offset it
   has there, skipping control batches and aborted transactions. The map is
   bounded; when it fills up, the pass covers the dirty section only up to
   where it stopped (``offset_map.latest_offset``).
2. **Groups** (:func:`group_segments_by_size`): the segments from the log's
   start to that end, grouped so that each group's bytes fit one segment
   (``segment.bytes``) and its indexes their size: small segments are merged.
3. **Each group cleaned into one segment** (:func:`clean_group`), its base
   offset the group's first: a record stays when it is past the map's end, or
   when its key's last offset in the map is its own (or the key is not in the
   map) and it has a value, or it is a tombstone whose batch's delete horizon
   has not passed (the first pass that keeps a tombstone sets the horizon to
   now + ``delete.retention.ms``). Transaction data of aborted transactions
   goes; markers go by :mod:`.txns`'s rules once past their horizon. Batches
   keep their offsets and producer metadata (:mod:`.batches`); a batch that
   loses every record is still written, empty, when it is its producer's last
   (idempotent producers' sequence state survives, Kafka's rule) or the last
   of its group, so a cleaned segment ends exactly where the group ended and
   the log's segments stay contiguous.

Sources and sinks are narrow: a :class:`SegmentReader` reads bytes of one
segment's ``.log`` (a local file, or ranged GETs of a bucket object); a
:class:`CleanedSink` takes the cleaned batches (a ``.cleaned`` local segment,
or a scratch segment that is then uploaded). Memory: one read window
(``chunk_bytes``, or one batch when larger) and its output at a time, plus the map.

Not thread-safe: one pass per thread; the functions share no state.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from common.errors import CorruptRecordError
from common.record.batch import BATCH_OVERHEAD, BatchHeader, iter_batches, read_batch_header
from local_tier.cleaning.batches import (
    batch_records,
    delete_horizon,
    empty_batch,
    rebuild_batch,
    walk_records,
)
from local_tier.cleaning.offset_map import OffsetMap
from local_tier.cleaning.txns import CleanedTransactions
from local_tier.txn_index import AbortedTxn

__all__ = [
    "INT32_MAX",
    "CleanedSink",
    "CleanerIO",
    "CleanerStats",
    "CleaningAborted",
    "LastRecord",
    "SegmentReader",
    "SourceSegment",
    "build_offset_map",
    "clean_group",
    "group_segments_by_size",
]

INT32_MAX = 2**31 - 1


class CleaningAborted(Exception):
    """The log changed under the cleaner (deleted, truncated, shut down): give up this pass."""


@dataclass(frozen=True, slots=True)
class LastRecord:
    """A producer's last data offset (None: its last entry is a marker) and epoch."""

    last_data_offset: int | None
    producer_epoch: int


class SegmentReader(Protocol):
    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes of the segment's ``.log`` at ``position``."""
        ...


class CleanedSink(Protocol):
    def append(self, data: bytes, last_offset: int, max_timestamp: int, offset_of_max: int) -> None:
        """Whole cleaned batches, in offset order."""
        ...

    def append_aborted(self, txn: AbortedTxn) -> None:
        """An aborted transaction whose marker stays in this segment (its ``.txnindex``)."""
        ...


@dataclass(slots=True)
class SourceSegment:
    """One segment to read: ``[base_offset, upper)``, ``size`` bytes, and the aborted
    transactions of the live indexes overlapping it (Kafka's ``collectAbortedTransactions``)."""

    reader: SegmentReader
    base_offset: int
    upper: int
    size: int
    index_bytes: int = 0
    aborted: list[AbortedTxn] = field(default_factory=list)


@dataclass(slots=True)
class CleanerStats:
    map_bytes_read: int = 0
    map_records_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started


class CleanerIO:
    """How a pass reads and yields: read windows, the I/O throttle, abort checks,
    the test pause points, and giving the interpreter lock back to the event loop.

    ``breathe`` sleeps ``rest_s`` after every ``slice_s`` of work, so a broker's
    event loop waiting for the interpreter lock gets it within about ``slice_s``
    instead of the interpreter's 5 ms switch interval.
    """

    def __init__(
        self,
        *,
        chunk_bytes: int = 1 << 20,
        throttle: Callable[[int], None] | None = None,
        check_done: Callable[[], None] | None = None,
        pause: Callable[[str], None] | None = None,
        slice_s: float = 0.001,
        rest_s: float = 0.0001,
    ) -> None:
        self.chunk_bytes = chunk_bytes
        self.stats = CleanerStats()
        self._throttle = throttle
        self._check_done = check_done
        self._pause = pause
        self._slice_s = slice_s
        self._rest_s = rest_s
        self._slice_start = time.perf_counter()

    def check_done(self) -> None:
        if self._check_done is not None:
            self._check_done()

    def pause(self, point: str) -> None:
        """A named point of the pass (tests may stop the broker there)."""
        if self._pause is not None:
            self._pause(point)

    def throttle(self, nbytes: int) -> None:
        if self._throttle is not None:
            self._throttle(nbytes)

    def breathe(self) -> None:
        now = time.perf_counter()
        if now - self._slice_start >= self._slice_s:
            time.sleep(self._rest_s)
            self._slice_start = time.perf_counter()

    def batches(self, segment: SourceSegment, start_position: int = 0) -> Iterator[tuple[BatchHeader, memoryview]]:
        """The whole batches of ``segment`` from ``start_position``, read window by window."""
        pos, end = start_position, segment.size
        while end - pos >= BATCH_OVERHEAD:
            self.check_done()
            window = segment.reader.read(pos, min(self.chunk_bytes, end - pos))
            self.throttle(len(window))
            view = memoryview(window)
            used = 0
            for at, header in iter_batches(view):
                yield header, view[at : at + header.size]
                used = at + header.size
            if used == 0:  # one batch larger than the window (or a torn tail)
                header = read_batch_header(window)
                if header.batch_length < BATCH_OVERHEAD - 12 or header.size > end - pos:
                    raise CorruptRecordError(f"incomplete batch at position {pos} of a sealed segment")
                whole = segment.reader.read(pos, header.size)
                self.throttle(len(whole))
                yield header, memoryview(whole)
                used = header.size
            pos += used


def _control_type(data: bytes, header: BatchHeader) -> int | None:
    """The control type (0 ABORT, 1 COMMIT, ...) of a control batch's record; None when empty."""
    if header.records_count == 0:
        return None
    records = walk_records(data, header.records_count)
    key = records[0][1]
    if key is None or len(key) < 4:
        return -1
    return int.from_bytes(key[2:4], "big", signed=True)


def build_offset_map(
    segments: Sequence[SourceSegment],
    start: int,
    end: int,
    offset_map: OffsetMap,
    io: CleanerIO,
    *,
    load_factor: float = 0.9,
) -> None:
    """Map every key of ``[start, end)`` in ``segments`` (the dirty ones, in order) to its
    last offset there; stops early when the map is full (``load_factor`` of its slots)."""
    offset_map.clear()
    txns = CleanedTransactions()
    for segment in segments:
        txns.add_aborted(segment.aborted)
    max_entries = max(1, int(offset_map.slots * load_factor))
    stats = io.stats
    for segment in segments:
        if segment.upper <= start or segment.base_offset >= end:
            continue
        for header, batch in io.batches(segment):
            if header.last_offset < start:
                continue
            if header.base_offset >= end:
                break
            stats.map_bytes_read += header.size
            io.breathe()
            if header.is_control:
                txns.on_control_batch_read(header, _control_type(batch_records(batch, header), header))
            elif not txns.on_batch_read(header) and header.records_count:
                base = header.base_offset
                for record in walk_records(batch_records(batch, header), header.records_count):
                    key = record[1]
                    offset = base + record[0]
                    if key is not None and offset >= start:
                        if len(offset_map) >= max_entries:
                            return
                        offset_map.put(key, offset)
                stats.map_records_read += header.records_count
            if header.last_offset >= start:
                offset_map.update_latest_offset(min(header.last_offset, end - 1))
        offset_map.update_latest_offset(min(segment.upper, end) - 1)


@dataclass(slots=True)
class CleanContext:
    """What a pass decides with: the map, the time, the producers, the transactions."""

    offset_map: OffsetMap
    now_ms: int
    delete_retention_ms: int
    last_records: Mapping[int, LastRecord]
    txns: CleanedTransactions = field(default_factory=CleanedTransactions)


def _is_last_of_producer(header: BatchHeader, last: LastRecord | None) -> bool:
    if last is None:
        return False
    if last.last_data_offset is not None:
        return header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.producer_epoch


def _filter_batch(
    header: BatchHeader, batch: memoryview, ctx: CleanContext, group_upper: int, stats: CleanerStats
) -> bytes | None:
    """Kafka's ``checkBatchRetention`` + ``filterTo`` for one batch: its bytes to keep, if any."""
    data = batch_records(batch, header) if header.records_count else b""
    horizon = delete_horizon(header)
    if header.is_control:
        can_discard = ctx.txns.on_control_batch_read(header, _control_type(data, header))
        discard_records = can_discard and horizon is not None and horizon <= ctx.now_ms
    else:
        can_discard = ctx.txns.on_batch_read(header)
        discard_records = can_discard
    keep_empty = (
        header.producer_id >= 0 and _is_last_of_producer(header, ctx.last_records.get(header.producer_id))
    ) or header.next_offset == group_upper
    stats.records_read += header.records_count
    if discard_records and not keep_empty:
        return None
    records = walk_records(data, header.records_count) if header.records_count else []
    if discard_records:
        retained = []
    elif header.is_control:
        retained = records
    else:
        retained = _retained_records(header, records, ctx, horizon)
    stats.records_retained += len(retained)
    if not retained:
        return empty_batch(header) if keep_empty else None
    marker_for_empty_txn = can_discard and header.is_control
    tombstones = not header.is_control and any(not r[2] for r in retained)
    needs_horizon = (tombstones or marker_for_empty_txn) and horizon is None
    if len(retained) == len(records) and not needs_horizon:
        return bytes(batch)
    new_horizon = ctx.now_ms + ctx.delete_retention_ms if needs_horizon else horizon
    return rebuild_batch(header, data, retained, new_horizon)


def _retained_records(
    header: BatchHeader, records: list, ctx: CleanContext, horizon: int | None  # type: ignore[type-arg]
) -> list:  # type: ignore[type-arg]
    """Kafka's ``shouldRetainRecord`` over one data batch's records."""
    offset_map = ctx.offset_map
    latest = offset_map.latest_offset
    base = header.base_offset
    retain_deletes = horizon is None or ctx.now_ms < horizon
    out = []
    for record in records:
        offset = base + record[0]
        if offset > latest:
            out.append(record)
            continue
        key = record[1]
        if key is None:
            continue  # a record without a key has no place in a compacted log
        if offset >= offset_map.get(key) and (record[2] or retain_deletes):
            out.append(record)
    return out


def clean_group(group: Sequence[SourceSegment], sink: CleanedSink, ctx: CleanContext, io: CleanerIO) -> None:
    """Clean the segments of one group into ``sink`` (one new segment)."""
    ctx.txns.cleaned_index = sink.append_aborted
    group_upper = group[-1].upper
    stats = io.stats
    for segment in group:
        ctx.txns.add_aborted(segment.aborted)
        out: list[bytes] = []
        pending = 0
        last_offset = max_ts = offset_of_max = -1
        for header, batch in io.batches(segment):
            stats.bytes_read += header.size
            io.breathe()
            kept = _filter_batch(header, batch, ctx, group_upper, stats)
            if kept is None:
                continue
            out.append(kept)
            pending += len(kept)
            last_offset = header.last_offset
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, header.last_offset
            if pending >= io.chunk_bytes:
                _flush(sink, out, last_offset, max_ts, offset_of_max, stats, io)
                out, pending, max_ts = [], 0, -1
        if out:
            _flush(sink, out, last_offset, max_ts, offset_of_max, stats, io)
    ctx.txns.cleaned_index = None


def _flush(
    sink: CleanedSink, out: list[bytes], last_offset: int, max_ts: int, offset_of_max: int,
    stats: CleanerStats, io: CleanerIO,
) -> None:
    data = b"".join(out)
    sink.append(data, last_offset, max_ts, offset_of_max)
    stats.bytes_written += len(data)
    io.throttle(len(data))


def group_segments_by_size(
    segments: Sequence[SourceSegment], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[SourceSegment]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose sizes add up to at most
    ``max_size`` (and index sizes to ``max_index_size``), their offsets within int32 of the
    group's base."""
    groups: list[list[SourceSegment]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        log_size, index_size = group[0].size, group[0].index_bytes
        while rest:
            nxt = rest[0]
            last = (rest[1].base_offset - 1) if len(rest) > 1 else first_uncleanable - 1
            if (
                log_size + nxt.size > max_size
                or index_size + nxt.index_bytes > max_index_size
                or (nxt.size and last - group[0].base_offset > INT32_MAX)
            ):
                break
            group.append(rest.pop(0))
            log_size += nxt.size
            index_size += nxt.index_bytes
        groups.append(group)
    return groups


class FileReader:
    """A :class:`SegmentReader` over a ``.log`` file, with its own descriptor (so the log
    may rename or delete the file meanwhile)."""

    def __init__(self, path: os.PathLike[str] | str) -> None:
        self._fd = os.open(path, os.O_RDONLY)

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
