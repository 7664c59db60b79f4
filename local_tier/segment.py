"""LogSegment: one ``<base20>.log`` file with its ``.index``, ``.timeindex`` and ``.txnindex``.

Over 500 lines because a segment's append, rollback, reads and recovery share
its private state (size, next offset, max timestamp, the index cursor); the
index files (``index.py``) and the batch codec (``records.py``) already live
apart.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from crc32c import crc32c

from common.errors import CorruptRecordError, KafkaError
from common.record.batch import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    BatchHeader,
    check_batch,
    decode_batch,
    iter_batches,
    peek_batch_header,
    read_batch_header,
)
from local_tier.config import LogConfig
from local_tier.descriptors import OPEN_SEGMENTS, LogFile, fsync_by_path
from local_tier.index import CorruptIndexError, OffsetIndex, TimeIndex
from local_tier.txn_index import TransactionIndex

__all__ = ["DELETED_SUFFIX", "AppendMark", "FileRegion", "LogSegment", "segment_file_name"]

DELETED_SUFFIX = ".deleted"
_SCAN_CHUNK = 16 * 1024
#: read ends a segment remembers (:meth:`LogSegment.read`): its consumers' next fetch positions
_READ_ENDS = 8
_RECOVERY_CHUNK = 8 * 1024 * 1024
_MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD
_INT32 = struct.Struct(">i")
_CRC_START = 21  # RecordBatch v2: the CRC covers everything from the attributes on
_NO_SIZE_LIMIT = 2**31  # batch sizes are int32: check_batch's max.message.bytes test never fires
_log = logging.getLogger("strata.local_tier")


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name: the base offset as 20 digits plus ``suffix`` (``.log`` ...)."""
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class FileRegion:
    """A byte range of a segment's ``.log``, ready for ``os.sendfile(file.fileno(), ...)``.

    Holds the segment's open file (:class:`~local_tier.descriptors.LogFile`): it stays
    valid after the segment is deleted (renamed) until the delayed delete closes it
    ``file.delete.delay.ms`` later, so a region must be sent within that delay. The
    descriptor bound (``OPEN_SEGMENTS``) does not close it: it only drops the segment's
    hold, and the file closes when the region is dropped too.
    """

    file: LogFile
    position: int
    length: int
    first_offset: int
    #: one past the last offset of the region's batches (its record count is the
    #: difference for dense offsets); -1 when unknown
    next_offset: int = -1
    #: the region's bytes when the read that found its batches already holds them (a
    #: small region at the tail): sent from memory, not read from the file a second time
    data: bytes | None = field(default=None, compare=False, repr=False)

    def read_bytes(self) -> bytes:
        """The region's bytes: :attr:`data`, or via ``os.pread`` (the file position is not used)."""
        if self.data is not None:
            return self.data
        chunks: list[bytes] = []
        done = 0
        fd = os.dup(self.file.fileno())  # one descriptor for the whole read (see held_fd)
        try:
            while done < self.length:
                chunk = os.pread(fd, self.length - done, self.position + done)
                if not chunk:
                    break
                chunks.append(chunk)
                done += len(chunk)
        finally:
            os.close(fd)
        return b"".join(chunks)


class AppendMark(NamedTuple):  # one per append (a tuple: cheap to build)
    """A segment's state before an append, to undo it with :meth:`LogSegment.rollback`."""

    size: int
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    bytes_since_last_index_entry: int
    created_ms: int | None
    offset_entries: int
    time_entries: int


