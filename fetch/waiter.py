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
        self._waiters: dict[TopicPartition, set[asyncio.Future[bool]]] = {}

    def notify(self, topic: str, partition: int) -> None:
        futures = self._waiters.pop((topic, partition), None)
        if not futures:
            return
        for fut in futures:
            if not fut.done():
                fut.set_result(True)

    def notify_all(self) -> None:
        for tp in list(self._waiters):
            self.notify(*tp)

    async def wait(self, partitions: Iterable[TopicPartition], timeout_s: float) -> bool:
        """Wait until one of ``partitions`` gets an append; False on timeout.

        One future and one timer per wait (no ``wait_for``/``shield`` tasks): a broker
        with many parked fetches wakes them all on every append."""
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        keys = list(dict.fromkeys(partitions))
        for tp in keys:
            self._waiters.setdefault(tp, set()).add(fut)
        timer = loop.call_later(timeout_s, _expire, fut)
        try:
            return await fut
        finally:
            timer.cancel()
            for tp in keys:
                waiting = self._waiters.get(tp)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[tp]

    @property
    def parked(self) -> int:
        return len({id(f) for futures in self._waiters.values() for f in futures})


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
