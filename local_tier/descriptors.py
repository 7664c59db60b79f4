"""Bounded file descriptors: a partition holds none while it is idle (issue 33).

A broker of 20,000 partitions cannot keep every segment's ``.log`` and indexes open:
a process's descriptor limit is often a few thousand, and here 20,000. Segments and
indexes open their files on use instead, and the event loop's open descriptors are
kept under a bound, least recently used closed first (:class:`DescriptorTable`:
:data:`OPEN_SEGMENTS` for ``.log`` files, ``index.OPEN_INDEXES`` for indexes).

A segment's ``.log`` is shared with the reads in flight: a
:class:`~local_tier.segment.FileRegion` a response will send holds the segment's
:class:`LogFile`. The bound therefore only *drops the segment's hold*
(:meth:`LogFile` closes itself when its last holder lets go), so a send, an fsync on
the flush thread or a snapshot of group offsets never finds its descriptor closed or,
worse, reused by another open. Closing a segment (deleted, moved) still closes its
file at once, as before.
"""

from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

__all__ = ["OPEN_SEGMENTS", "DescriptorTable", "LogFile", "default_limit", "fsync_by_path"]


class Holder(Protocol):
    def release_descriptor(self) -> None:
        """Close (or let go of) the descriptor; the next use opens the file again."""


def default_limit(share: int, ceiling: int) -> int:
    """``1/share`` of this process's open-file limit, at least 16 and at most ``ceiling``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return ceiling if soft == resource.RLIM_INFINITY else max(16, min(ceiling, soft // share))


def fsync_by_path(path_now: Callable[[], Path]) -> None:
    """fsync a file through a descriptor of this call's own (on the flush thread: the loop may
    close or let go of its descriptor meanwhile). ``path_now`` reads the file's current path:
    a file renamed meanwhile (deleted, cleaned) is found at its new one; one deleted meanwhile
    needs nothing."""
    for _ in range(2):
        path = path_now()
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            if path_now() != path:
                continue  # renamed between reading the path and opening it
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return


class DescriptorTable:
    """The holders of descriptors used on one thread (the event loop, which owns the logs;
    :meth:`bind`), at most :attr:`limit`, least recently used released first.

    Files used on other threads (a cleaner's new segment, a split, an fsync) are not
    counted: their users close them, and no thread ever closes a descriptor another
    thread may be using. The table is guarded by a lock held for dictionary operations
    only."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.closed_for_room = 0  # descriptors released to stay under the limit
        self._owner: int | None = None
        self._lock = threading.Lock()
        self._lru: OrderedDict[Holder, None] = OrderedDict()

    def bind(self) -> None:
        """Count the files used on the calling thread from now on (the broker's loop)."""
        self._owner = threading.get_ident()

    def __len__(self) -> int:
        return len(self._lru)

    def opened(self, holder: Holder) -> None:
        """``holder`` (now with a descriptor) was used: the most recent; may release others'."""
        if threading.get_ident() != self._owner:
            return
        victims: list[Holder] = []
        with self._lock:
            self._lru[holder] = None
            self._lru.move_to_end(holder)
            while len(self._lru) > self.limit:
                victim, _ = self._lru.popitem(last=False)
                victims.append(victim)
        for victim in victims:  # loop-owned, like ``holder``
            self.closed_for_room += 1
            victim.release_descriptor()

    def forget(self, holder: Holder) -> None:
        with self._lock:
            self._lru.pop(holder, None)


class LogFile:
    """One open descriptor of a segment's ``.log`` (read with ``pread``, written in append
    mode), shared by the segment and the reads in flight; closed by :meth:`close` or when
    its last holder drops it. ``fileno()`` of a closed one raises ValueError, as a closed
    ``io.FileIO`` does."""

    __slots__ = ("_fd", "name")

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.name = str(path)
        self._fd = -1
        # never created on a reopen: a file unlinked meanwhile is not brought back empty
        self._fd = os.open(path, os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0), 0o644)

    @classmethod
    def closed_file(cls, path: Path) -> LogFile:
        file = cls.__new__(cls)
        file.name, file._fd = str(path), -1
        return file

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError(f"I/O operation on closed file {self.name}")
        return self._fd

    def write(self, data: bytes | bytearray | memoryview) -> int:
        return os.write(self.fileno(), data)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LogFile({self.name!r}, fd={self._fd})"


#: the bound on the event loop's open segment ``.log`` descriptors
OPEN_SEGMENTS = DescriptorTable(default_limit(4, 8192))
