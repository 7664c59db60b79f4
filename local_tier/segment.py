"""LogSegment: one ``<base20>.log`` file with its ``.index``, ``.timeindex`` and ``.txnindex``."""

from __future__ import annotations

import io
import os
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from local_tier.config import LogConfig
from local_tier.errors import CorruptRecordError, KafkaError
from local_tier.index import CorruptIndexError, OffsetIndex, TimeIndex
from local_tier.records import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    BatchHeader,
    check_batch,
    decode_batch,
    iter_batches,
    read_batch_header,
)
from local_tier.txn_index import TransactionIndex

__all__ = ["DELETED_SUFFIX", "FileRegion", "LogSegment", "segment_file_name"]

DELETED_SUFFIX = ".deleted"
_SCAN_CHUNK = 16 * 1024
_RECOVERY_CHUNK = 8 * 1024 * 1024
_MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD
_INT32 = struct.Struct(">i")


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name: the base offset as 20 digits plus ``suffix`` (``.log`` ...)."""
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class FileRegion:
    """A byte range of a segment's ``.log``, ready for ``os.sendfile(file.fileno(), ...)``.

    Holds the segment's open file object: it stays valid after the segment is
    deleted (renamed) until the delayed delete closes it ``file.delete.delay.ms``
    later, so a region must be sent within that delay.
    """

    file: io.FileIO
    position: int
    length: int
    first_offset: int
    #: one past the last offset of the region's batches (its record count is the
    #: difference for dense offsets); -1 when unknown
    next_offset: int = -1

    def read_bytes(self) -> bytes:
        """The region's bytes, via ``os.pread`` (the file position is not used)."""
        chunks: list[bytes] = []
        done = 0
        while done < self.length:
            chunk = os.pread(self.file.fileno(), self.length - done, self.position + done)
            if not chunk:
                break
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)


