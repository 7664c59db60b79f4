"""A diskless partition's sequence (ADR 0027, sections 4 and 5): dense offsets across
writers, idempotence across brokers, re-commits answered once, roll-back after a failed
slot, and a new sequencer resuming from the committed entries."""

from __future__ import annotations

import uuid

import pytest

from common.errors import (
    FencedLeaderEpochError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    UnknownLeaderEpochError,
)
from service.diskless.sequence import PartitionSequence, Proposal

TOPIC = uuid.UUID("00000000-0000-0000-0000-0000000000aa")


def _proposal(obj: str, position: int, count: int = 10, *, pid: int = -1, epoch: int = 0, seq: int = 0,
              leader_epoch: int = 3, **kw) -> Proposal:  # noqa: ANN003
    return Proposal(TOPIC, 0, leader_epoch, obj, position, 100 * count, count, 1_700_000_000_000 + position,
                    producer_id=pid, producer_epoch=epoch if pid >= 0 else -1,
                    base_sequence=seq if pid >= 0 else -1, **kw)


def _commit_all(seq: PartitionSequence) -> None:
    seq.made_durable(seq.take_pending())


def test_batches_from_several_writers_get_dense_offsets_durable_only_once_their_slot_is_written():
    seq = PartitionSequence(TOPIC, 0, 3, start_offset=500)
    a = seq.accept(_proposal("broker-1.wal", 0, 10))
    b = seq.accept(_proposal("broker-2.wal", 0, 5))
    c = seq.accept(_proposal("broker-1.wal", 1000, 1))
    assert [(e.base_offset, e.last_offset) for e in (a, b, c)] == [(500, 509), (510, 514), (515, 515)]
    assert seq.committed_end == 500  # nothing is durable yet: the high watermark waits
    taken = seq.take_pending()
    d = seq.accept(_proposal("broker-3.wal", 0, 2))  # accepted while the slot is being written
    assert d.base_offset == 516 and seq.committed_end == 500
    seq.made_durable(taken)
    assert seq.committed_end == 516
    _commit_all(seq)
    assert seq.committed_end == 518
    assert [e.base_offset for e in seq.entries_from(512)] == [510, 515, 516]
    assert seq.entries_from(518) == []


def test_an_idempotent_retry_through_another_broker_gets_its_first_offsets():
    seq = PartitionSequence(TOPIC, 0, 3, start_offset=0)
    first = seq.accept(_proposal("broker-1.wal", 0, 10, pid=7, seq=0))
    second = seq.accept(_proposal("broker-1.wal", 1000, 10, pid=7, seq=10))
    retry_pending = seq.accept(_proposal("broker-2.wal", 40, 10, pid=7, seq=10))  # before its slot landed
    assert retry_pending is second
    _commit_all(seq)
    retry = seq.accept(_proposal("broker-3.wal", 0, 10, pid=7, seq=0))  # the same batch, another object
    assert retry is first and seq.pending == [] and seq.next_offset == 20
    with pytest.raises(OutOfOrderSequenceError):
        seq.accept(_proposal("broker-3.wal", 100, 10, pid=7, seq=30))
    assert seq.next_offset == 20  # a refused proposal takes no offsets
    assert seq.accept(_proposal("broker-3.wal", 300, 10, pid=7, epoch=1, seq=0)).base_offset == 20  # a new epoch
    with pytest.raises(InvalidProducerEpochError):  # the fenced epoch, through any broker
        seq.accept(_proposal("broker-1.wal", 2000, 10, pid=7, epoch=0, seq=20))
    assert seq.next_offset == 30


def test_a_recommitted_location_is_answered_with_its_offsets_not_appended_twice():
    seq = PartitionSequence(TOPIC, 0, 3, start_offset=0)
    entry = seq.accept(_proposal("broker-1.wal", 0, 10))  # no producer id: only the location tells
    _commit_all(seq)
    assert seq.accept(_proposal("broker-1.wal", 0, 10)) is entry
    assert seq.next_offset == 10


