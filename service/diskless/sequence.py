"""One diskless partition's sequence, as its sequencer keeps it: :class:`PartitionSequence`.

ADR 0027, section 4. A writer that has put a write-ahead object in the bucket proposes
each batch of it (:class:`Proposal`); the sequence checks the proposal and assigns it the
next offsets at once (:meth:`PartitionSequence.accept`), but the offsets count only once
the commit object holding them is in the bucket: accepted entries are *pending* until the
group committer takes them (:meth:`take_pending`) and reports the slot written
(:meth:`made_durable`). When a write fails, everything not durable is dropped and the
state is rebuilt from the durable entries (:meth:`roll_back`): offsets stay dense, and the
writers, answered with an error, propose again.

The checks, in Kafka's order: the leader epoch the writer saw; no transactional batch
(ADR 0027, section 9); the same object and position committed before (a writer whose
answer was lost, perhaps now proposing to a new sequencer: the first offsets, not twice);
the producer's epoch and sequence against the partition's producer state
(:class:`~local_tier.producer_state.ProducerStateManager`, the same rules as a classic
log's, so idempotence holds whichever broker each retry reached; a duplicate gets the
offsets of its first commit).

A new sequencer builds the sequence from the commit chain it reads
(:meth:`PartitionSequence.resume`). Not thread-safe: the sequencer's event loop owns it.
"""

from __future__ import annotations

import uuid
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from common.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidTxnStateError,
    UnknownLeaderEpochError,
)
from local_tier.producer_entry import ProducerStateEntry, increment_sequence
from local_tier.producer_state import AppendOrigin, ProducerStateManager
from remote_tier.diskless.commits import CommitEntry

__all__ = ["PartitionSequence", "Proposal", "count_producer", "producer_state"]

_Location = tuple[str, int]  # object key, position


