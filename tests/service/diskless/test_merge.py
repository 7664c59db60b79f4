"""Merging a diskless partition's committed tail into a tiered segment (ADR 0027, section 7)
on real stores: the segment holds the batches with their committed offsets and classic
indexes, the manifest publishes it, the sequence starts after it, and a new sequencer
resumes from the segment's producer snapshot plus the entries left."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from common.errors import OutOfOrderSequenceError
from common.record.batch import build_batch, decode_all, read_batch_header
from local_tier.config import LogConfig
from local_tier.producer_snapshot import decode_snapshot
from remote_tier import ObjectStore
from remote_tier.diskless.commits import ChainId, CommitChain
from remote_tier.manifest import ManifestStore
from remote_tier.storage_manager import RemoteStorageManager
from service.diskless.committer import GroupCommitter
from service.diskless.merge import merge, mergeable
from service.diskless.sequence import Proposal
from service.diskless.sequencer import Sequencer
from service.diskless.takeover import take_over
from service.diskless.writer import WalWriter

TOPIC = uuid.UUID("00000000-0000-0000-0000-0000000000ee")
DEADLINE_MS = 30_000


def _produce(store: ObjectStore, sequencer: Sequencer, batches: int) -> None:
    async def put(key: str, data: bytes) -> None:
        await asyncio.to_thread(store.put, key, data)

    async def scenario() -> None:
        writer = WalWriter("c", 1, put, sequencer.commit, batch_ms=5, batch_bytes=1 << 20,
                           commit_deadline_ms=DEADLINE_MS)
        for n in range(batches):  # one object per batch: the window closes between them
            batch = build_batch([(None, f"v{n}-{i}".encode(), (), None) for i in range(3)],
                                producer_id=9, producer_epoch=0, base_sequence=3 * n)
            await writer.write(TOPIC, 0, 1, batch, read_batch_header(batch))

    asyncio.run(scenario())


def test_the_oldest_entries_become_a_tiered_segment_and_a_new_sequencer_goes_on_after_it(store: ObjectStore):
    sequencer = Sequencer(GroupCommitter(CommitChain(store, "c", ChainId(1, 1)), 0, asyncio.to_thread))
    sequencer.lead(take_over(store, "c", ManifestStore(store, "c"), TOPIC, 0, "t", 1, ChainId(1, 1), 0))
    _produce(store, sequencer, 6)
    sequence = sequencer.get(TOPIC, 0)
    now = int(time.time() * 1000)
    assert mergeable(sequence, now_ms=now, commit_deadline_ms=DEADLINE_MS, max_bytes=1 << 30) == []  # too young
    chosen = mergeable(sequence, now_ms=now + DEADLINE_MS + 1000, commit_deadline_ms=DEADLINE_MS,
                       max_bytes=4 * sequence.durable[0].size)
    assert [e.base_offset for e in chosen] == [0, 3, 6, 9]

    rsm = RemoteStorageManager(store, prefix="c")
    merged = merge(rsm, "t", TOPIC, 0, 1, chosen, store.get, LogConfig(), ())
    assert sequence.start_offset == 0  # the merge leaves the sequence to the loop
    sequence.merged_up_to(merged.next_offset, merged.producers)
    segment = merged.segment

    assert (segment.base_offset, segment.last_offset, segment.record_count) == (0, 11, 12)
    assert segment.producer_snapshot_bytes > 0
    manifest = rsm.manifest(TOPIC, 0)
    assert [s.upload_id for s in manifest.segments] == [segment.upload_id] and manifest.next_offset == 12
    log = store.get(rsm.layout(TOPIC, 0).segment_keys(0, segment.upload_id)[0])
    records = decode_all(log)
    assert [r.offset for r in records] == list(range(12)) and records[5].value == b"v1-2"
    assert sequence.start_offset == 12 and [e.base_offset for e in sequence.durable] == [12, 15]

    producers = decode_snapshot(rsm.read_producer_snapshot(segment, TOPIC, 0))
    fresh = Sequencer(GroupCommitter(CommitChain(store, "c", ChainId(2, 1)), 0, asyncio.to_thread))
    fresh.lead(take_over(store, "c", ManifestStore(store, "c"), TOPIC, 0, "t", 2, ChainId(2, 1), 0, producers))
    resumed = fresh.get(TOPIC, 0)
    assert resumed.start_offset == 12 and resumed.committed_end == 18
    with pytest.raises(OutOfOrderSequenceError):  # the producer's state came through the merge
        resumed.accept(Proposal(TOPIC, 0, 2, "late.wal", 0, 70, 3, 0, producer_id=9, producer_epoch=0,
                                base_sequence=30))
    assert resumed.accept(Proposal(TOPIC, 0, 2, "next.wal", 0, 70, 3, 0, producer_id=9, producer_epoch=0,
                                   base_sequence=18)).base_offset == 18
