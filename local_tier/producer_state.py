"""Producer state of one partition: idempotence and the transactions it holds open.

As Kafka's ``ProducerStateManager``: for every producer id that wrote to the
partition, the epoch, the coordinator epoch of its last marker, the metadata of
its last :data:`NUM_BATCHES_TO_RETAIN` batches (sequence range and offsets, to
answer a retried batch with its original offsets instead of writing it twice),
and the first offset of its open transaction, if any. The open transactions
give the partition's first unstable offset, and so its last stable offset
(``LSO = min(first unstable offset, high watermark)``).

The state is validated and changed per batch in three steps, so a request that
fails half-way changes nothing: :meth:`ProducerStateManager.prepare_update`
gives a :class:`ProducerAppendInfo` working on a copy of the producer's entry;
its :meth:`~ProducerAppendInfo.append_data_batch` and
:meth:`~ProducerAppendInfo.append_end_txn_marker` validate (raising Kafka's
errors) and record; :meth:`ProducerStateManager.update` installs the result once
the bytes are in the log.

Snapshots (``{offset:020d}.snapshot`` beside the segments; format in
:mod:`local_tier.producer_snapshot`, ADR 0011) hold the state as of an offset:
every batch below it is in the state, none at or above it.

Thread-safety: not thread-safe; the owning :class:`~local_tier.log.Log` calls it
on the broker's event loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from common.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from local_tier.producer_entry import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    ProducerStateEntry,
)
from local_tier.producer_snapshot import (
    SNAPSHOT_SUFFIX,
    CorruptSnapshotError,
    encode_snapshot,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NUM_BATCHES_TO_RETAIN",
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
]


_INT32_MAX = 2**31 - 1

_log = logging.getLogger("strata.local_tier")


class AppendOrigin(Enum):
    """Who appends: a client (full checks), a coordinator (markers, offsets: epochs only),
    or the log itself replaying its own batches at load (no checks)."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker closed: offsets ``first_offset..last_offset`` (the marker)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerAppendInfo:
    """Validates one producer's batches of one append against its state (a working copy)."""

    def __init__(self, partition: str, current: ProducerStateEntry, origin: AppendOrigin) -> None:
        self._partition = partition
        self._origin = origin
        self._current = current
        self.entry = current.copy()
        self.started_txn_first_offsets: list[int] = []

    @property
    def producer_id(self) -> int:
        return self.entry.producer_id

    def _check_epoch(self, epoch: int, offset: int) -> None:
        if epoch < self.entry.producer_epoch and self._origin is not AppendOrigin.REPLICATION:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {self.producer_id} at offset {offset} in "
                f"{self._partition} is below the last seen epoch {self.entry.producer_epoch}"
            )

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        entry, current = self.entry, self._current
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"sequence {first_seq} for the new epoch {epoch} of producer "
                    f"{self.producer_id} in {self._partition} (offset {offset}): a new epoch "
                    f"starts at 0 (current epoch {entry.producer_epoch})"
                )
            return
        if not entry.is_empty:
            last_seq = entry.last_seq
        elif epoch == current.producer_epoch:
            last_seq = current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # No known epoch (every batch of the producer expired or was deleted): any sequence.
        if current.producer_epoch == NO_PRODUCER_EPOCH:
            return
        if not (first_seq == last_seq + 1 or (first_seq == 0 and last_seq == _INT32_MAX)):
            raise OutOfOrderSequenceError(
                f"out of order sequence {first_seq} for producer {self.producer_id} in "
                f"{self._partition} (offset {offset}): the last sequence is {last_seq}"
            )

    def append_data_batch(
        self,
        epoch: int,
        first_seq: int,
        last_seq: int,
        timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        self._check_epoch(epoch, first_offset)
        if self._origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        entry = self.entry
        entry.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, timestamp)
        if entry.current_txn_first_offset is not None and not is_transactional:
            raise InvalidTxnStateError(
                f"producer {self.producer_id} wrote a non-transactional batch at offset "
                f"{first_offset} of {self._partition} while its transaction is open"
            )
        if entry.current_txn_first_offset is None and is_transactional:
            entry.current_txn_first_offset = first_offset
            self.started_txn_first_offsets.append(first_offset)

    def append_end_txn_marker(
        self, epoch: int, coordinator_epoch: int, committed: bool, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        """Close the open transaction (None when none was open: the marker changes no LSO)."""
        self._check_epoch(epoch, offset)
        entry = self.entry
        if entry.coordinator_epoch > coordinator_epoch and self._origin is not AppendOrigin.REPLICATION:
            raise TransactionCoordinatorFencedError(
                f"marker of producer {self.producer_id} at offset {offset} of {self._partition} "
                f"has coordinator epoch {coordinator_epoch}, below the current {entry.coordinator_epoch}"
            )
        completed = None
        if entry.current_txn_first_offset is not None:
            completed = CompletedTxn(self.producer_id, entry.current_txn_first_offset, offset, not committed)
        entry.maybe_update_epoch(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = None
        entry.last_timestamp = timestamp
        return completed


class ProducerStateManager:
    """Every producer's state in one partition, its open transactions and its snapshots.

    Invariant: the state holds every batch below :attr:`map_end_offset` and none
    above; :attr:`ongoing_txns` maps the first offset of each open transaction to
    its producer id; snapshot files in ``dir`` are named by the offset they were
    taken at.
    """

    def __init__(self, dir: Path, partition: str) -> None:
        self.dir = dir
        self._partition = partition
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing_txns: dict[int, int] = {}  # first offset -> producer id
        self.map_end_offset = 0

    # -- queries ----------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None: none open)."""
        return min(self.ongoing_txns) if self.ongoing_txns else None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is done: the oldest other open transaction's start, or past it."""
        others = [first for first, pid in self.ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    # -- changes ----------------------------------------------------------------------

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(self._partition, current, origin)

    def update(self, info: ProducerAppendInfo) -> None:
        self.producers[info.producer_id] = info.entry
        for first in info.started_txn_first_offsets:
            self.ongoing_txns[first] = info.producer_id

    def complete_txn(self, completed: CompletedTxn) -> None:
        if self.ongoing_txns.pop(completed.first_offset, None) is None:
            raise ValueError(f"{self._partition}: completing {completed}, which was never started")

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` with no open transaction; returns how many."""
        expired = [
            pid
            for pid, entry in self.producers.items()
            if entry.current_txn_first_offset is None and now_ms - entry.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def clear(self, offset: int) -> None:
        """Empty state as of ``offset`` (nothing known below it)."""
        self.producers.clear()
        self.ongoing_txns.clear()
        self.map_end_offset = offset

    # -- snapshots --------------------------------------------------------------------

    def has_snapshot_at(self, offset: int) -> bool:
        """Whether a snapshot file at ``offset`` is on disk (the state there follows from the
        log below it, so it needs no rewrite while the log does not move)."""
        return snapshot_path(self.dir, offset).exists()

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files on disk, ascending."""
        offsets = []
        for path in self.dir.glob("*" + SNAPSHOT_SUFFIX):
            stem = path.name[: -len(SNAPSHOT_SUFFIX)]
            if stem.isdigit() and len(stem) == 20:
                offsets.append(int(stem))
        return sorted(offsets)

    def snapshot_bytes(self) -> tuple[int, bytes]:
        """The state as snapshot bytes, with the offset it is as of (:attr:`map_end_offset`)."""
        return self.map_end_offset, encode_snapshot(self.producers.values())

    def take_snapshot(self, *, fsync: bool = True) -> Path:
        """Write the snapshot at :attr:`map_end_offset` now (fsynced unless told not to,
        atomically renamed)."""
        offset, data = self.snapshot_bytes()
        return write_snapshot(self.dir, offset, data, fsync=fsync)

    def load(self, upper: int, *, now_ms: int, expiration_ms: int) -> int:
        """Load the latest readable snapshot at or below ``upper``; returns its offset (-1: none).

        Snapshots above ``upper`` (state the log no longer holds) and unreadable
        ones are deleted. Producers that expired while the broker was down are
        not loaded (as Kafka). The caller replays the log from the returned offset.
        """
        self.clear(0)
        for offset in reversed(self.snapshot_offsets()):
            path = snapshot_path(self.dir, offset)
            if offset > upper:
                path.unlink(missing_ok=True)
                continue
            try:
                entries = read_snapshot(path)
            except CorruptSnapshotError as exc:
                _log.warning("%s: deleting unreadable producer snapshot %s: %s", self._partition, path.name, exc)
                path.unlink(missing_ok=True)
                continue
            self._load_entries(entries, now_ms, expiration_ms)
            self.map_end_offset = offset
            return offset
        return -1

    def _load_entries(self, entries: Iterable[ProducerStateEntry], now_ms: int, expiration_ms: int) -> None:
        for entry in entries:
            if entry.current_txn_first_offset is None and now_ms - entry.last_timestamp >= expiration_ms:
                continue
            self.producers[entry.producer_id] = entry
            if entry.current_txn_first_offset is not None:
                self.ongoing_txns[entry.current_txn_first_offset] = entry.producer_id

    def delete_snapshots_below(self, offset: int) -> int:
        """Remove snapshot files taken below ``offset`` (the log start); returns how many."""
        removed = 0
        for snap in self.snapshot_offsets():
            if snap < offset:
                snapshot_path(self.dir, snap).unlink(missing_ok=True)
                removed += 1
        return removed
