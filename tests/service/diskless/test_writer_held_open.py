"""An object held open by the in-flight bound counts its commit deadline from its close,
not from its first batch: a bucket whose PUTs take most of the deadline still commits
every object, with the bound as without it."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from common.record.batch import build_batch, read_batch_header
from remote_tier import FileSystemObjectStore
from remote_tier.diskless.commits import ChainId, CommitChain
from service.diskless.committer import GroupCommitter
from service.diskless.sequence import PartitionSequence
from service.diskless.sequencer import Sequencer
from service.diskless.writer import WalWriter

TOPIC = uuid.UUID("00000000-0000-0000-0000-0000000000dd")


def _batch(n: int) -> bytes:
    return build_batch([(None, f"r{n}-{i}".encode() * 20, (), None) for i in range(2)])


def _scenario(tmp_path: Path, max_inflight: int) -> list[object]:
    store = FileSystemObjectStore(tmp_path / f"bucket{max_inflight}")

    async def put(key: str, data: bytes) -> None:
        await asyncio.sleep(0.3)  # a slow bucket, but well within the 0.5 s deadline
        await asyncio.to_thread(store.put, key, data)

    async def main() -> list[object]:
        sequencer = Sequencer(GroupCommitter(CommitChain(store, "c", ChainId(1, 5)), 0, asyncio.to_thread))
        sequencer.lead(PartitionSequence(TOPIC, 0, 0, 0))
        writer = WalWriter("c", 1, put, sequencer.commit, batch_ms=20, batch_bytes=1 << 20,
                           commit_deadline_ms=500, max_inflight=max_inflight)
        writes = []
        for n in range(2):
            batch = _batch(n)
            writes.append(writer.write(TOPIC, 0, 0, batch, read_batch_header(batch)))
            await asyncio.sleep(0.03)  # the first object has closed: the second is a new one
        results = await asyncio.gather(*writes, return_exceptions=True)
        await writer.close()
        return list(results)

    return asyncio.run(main())


def test_without_the_bound_both_objects_commit(tmp_path: Path) -> None:
    results = _scenario(tmp_path, max_inflight=4)
    assert not any(isinstance(r, BaseException) for r in results), results


def test_at_the_bound_the_held_object_still_commits(tmp_path: Path) -> None:
    start = time.monotonic()
    results = _scenario(tmp_path, max_inflight=1)
    # the second object waited for the first (0.3 s), then its own PUT (0.3 s): 0.6 s after its
    # first batch, past the deadline counted from then, though no PUT took longer than 0.3 s
    assert not any(isinstance(r, BaseException) for r in results), (results, time.monotonic() - start)
