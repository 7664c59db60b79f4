"""``diskless.max.inflight.objects`` (ADR 0027, section 2): while the bucket is slow, a
broker keeps at most that many write-ahead objects in flight, the open object fills up to
``diskless.batch.bytes``, and further batches wait in order; a batch that waits past the
commit deadline fails with KAFKA_STORAGE_ERROR and is never written."""

from __future__ import annotations

import asyncio
import uuid

from common.errors import KafkaError, KafkaStorageError
from common.record.batch import build_batch, read_batch_header
from remote_tier import ObjectStore
from remote_tier.diskless.commits import ChainId, CommitChain, CommitEntry
from service.diskless.committer import GroupCommitter
from service.diskless.sequence import PartitionSequence
from service.diskless.sequencer import Sequencer
from service.diskless.writer import WalWriter

TOPIC = uuid.UUID("00000000-0000-0000-0000-0000000000dd")


class _SlowBucket:
    """PUTs that wait for ``gate``, counting how many are in flight at once."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.gate = asyncio.Event()
        self.now = 0
        self.most = 0
        self.keys: list[str] = []

    async def put(self, key: str, data: bytes) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await self.gate.wait()
            await asyncio.to_thread(self.store.put, key, data)
            self.keys.append(key)
        finally:
            self.now -= 1


def _writer(store: ObjectStore, bucket: _SlowBucket, **settings: int) -> tuple[WalWriter, Sequencer]:
    sequencer = Sequencer(GroupCommitter(CommitChain(store, "c", ChainId(1, 5)), 0, asyncio.to_thread))
    sequencer.lead(PartitionSequence(TOPIC, 0, 0, 0))
    limits = {"batch_ms": 20, "commit_deadline_ms": 30_000, "max_inflight": 2, **settings}
    return WalWriter("c", 1, bucket.put, sequencer.commit, **limits), sequencer


def _batch(n: int) -> bytes:
    return build_batch([(None, f"r{n}-{i}".encode() * 20, (), None) for i in range(2)])


def test_a_slow_bucket_bounds_the_objects_in_flight_and_every_batch_lands_in_order(store: ObjectStore):
    one = len(_batch(0))

    async def scenario() -> tuple[list[int], int, int, int]:
        bucket = _SlowBucket(store)
        writer, _ = _writer(store, bucket, batch_bytes=3 * one)
        writes = []
        for n in range(40):
            batch = _batch(n)
            writes.append(writer.write(TOPIC, 0, 0, batch, read_batch_header(batch)))
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.1)
        held = (writer.inflight, writer.waiting)
        assert not any(w.done() for w in writes)  # nothing answered before its PUT
        bucket.gate.set()
        entries = [await w for w in writes]
        await writer.close()
        return [e.base_offset for e in entries], bucket.most, held[0], held[1]

    offsets, most, inflight, waiting = asyncio.run(scenario())
    assert most == 2, f"{most} PUTs in flight at once with diskless.max.inflight.objects=2"
    assert inflight == 2
    # two objects in flight, the open one full (3 batches), the other 40 - 2*3 - 3 waiting at most
    assert 40 - 3 * 3 - 6 <= waiting <= 40 - 3, waiting
    assert offsets == [2 * n for n in range(40)]  # dense and in produce order, after the wait


def test_a_batch_waiting_past_the_commit_deadline_fails_retriably_and_is_never_written(store: ObjectStore):
    one = len(_batch(0))

    async def scenario() -> tuple[list[object], list[int]]:
        bucket = _SlowBucket(store)
        writer, sequencer = _writer(store, bucket, batch_bytes=one, max_inflight=1, commit_deadline_ms=400)
        writes = []
        for n in range(4):
            batch = _batch(n)
            writes.append(writer.write(TOPIC, 0, 0, batch, read_batch_header(batch)))
        await asyncio.sleep(0.7)  # past the deadline: the waiting batches fail
        bucket.gate.set()
        results = await asyncio.gather(*writes, return_exceptions=True)
        await writer.close()
        return list(results), [e.base_offset for e in sequencer.get(TOPIC, 0).durable]

    results, durable = asyncio.run(scenario())
    # batch 0 in flight; batch 1 fills the open object, held at the bound for a whole commit
    # deadline: it fails and is never written
    assert isinstance(results[1], KafkaStorageError), results
    assert "diskless.max.inflight.objects" in str(results[1])
    # every batch is answered: with an error, or with the entry that is in the commit chain
    assert all(isinstance(r, KafkaError | CommitEntry) for r in results), results
    assert any(isinstance(r, KafkaStorageError) for r in results[2:])  # one at least waited out its deadline
    committed = sorted(r.base_offset for r in results if isinstance(r, CommitEntry))
    assert durable == committed == [2 * i for i in range(len(committed))]
