"""Handing a diskless partition from sequencer to sequencer (ADR 0027, section 4) on real
stores: the new sequencer reads the chains the manifest lists, resumes with dense offsets
and the producers' state, records its own chain, and a stale sequencer is fenced."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from remote_tier import ObjectStore
from remote_tier.diskless.commits import ChainId, CommitChain
from remote_tier.diskless.wal import WalKey
from remote_tier.errors import FencedError
from remote_tier.manifest import ManifestStore
from service.diskless.committer import GroupCommitter
from service.diskless.sequence import Proposal
from service.diskless.sequencer import Sequencer
from service.diskless.takeover import take_over

TOPIC = uuid.UUID("00000000-0000-0000-0000-0000000000dd")


def _key(name: str) -> str:
    """A write-ahead object key of now, one per name."""
    return WalKey("c", 9, int(time.time() * 1000), uuid.uuid5(TOPIC, name).hex).key


class _Broker:
    """One broker's sequencer: its chain (this broker epoch) and committer."""

    def __init__(self, store: ObjectStore, chain: ChainId) -> None:
        self.store = store
        self.chain = chain
        self.sequencer = Sequencer(GroupCommitter(CommitChain(store, "c", chain), 0, asyncio.to_thread))

    def take_over(self, partition: int, epoch: int) -> None:
        sequence = take_over(self.store, "c", ManifestStore(self.store, "c"), TOPIC, partition, "t", epoch,
                             self.chain, self.sequencer.committer.next_slot)
        self.sequencer.lead(sequence)

    def commit(self, partition: int, epoch: int, objects: list[str], **producer: int) -> list[int]:
        proposals = [Proposal(TOPIC, partition, epoch, _key(name), 0, 70, 5, 0, **producer) for name in objects]
        answers = asyncio.run(self.sequencer.commit(proposals))
        return [a.base_offset for a in answers]  # type: ignore[union-attr]


def test_sequencers_hand_a_partition_over_through_the_bucket(store: ObjectStore):
    one, two = _Broker(store, ChainId(1, 5)), _Broker(store, ChainId(2, 7))
    one.take_over(0, 1)
    one.take_over(1, 1)
    assert one.commit(0, 1, ["a", "b"]) == [0, 5]
    assert one.commit(1, 1, ["c"]) == [0]  # another partition in the same chain
    assert one.commit(0, 1, ["d"], producer_id=4, producer_epoch=0, base_sequence=0) == [10]

    two.take_over(0, 2)  # broker 1 lost partition 0 (dead, or its lease lapsed)
    assert two.sequencer.get(TOPIC, 0).committed_end == 15
    assert two.commit(0, 2, ["e"]) == [15]
    # the producer's retry of its batch, now through broker 2: the offsets of the first commit
    assert two.commit(0, 2, ["d-again"], producer_id=4, producer_epoch=0, base_sequence=0) == [10]
    manifest = ManifestStore(store, "c").load(TOPIC, 0)[0]
    assert [(c.chain, c.slot, c.leader_epoch, c.end_slot) for c in manifest.diskless] == [
        ("1-5", 0, 1, 2), ("2-7", 0, 2, None)]  # broker 1's chain closed at the last slot read

    with pytest.raises(FencedError):  # broker 1 back with its old epoch: refused by the manifest
        one.take_over(0, 1)

    one.take_over(0, 3)  # and back to broker 1, same broker epoch: a second range of its chain
    sequence = one.sequencer.get(TOPIC, 0)
    assert sequence.committed_end == 20 and [e.base_offset for e in sequence.durable] == [0, 5, 10, 15]
    assert one.commit(0, 3, ["f"]) == [20]
    assert [(c.chain, c.slot, c.end_slot) for c in ManifestStore(store, "c").load(TOPIC, 0)[0].diskless] == [
        ("1-5", 0, 2), ("2-7", 0, 0), ("1-5", 3, None)]

    fresh = _Broker(store, ChainId(3, 1))  # a broker started from nothing serves the partition at once
    fresh.take_over(0, 4)
    assert [e.base_offset for e in fresh.sequencer.get(TOPIC, 0).durable] == [0, 5, 10, 15, 20]
    assert fresh.sequencer.get(TOPIC, 1) is None
    fresh.take_over(1, 2)
    assert fresh.sequencer.get(TOPIC, 1).committed_end == 5


def test_a_slot_written_after_the_successor_read_the_chain_is_never_read(store: ObjectStore):
    """A replaced sequencer that does not know it yet (its metadata is behind) writes a slot
    after its successor read its chain: that slot is past the end the successor recorded, so
    the next sequencer keeps the successor's commit at those offsets (review of stop 46)."""
    one, two, three = (_Broker(store, ChainId(n, 1)) for n in (1, 2, 3))
    one.take_over(0, 1)
    assert one.commit(0, 1, ["a"]) == [0]
    two.take_over(0, 2)
    assert one.commit(0, 1, ["stale"]) == [5]  # its own view: in the real broker the lease wait prevents this
    assert two.commit(0, 2, ["acked"]) == [5]
    three.take_over(0, 3)
    assert [WalKey.parse(e.object_key).object_id for e in three.sequencer.get(TOPIC, 0).durable] == [
        uuid.uuid5(TOPIC, name).hex for name in ("a", "acked")]


class _TrimmedWhileRead:
    """A store whose first GET lets the collector delete a dead prefix of the chain."""

    def __init__(self, store: ObjectStore, doomed: list[str]) -> None:
        self._store, self._doomed = store, doomed

    def get(self, key: str, *args: int) -> bytes:
        while self._doomed:
            self._store.delete(self._doomed.pop())
        return self._store.get(key, *args)

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._store, name)


def test_a_read_racing_the_collector_goes_on_past_the_trimmed_slots(store: ObjectStore):
    from service.diskless.takeover import read_unmerged

    one = _Broker(store, ChainId(1, 1))
    one.take_over(0, 1)
    for n in range(21):
        one.commit(0, 1, [f"o{n}"])
    chain = CommitChain(store, "c", ChainId(1, 1))
    manifest = ManifestStore(store, "c").load(TOPIC, 0)[0]
    doomed = [chain.key(slot) for slot in range(1, 6)]  # as if merged: the collector trims them
    _, entries, ends = read_unmerged(_TrimmedWhileRead(store, doomed), "c", manifest, TOPIC, 0)  # type: ignore[arg-type]
    assert len(entries) == 16 and entries[-1].base_offset == 100 and ends == [20]


def test_a_proposal_past_the_commit_deadline_or_naming_no_object_is_refused(store: ObjectStore):
    from common.errors import CorruptRecordError, RequestTimedOutError

    one = _Broker(store, ChainId(1, 1))
    one.take_over(0, 1)
    ancient = WalKey("c", 9, 1_000, "a" * 32).key
    answers = asyncio.run(one.sequencer.commit([Proposal(TOPIC, 0, 1, ancient, 0, 70, 5, 0),
                                                Proposal(TOPIC, 0, 1, "not-a-key", 0, 70, 5, 0)]))
    assert isinstance(answers[0], RequestTimedOutError) and isinstance(answers[1], CorruptRecordError)
    assert one.sequencer.get(TOPIC, 0).next_offset == 0
