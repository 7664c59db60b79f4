"""Collecting diskless objects (ADR 0027, sections 3 and 8) on real stores: orphans of a
writer that never committed go after the grace period, never before; merged slots go as a
prefix of their chain and the objects only they named with them; what is unmerged stays and
a new sequencer still reads it."""

from __future__ import annotations

import asyncio
import time
import uuid

from common.record.batch import build_batch, read_batch_header
from local_tier.config import LogConfig
from remote_tier import ObjectStore
from remote_tier.diskless.commits import ChainId, CommitChain
from remote_tier.diskless.wal import WalKey
from remote_tier.manifest import ManifestStore
from remote_tier.storage_manager import RemoteStorageManager
from service.diskless.collector import collect
from service.diskless.committer import GroupCommitter
from service.diskless.merge import merge, mergeable
from service.diskless.sequencer import Sequencer
from service.diskless.takeover import take_over
from service.diskless.writer import WalWriter

TOPIC = uuid.UUID("00000000-0000-0000-0000-0000000000ff")
GRACE_MS = 600_000


def test_orphans_and_merged_data_are_collected_and_nothing_unmerged(store: ObjectStore):
    sequencer = Sequencer(GroupCommitter(CommitChain(store, "c", ChainId(1, 1)), 0, asyncio.to_thread))
    sequencer.lead(take_over(store, "c", ManifestStore(store, "c"), TOPIC, 0, "t", 1, ChainId(1, 1), 0))

    async def produce() -> None:
        async def put(key: str, data: bytes) -> None:
            await asyncio.to_thread(store.put, key, data)

        writer = WalWriter("c", 1, put, sequencer.commit, batch_ms=5, batch_bytes=1 << 20, commit_deadline_ms=30_000)
        for n in range(5):
            batch = build_batch([(None, f"v{n}".encode(), (), None)])
            await writer.write(TOPIC, 0, 1, batch, read_batch_header(batch))

    asyncio.run(produce())
    orphan = WalKey.new("c", 2, int(time.time() * 1000)).key  # a writer that died before its commit
    store.put(orphan, b"batches nobody committed")
    now = int(time.time() * 1000)

    early = collect(store, "c", now_ms=now, grace_ms=GRACE_MS, topic_exists=lambda _: True)
    assert (early.slots_deleted, early.objects_deleted) == (0, 0)  # nothing is old enough yet

    sequence = sequencer.get(TOPIC, 0)
    later = now + GRACE_MS + 1000
    chosen = mergeable(sequence, now_ms=later, commit_deadline_ms=30_000, max_bytes=3 * sequence.durable[0].size)
    merged = merge(RemoteStorageManager(store, prefix="c"), "t", TOPIC, 0, 1, chosen, store.get, LogConfig(), ())
    sequence.merged_up_to(merged.next_offset, merged.producers)
    merged_objects = {e.object_key for e in chosen}
    kept_objects = {e.object_key for e in sequence.durable}

    seen: dict = {}
    report = collect(store, "c", now_ms=later, grace_ms=GRACE_MS, topic_exists=lambda _: True, seen=seen)

    left = {info.key for info in store.list("c/diskless/wal/")}
    assert orphan not in left and not (merged_objects & left) and kept_objects <= left
    assert report.objects_deleted == len(merged_objects) + 1 and report.slots_deleted == 3
    assert CommitChain(store, "c", ChainId(1, 1)).slots() == [3, 4]
    # a new sequencer still finds the unmerged entries, though the listed start slot is gone
    fresh = take_over(store, "c", ManifestStore(store, "c"), TOPIC, 0, "t", 2, ChainId(2, 1), 0)
    assert fresh.start_offset == 3 and [e.base_offset for e in fresh.durable] == [3, 4]

    gone = collect(store, "c", now_ms=later, grace_ms=GRACE_MS, topic_exists=lambda _: False, seen=seen)
    assert gone.objects_deleted == 2 and CommitChain(store, "c", ChainId(1, 1)).slots() == [4]


def test_an_unreadable_slot_keeps_every_object(store: ObjectStore):
    old = WalKey.new("c", 2, 1_000).key  # unreferenced, long past the grace period
    store.put(old, b"x")
    store.put(CommitChain(store, "c", ChainId(5, 1)).key(0), b'{"version": 2}')  # a newer broker's slot
    report = collect(store, "c", now_ms=int(time.time() * 1000), grace_ms=GRACE_MS, topic_exists=lambda _: True)
    assert report.objects_deleted == 0 and {i.key for i in store.list("c/diskless/wal/")} == {old}
