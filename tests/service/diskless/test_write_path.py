"""The write path of diskless topics on one broker (ADR 0027, sections 2-5), on a directory
and on the moto S3 server: produced batches of several partitions share write-ahead
objects, each batch's offsets come from its sequencer once the object and the commit are
in the bucket, and the bytes at an entry's place are the batch as produced."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from common.errors import KafkaStorageError, NotLeaderOrFollowerError, RequestTimedOutError
from common.record.batch import build_batch, decode_all, read_batch_header
from remote_tier import ObjectStore
from remote_tier.diskless.commits import ChainId, CommitChain
from remote_tier.diskless.wal import WalKey, parse_trailer
from service.diskless.committer import GroupCommitter
from service.diskless.sequence import PartitionSequence
from service.diskless.sequencer import Sequencer
from service.diskless.writer import WalWriter

TOPIC = uuid.UUID("00000000-0000-0000-0000-0000000000cc")




def _broker(store: ObjectStore, partitions: int, **limits: int) -> tuple[WalWriter, Sequencer]:
    chain = CommitChain(store, "c", ChainId(1, 5))
    sequencer = Sequencer(GroupCommitter(chain, 0, asyncio.to_thread))
    for p in range(partitions):
        sequencer.lead(PartitionSequence(TOPIC, p, 0, 0))

    async def put(key: str, data: bytes) -> None:
        await asyncio.to_thread(store.put, key, data)

    settings = {"batch_ms": 50, "batch_bytes": 8 << 20, "commit_deadline_ms": 30_000, **limits}
    return WalWriter("c", 1, put, sequencer.commit, **settings), sequencer


def _batch(partition: int, n: int, *, pid: int = -1, seq: int = -1) -> bytes:
    return build_batch([(None, f"p{partition}-r{n}-{i}".encode(), (), None) for i in range(3)],
                       producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)


def test_batches_of_many_partitions_share_objects_and_get_dense_offsets(store: ObjectStore):
    writer, sequencer = _broker(store, 3)

    async def scenario() -> list:  # type: ignore[type-arg]
        writes = []
        for n in range(20):
            batch = _batch(n % 3, n)
            writes.append((n % 3, batch, writer.write(TOPIC, n % 3, 0, batch, read_batch_header(batch))))
            if n % 7 == 6:
                await asyncio.sleep(0.08)  # past the window: the next batches go in a new object
        return [(p, batch, await w) for p, batch, w in writes]

    written = asyncio.run(scenario())
    for p in range(3):
        offsets = [entry.base_offset for q, _, entry in written if q == p]
        assert offsets == [3 * i for i in range(len(offsets))]  # dense, in produce order
        assert sequencer.get(TOPIC, p).committed_end == 3 * len(offsets)
    keys = {entry.object_key for *_, entry in written}
    assert 2 <= len(keys) == writer.objects_written <= 4
    for _, batch, entry in written:  # the bytes at the entry's place are the produced batch
        assert store.get(entry.object_key, entry.position, entry.position + entry.size) == batch
    for key in keys:
        assert WalKey.parse(key).broker_id == 1
        runs = parse_trailer(store.get(key))
        assert {r.partition for r in runs} <= {0, 1, 2}
    committed = [e for b in CommitChain(store, "c", ChainId(1, 5)).read_from(0) for e in b.entries]
    assert sorted((e.partition, e.base_offset) for e in committed) == sorted(
        (p, entry.base_offset) for p, _, entry in written)


def test_an_object_closes_when_full_before_its_window(store: ObjectStore):
    batches = [_batch(0, n) for n in range(6)]
    writer, _ = _broker(store, 1, batch_ms=60_000, batch_bytes=2 * max(len(b) for b in batches))

    async def scenario() -> list:  # type: ignore[type-arg]
        return await asyncio.wait_for(asyncio.gather(*(
            writer.write(TOPIC, 0, 0, b, read_batch_header(b)) for b in batches)), 10)

    entries = asyncio.run(scenario())  # the window is a minute: only size closed them
    assert writer.objects_written == 3 and [e.base_offset for e in entries] == list(range(0, 18, 3))
    assert [r.value for r in decode_all(store.get(entries[0].object_key, entries[0].position,
                                                  entries[0].position + entries[0].size))][0] == b"p0-r0-0"


def test_a_failed_put_or_a_late_commit_fails_the_batches_and_nothing_is_committed(store: ObjectStore):
    writer, sequencer = _broker(store, 2)

    async def refuse(key: str, data: bytes) -> None:
        raise ConnectionError("the bucket is down")

    writer._put = refuse  # noqa: SLF001 - the bucket fails for this write only

    async def scenario() -> None:
        batch = _batch(0, 0)
        with pytest.raises(KafkaStorageError, match="bucket refused"):
            await writer.write(TOPIC, 0, 0, batch, read_batch_header(batch))
        with pytest.raises(NotLeaderOrFollowerError):  # a partition this broker does not sequence
            other = uuid.uuid4()
            await _broker(store, 0)[0].write(other, 0, 0, batch, read_batch_header(batch))

    asyncio.run(scenario())
    assert sequencer.get(TOPIC, 0).committed_end == 0

    slow, slow_sequencer = _broker(store, 1, commit_deadline_ms=100)

    async def stalled(proposals):  # noqa: ANN001, ANN202 - a sequencer that does not answer
        await asyncio.sleep(5)

    slow._propose = stalled  # noqa: SLF001

    async def late() -> None:
        batch = _batch(0, 1)
        with pytest.raises(RequestTimedOutError):
            await asyncio.wait_for(slow.write(TOPIC, 0, 0, batch, read_batch_header(batch)), 3)

    asyncio.run(late())
    assert slow_sequencer.get(TOPIC, 0).committed_end == 0


def test_an_idempotent_retry_in_a_second_object_gets_the_first_offsets(store: ObjectStore):
    writer, sequencer = _broker(store, 1)

    async def scenario() -> tuple:  # type: ignore[type-arg]
        first = _batch(0, 0, pid=11, seq=0)
        a = await writer.write(TOPIC, 0, 0, first, read_batch_header(first))
        b = await writer.write(TOPIC, 0, 0, first, read_batch_header(first))  # the producer's retry
        nxt = _batch(0, 1, pid=11, seq=3)
        c = await writer.write(TOPIC, 0, 0, nxt, read_batch_header(nxt))
        return a, b, c

    a, b, c = asyncio.run(scenario())
    assert a.object_key != b.object_key or a is b
    assert (a.base_offset, b.base_offset, c.base_offset) == (0, 0, 3)
    assert sequencer.get(TOPIC, 0).committed_end == 6


def test_reads_of_the_tail_carry_the_committed_offsets_and_cost_one_get_per_object(store: ObjectStore):
    from common.errors import CorruptRecordError
    from common.record.batch import validate_batches
    from service.diskless.reader import WalCache, read_entries

    writer, sequencer = _broker(store, 2)
    written_cache = WalCache(64 << 20)
    writer._cache = written_cache  # noqa: SLF001 - as the broker wires it

    async def produce() -> None:
        for n in range(12):
            batch = _batch(n % 2, n)
            await writer.write(TOPIC, n % 2, 0, batch, read_batch_header(batch))

    asyncio.run(produce())
    gets: list[str] = []

    async def get_object(key: str) -> bytes:
        gets.append(key)
        return await asyncio.to_thread(store.get, key)

    entries = sequencer.get(TOPIC, 1).entries_from(4)
    data = asyncio.run(read_entries(entries, written_cache, get_object, 1 << 20))
    assert gets == []  # the writer's own objects: no GET
    validate_batches(data, max_message_bytes=1 << 20)  # CRCs still hold with the offsets written in
    records = decode_all(data)
    assert [r.offset for r in records] == list(range(3, 18))
    assert [r.value for r in records][:3] == [b"p1-r3-0", b"p1-r3-1", b"p1-r3-2"]

    cold = WalCache(64 << 20)
    all_entries = sequencer.get(TOPIC, 0).entries_from(0) + sequencer.get(TOPIC, 1).entries_from(0)
    asyncio.run(read_entries(all_entries, cold, get_object, 1 << 30))
    assert sorted(gets) == sorted({e.object_key for e in all_entries})  # one GET per object
    first = asyncio.run(read_entries(entries, cold, get_object, 1))
    assert decode_all(first)[0].offset == 3 and len(decode_all(first)) == 3  # at least one batch

    tiny = WalCache(10)  # an object larger than the cache is read, not kept
    asyncio.run(read_entries(entries[:1], tiny, get_object, 1 << 20))
    assert tiny.size == 0
    bad = entries[0].__class__(**{**{f: getattr(entries[0], f) for f in entries[0].__slots__}, "size": 7})
    with pytest.raises(CorruptRecordError, match="not the one committed"):
        asyncio.run(read_entries([bad], cold, get_object, 1 << 20))


def test_a_sequencer_that_fails_in_any_way_fails_the_batches_instead_of_leaving_them_waiting(store: ObjectStore):
    writer, _ = _broker(store, 1)

    async def broken(proposals):  # noqa: ANN001, ANN202 - a peer's connection dropped mid-answer
        raise ConnectionResetError("peer went away")

    async def short(proposals):  # noqa: ANN001, ANN202 - answers for fewer batches than asked
        return []

    async def scenario(propose) -> None:  # noqa: ANN001
        writer._propose = propose  # noqa: SLF001
        batch = _batch(0, 0)
        with pytest.raises(KafkaStorageError):
            await asyncio.wait_for(writer.write(TOPIC, 0, 0, batch, read_batch_header(batch)), 5)

    asyncio.run(scenario(broken))
    asyncio.run(scenario(short))