class LogSegment:
    """One segment of a partition's log.

    Invariants: ``base_offset ≤`` every offset in the segment ``< next_offset``;
    the ``.log`` holds only whole batches in increasing offset order, except for
    a torn tail after a crash, which :meth:`recover` cuts; ``size`` is the file
    length; index entries point at batch starts below ``size`` and are written
    only after the bytes they point at; relative offsets fit in int32 and
    positions in int32. An append is all or nothing: when any of its writes
    fails (a full disk), the ``.log`` and both indexes are cut back to where they
    were, so the next append starts on a batch boundary (Kafka never appends
    after a failed write). If even that cut fails, the segment refuses further
    appends (:attr:`write_error`) until the broker restarts and validates it.

    Thread-safety: not thread-safe. The owning :class:`~local_tier.log.Log` calls
    everything from the broker's event loop thread, except :meth:`flush`, which
    only fsyncs descriptors and may run on the log manager's flush thread.
    Reads use ``os.pread`` and never move the file position; appends go through an
    ``O_APPEND`` descriptor. The ``.log`` is opened on use (:meth:`_handle`) and let go of
    when the loop's descriptor bound needs room (:meth:`release_descriptor`); a method
    keeps the :class:`LogFile` it uses in a local for as long as it uses the descriptor.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        log_file: LogFile,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        *,
        indexes_missing: bool,
        txn_index: TransactionIndex | None = None,
        suffix: str = "",
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.log_path = directory / (segment_file_name(base_offset, ".log") + suffix)
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index or TransactionIndex(
            directory / (segment_file_name(base_offset, ".txnindex") + suffix)
        )
        self._file: LogFile | None = log_file
        self._size = os.fstat(log_file.fileno()).st_size
        self._indexes_missing = indexes_missing and self._size > 0
        self._tail_error: str | None = None
        self._next_offset = base_offset
        self._max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_last_index_entry = 0
        self._created_ms: int | None = None
        self.recovery_error: str | None = None
        """Why the last :meth:`recover` stopped early (None when nothing was cut)."""
        self.recovered_epochs: list[tuple[int, int]] = []
        """Where the batches :meth:`recover` walked start a newer leader epoch."""
        self.write_error: str | None = None
        """Set when a failed append could not be undone: the segment takes no more appends."""
        self._index_mismatch_logged = False
        #: where reads ended: offset -> the position before which every batch ends below it
        #: (:meth:`read`); a consumer's next fetch starts there without the index and a scan
        #: from its entry (at the tail, up to ``index.interval.bytes`` of headers per fetch)
        self._read_ends: dict[int, int] = {}

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        create: bool = False,
        *,
        validate_tail: bool = False,
        suffix: str = "",
        listing: Collection[str] | None = None,
    ) -> LogSegment:
        """Open (or with ``create`` make) the segment's three files and load its state.

        With ``validate_tail`` (the last segment of a log) the batches after the
        last offset-index entry are checked in full (CRC); any problem found while
        loading is reported by :meth:`sanity_check`. ``suffix`` is added to every
        file name (``.cleaned``: a segment the cleaner is writing). ``listing``: the names in
        ``directory`` just now (a log's load lists it once), so the files are not looked up.
        """
        log_path = directory / (segment_file_name(base_offset, ".log") + suffix)
        index_path = directory / (segment_file_name(base_offset, ".index") + suffix)
        time_path = directory / (segment_file_name(base_offset, ".timeindex") + suffix)
        paths = (log_path, index_path, time_path)
        there = [p.name in listing if listing is not None else p.exists() for p in paths]
        if not create and not there[0]:
            raise FileNotFoundError(log_path)
        missing = not there[1] or not there[2]
        new_files = [p for p, found in zip(paths, there, strict=True) if not found]
        log_file = LogFile(log_path, create=True)
        offset_index: OffsetIndex | None = None
        try:
            offset_index = OffsetIndex(index_path, base_offset, config.segment_index_bytes)
            time_index = TimeIndex(time_path, base_offset, config.segment_index_bytes)
        except BaseException:
            log_file.close()
            if offset_index is not None:
                offset_index.close()
            for path in new_files:  # a segment that could not be made whole is not left behind
                path.unlink(missing_ok=True)
            raise
        segment = cls(
            directory,
            base_offset,
            config,
            log_file,
            offset_index,
            time_index,
            indexes_missing=missing,
            suffix=suffix,
        )
        segment._load_tail(validate_tail)
        OPEN_SEGMENTS.opened(segment)
        return segment

    def _load_tail(self, validate: bool) -> None:
        """Derive next offset, max timestamp and roll time from the indexes plus a short scan.

        The scan starts at the last offset-index entry, whose position is bounded
        first; the batch found there must be the one the entry names, and the
        batches after it must end exactly at the end of the file. With
        ``validate`` those batches are also checked whole (CRC). A failure is kept
        in ``_tail_error`` for :meth:`sanity_check`, and the rebuild that follows
        derives everything again from the ``.log``.
        """
        if self._size == 0:
            return
        max_ts, ts_offset = self.time_index.last_entry
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, ts_offset
        indexed_offset, position = self.offset_index.last_entry
        if not 0 <= position < self._size:
            self._tail_error = (
                f"its last index entry points at position {position}, outside the log "
                f"of {self._size} bytes"
            )
            return
        end = position
        try:
            file = self._handle()
            first = read_batch_header(os.pread(file.fileno(), BATCH_OVERHEAD, 0))
            self._created_ms = first.max_timestamp if first.max_timestamp > 0 else None
            for pos, header in self._scan(position, file=file):
                if pos == position and self.offset_index.entries and header.last_offset != indexed_offset:
                    break  # the entry does not name the batch it points at
                self._note_timestamp(header)
                self._next_offset = header.next_offset
                self._bytes_since_last_index_entry = pos + header.size - position
                end = pos + header.size
            if end != self._size:
                self._tail_error = (
                    f"{self._size - end} bytes at position {end} are not a whole batch "
                    "(a torn write, or an index entry that does not match the log)"
                )
            elif validate:
                for _ in self._checked_batches(position, self._size):
                    pass
        except KafkaError as exc:
            self._tail_error = str(exc)

    # ------------------------------------------------------------------ properties

    @property
    def file(self) -> LogFile:
        """The open ``.log`` (opened again if the descriptor bound let go of it); keep the
        object, not only its ``fileno()``, for as long as the descriptor is used."""
        return self._handle()

    def _handle(self) -> LogFile:
        file = self._file
        if file is None:
            file = self._file = LogFile(self.log_path)
        elif file.closed:  # closed for good (:meth:`close`): fileno() raises
            return file
        OPEN_SEGMENTS.opened(self)
        return file

    def release_descriptor(self) -> None:
        """Let go of the ``.log`` (the loop's descriptor bound needs room): it closes once
        the regions in flight that hold it are sent; the next use opens it again."""
        file = self._file
        if file is not None and not file.closed:
            self._file = None

    @property
    def size(self) -> int:
        return self._size

    @property
    def next_offset(self) -> int:
        """One past the last offset in the segment (``base_offset`` when empty)."""
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """The largest batch max timestamp appended so far (-1 when none)."""
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        return self._offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """What retention.ms compares: max timestamp, or the file's mtime when there is none."""
        if self._max_timestamp > 0:
            return self._max_timestamp
        return int(os.stat(self.log_path).st_mtime * 1000)

    @property
    def created_ms(self) -> int | None:
        """When segment.ms counts from: the first append's time (None while empty)."""
        return self._created_ms

    def is_full(self) -> bool:
        """True when either index can take no more entries (the log must roll)."""
        return self.offset_index.is_full() or self.time_index.is_full()

    # ------------------------------------------------------------------ writing

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        records: bytes | bytearray | memoryview,
        *,
        now_ms: int | None = None,
    ) -> None:
        """Append whole, already stamped batches with one write; index them sparsely.

        All or nothing: the log bytes are written first, then the index entries
        that point at them; if any write fails (OSError, e.g. ENOSPC) everything
        is undone (:meth:`rollback`) and the OSError is raised.
        """
        length = len(records)
        if length == 0:
            return
        if self.write_error is not None:
            raise OSError(errno.EIO, f"{self.log_path.name} takes no more appends: {self.write_error}")
        mark = self.mark()
        position = self._size
        try:
            _write_all(self._handle(), records)
            self._size += length
            if position == 0:
                self._created_ms = now_ms if now_ms is not None else int(time.time() * 1000)
            interval = self.config.index_interval_bytes
            if self._bytes_since_last_index_entry + length <= interval:
                self._bytes_since_last_index_entry += length
            else:
                for pos, header in iter_batches(records):
                    self._note_timestamp(header)
                    self._index_batch(position + pos, header)
        except Exception:  # OSError above all: a full disk, a short write
            self.rollback(mark)
            raise
        self._next_offset = largest_offset + 1
        if largest_timestamp > self._max_timestamp:
            self._max_timestamp = largest_timestamp
            self._offset_of_max_timestamp = offset_of_max_timestamp

    def mark(self) -> AppendMark:
        """The state to return to if the next append must be undone."""
        return AppendMark(
            self._size,
            self._next_offset,
            self._max_timestamp,
            self._offset_of_max_timestamp,
            self._bytes_since_last_index_entry,
            self._created_ms,
            self.offset_index.entries,
            self.time_index.entries,
        )

    def rollback(self, mark: AppendMark) -> None:
        """Undo the appends made since ``mark``: cut the files back and restore the state.

        Cutting a file never needs free space. Should it fail anyway, the
        segment keeps the logical state of ``mark`` (reads stop there), records
        :attr:`write_error` and refuses appends; the next start finds the bytes
        beyond the last whole batch and cuts them.
        """
        try:
            os.ftruncate(self._handle().fileno(), mark.size)
            self.offset_index.truncate_entries(mark.offset_entries)
            self.time_index.truncate_entries(mark.time_entries)
        except OSError as exc:
            self.write_error = f"a failed append could not be undone ({exc})"
            raise
        finally:
            self._read_ends.clear()
            self._size = mark.size
            self._next_offset = mark.next_offset
            self._max_timestamp = mark.max_timestamp
            self._offset_of_max_timestamp = mark.offset_of_max_timestamp
            self._bytes_since_last_index_entry = mark.bytes_since_last_index_entry
            self._created_ms = mark.created_ms

    def _note_timestamp(self, header: BatchHeader) -> None:
        if header.max_timestamp > self._max_timestamp:
            self._max_timestamp = header.max_timestamp
            self._offset_of_max_timestamp = header.last_offset

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        """Kafka's rule: index a batch once more than index.interval.bytes were written since the last entry."""
        if (
            self._bytes_since_last_index_entry > self.config.index_interval_bytes
            and not self.is_full()
        ):
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += header.size

    def on_become_inactive(self) -> None:
        """On roll: make the time index's last entry the segment's max timestamp."""
        if self._max_timestamp >= 0 and not self.time_index.is_full():
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)

    # ------------------------------------------------------------------ reading

    def _scan(
        self, position: int, end: int | None = None, file: LogFile | None = None, keep: list[Any] | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Headers of the complete batches in ``[position, end)``: 16 KiB chunks, or single headers
        for large batches. ``file``: the ``.log`` the caller already holds; ``keep``: set to
        ``[start, bytes]`` of each chunk read, for a caller that sends what it found."""
        end = self._size if end is None else end
        file = self._handle() if file is None else file  # held while the generator lives
        fd = file.fileno()
        chunk = b""
        chunk_start = position
        read_size = _SCAN_CHUNK
        while end - position >= BATCH_OVERHEAD:
            rel = position - chunk_start
            if rel + BATCH_OVERHEAD > len(chunk):
                chunk = os.pread(fd, min(read_size, end - position), position)
                chunk_start, rel = position, 0
                if keep is not None:
                    keep[:] = (chunk_start, chunk)
                if len(chunk) < BATCH_OVERHEAD:
                    return
            header = peek_batch_header(chunk, rel)
            if header.batch_length < _MIN_BATCH_LENGTH or position + header.size > end:
                return
            yield position, header
            position += header.size
            # Large batches: fetch just the next header instead of a chunk of payload.
            read_size = BATCH_OVERHEAD if header.size >= _SCAN_CHUNK // 2 else _SCAN_CHUNK

    def _scan_from_index(
        self, offset: int, end: int, file: LogFile | None = None, keep: list[Any] | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Like :meth:`_scan` from the index entry for ``offset``, checking the entry first.

        The batch at the entry's position must be the one the entry names; when it
        is not (an index damaged in a way the load-time checks cannot see without
        reading every entry), the scan starts at position 0 instead: slower, never
        wrong. The next start rebuilds an index that fails its checks.
        """
        indexed_offset, position = self.offset_index.lookup(offset)
        if position == 0:
            yield from self._scan(0, end, file, keep)
            return
        if position >= end:
            return
        batches = self._scan(position, end, file, keep)
        try:
            found = next(batches, None)
        except KafkaError:  # not a batch header at all
            found = None
        if found is not None and found[0] == position and found[1].last_offset == indexed_offset:
            yield found
            yield from batches
            return
        if not self._index_mismatch_logged:
            self._index_mismatch_logged = True
            _log.warning(
                "%s: index entry (offset %d, position %d) does not match the log; "
                "scanning the segment from its start",
                self.offset_index.path,
                indexed_offset,
                position,
            )
        yield from self._scan(0, end, file, keep)

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = True,
        *,
        max_offset: int | None = None,
    ) -> FileRegion | None:
        """Whole batches from the one containing ``start_offset``, within ``max_bytes``.

        Returns None when no batch at or after ``start_offset`` lies below
        ``max_position``; a zero-length region when there is one but it may not be
        returned (larger than ``max_bytes`` without ``min_one_message``, or at or
        past ``max_offset``). With ``min_one_message`` the first batch is whole
        even when larger than ``max_bytes`` (KIP-74).
        """
        end = self._size if max_position is None else min(max_position, self._size)
        file = self._handle()
        first: tuple[int, BatchHeader] | None = None
        region_end = 0
        next_offset = -1
        known = self._read_ends.get(start_offset)
        keep: list[Any] = []
        if known is not None and known <= end:
            batches = self._scan(known, end, file, keep)
        else:
            batches = self._scan_from_index(start_offset, end, file, keep)
        for pos, header in batches:
            if first is None:
                if header.last_offset < start_offset:
                    continue
                first = (pos, header)
                too_big = header.size > max_bytes and not min_one_message
                if too_big or (max_offset is not None and header.base_offset >= max_offset):
                    return FileRegion(file, pos, 0, header.base_offset)
                region_end = pos + header.size
                next_offset = header.last_offset + 1
                continue
            if max_offset is not None and header.base_offset >= max_offset:
                break
            if pos + header.size - first[0] > max_bytes:
                break
            region_end = pos + header.size
            next_offset = header.last_offset + 1
        if first is None:  # every batch below ``end`` ends before ``start_offset``
            self._note_read_end(start_offset, end)
            return None
        self._note_read_end(next_offset, region_end)
        data = None
        if keep:  # the last chunk read holds the whole region (a small read at the tail): keep its bytes
            start, chunk = keep
            if start <= first[0] and region_end <= start + len(chunk):
                data = chunk if (start, len(chunk)) == (first[0], region_end - first[0]) else \
                    chunk[first[0] - start:region_end - start]
        return FileRegion(file, first[0], region_end - first[0], first[1].base_offset, next_offset, data)

    def _note_read_end(self, offset: int, position: int) -> None:
        """Every batch before ``position`` ends below ``offset``: true until the file is cut
        (:meth:`rollback`, :meth:`recover`, which forget these), as appends only add after."""
        ends = self._read_ends
        if len(ends) >= _READ_ENDS and offset not in ends:
            del ends[next(iter(ends))]  # the oldest: a consumer that moved on, or left
        ends[offset] = position

    def batches_from(self, start_offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of the complete batches from the one holding ``start_offset``."""
        _, position = self.offset_index.lookup(start_offset)
        for pos, header in self._scan(position):
            if header.last_offset >= start_offset:
                yield pos, header

    def read_at(self, position: int, size: int) -> bytes:
        """``size`` bytes of the ``.log`` at ``position`` (``os.pread``)."""
        file = self._handle()
        return os.pread(file.fileno(), size, position)

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int = 0
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at/after ``start_offset`` with timestamp ≥ ``timestamp``.

        The time and offset indexes narrow the scan; only the headers are read
        until the first batch whose max timestamp qualifies, which alone is decoded.
        """
        _, indexed_offset = self.time_index.lookup(timestamp)
        for pos, header in self._scan_from_index(max(indexed_offset, start_offset), self._size):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            _, records = decode_batch(os.pread(self._handle().fileno(), header.size, pos))
            for record in records:
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    return record.offset, record.timestamp
        return None

    # ------------------------------------------------------------------ recovery

    def sanity_check(self) -> None:
        """Raise CorruptIndexError when an index is missing, malformed or points past the log."""
        if self._indexes_missing:
            raise CorruptIndexError(f"index files of {self.log_path.name} are missing")
        if self._tail_error is not None:
            raise CorruptIndexError(
                f"{self.log_path.name} cannot be read from its last index entry: {self._tail_error}"
            )
        self.offset_index.sanity_check(self._size, self._next_offset)
        self.time_index.sanity_check(self._size, self._next_offset)

    def _checked_batches(self, position: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """Every batch in ``[position, end)`` checked whole (framing, CRC, counts).

        Raises the batch's KafkaError at the first invalid one. A batch's size is
        bounded by the bytes left in the file, not by ``max.message.bytes``: a
        lowered limit must not cut batches that were valid when appended.
        Memory: windows of 8 MiB; a larger batch is checked 8 MiB at a time, so a
        corrupt length field costs reads, never a large allocation.
        """
        file = self._handle()  # held while the generator lives
        fd = file.fileno()
        window = memoryview(b"")
        window_start = position
        while position < end:
            rel = position - window_start
            if rel + LOG_OVERHEAD > len(window):  # this batch's length is not in the window
                window = memoryview(os.pread(fd, min(_RECOVERY_CHUNK, end - position), position))
                window_start, rel = position, 0
            need = _batch_size_hint(window, rel, end - position)
            if need > _RECOVERY_CHUNK:  # larger than a window: checked in pieces
                header = self._check_large_batch(position, need)
                window, window_start = memoryview(b""), position + need
            else:
                if rel + need > len(window):
                    size = min(_RECOVERY_CHUNK, end - position)
                    window, window_start = memoryview(os.pread(fd, size, position)), position
                    rel = 0
                header = check_batch(
                    window, rel, max_message_bytes=_NO_SIZE_LIMIT, file_position=position, stored=True
                )
            yield position, header
            position += header.size

    def _check_large_batch(self, position: int, size: int) -> BatchHeader:
        """The header and the CRC of one batch of ``size`` bytes, read 8 MiB at a time.

        The CRC covers every byte after it (counts, codec, records), which is what
        recovery must trust; the content rules :func:`check_batch` adds were
        applied when the batch was appended.
        """
        file = self._handle()
        fd = file.fileno()
        header = read_batch_header(os.pread(fd, BATCH_OVERHEAD, position))
        crc = 0
        at, end = position + _CRC_START, position + size
        while at < end:
            chunk = os.pread(fd, min(_RECOVERY_CHUNK, end - at), at)
            if not chunk:
                raise CorruptRecordError(f"incomplete batch at position {position}")
            crc = crc32c(chunk, crc)
            at += len(chunk)
        if crc != header.crc:
            raise CorruptRecordError(f"CRC mismatch: batch at position {position}")
        return header

    def recover(self) -> int:
        """Validate every batch from position 0, rebuild both indexes, cut the log at the first bad batch.

        Returns the number of bytes truncated; :attr:`recovery_error` says why.
        :attr:`recovered_epochs` lists ``(leader epoch, base offset)`` of each batch whose
        epoch is newer than the batch's before it (the log rebuilds its epoch cache from them).
        """
        self.recovered_epochs = []
        self._read_ends.clear()
        self.offset_index.reset()
        self.time_index.reset()
        self._max_timestamp = -1
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_last_index_entry = 0
        self._created_ms = None
        self.recovery_error = None
        file = self._handle()
        fd = file.fileno()
        file_size = os.fstat(fd).st_size
        next_offset = self.base_offset
        good_end = 0
        try:
            for position, header in self._checked_batches(0, file_size):
                if header.base_offset < next_offset:
                    self.recovery_error = (
                        f"batch at position {position} has base offset {header.base_offset}, "
                        f"below the expected {next_offset}"
                    )
                    break
                if self._created_ms is None:
                    self._created_ms = header.max_timestamp if header.max_timestamp > 0 else None
                self._note_timestamp(header)
                self._index_batch(position, header)
                epochs = self.recovered_epochs
                if not epochs or header.partition_leader_epoch > epochs[-1][0]:
                    epochs.append((header.partition_leader_epoch, header.base_offset))
                next_offset = header.next_offset
                good_end = position + header.size
        except KafkaError as exc:
            self.recovery_error = str(exc)
        truncated = file_size - good_end
        if truncated:
            os.ftruncate(fd, good_end)
        self._size = good_end
        self._next_offset = next_offset
        self._indexes_missing = False
        self._tail_error = None
        self.write_error = None
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is at or above ``offset`` (a follower
        truncating to its leader's log); returns the bytes removed. The indexes and the
        timestamps are rebuilt from what is left (:meth:`recover`)."""
        cut = None
        for position, header in self._scan(0):
            if header.last_offset >= offset:
                cut = position
                break
        if cut is None:
            return 0
        removed = self._size - cut
        os.ftruncate(self._handle().fileno(), cut)
        self.recover()
        return removed

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        """fsync the log and its indexes (on the flush thread: through the segment's
        descriptor when it is open, else through one of this call's own)."""
        file = self._file
        if file is None:
            fsync_by_path(lambda: self.log_path)
        else:
            os.fsync(file.fileno())
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Close the descriptors (regions handed out become unusable); not opened again."""
        OPEN_SEGMENTS.forget(self)
        file, self._file = self._file, LogFile.closed_file(self.log_path)
        if file is not None:
            file.close()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def delete(self) -> None:
        """Rename the three files to ``*.deleted``; descriptors stay open for in-flight reads."""
        deleted = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        os.rename(self.log_path, deleted)
        self.log_path = deleted
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))

    def change_suffix(self, old: str, new: str) -> None:
        """Rename the files from ``<name><old>`` to ``<name><new>`` (descriptors stay open):
        the indexes first, the ``.log`` last, so a ``.log`` with the new suffix means
        every file has it (the cleaner's ``.cleaned`` → ``.swap`` → final names)."""
        for index in (self.offset_index, self.time_index, self.txn_index):
            name = index.path.name
            if name.endswith(old):
                index.rename(index.path.with_name(name[: len(name) - len(old)] + new))
        name = self.log_path.name
        if name.endswith(old):
            renamed = self.log_path.with_name(name[: len(name) - len(old)] + new)
            os.rename(self.log_path, renamed)
            self.log_path = renamed

    def remove_files(self) -> None:
        """Close the descriptors and unlink the files (the end of a delayed delete)."""
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self._size}, "
            f"next_offset={self._next_offset})"
        )


def _batch_size_hint(window: memoryview, rel: int, remaining: int) -> int:
    """Bytes needed at ``rel`` to validate one batch: its size when it fits in ``remaining``."""
    if rel + LOG_OVERHEAD > len(window):
        return LOG_OVERHEAD
    (length,) = _INT32.unpack_from(window, rel + 8)
    size = LOG_OVERHEAD + length
    return size if LOG_OVERHEAD < size <= remaining else LOG_OVERHEAD


def _write_all(file: LogFile, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = file.write(view)
        if written is None or written == 0:
            raise OSError(f"could not write to {file.name!r}")
        view = view[written:]
