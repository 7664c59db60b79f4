"""The exclusive lock on a broker's data directory: Kafka's ``.lock`` file.

Two brokers on one data directory would append to the same segments, delete
each other's files and hand out the same offsets twice. ``strata up`` therefore
takes :class:`DataDirLock` on ``<data-dir>/.lock`` before it opens or creates
anything else there, and holds it for the life of the process.

The lock is ``fcntl.flock(LOCK_EX | LOCK_NB)`` on that file: the kernel drops it
when the process ends, however it ends (``kill -9`` included), so a ``.lock``
left behind never blocks the next start; only a live holder does. The file
holds the holder's pid, written after the lock is taken, for the message the
next process prints (best effort: a full disk leaves it empty). See
``docs/adr/0007-full-disk-and-data-dir-lock.md``.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["LOCK_FILE", "DataDirError", "DataDirInUseError", "DataDirLock"]

LOCK_FILE = ".lock"
_PID_BYTES = 32


class DataDirError(Exception):
    """The data directory cannot be locked (the message says why and what to do)."""


class DataDirInUseError(DataDirError):
    """Another live process holds the data directory's lock."""


class DataDirLock:
    """An exclusive, process-wide lock on one data directory, held until :meth:`release`.

    Thread-safety: acquire and release from one thread; the lock belongs to the
    process (its open file description), not to a thread.
    """

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self.path = directory / LOCK_FILE
        self._fd = fd

    @classmethod
    def acquire(cls, directory: Path) -> DataDirLock:
        """Create ``directory`` if needed and lock it.

        Raises DataDirInUseError when another process holds the lock, DataDirError
        for anything else in the way (a path that is not a directory, no permission).
        """
        directory = Path(directory).absolute()
        path = directory / LOCK_FILE
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DataDirError(f"cannot use the data directory {directory}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, _PID_BYTES, 0).decode("ascii", "replace").strip()
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DataDirError(f"cannot lock the data directory {directory}: {exc}") from exc
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise DataDirInUseError(
                f"the data directory {directory} is in use: {who} holds its lock {path}. "
                "Two brokers on one data directory would corrupt each other's logs. "
                "Stop the other broker first, or give this one its own --data-dir."
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid only improves the message; the lock is what counts
        return cls(directory, fd)

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        """Drop the lock (idempotent). The file stays, as Kafka's does."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
