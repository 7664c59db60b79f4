"""A log directory that failed: :class:`LogDirFailure` (Kafka's ``LogDirFailureChannel``).

After an fsync fails, the kernel may already have dropped the dirty pages it could
not write (and marked them clean), so a later fsync that succeeds proves nothing
about the data appended before it. Kafka's answer, and this one: the first failed
fsync, or a failed write of a log's files, takes the whole log directory offline
for the life of the process. Its partitions answer KAFKA_STORAGE_ERROR, nothing
more is written or fsynced there (the recovery points stop where the last good
fsync left them), and the shutdown leaves no clean-shutdown marker, so the next
start recovers every log from its last recovery point (ADR 0007).

A full disk is not such a failure: a ``write`` answered ENOSPC or EDQUOT wrote
nothing the log keeps (the writers undo their partial work) and the same
partition takes appends again once space is free. An fsync that fails is a
failure whatever its errno: on a thin or loop-backed device a full backing store
makes fsync answer ENOSPC first, then EIO, with the pages gone either way.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from common.errors import KafkaStorageError

__all__ = ["LogDirFailure", "is_disk_full"]

_log = logging.getLogger("strata.local_tier")
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(exc: OSError) -> bool:
    """A write refused for want of space (recoverable), not a failing device."""
    return exc.errno in _DISK_FULL


class LogDirFailure:
    """Whether one log directory is offline, and why.

    Thread-safe: :meth:`fail` runs on the flush thread or the event loop; the
    listeners are called on the thread that failed, once.
    """

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._listeners: list[Callable[[str], None]] = []

    @property
    def offline(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        return self._reason

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(reason)`` when the directory goes offline (now, if it already is)."""
        with self._lock:
            self._listeners.append(listener)
            reason = self._reason
        if reason is not None:
            listener(reason)

    def fail(self, what: str, exc: BaseException) -> None:
        """Take the directory offline because ``what`` failed with ``exc`` (idempotent)."""
        reason = f"{what} failed: {exc}"
        with self._lock:
            if self._reason is not None:
                return
            self._reason = reason
            listeners = list(self._listeners)
        _log.error("log directory %s is offline: %s; its partitions answer KAFKA_STORAGE_ERROR "
                   "and the next start recovers them", self.log_dir, reason)
        for listener in listeners:
            try:
                listener(reason)
            except Exception:  # noqa: BLE001 - one listener must not keep the others uninformed
                _log.exception("log directory failure listener failed")

    def check(self, name: str) -> None:
        """KafkaStorageError when the directory is offline (``name``: the partition asked for)."""
        reason = self._reason
        if reason is not None:
            raise KafkaStorageError(
                f"partition {name} is offline on this broker: its log directory failed ({reason})"
            )