class LogSegment:
    """One segment of a partition's log.

    Invariants: ``base_offset ≤`` every offset in the segment ``< next_offset``;
    the ``.log`` holds only whole batches in increasing offset order, except for
    a torn tail after a crash, which :meth:`recover` cuts; ``size`` is the file
    length; index entries point at batch starts below ``size``; relative offsets
    fit in int32 and positions in int32.

    Thread-safety: not thread-safe. The owning :class:`~local_tier.log.Log` calls
    everything from the broker's event loop thread, except :meth:`flush`, which
    only fsyncs descriptors and may run on the log manager's flush thread.
    Reads use ``os.pread`` and never move the file position; appends go through an
    ``O_APPEND`` descriptor.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        log_file: io.FileIO,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        *,
        indexes_missing: bool,
        txn_index: TransactionIndex | None = None,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.log_path = directory / segment_file_name(base_offset, ".log")
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index or TransactionIndex(
            directory / segment_file_name(base_offset, ".txnindex")
        )
        self._file = log_file
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

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, config: LogConfig, create: bool = False
    ) -> LogSegment:
        """Open (or with ``create`` make) the segment's three files and load its state."""
        log_path = directory / segment_file_name(base_offset, ".log")
        if not create and not log_path.exists():
            raise FileNotFoundError(log_path)
        index_path = directory / segment_file_name(base_offset, ".index")
        time_path = directory / segment_file_name(base_offset, ".timeindex")
        missing = not index_path.exists() or not time_path.exists()
        log_file = open(log_path, "a+b", buffering=0)  # noqa: SIM115 - owned by the segment
        try:
            offset_index = OffsetIndex(index_path, base_offset, config.segment_index_bytes)
            time_index = TimeIndex(time_path, base_offset, config.segment_index_bytes)
        except BaseException:
            log_file.close()
            raise
        segment = cls(
            directory,
            base_offset,
            config,
            log_file,
            offset_index,
            time_index,
            indexes_missing=missing,
        )
        segment._load_tail()
        return segment

    def _load_tail(self) -> None:
        """Derive next offset, max timestamp and roll time from the indexes plus a short scan."""
        if self._size == 0:
            return
        max_ts, ts_offset = self.time_index.last_entry
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, ts_offset
        _, position = self.offset_index.last_entry
        if position >= self._size:
            position = 0  # the index is corrupt; sanity_check reports it
        try:
            first = read_batch_header(os.pread(self._file.fileno(), BATCH_OVERHEAD, 0))
            self._created_ms = first.max_timestamp if first.max_timestamp > 0 else None
            for pos, header in self._scan(position):
                self._note_timestamp(header)
                self._next_offset = header.next_offset
                self._bytes_since_last_index_entry = pos + header.size - position
        except CorruptRecordError as exc:
            self._tail_error = str(exc)

    # ------------------------------------------------------------------ properties

    @property
    def file(self) -> io.FileIO:
        return self._file

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
        return int(os.fstat(self._file.fileno()).st_mtime * 1000)

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
        """Append whole, already stamped batches with one write; index them sparsely."""
        length = len(records)
        if length == 0:
            return
        position = self._size
        if position == 0:
            self._created_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        interval = self.config.index_interval_bytes
        if self._bytes_since_last_index_entry + length <= interval:
            self._bytes_since_last_index_entry += length
        else:
            for pos, header in iter_batches(records):
                self._note_timestamp(header)
                self._index_batch(position + pos, header)
        _write_all(self._file, records)
        self._size += length
        self._next_offset = largest_offset + 1
        if largest_timestamp > self._max_timestamp:
            self._max_timestamp = largest_timestamp
            self._offset_of_max_timestamp = offset_of_max_timestamp

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

    def _scan(self, position: int, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """Headers of the complete batches in ``[position, end)``: 16 KiB chunks, or single headers for large batches."""
        end = self._size if end is None else end
        fd = self._file.fileno()
        chunk = b""
        chunk_start = position
        read_size = _SCAN_CHUNK
        while end - position >= BATCH_OVERHEAD:
            rel = position - chunk_start
            if rel + BATCH_OVERHEAD > len(chunk):
                chunk = os.pread(fd, min(read_size, end - position), position)
                chunk_start, rel = position, 0
                if len(chunk) < BATCH_OVERHEAD:
                    return
            header = read_batch_header(chunk, rel)
            if header.batch_length < _MIN_BATCH_LENGTH or position + header.size > end:
                return
            yield position, header
            position += header.size
            # Large batches: fetch just the next header instead of a chunk of payload.
            read_size = BATCH_OVERHEAD if header.size >= _SCAN_CHUNK // 2 else _SCAN_CHUNK

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
        _, position = self.offset_index.lookup(start_offset)
        first: tuple[int, BatchHeader] | None = None
        region_end = 0
        next_offset = -1
        for pos, header in self._scan(position, end):
            if first is None:
                if header.last_offset < start_offset:
                    continue
                first = (pos, header)
                too_big = header.size > max_bytes and not min_one_message
                if too_big or (max_offset is not None and header.base_offset >= max_offset):
                    return FileRegion(self._file, pos, 0, header.base_offset)
                region_end = pos + header.size
                next_offset = header.last_offset + 1
                continue
            if max_offset is not None and header.base_offset >= max_offset:
                break
            if pos + header.size - first[0] > max_bytes:
                break
            region_end = pos + header.size
            next_offset = header.last_offset + 1
        if first is None:
            return None
        return FileRegion(self._file, first[0], region_end - first[0], first[1].base_offset, next_offset)

    def batches_from(self, start_offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of the complete batches from the one holding ``start_offset``."""
        _, position = self.offset_index.lookup(start_offset)
        for pos, header in self._scan(position):
            if header.last_offset >= start_offset:
                yield pos, header

    def read_at(self, position: int, size: int) -> bytes:
        """``size`` bytes of the ``.log`` at ``position`` (``os.pread``)."""
        return os.pread(self._file.fileno(), size, position)

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int = 0
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at/after ``start_offset`` with timestamp ≥ ``timestamp``.

        The time and offset indexes narrow the scan; only the headers are read
        until the first batch whose max timestamp qualifies, which alone is decoded.
        """
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, start_offset))
        for pos, header in self._scan(position):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            _, records = decode_batch(os.pread(self._file.fileno(), header.size, pos))
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
        self.offset_index.sanity_check(self._size)
        self.time_index.sanity_check(self._size)

    def recover(self, max_message_bytes: int) -> int:
        """Validate every batch from position 0, rebuild both indexes, cut the log at the first bad batch.

        Returns the number of bytes truncated; :attr:`recovery_error` says why.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._max_timestamp = -1
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_last_index_entry = 0
        self._created_ms = None
        self.recovery_error = None
        fd = self._file.fileno()
        file_size = os.fstat(fd).st_size
        next_offset = self.base_offset
        position = 0
        window = memoryview(b"")
        window_start = 0
        while position < file_size:
            rel = position - window_start
            need = _batch_size_hint(window, rel, max_message_bytes)
            if rel + need > len(window):
                size = min(max(_RECOVERY_CHUNK, need), file_size - position)
                window, window_start, rel = memoryview(os.pread(fd, size, position)), position, 0
            try:
                header = check_batch(
                    window, rel, max_message_bytes=max_message_bytes, file_position=position
                )
            except KafkaError as exc:
                self.recovery_error = str(exc)
                break
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
            next_offset = header.next_offset
            position += header.size
        truncated = file_size - position
        if truncated:
            os.ftruncate(fd, position)
        self._size = position
        self._next_offset = next_offset
        self._indexes_missing = False
        self._tail_error = None
        return truncated

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        """fsync the log and its indexes."""
        os.fsync(self._file.fileno())
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Close the three descriptors (regions handed out become unusable)."""
        self._file.close()
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


def _batch_size_hint(window: memoryview, rel: int, max_message_bytes: int) -> int:
    """Bytes needed at ``rel`` to validate one batch: its size when known and plausible."""
    if rel + LOG_OVERHEAD > len(window):
        return LOG_OVERHEAD
    (length,) = _INT32.unpack_from(window, rel + 8)
    size = LOG_OVERHEAD + length
    return size if LOG_OVERHEAD < size <= max_message_bytes else LOG_OVERHEAD


def _write_all(file: io.FileIO, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = file.write(view)
        if written is None or written == 0:
            raise OSError(f"could not write to {file.name!r}")
        view = view[written:]
