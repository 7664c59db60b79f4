"""Handing a diskless partition from sequencer to sequencer (ADR 0027, section 4) on real
stores: the new sequencer reads the chains the manifest lists, resumes with dense offsets
and the producers' state, records its own chain, and a stale sequencer is fenced."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from remote_tier import ObjectStore
from remote_tier.diskless.commits import ChainId, CommitChain
from remote_tier.errors import FencedError
from remote_tier.manifest import ManifestStore
from service.diskless.committer import GroupCommitter
from service.diskless.sequence import Proposal
from service.diskless.sequencer import Sequencer
from service.diskless.takeover import take_over

TOPIC = uuid.UUID("00000000-0000-0000-0000-0000000000dd")


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
        proposals = [Proposal(TOPIC, partition, epoch, key, 0, 70, 5, 0, **producer) for key in objects]
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
    assert [(c.chain, c.slot, c.leader_epoch) for c in manifest.diskless] == [("1-5", 0, 1), ("2-7", 0, 2)]

    with pytest.raises(FencedError):  # broker 1 back with its old epoch: refused by the manifest
        one.take_over(0, 1)

    one.take_over(0, 3)  # and back to broker 1, same broker epoch: its chain read from its first slot
    sequence = one.sequencer.get(TOPIC, 0)
    assert sequence.committed_end == 20 and [e.base_offset for e in sequence.durable] == [0, 5, 10, 15]
    assert one.commit(0, 3, ["f"]) == [20]
    assert len(ManifestStore(store, "c").load(TOPIC, 0)[0].diskless) == 2

    fresh = _Broker(store, ChainId(3, 1))  # a broker started from nothing serves the partition at once
    fresh.take_over(0, 4)
    assert [e.base_offset for e in fresh.sequencer.get(TOPIC, 0).durable] == [0, 5, 10, 15, 20]
    assert fresh.sequencer.get(TOPIC, 1) is None
    fresh.take_over(1, 2)
    assert fresh.sequencer.get(TOPIC, 1).committed_end == 5
