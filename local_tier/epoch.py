"""LeaderEpochCache: which leader epoch started at which offset, persisted per partition."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from local_tier.checkpoint import read_checkpoint, write_checkpoint

__all__ = ["LEADER_EPOCH_CHECKPOINT", "UNDEFINED_EPOCH_OFFSET", "LeaderEpochCache"]

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH_OFFSET = (-1, -1)

_log = logging.getLogger("strata.local_tier")


class LeaderEpochCache:
    """``(epoch, start_offset)`` entries in the partition dir's ``leader-epoch-checkpoint``.

    Invariants: epochs and start offsets strictly increase. After :meth:`assign`
    the file holds memory's entries (atomic temp + fsync + rename; nothing is written
    when it holds them already); if the write fails (a full disk) it raises OSError
    and neither changes (unless the cache hands its writes on). A
    :class:`~local_tier.log.Log`'s cache, once loaded, hands its
    writes to the log instead (:meth:`write_later`), which writes and fsyncs them on its
    flush thread, in order, and counts no offset of a newer epoch durable before that
    (ADR 0030); the broker's event loop then does no file work for an epoch.
    A file that still holds entries beyond the log end or below
    the log start is safe, because every load truncates the cache to the log again:
    so :meth:`truncate_from_end` changes memory only (the next :meth:`assign` writes
    the file), and :meth:`truncate_from_start` writes when it can and otherwise only
    logs. A restart of a broker whose partitions are idle thus writes no checkpoint:
    the load drops an epoch that starts at the log end, and becoming leader again at
    that epoch finds the file already saying so (it used to cost two fsyncs per
    partition: 10,000 partitions took a minute to start).
    Thread-safety: not thread-safe; mutated only on the broker's event loop thread.
    """

    def __init__(self, path: Path, log_end_offset: Callable[[], int]) -> None:
        self.path = path
        self._log_end_offset = log_end_offset
        self._write_later: Callable[[list[tuple[int, int]], int | None], None] | None = None
        self._entries: list[tuple[int, int]] = [
            (int(epoch), int(start)) for epoch, start in read_checkpoint(path)
        ]
        self._on_disk = list(self._entries)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, -1 when none was assigned."""
        return self._entries[-1][0] if self._entries else -1

    def write_later(self, writer: Callable[[list[tuple[int, int]], int | None], None]) -> None:
        """From now on hand each write's entries to ``writer`` (which must write them, in
        order) instead of writing them here: the file may lag memory until it has. Its second
        argument is the first offset whose epoch the file does not hold yet (None: the write
        only moves the log start), which the owner must not count durable before the write."""
        self._write_later = writer

    def release(self, end_offset: int) -> None:
        """Its log closed: drop the log's callables (they form a reference cycle with it,
        and a frozen cycle is never collected; see :mod:`service.gc_policy`) and answer
        ``end_offset`` for the latest epoch from now on; writes are dropped."""
        self._log_end_offset = lambda: end_offset
        self._write_later = _drop

    @property
    def needs_persist(self) -> bool:
        """Whether memory holds entries the file does not (an epoch assigned without
        ``persist``, a truncation): the next append writes them before its bytes."""
        return self._entries != self._on_disk

    def persist(self) -> None:
        """Write memory's entries to the file now; OSError (a full disk) leaves the file as it was."""
        if self._entries != self._on_disk:
            self._write(self._entries, _first_difference(self._entries, self._on_disk))
            self._on_disk = list(self._entries)

    def assign(self, epoch: int, start_offset: int, *, persist: bool = True) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (ignored unless newer than the latest).

        ``persist=False`` (a partition becoming leader, before any record of the epoch) keeps
        it in memory only: no file write or fsync on the event loop per leadership, which at
        10,000 partitions held the loop long enough to miss heartbeats (Kafka's KAFKA-15046).
        The epoch reaches the file with the first append in it (:meth:`needs_persist`); lost
        in a crash before that, no record carries it, and the next leadership assigns it again."""
        if self._entries:
            latest_epoch = self._entries[-1][0]
            if epoch <= latest_epoch:
                if epoch < latest_epoch:
                    _log.warning(
                        "%s: ignoring epoch %d at offset %d, older than latest epoch %d",
                        self.path.parent.name,
                        epoch,
                        start_offset,
                        latest_epoch,
                    )
                return
        kept = [e for e in self._entries if e[1] < start_offset]
        entries = [*kept, (epoch, start_offset)]
        if persist and entries != self._on_disk:
            self._write(entries, start_offset)
            self._on_disk = entries
        self._entries = entries

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer ``(epoch, end_offset)``.

        The latest epoch ends at the log end offset; an older one ends where the
        next known epoch starts, reported with the largest known epoch ≤ ``epoch``
        (or ``epoch`` itself when it precedes them all). ``(-1, -1)`` for an
        epoch newer than the latest, or an empty cache.
        """
        if not self._entries or epoch > self.latest_epoch:
            return UNDEFINED_EPOCH_OFFSET
        if epoch == self.latest_epoch:
            return epoch, self._log_end_offset()
        floor = epoch
        for known, start in self._entries:
            if known > epoch:
                return floor, start
            floor = known
        raise AssertionError("unreachable: an epoch below the latest has a successor")

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was cut there), in
        memory: the next load drops them again (see the class docstring)."""
        self._entries = [e for e in self._entries if e[1] < end_offset]

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget offsets below ``start_offset``; the epoch covering it now starts there."""
        below = [e for e in self._entries if e[1] <= start_offset]
        if not below or (len(below) == 1 and below[0][1] == start_offset):
            return
        self._entries = [(below[-1][0], start_offset), *self._entries[len(below) :]]
        self._try_persist()

    def _write(self, entries: list[tuple[int, int]], adds_from: int | None) -> None:
        if self._write_later is None:
            write_checkpoint(self.path, entries)
        else:
            self._write_later(list(entries), adds_from)

    def _try_persist(self) -> None:
        """Write after :meth:`truncate_from_start`: no epoch is added (a file that still has
        the older entries is cut to the log start at the next load)."""
        try:
            self._write(self._entries, None)
            self._on_disk = list(self._entries)
        except OSError as exc:
            _log.warning("%s: cannot write %s (%s); it is rewritten at the next change",
                         self.path.parent.name, self.path.name, exc)


def _first_difference(entries: list[tuple[int, int]], on_disk: list[tuple[int, int]]) -> int | None:
    """The start offset of the first entry of ``entries`` the file does not hold as it is
    (None: ``entries`` only lacks some of the file's, which the next load cuts anyway)."""
    for index, entry in enumerate(entries):
        if index >= len(on_disk) or on_disk[index] != entry:
            return entry[1]
    return None


def _drop(_entries: list[tuple[int, int]], _adds_from: int | None) -> None:
    """A closed log's epoch writes: none (its files are closed or gone)."""