def test_stale_or_future_leader_epochs_and_transactions_are_refused():
    seq = PartitionSequence(TOPIC, 0, 3, start_offset=0)
    with pytest.raises(FencedLeaderEpochError):
        seq.accept(_proposal("a.wal", 0, leader_epoch=2))
    with pytest.raises(UnknownLeaderEpochError):
        seq.accept(_proposal("a.wal", 0, leader_epoch=4))
    with pytest.raises(InvalidTxnStateError, match="not supported on diskless topics"):
        seq.accept(_proposal("a.wal", 0, pid=7, is_transactional=True))
    assert seq.next_offset == 0


def test_a_failed_slot_drops_what_was_not_durable_and_the_offsets_are_given_again():
    seq = PartitionSequence(TOPIC, 0, 3, start_offset=0)
    seq.accept(_proposal("a.wal", 0, 10, pid=7, seq=0))
    _commit_all(seq)
    seq.accept(_proposal("a.wal", 1000, 10, pid=7, seq=10))
    seq.take_pending()
    seq.accept(_proposal("b.wal", 0, 5))
    dropped = seq.roll_back()
    assert [e.base_offset for e in dropped] == [10, 20]
    assert seq.next_offset == 10 and seq.committed_end == 10
    again = seq.accept(_proposal("c.wal", 0, 10, pid=7, seq=10))  # the producer's retry
    assert again.base_offset == 10


def test_a_new_sequencer_resumes_from_the_committed_entries_and_keeps_idempotence():
    old = PartitionSequence(TOPIC, 0, 3, start_offset=100)
    for n in range(5):
        old.accept(_proposal(f"w{n}.wal", 0, 10, pid=7, seq=10 * n))
    old.accept(_proposal("x.wal", 0, 3))
    _commit_all(old)
    other_partition = old.durable[0].__class__(uuid.uuid4(), 1, 3, 0, 1, "y.wal", 0, 1, 0)
    new = PartitionSequence.resume(TOPIC, 0, 4, 100, (), [*old.durable[:3], other_partition, *old.durable[3:]])
    assert new.committed_end == old.committed_end == 153 and new.next_offset == 153
    # a writer that proposed to the old sequencer retries with the new epoch: the same offsets
    assert new.accept(_proposal("w4.wal", 0, 10, pid=7, seq=40, leader_epoch=4)).base_offset == 140
    assert new.accept(_proposal("x.wal", 0, 3, leader_epoch=4)).base_offset == 150
    assert new.accept(_proposal("z.wal", 0, 1, pid=7, seq=50, leader_epoch=4)).base_offset == 153
    with pytest.raises(ValueError, match="does not follow"):
        PartitionSequence.resume(TOPIC, 0, 4, 100, (), old.durable[1:])


def test_a_merge_forgets_what_it_published():
    seq = PartitionSequence(TOPIC, 0, 3, start_offset=0)
    for n in range(4):
        seq.accept(_proposal(f"w{n}.wal", 0, 10))
    _commit_all(seq)
    seq.merged_up_to(20, ())
    assert seq.start_offset == 20 and [e.base_offset for e in seq.durable] == [20, 30]
    assert seq.entries_from(0)[0].base_offset == 20
    with pytest.raises(ValueError, match="splits"):
        seq.merged_up_to(25, ())


def test_a_retry_of_a_merged_batch_gets_its_offsets_and_an_empty_proposal_is_refused():
    from common.errors import CorruptRecordError

    seq = PartitionSequence(TOPIC, 0, 3, start_offset=0)
    seq.accept(_proposal("a.wal", 0, 5, pid=7, seq=0))
    _commit_all(seq)
    producers = [entry.copy() for entry in seq._producers.producers.values()]  # noqa: SLF001 - the segment's snapshot
    seq.merged_up_to(5, producers)
    retry = seq.accept(_proposal("b.wal", 0, 5, pid=7, seq=0))  # known only from the snapshot now
    assert (retry.base_offset, retry.last_offset, seq.next_offset) == (0, 4, 5)
    with pytest.raises(CorruptRecordError, match="describes no batch"):
        seq.accept(_proposal("c.wal", 0, 0))
    with pytest.raises(ValueError, match="past the committed end"):
        seq.merged_up_to(6, ())
