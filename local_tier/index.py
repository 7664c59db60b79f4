"""Kafka's sparse segment indexes: ``<base20>.index`` (OffsetIndex) and ``<base20>.timeindex`` (TimeIndex).

On disk, exactly Kafka's formats (big-endian):

* OffsetIndex entry, 8 bytes: ``relative_offset int32 | position int32``; the
  offset is the *last* offset of the batch that starts at ``position``.
* TimeIndex entry, 12 bytes: ``timestamp int64 | relative_offset int32``; the max
  timestamp seen so far in the segment and the offset holding it.

Unlike Kafka, the files are neither memory-mapped nor preallocated: entries live
in memory (two ``array('q')`` columns, searched with ``bisect``) and each new
entry is appended to the file with one ``os.write``. An index is therefore always
exactly ``entries * entry_size`` bytes long, and nothing needs trimming on roll.
The segment decides when to add an entry (every ``index.interval.bytes``).

An index holds no file descriptor while nothing is written to it: the file is read
whole at open and closed, and a descriptor is opened for the first write after. The
descriptors the event loop writes through are bounded (:data:`OPEN_INDEXES`, an LRU:
the least recently written index's descriptor is closed when a new one would pass
the bound), so a broker of 10,000 idle partitions holds one descriptor per partition
(its active segment's ``.log``), not three (issue 33). An fsync (:meth:`_Index.flush`,
on the flush thread) opens the file by its path for itself: it never shares a
descriptor the loop may close.

Nothing read from an index file is trusted: a file larger than
``segment.index.bytes`` is not read (it is reported corrupt), and
:meth:`OffsetIndex.sanity_check` / :meth:`TimeIndex.sanity_check` bound every
value against the log before the segment uses the index; a failed check makes
the segment rebuild both indexes from its ``.log``. An entry is appended whole
or not at all: a short write (a full disk) is cut back off the file.
"""

from __future__ import annotations

import errno
import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from local_tier.descriptors import DescriptorTable, default_limit, fsync_by_path

__all__ = ["OPEN_INDEXES", "CorruptIndexError", "OffsetIndex", "TimeIndex"]

_INT32_MAX = 2**31 - 1


class CorruptIndexError(Exception):
    """An index file fails its sanity check; the segment rebuilds it from the log."""


#: the bound on the event loop's open index descriptors (see the module docstring)
OPEN_INDEXES = DescriptorTable(default_limit(8, 4096))