@dataclass(frozen=True, slots=True)
class Proposal:
    """One batch a writer asks the sequencer to commit (what its header and its place in a
    write-ahead object say)."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int  # the sequencer's epoch as the writer knows it
    object_key: str
    position: int
    size: int
    record_count: int
    max_timestamp: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    is_transactional: bool = False


def count_producer(producers: ProducerStateManager, entry: CommitEntry,
                   origin: AppendOrigin = AppendOrigin.REPLICATION) -> None:
    """Add ``entry``'s batch to its producer's state (checked first when ``origin`` is a
    client's: raises before changing anything); nothing for a batch without a producer id."""
    if entry.producer_id < 0:
        return
    info = producers.prepare_update(entry.producer_id, origin)
    info.append_data_batch(entry.producer_epoch, entry.base_sequence,
                           increment_sequence(entry.base_sequence, entry.record_count - 1),
                           entry.max_timestamp, entry.base_offset, entry.last_offset, False)
    producers.update(info)


def producer_state(directory: Path, name: str, base: Iterable[ProducerStateEntry]) -> ProducerStateManager:
    """A producer state starting from copies of ``base`` (snapshots go in ``directory``)."""
    producers = ProducerStateManager(directory, name)
    for entry in base:
        producers.producers[entry.producer_id] = entry.copy()
    return producers


class PartitionSequence:
    """The committed and pending entries of one partition since its last merge (see the
    module docstring)."""

    def __init__(self, topic_id: uuid.UUID, partition: int, leader_epoch: int, start_offset: int,
                 producers: Iterable[ProducerStateEntry] = ()) -> None:
        self.topic_id = topic_id
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.name = f"{topic_id}-{partition}"
        #: the first offset not merged, and the producers as they were there
        self.start_offset = start_offset
        self._base_producers = [entry.copy() for entry in producers]
        self.durable: list[CommitEntry] = []
        self.pending: list[CommitEntry] = []  # accepted, not yet taken by the committer
        self.in_flight: list[CommitEntry] = []  # taken, their slot not yet written
        #: no longer sequenced here (its sequencer resigned it): nothing more of it is written
        #: or acknowledged, even a slot already in flight (ADR 0027, section 4)
        self.resigned = False
        self._rebuild()

    @classmethod
    def resume(cls, topic_id: uuid.UUID, partition: int, leader_epoch: int, start_offset: int,
               producers: Iterable[ProducerStateEntry], committed: Iterable[CommitEntry]) -> PartitionSequence:
        """The sequence a new sequencer (``leader_epoch``) takes over: the producers at the
        last merge and the partition's entries read from the previous chain, in order."""
        sequence = cls(topic_id, partition, leader_epoch, start_offset, producers)
        expected = start_offset
        for entry in committed:
            if entry.topic_id != topic_id or entry.partition != partition:
                continue
            if entry.base_offset != expected:
                raise ValueError(f"{sequence.name}: a committed entry at offset {entry.base_offset} "
                                 f"does not follow offset {expected - 1}")
            sequence.durable.append(entry)
            expected = entry.last_offset + 1
        sequence._rebuild()
        return sequence

    # -- what the committed state is ------------------------------------------------------

    @property
    def base_producers(self) -> list[ProducerStateEntry]:
        """The producer state at :attr:`start_offset` (the last merge's)."""
        return self._base_producers

    @property
    def committed_end(self) -> int:
        """The offset after the last durable entry: the partition's high watermark."""
        return self.durable[-1].last_offset + 1 if self.durable else self.start_offset

    # -- proposals -------------------------------------------------------------------------

    def accept(self, proposal: Proposal) -> CommitEntry:
        """The entry of ``proposal``: a new pending one with the next offsets, or the entry
        it duplicates (durable or not); Kafka's errors for a stale or unknown leader epoch,
        a transactional batch, a fenced producer epoch or a sequence out of order."""
        if proposal.leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"{self.name}: leader epoch {proposal.leader_epoch} is "
                                         f"older than the sequencer's {self.leader_epoch}")
        if proposal.leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(f"{self.name}: leader epoch {proposal.leader_epoch} is "
                                          f"newer than the sequencer's {self.leader_epoch}")
        if proposal.is_transactional:
            raise InvalidTxnStateError("transactions are not supported on diskless topics (issue 35)")
        if proposal.record_count < 1 or proposal.size < 1 or proposal.position < 0:
            raise CorruptRecordError(f"{self.name}: a proposal of {proposal.record_count} records, "
                                     f"{proposal.size} bytes at position {proposal.position} describes no batch")
        known = self._by_location.get((proposal.object_key, proposal.position))
        if known is not None:
            return known
        pid = proposal.producer_id
        if pid >= 0:
            last_seq = increment_sequence(proposal.base_sequence, proposal.record_count - 1)
            current = self._producers.last_entry(pid)
            duplicate = current.find_duplicate(proposal.producer_epoch, proposal.base_sequence, last_seq) \
                if current is not None else None
            if duplicate is not None:
                found = self._by_last_offset.get(duplicate.last_offset)
                if found is not None:
                    return found
                # merged already (known from the segment's producer snapshot): its offsets
                return CommitEntry(self.topic_id, self.partition, self.leader_epoch, duplicate.first_offset,
                                   duplicate.last_offset - duplicate.first_offset + 1, proposal.object_key,
                                   proposal.position, proposal.size, duplicate.timestamp, pid,
                                   proposal.producer_epoch, proposal.base_sequence)
        entry = CommitEntry(self.topic_id, self.partition, self.leader_epoch, self.next_offset,
                            proposal.record_count, proposal.object_key, proposal.position, proposal.size,
                            proposal.max_timestamp, pid, proposal.producer_epoch, proposal.base_sequence)
        self._install(entry, AppendOrigin.CLIENT)
        self.pending.append(entry)
        return entry

    def _install(self, entry: CommitEntry, origin: AppendOrigin) -> None:
        """Count ``entry`` in the producer state and the lookups; a client's entry is checked
        first (raises before changing anything), a committed one replayed as it is."""
        count_producer(self._producers, entry, origin)
        self._by_location[(entry.object_key, entry.position)] = entry
        self._by_last_offset[entry.last_offset] = entry
        self.next_offset = entry.last_offset + 1

    # -- the committer's side --------------------------------------------------------------

    def take_pending(self) -> list[CommitEntry]:
        """The pending entries, now in flight (the committer writes them in its next slot)."""
        taken, self.pending = self.pending, []
        self.in_flight.extend(taken)
        return taken

    def made_durable(self, entries: list[CommitEntry]) -> None:
        """The slot holding ``entries`` (the oldest in flight) is in the bucket."""
        if self.in_flight[:len(entries)] != entries:
            raise ValueError(f"{self.name}: entries made durable out of order")
        del self.in_flight[:len(entries)]
        self.durable.extend(entries)

    def roll_back(self) -> list[CommitEntry]:
        """A slot write failed: forget every entry not durable (returned; their writers are
        answered with an error) and rebuild the state from the durable ones."""
        dropped = self.in_flight + self.pending
        self.in_flight, self.pending = [], []
        self._rebuild()
        return dropped

    def merged_up_to(self, offset: int, producers: Iterable[ProducerStateEntry]) -> None:
        """Durable entries below ``offset`` are in a published tiered segment (section 7):
        forget them; ``producers`` is the producer state at ``offset`` (the segment's
        snapshot). The merge takes only entries of objects past the commit deadline, so no
        writer proposes their locations again."""
        if offset > self.committed_end:
            raise ValueError(f"{self.name}: merged up to {offset}, past the committed end {self.committed_end}")
        merged = [e for e in self.durable if e.base_offset < offset]
        if merged and merged[-1].last_offset >= offset:
            raise ValueError(f"{self.name}: offset {offset} splits a committed batch")
        del self.durable[:len(merged)]
        for entry in merged:
            self._by_location.pop((entry.object_key, entry.position), None)
            self._by_last_offset.pop(entry.last_offset, None)
        self.start_offset = offset
        self._base_producers = [entry.copy() for entry in producers]

    def entries_from(self, offset: int) -> list[CommitEntry]:
        """The durable entries holding ``offset`` and after (a read of the unmerged tail)."""
        at = bisect_right(self.durable, offset - 1, key=lambda e: e.last_offset)
        return self.durable[at:]

    def _rebuild(self) -> None:
        self._producers = producer_state(Path("/nonexistent"), self.name, self._base_producers)  # never snapshotted
        self._by_location: dict[_Location, CommitEntry] = {}
        self._by_last_offset: dict[int, CommitEntry] = {}
        self.next_offset = self.start_offset
        for entry in self.durable:
            self._install(entry, AppendOrigin.REPLICATION)
