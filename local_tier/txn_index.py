"""The transaction index (``.txnindex``): the aborted transactions of one segment.

Kafka's format: fixed 34-byte entries, big-endian, in the order the ABORT markers
were appended::

    version int16 (0)  producer_id int64  first_offset int64  last_offset int64
    last_stable_offset int64

An entry lives in the segment holding its ABORT marker (``last_offset``); its
data may start in earlier segments (``first_offset``). ``last_stable_offset`` is
the partition's LSO once the transaction was complete: a reader collecting the
aborted transactions of a fetch range may stop at the first entry whose LSO is
at or past the range's end (nothing later can overlap it).

The file is created on the first entry (most segments have none). Entries are
decoded by :func:`decode_aborted`, also used for the copies in the bucket.

Thread-safety: not thread-safe; the owning segment's log calls it on the event
loop thread, except :meth:`TransactionIndex.flush` (the flush thread).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ENTRY_SIZE",
    "AbortedTxn",
    "TransactionIndex",
    "TxnSearch",
    "collect_aborted",
    "decode_aborted",
]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


def decode_aborted(data: bytes | bytearray | memoryview) -> list[AbortedTxn]:
    """Entries of a ``.txnindex``; a torn last entry (crash) is ignored, other versions skipped."""
    out = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version == _VERSION:
            out.append(AbortedTxn(pid, first, last, lso))
    return out


@dataclass(slots=True)
class TxnSearch:
    """Aborted transactions overlapping ``[fetch_offset, upper_bound)``, gathered segment by segment."""

    fetch_offset: int
    upper_bound: int
    found: list[AbortedTxn]
    complete: bool = False

    def add(self, entries: Iterable[AbortedTxn]) -> None:
        """Take the overlapping entries of one segment (segments in offset order)."""
        for txn in entries:
            if txn.last_offset >= self.fetch_offset and txn.first_offset < self.upper_bound:
                self.found.append(txn)
            if txn.last_stable_offset >= self.upper_bound:
                self.complete = True
                return


def collect_aborted(
    segments: Sequence[Sequence[AbortedTxn]], fetch_offset: int, upper_bound: int
) -> list[AbortedTxn]:
    """Aborted transactions of ``[fetch_offset, upper_bound)`` from the indexes of the
    segments from the one holding ``fetch_offset`` onwards, in order."""
    search = TxnSearch(fetch_offset, upper_bound, [])
    for entries in segments:
        search.add(entries)
        if search.complete:
            break
    return search.found


class TransactionIndex:
    """One segment's ``.txnindex``; entries kept in memory, appended to the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self.entries: list[AbortedTxn] = []
        if path.exists():
            data = path.read_bytes()
            self.entries = decode_aborted(data)
            whole = len(data) - len(data) % ENTRY_SIZE
            if whole != len(data):
                os.truncate(path, whole)  # a torn entry from a crash

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def append(self, txn: AbortedTxn) -> None:
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            raise ValueError(
                f"{self.path.name}: aborted transaction ending at {txn.last_offset} does not "
                f"follow the last one ({self.entries[-1].last_offset})"
            )
        data = txn.encode()
        fd = self._open()
        if os.write(fd, data) != len(data):
            raise OSError(f"short write to {self.path}")
        self.entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (recovery, truncation)."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) == len(self.entries):
            return
        self.entries = keep
        if self.path.exists():
            os.truncate(self.path, len(keep) * ENTRY_SIZE)

    def flush(self) -> None:
        fd = self._fd
        if fd is not None:
            os.fsync(fd)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