class _Index:
    """An append-only file of fixed-size ``(key, value)`` entries mirrored in memory.

    Invariants: the file holds ``len(self)`` whole entries (plus any torn bytes
    found at load, which :meth:`sanity_check` reports); keys are increasing.
    Thread-safety: not thread-safe; owned by one :class:`LogSegment`. ``flush``
    may run on the flush thread because it only calls ``os.fsync`` on the fd.
    """

    _ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self._ENTRY.size)
        self._keys = array("q")
        self._values = array("q")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self._file_size = os.fstat(fd).st_size
            self._oversized = self._file_size > self.max_entries * self._ENTRY.size
            data = b"" if self._oversized else _read_all(fd, self._file_size)
        finally:
            os.close(fd)
        self._fd = -1  # opened by the first write (:meth:`_writable`)
        whole = len(data) - len(data) % self._ENTRY.size
        for key, value in self._ENTRY.iter_unpack(data[:whole]):
            self._keys.append(key)
            self._values.append(value)

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def entries(self) -> int:
        return len(self._keys)

    @property
    def size_in_bytes(self) -> int:
        return self._file_size

    def is_full(self) -> bool:
        """True when ``segment.index.bytes`` worth of entries are present."""
        return len(self._keys) >= self.max_entries

    def _append(self, key: int, value: int) -> None:
        """Write one whole entry; on a failed or short write, cut the file back and raise OSError."""
        if self.is_full():
            raise ValueError(f"index {self.path.name} is full ({self.max_entries} entries)")
        entry = self._ENTRY.pack(key, value)
        fd = self._writable()
        try:
            written = os.write(fd, entry)
            if written != len(entry):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        except OSError:
            os.ftruncate(fd, self._file_size)
            raise
        self._keys.append(key)
        self._values.append(value)
        self._file_size += self._ENTRY.size

    def truncate_entries(self, count: int) -> None:
        """Keep only the first ``count`` entries (in memory and in the file)."""
        del self._keys[count:]
        del self._values[count:]
        self._file_size = count * self._ENTRY.size
        self._oversized = False
        os.ftruncate(self._writable(), self._file_size)

    def reset(self) -> None:
        """Remove every entry (before a rebuild)."""
        self.truncate_entries(0)

    def _check_file(self) -> None:
        if self._oversized:
            raise CorruptIndexError(
                f"index file {self.path.name} has size {self._file_size}, more than "
                f"segment.index.bytes allows ({self.max_entries} entries)"
            )
        if self._file_size % self._ENTRY.size:
            raise CorruptIndexError(
                f"index file {self.path.name} has size {self._file_size}, "
                f"not a multiple of the entry size {self._ENTRY.size}"
            )

    def _writable(self) -> int:
        """The descriptor to write through, opened when closed (counted in :data:`OPEN_INDEXES`)."""
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        OPEN_INDEXES.opened(self)
        return self._fd

    def release_descriptor(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def flush(self) -> None:
        """fsync the file through a descriptor of this call's own (it runs on the flush thread,
        and the loop may close its descriptor meanwhile); a file renamed meanwhile is found
        at its new path, one deleted meanwhile needs nothing."""
        fsync_by_path(lambda: self.path)

    def close(self) -> None:
        OPEN_INDEXES.forget(self)
        self.release_descriptor()

    def rename(self, path: Path) -> None:
        """Rename the file (the descriptor stays valid)."""
        os.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        """Close and unlink the file."""
        self.close()
        self.path.unlink(missing_ok=True)


class OffsetIndex(_Index):
    """Maps offsets to byte positions in the segment's ``.log``.

    Invariants: ``base_offset ≤`` every entry's offset ``≤ base_offset + 2**31 - 1``;
    offsets and positions strictly increase. Thread-safety: see :class:`_Index`.
    """

    _ENTRY = struct.Struct(">ii")

    def append(self, offset: int, position: int) -> None:
        """Add an entry; ``offset`` must exceed the last one."""
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise ValueError(f"offset {offset} does not fit index {self.path.name}")
        if self._keys and relative <= self._keys[-1]:
            raise ValueError(
                f"offset {offset} is not larger than the last indexed offset "
                f"{self._keys[-1] + self.base_offset} in {self.path.name}"
            )
        self._append(relative, position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the largest entry with offset ≤ target, else ``(base_offset, 0)``."""
        slot = bisect_right(self._keys, target_offset - self.base_offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[slot], self._values[slot]

    @property
    def last_entry(self) -> tuple[int, int]:
        if not self._keys:
            return self.base_offset, 0
        return self.base_offset + self._keys[-1], self._values[-1]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is ≥ ``offset``."""
        self.truncate_entries(bisect_right(self._keys, offset - self.base_offset - 1))

    def sanity_check(self, log_size: int | None = None, next_offset: int | None = None) -> None:
        """Raise CorruptIndexError unless entries are monotonic and inside the log.

        Inside the log: positions in ``[0, log_size)`` and offsets in
        ``[base_offset, next_offset)`` (when given).
        """
        self._check_file()
        keys, positions = self._keys, self._values
        if keys and (keys[0] < 0 or positions[0] < 0):
            raise CorruptIndexError(
                f"index {self.path.name} has a negative relative offset or position"
            )
        for i in range(1, len(keys)):
            if keys[i] <= keys[i - 1] or positions[i] <= positions[i - 1]:
                raise CorruptIndexError(
                    f"index {self.path.name} is not monotonic at entry {i}: "
                    f"({keys[i - 1]}, {positions[i - 1]}) then ({keys[i]}, {positions[i]})"
                )
        if log_size is not None and positions and positions[-1] >= log_size:
            raise CorruptIndexError(
                f"index {self.path.name} points at position {positions[-1]} "
                f"beyond the log size {log_size}"
            )
        if next_offset is not None and keys and self.base_offset + keys[-1] >= next_offset:
            raise CorruptIndexError(
                f"index {self.path.name} names offset {self.base_offset + keys[-1]}, "
                f"beyond the segment's last offset {next_offset - 1}"
            )


class TimeIndex(_Index):
    """Maps timestamps to offsets: entry (T, O) means max timestamp T was first reached at O.

    Invariants: timestamps strictly increase, offsets never decrease, every
    offset ≥ ``base_offset``. Thread-safety: see :class:`_Index`.
    """

    _ENTRY = struct.Struct(">qi")

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` if the timestamp exceeds the last entry's (Kafka's rule)."""
        if self._keys and timestamp <= self._keys[-1]:
            return
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise ValueError(f"offset {offset} does not fit index {self.path.name}")
        if self._values and relative < self._values[-1]:
            raise ValueError(f"offset {offset} goes backwards in {self.path.name}")
        self._append(timestamp, relative)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the largest entry with timestamp ≤ ``timestamp``.

        ``(-1, base_offset)`` when there is none.
        """
        slot = bisect_right(self._keys, timestamp) - 1
        if slot < 0:
            return -1, self.base_offset
        return self._keys[slot], self.base_offset + self._values[slot]

    @property
    def last_entry(self) -> tuple[int, int]:
        if not self._keys:
            return -1, self.base_offset
        return self._keys[-1], self.base_offset + self._values[-1]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is ≥ ``offset``."""
        self.truncate_entries(bisect_left(self._values, offset - self.base_offset))

    def sanity_check(self, log_size: int | None = None, next_offset: int | None = None) -> None:
        """Raise CorruptIndexError unless timestamps increase, offsets never decrease and
        every offset lies in ``[base_offset, next_offset)`` (when given)."""
        self._check_file()
        stamps, offsets = self._keys, self._values
        if offsets and offsets[0] < 0:
            raise CorruptIndexError(f"time index {self.path.name} has a negative relative offset")
        for i in range(1, len(stamps)):
            if stamps[i] <= stamps[i - 1] or offsets[i] < offsets[i - 1]:
                raise CorruptIndexError(
                    f"time index {self.path.name} is not monotonic at entry {i}"
                )
        if log_size == 0 and stamps:
            raise CorruptIndexError(f"time index {self.path.name} has entries for an empty log")
        if next_offset is not None and offsets and self.base_offset + offsets[-1] >= next_offset:
            raise CorruptIndexError(
                f"time index {self.path.name} names offset {self.base_offset + offsets[-1]}, "
                f"beyond the segment's last offset {next_offset - 1}"
            )


def _read_all(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    pos = 0
    while pos < size:
        chunk = os.pread(fd, size - pos, pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks)
