"""Long-poll parking for Fetch requests: wake on append, never poll."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

__all__ = ["AppendWaiters"]

TopicPartition = tuple[str, int]


class AppendWaiters:
    """Futures of parked fetches, keyed by the partitions they wait on.

    ``notify`` is called by the produce path after an append moved a high
    watermark; every fetch parked on that partition wakes up and re-reads.
    Not thread-safe: used on the event loop only.
    """

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def notify(self, topic: str, partition: int) -> None:
        futures = self._waiters.pop((topic, partition), None)
        if not futures:
            return
        for fut in futures:
            if not fut.done():
                fut.set_result(None)

    def notify_all(self) -> None:
        for tp in list(self._waiters):
            self.notify(*tp)

    async def wait(self, partitions: Iterable[TopicPartition], timeout_s: float) -> bool:
        """Wait until one of ``partitions`` gets an append; False on timeout."""
        if timeout_s <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(dict.fromkeys(partitions))
        for tp in keys:
            self._waiters.setdefault(tp, set()).add(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            for tp in keys:
                waiting = self._waiters.get(tp)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[tp]
            if not fut.done():
                fut.cancel()

    @property
    def parked(self) -> int:
        return len({id(f) for futures in self._waiters.values() for f in futures})
