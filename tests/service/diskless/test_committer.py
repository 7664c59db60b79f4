"""A sequencer's group commits (ADR 0027, section 4) against real stores: a directory and
the moto S3 server over HTTP. Writers are answered only once their slot is in the bucket,
entries that arrive during a write share the next slot, and a failed write is retried by
the writers with the same offsets."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from common.errors import KafkaStorageError, NotLeaderOrFollowerError
from remote_tier import ObjectStore
from remote_tier.diskless.commits import ChainId, CommitChain
from remote_tier.diskless.wal import WalKey
from service.diskless.committer import GroupCommitter
from service.diskless.sequence import PartitionSequence, Proposal

TOPIC = uuid.UUID("00000000-0000-0000-0000-0000000000bb")
CHAIN = ChainId(2, 40)




class _Gate:
    """A store whose conditional creates wait for a release (a slow PUT), or fail once."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self.release = threading.Event()
        self.release.set()
        self.fail_next = False
        self.creates = 0

    def put_if_absent(self, key: str, data: bytes) -> str:
        self.release.wait(10)
        self.creates += 1
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("the bucket did not answer")
        return self._store.put_if_absent(key, data)

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._store, name)


def _proposal(obj: str, count: int, partition: int = 0, **kw) -> Proposal:  # noqa: ANN003
    return Proposal(TOPIC, partition, 1, obj, 0, 10 * count, count, 0, **kw)


async def _to_thread(fn, *args):  # noqa: ANN001, ANN002, ANN202
    return await asyncio.to_thread(fn, *args)


def _committer(store: ObjectStore, *partitions: int) -> tuple[_Gate, GroupCommitter, list[PartitionSequence]]:
    """A committer writing chain CHAIN of ``store`` through a gate, with a sequence per partition."""
    gate = _Gate(store)
    committer = GroupCommitter(CommitChain(gate, "p", CHAIN), 0, _to_thread)  # type: ignore[arg-type]
    return gate, committer, [PartitionSequence(TOPIC, p, 1, 0) for p in partitions]


def test_writers_are_answered_after_their_slot_and_late_arrivals_share_the_next(store: ObjectStore):
    gate, committer, (p0, p1) = _committer(store, 0, 1)

    async def scenario() -> None:
        gate.release.clear()  # the first slot's PUT hangs
        first = committer.wait_durable(p0, p0.accept(_proposal("a.wal", 5)))
        await asyncio.sleep(0.05)
        later = [committer.wait_durable(p0, p0.accept(_proposal(f"b{n}.wal", 1))) for n in range(10)]
        later += [committer.wait_durable(p1, p1.accept(_proposal(f"c{n}.wal", 2, partition=1))) for n in range(10)]
        await asyncio.sleep(0.05)
        assert not first.done() and p0.committed_end == 0  # nothing answered before the bucket has it
        gate.release.set()
        await asyncio.wait_for(asyncio.gather(first, *later), 10)
        assert committer.slots_written == 2 and gate.creates == 2  # 21 batches, two PUTs
        assert (p0.committed_end, p1.committed_end) == (15, 20)

    asyncio.run(scenario())
    batches = CommitChain(store, "p", CHAIN).read_from(0)
    assert [len(b.entries) for b in batches] == [1, 20]
    assert [e.base_offset for e in batches[1].entries if e.partition == 0] == list(range(5, 15))


def test_a_failed_slot_fails_its_writers_and_their_retries_get_the_same_offsets(store: ObjectStore):
    gate, committer, (seq,) = _committer(store, 0)

    async def scenario() -> None:
        await committer.wait_durable(seq, seq.accept(_proposal("a.wal", 5, producer_id=9, producer_epoch=0,
                                                               base_sequence=0)))
        gate.fail_next = True
        lost = seq.accept(_proposal("b.wal", 5, producer_id=9, producer_epoch=0, base_sequence=5))
        with pytest.raises(KafkaStorageError):
            await committer.wait_durable(seq, lost)
        assert seq.next_offset == 5 and seq.committed_end == 5
        retry = seq.accept(_proposal("c.wal", 5, producer_id=9, producer_epoch=0, base_sequence=5))
        await committer.wait_durable(seq, retry)
        assert (retry.base_offset, seq.committed_end) == (5, 10)
        again = seq.accept(_proposal("d.wal", 5, producer_id=9, producer_epoch=0, base_sequence=5))
        assert again is retry  # a duplicate of a durable batch is answered at once
        await asyncio.wait_for(committer.wait_durable(seq, again), 1)

    asyncio.run(scenario())
    assert [b.slot for b in CommitChain(store, "p", CHAIN).read_from(0)] == [0, 1]


