"""A batch that waited for room and was admitted leaves no expiry timer behind (its timer,
holding its waiter, is cancelled when it leaves the queue)."""

from __future__ import annotations

import asyncio
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


def test_no_expiry_timer_outlives_its_answered_batch(tmp_path: Path) -> None:
    store = FileSystemObjectStore(tmp_path / "bucket")
    one = len(_batch(0))
    gate = asyncio.Event

    async def main() -> int:
        opened = gate()

        async def put(key: str, data: bytes) -> None:
            await opened.wait()
            await asyncio.to_thread(store.put, key, data)

        sequencer = Sequencer(GroupCommitter(CommitChain(store, "c", ChainId(1, 5)), 0, asyncio.to_thread))
        sequencer.lead(PartitionSequence(TOPIC, 0, 0, 0))
        writer = WalWriter("c", 1, put, sequencer.commit, batch_ms=20, batch_bytes=one,
                           commit_deadline_ms=60_000, max_inflight=1)
        writes = []
        for n in range(200):
            batch = _batch(n)
            writes.append(writer.write(TOPIC, 0, 0, batch, read_batch_header(batch)))
        opened.set()
        await asyncio.gather(*writes)
        await writer.close()
        loop = asyncio.get_running_loop()
        left = [h for h in loop._scheduled  # noqa: SLF001
                if not h.cancelled() and getattr(h._callback, "__name__", "") == "_expire"]  # noqa: SLF001
        return len(left)

    left = asyncio.run(main())
    assert left == 0, f"{left} expiry timers still scheduled (60 s each) after every batch was answered"
