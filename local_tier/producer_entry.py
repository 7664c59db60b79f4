"""What a partition keeps of one producer: :class:`ProducerStateEntry` and its retained batches.

Shared by the producer state (``producer_state.py``) and its snapshot file
(``producer_snapshot.py``), which both read and make entries; neither imports the other's
module for them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NUM_BATCHES_TO_RETAIN",
    "BatchMetadata",
    "ProducerStateEntry",
    "decrement_sequence",
    "increment_sequence",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NUM_BATCHES_TO_RETAIN = 5
_INT32_MAX = 2**31 - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping past int32 max to 0, as Kafka's sequences do."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One retained batch of a producer: its last sequence and offsets."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """What the partition knows of one producer id (mutable; copied by :meth:`copy`)."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
        )

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def maybe_update_epoch(self, epoch: int) -> None:
        """A new epoch forgets the old epoch's batches (their sequences restart at 0)."""
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.maybe_update_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.last_seq == last_seq and batch.first_seq == first_seq:
                return batch
        return None