def test_a_chain_written_by_someone_else_stops_the_committer(store: ObjectStore):
    rival = CommitChain(store, "p", CHAIN)

    async def scenario() -> None:
        committer = GroupCommitter(CommitChain(store, "p", CHAIN), 0, _to_thread)
        seq = PartitionSequence(TOPIC, 0, 1, 0)
        other = PartitionSequence(TOPIC, 0, 1, 0)
        other.accept(_proposal("z.wal", 1))
        from remote_tier.diskless.commits import CommitBatch

        assert rival.append(CommitBatch(CHAIN, 0, "not ours", 0, tuple(other.take_pending())))
        with pytest.raises(NotLeaderOrFollowerError, match="another process"):
            await committer.wait_durable(seq, seq.accept(_proposal("a.wal", 1)))
        assert committer.broken is not None and seq.next_offset == 0
        with pytest.raises(NotLeaderOrFollowerError):
            await committer.wait_durable(seq, seq.accept(_proposal("b.wal", 1)))

    asyncio.run(scenario())


def test_a_sequencer_that_cannot_confirm_its_lease_writes_no_slot_and_answers_nobody(store: ObjectStore):
    leading = [True]
    gate = _Gate(store)
    committer = GroupCommitter(CommitChain(gate, "p", CHAIN), 0, _to_thread,  # type: ignore[arg-type]
                               may_answer=lambda: leading[0])
    seq = PartitionSequence(TOPIC, 0, 1, 0)

    async def scenario() -> None:
        await committer.wait_durable(seq, seq.accept(_proposal("a.wal", 2)))
        leading[0] = False  # lost before the write: no slot at all, the offsets are given again
        with pytest.raises(NotLeaderOrFollowerError, match="cannot confirm"):
            await committer.wait_durable(seq, seq.accept(_proposal("b.wal", 2)))
        assert gate.creates == 1 and seq.next_offset == 2
        leading[0] = True
        gate.release.clear()  # lost while the PUT is on its way: the slot lands, nobody is answered
        waiting = committer.wait_durable(seq, seq.accept(_proposal("c.wal", 2)))
        await asyncio.sleep(0.05)
        leading[0] = False
        gate.release.set()
        with pytest.raises(NotLeaderOrFollowerError, match="cannot confirm"):
            await waiting

    asyncio.run(scenario())
    # that slot is in the chain: the next sequencer reads it and answers a retry with offset 2
    assert [e.base_offset for b in CommitChain(store, "p", CHAIN).read_from(0) for e in b.entries] == [0, 2]


def test_a_partition_resigned_while_its_slot_fails_still_answers_its_writers(store: ObjectStore):
    from service.diskless.sequencer import Sequencer

    gate, committer, (seq,) = _committer(store, 0)
    sequencer = Sequencer(committer)
    sequencer.lead(seq)
    key = WalKey("p", 1, int(time.time() * 1000), "b" * 32).key

    async def scenario() -> list:  # type: ignore[type-arg]
        gate.release.clear()
        gate.fail_next = True
        task = asyncio.ensure_future(sequencer.commit([Proposal(TOPIC, 0, 1, key, 0, 70, 5, 0)]))
        await asyncio.sleep(0.05)
        sequencer.resign(TOPIC, 0)  # leadership moves while the slot is in flight
        gate.release.set()  # and the slot's PUT fails
        return await asyncio.wait_for(task, 5)

    answers = asyncio.run(scenario())
    assert isinstance(answers[0], KafkaStorageError) and seq.next_offset == 0
