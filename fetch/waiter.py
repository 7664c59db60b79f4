"""Long-poll parking for Fetch requests: wake on append, never poll.

Two kinds of interest: a parked fetch (:meth:`AppendWaiters.wait`, for one request) and a
standing :class:`Watch` (a follower's fetch session, for as long as the session lives),
which collects the partitions that changed so a request reads only those.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

__all__ = ["AppendWaiters", "Watch"]

TopicPartition = tuple[str, int]


class AppendWaiters:
    """Futures of parked fetches, keyed by the partitions they wait on.

    ``notify`` is called by the produce path after an append moved a high
    watermark; every fetch parked on that partition wakes up and re-reads.
    Not thread-safe: used on the event loop only.
    """

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[bool]]] = {}
        self._watches: dict[TopicPartition, set[Watch]] = {}
        #: parked fetches woken so far (a produce compares it around its appends)
        self.woken = 0

    def notify(self, topic: str, partition: int) -> None:
        self.touch(topic, partition)
        futures = self._waiters.pop((topic, partition), None)
        if not futures:
            return
        for fut in futures:
            if not fut.done():
                fut.set_result(True)
                self.woken += 1

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

    def touch(self, topic: str, partition: int) -> None:
        """Something a watch reports changed on the partition (its log start, say), but
        nothing a parked fetch waits for: only the watches hear of it."""
        watches = self._watches.get((topic, partition))
        if watches:
            for watch in watches:
                watch.mark((topic, partition))

    def watch(self) -> Watch:
        """A standing interest in partitions, empty until :meth:`Watch.add`."""
        return Watch(self._watches)

    @property
    def watched(self) -> int:
        """Partitions some watch holds."""
        return len(self._watches)

    @property
    def parked(self) -> int:
        return len({id(f) for futures in self._waiters.values() for f in futures})


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


class Watch:
    """The partitions one follower fetch session holds; :meth:`take` returns those touched
    since the last take, and :meth:`wait` parks until one is. Closed with its session."""

    __slots__ = ("_index", "keys", "dirty", "_future")

    def __init__(self, index: dict[TopicPartition, set[Watch]]) -> None:
        self._index = index
        self.keys: set[TopicPartition] = set()
        self.dirty: set[TopicPartition] = set()
        self._future: asyncio.Future[bool] | None = None

    def add(self, keys: Iterable[TopicPartition]) -> None:
        index = self._index
        for key in keys:
            if key not in self.keys:
                self.keys.add(key)
                index.setdefault(key, set()).add(self)

    def remove(self, keys: Iterable[TopicPartition]) -> None:
        index = self._index
        for key in keys:
            if key in self.keys:
                self.keys.discard(key)
                self.dirty.discard(key)
                watches = index.get(key)
                if watches is not None:
                    watches.discard(self)
                    if not watches:
                        del index[key]

    def close(self) -> None:
        self.remove(list(self.keys))
        if self._future is not None and not self._future.done():
            self._future.set_result(False)

    def mark(self, key: TopicPartition) -> None:
        self.dirty.add(key)
        if self._future is not None and not self._future.done():
            self._future.set_result(True)

    def take(self) -> set[TopicPartition]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    async def wait(self, timeout_s: float) -> bool:
        """Until a partition is touched (True at once if one was) or ``timeout_s``."""
        if self.dirty:
            return True
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        fut = self._future = loop.create_future()
        timer = loop.call_later(timeout_s, _expire, fut)
        try:
            return await fut
        finally:
            timer.cancel()
            if self._future is fut:
                self._future = None
