"""A wake that arrives after a commit's touch resolved the poll's future, but before the
poll's coroutine resumed, still ends a poll waiting for min_bytes (it must not wait again
to max_wait while its reader was answered elsewhere)."""

from __future__ import annotations

import asyncio
import time
import types
import uuid

from remote_tier.diskless.commits import CommitEntry  # noqa: F401 - only to check the import path
from service.diskless import rpc
from service.diskless.index_waits import IndexWaits
from service.diskless.node import DisklessNode

TOPIC = uuid.UUID("00000000-0000-0000-0000-0000000000ee")


def test_a_wake_right_after_a_touch_ends_the_min_bytes_poll() -> None:
    async def scenario() -> float:
        waits = IndexWaits()
        # a sequencer whose partition holds nothing (or less than min_bytes) at every look
        fake = types.SimpleNamespace(
            waits=waits,
            _index_one=lambda read: rpc.IndexAnswer(0, 0, ()),
            _loading=set(),
        )
        reads = [rpc.IndexRead(TOPIC, 0, 0, 1 << 20)]
        start = time.monotonic()
        polling = asyncio.ensure_future(DisklessNode.index_here(fake, reads, 3000, "poll-1", 6000))
        await asyncio.sleep(0.1)
        assert not polling.done()
        # a small commit to the partition (not enough for min_bytes) and, in the same turn of
        # the loop, the reader's wake (another sequencer answered it first)
        waits.touch((TOPIC, 0))
        waits.wake("poll-1")
        await polling
        return time.monotonic() - start

    elapsed = asyncio.run(scenario())
    assert elapsed < 1.0, f"the woken poll answered only after {elapsed:.2f}s (its max_wait)"
