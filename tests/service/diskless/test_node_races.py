"""The wiring's races, on an in-process broker (review of issue 35's wiring): a slot landing
after its partition was resigned, a merge published during a takeover, the memory a merge
holds, one GET per object however many readers, and a long poll ended by its reader."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import service.diskless.takeover as takeover_module
import service.diskless.upkeep as upkeep
from common.errors import NotLeaderOrFollowerError
from common.record.batch import validate_batches
from remote_tier.diskless.commits import ChainId
from remote_tier.diskless.wal import WalKey
from remote_tier.errors import FencedError
from service.cluster.channel import BrokerChannel, ChannelConfig
from service.diskless import rpc
from service.diskless.fetching import read_diskless
from service.diskless.sequence import Proposal
from service.diskless.takeover import take_over
from service.handlers.router import Router, api_table
from service.network.server import KafkaServer
from tests.service.diskless.broker_harness import batch, diskless_topic, run

QUICK = {"diskless.commit.deadline.ms": "100", "diskless.orphan.grace.ms": "400"}


class _SlowChain:
    """A commit chain whose slot writes wait for ``release``."""

    def __init__(self, chain: Any) -> None:
        self._chain = chain
        self.release = threading.Event()
        self.chain = chain.chain

    def append(self, batch: Any) -> bool:
        self.release.wait(10)
        return self._chain.append(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._chain, name)


def test_a_slot_landing_after_its_partition_was_resigned_is_not_acknowledged(tmp_path: Path) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        node = broker.diskless
        info = await diskless_topic(broker, "d")
        committer = node.sequencer.committer
        slow = committer.chain = _SlowChain(committer.chain)
        key = WalKey.new("", 1, int(time.time() * 1000)).key
        proposal = Proposal(info.topic_id, 0, 0, key, 0, 80, 1, 1_700_000_000_000)
        commit = asyncio.ensure_future(node.commit_here([proposal]))
        await asyncio.sleep(0.2)  # the slot's PUT is under way (a slow bucket)
        node.sequencer.resign(info.topic_id, 0)  # the metadata moved the leadership
        successor = await asyncio.to_thread(take_over, node.store, "", node.manifests, info.topic_id, 0, "d", 1,
                                            ChainId(2, 7), 0, [])  # reads and seals the chain first
        slow.release.set()
        (answer,) = await commit
        return answer, successor.committed_end

    answer, end = run(tmp_path, body)
    # the successor never saw the late slot: its writer is told to propose again, not acknowledged
    assert isinstance(answer, NotLeaderOrFollowerError), answer
    assert end == 0


def test_a_merge_published_during_a_takeover_read_makes_the_takeover_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        node = broker.diskless
        info = await diskless_topic(broker, "d")
        for i in range(3):
            records = batch([b"r%d" % i], 1_700_000_000_000)
            await node.produce(info, 0, records, validate_batches(records, max_message_bytes=1 << 20), False)
        await asyncio.sleep(0.3)  # past the commit deadline: mergeable
        loop = asyncio.get_running_loop()
        real = takeover_module.read_unmerged

        def read_while_the_old_sequencer_merges(*args: Any, **kw: Any) -> Any:
            out = real(*args, **kw)
            assert asyncio.run_coroutine_threadsafe(upkeep.merge_due(node, broker, force=True), loop).result(30) == 1
            return out

        monkeypatch.setattr(takeover_module, "read_unmerged", read_while_the_old_sequencer_merges)
        with pytest.raises(FencedError, match="changed during the takeover"):
            await asyncio.to_thread(takeover_module.take_over, node.store, "", node.manifests,
                                    info.topic_id, 0, "d", 1, ChainId(2, 7), 0, [])
        monkeypatch.setattr(takeover_module, "read_unmerged", real)
        successor = await asyncio.to_thread(takeover_module.take_over, node.store, "", node.manifests,
                                            info.topic_id, 0, "d", 1, ChainId(2, 7), 0, [])
        return successor.start_offset, [e.base_offset for e in successor.durable]

    assert run(tmp_path, body, **QUICK) == (3, [])


def test_a_merge_reads_its_objects_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held: list[int] = []
    real = upkeep.merge

    def spy(rsm, topic, topic_id, partition, epoch, entries, read_object, *rest):  # noqa: ANN001, ANN002, ANN202
        keys = []

        def counted(key: str) -> bytes:
            keys.append(key)
            return read_object(key)

        out = real(rsm, topic, topic_id, partition, epoch, entries, counted, *rest)
        held.append(len(keys))
        return out

    monkeypatch.setattr(upkeep, "merge", spy)

    async def body(broker):  # noqa: ANN001, ANN202
        node = broker.diskless
        info = await diskless_topic(broker, "d", partitions=2)
        for i in range(6):  # six objects, each: a small batch of partition 0 and 1 MB of partition 1
            small = batch([b"s%d" % i], 1_700_000_000_000)
            big = batch([b"B" * 1_000_000], 1_700_000_000_000)
            await asyncio.gather(
                node.produce(info, 0, small, validate_batches(small, max_message_bytes=8 << 20), False),
                node.produce(info, 1, big, validate_batches(big, max_message_bytes=8 << 20), False))
        await asyncio.sleep(0.3)
        node.sequencer.resign(info.topic_id, 1)  # merge only partition 0
        assert await upkeep.merge_due(node, broker, force=True) == 1
        return node.manifests.load(info.topic_id, 0)[0].next_offset

    assert run(tmp_path, body, **QUICK, **{"diskless.cache.bytes": "0"}) == 6
    assert held == [6]  # each object read once, in turn (write_segment keeps the current one only)


def test_one_uncached_object_is_read_with_one_get_however_many_partitions_it_holds(tmp_path: Path) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        node = broker.diskless
        info = await diskless_topic(broker, "d", partitions=8)
        writes = []
        for p in range(8):
            records = batch([b"x" * 1000], 1_700_000_000_000)
            writes.append(node.produce(info, p, records, validate_batches(records, max_message_bytes=1 << 20), False))
        entries = await asyncio.gather(*writes)
        assert len({e.object_key for e in entries}) == 1
        node.cache._objects.clear()  # noqa: SLF001 - as on a broker that did not write it
        node.cache.size = 0
        gets: list[str] = []
        real = node.store.get

        def counted(key: str, *args: Any) -> bytes:
            if "diskless/wal/" in key:  # (manifests are read too)
                gets.append(key)
            return real(key, *args)

        node.store.get = counted  # type: ignore[method-assign]
        answers = await asyncio.gather(*(read_diskless(node, [(info, "d", p, 0, 1 << 20)], 1 << 20, 0)
                                         for p in range(8)))
        assert all(a[0].size > 1000 for a in answers)
        return len(gets)

    assert run(tmp_path, body) == 1


def test_a_commit_does_not_wait_for_a_long_poll_and_a_wake_ends_the_poll(tmp_path: Path) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        info = await diskless_topic(broker, "d", partitions=2)
        server = KafkaServer(Router(broker), "127.0.0.1", 0)
        await server.start()
        versions = {spec.key: spec.max_version for spec in api_table().values()}
        polls = BrokerChannel(1, "127.0.0.1", server.port, ChannelConfig("peer-2-index"), versions)
        commits = BrokerChannel(1, "127.0.0.1", server.port, ChannelConfig("peer-2"), versions)
        try:  # a consumer on the peer long-polls partition 1 (nothing there: the sequencer waits)
            request = rpc.IndexRequest((rpc.IndexRead(info.topic_id, 1, 0, 1 << 20),), 4000, "poll-1")
            poll = asyncio.ensure_future(polls.request_raw(rpc.DISKLESS_INDEX, rpc.encode_index_request(request),
                                                           timeout_s=20))
            await asyncio.sleep(0.2)
            key = WalKey.new("", 2, int(time.time() * 1000)).key
            proposal = Proposal(info.topic_id, 0, 0, key, 0, 80, 1, 1_700_000_000_000)
            start = time.monotonic()
            raw = await commits.request_raw(rpc.DISKLESS_COMMIT, rpc.encode_commit_request([proposal]), timeout_s=20)
            committed_in = time.monotonic() - start
            (answer,) = rpc.decode_commit_answer(raw, [proposal])
            start = time.monotonic()
            await commits.request_raw(rpc.DISKLESS_INDEX, rpc.encode_index_request(rpc.IndexRequest(wake="poll-1")))
            (empty,) = rpc.decode_index_answer(await poll, 1)
            return committed_in, answer, time.monotonic() - start, empty
        finally:
            await polls.close()
            await commits.close()
            await server.close()

    committed_in, answer, woken_in, empty = run(tmp_path, body)
    assert answer.base_offset == 0 and committed_in < 1.0
    assert woken_in < 1.0 and empty.entries == () and empty.end_offset == 0


def test_retention_removes_merged_segments_past_retention_ms_and_moves_the_log_start(tmp_path: Path) -> None:
    from service.diskless.offsets import list_offset

    async def body(broker):  # noqa: ANN001, ANN202
        node = broker.diskless
        info = await diskless_topic(broker, "old", retention_ms="60000")
        for i in range(3):  # records of long ago (the producer's timestamps), then one of now
            records = batch([b"r%d" % i], 1_700_000_000_000)
            await node.produce(info, 0, records, validate_batches(records, max_message_bytes=1 << 20), False)
        await asyncio.sleep(0.3)
        assert await upkeep.merge_due(node, broker, force=True) == 1  # merged, then expired at once
        fresh = batch([b"now"], int(time.time() * 1000))
        await node.produce(info, 0, fresh, validate_batches(fresh, max_message_bytes=1 << 20), False)
        manifest = node.manifests.load(info.topic_id, 0)[0]
        earliest = await list_offset(node, info, 0, -2)
        latest = await list_offset(node, info, 0, -1)
        return manifest.segments, manifest.log_start_offset, earliest[1], latest[1], node.retention_at

    segments, log_start, earliest, latest, due = run(tmp_path, body, **QUICK)
    assert segments == () and log_start == 3 and earliest == 3 and latest == 4
    assert all(at > 2**62 for at in due.values())  # nothing left to expire by time: no request until a merge
