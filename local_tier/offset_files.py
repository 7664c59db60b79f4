"""An offset checkpoint file kept in memory between writes: :class:`OffsetFile`.

The log manager's checkpoints (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint``) hold one line per
log of the directory and are rewritten whole. Each is kept here with the logs whose
entry may have changed since its last write, so a pass over an idle directory reads no
log and writes no file.

Not thread-safe: the log manager's owner (the event loop) only; the writes themselves
run on its flush thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from local_tier.log import Log

__all__ = ["OffsetFile", "TopicPartition", "succeeded"]

TopicPartition = tuple[str, int]


class OffsetFile:
    """One offset checkpoint file as last handed to the flush thread: its entries, the logs
    whose entry may have changed since (fed by :meth:`Log._changed`), and that write.

    A pass reads only those logs, and writes the file only when an entry changed or the last
    write failed: at 10,000 idle partitions the five-second high-watermark checkpoint read
    10,000 logs and wrote and fsynced 10,000 lines to say what the file already said.
    """

    __slots__ = ("dirty", "entries", "name", "offset_of", "unsettled", "written")

    def __init__(self, name: str, offset_of: Callable[[Log], int],
                 unsettled: Callable[[Log], bool] = lambda log: False) -> None:
        self.name = name
        self.offset_of = offset_of
        #: whether a log's offset may still move without another change (a flush in flight):
        #: the log stays dirty for the next pass
        self.unsettled = unsettled
        self.entries: dict[TopicPartition, int] = {}
        self.dirty: set[TopicPartition] = set()
        self.written: Future[bool] | None = None

    def refresh(self, logs: Mapping[TopicPartition, Log]) -> bool:
        """Take the dirty logs' offsets (a log gone leaves the file); whether the file is due:
        an entry changed, or it was never written, or its last write failed."""
        due = self.written is None or (self.written.done() and not succeeded(self.written))
        dirty, self.dirty = self.dirty, set()
        for key in dirty:
            log = logs.get(key)
            if log is None:
                due = self.entries.pop(key, None) is not None or due
                continue
            offset = self.offset_of(log)
            if self.entries.get(key) != offset:
                self.entries[key] = offset
                due = True
            if self.unsettled(log):
                self.dirty.add(key)
        return due


def succeeded(future: Future[bool]) -> bool:
    """Whether a finished write succeeded (not cancelled, no exception, True)."""
    return not future.cancelled() and future.exception() is None and future.result()
