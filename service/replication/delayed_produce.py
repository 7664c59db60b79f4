"""Produce requests waiting for the ISR (acks=all): :class:`ProduceWaiters`.

Kafka's produce purgatory: a request whose records are appended but not yet on
every in-sync replica waits, keyed by its partition and the offset its records
end before, until the leader's high watermark reaches that offset. The replica
manager calls :meth:`ProduceWaiters.wake` whenever a partition's high watermark,
ISR or leadership changes; only the waiters whose offset the high watermark has
passed are completed (a heap per partition, lowest offset first), so a follower's
fetch costs the waiters it completes, not every waiting request. Each waiter has
one timer (REQUEST_TIMED_OUT).

Completion is :meth:`Partition.replicated`'s answer: done, or
``NOT_ENOUGH_REPLICAS_AFTER_APPEND`` (the ISR shrank below ``min.insync.replicas``),
or ``NOT_LEADER_OR_FOLLOWER`` (the leadership moved: every waiter of the partition).

Not thread-safe: the event loop only.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

from common.errors import KafkaError, NotLeaderOrFollowerError, RequestTimedOutError
from service.replication.partition import Partition

__all__ = ["ProduceWaiters"]

TopicPartition = tuple[str, int]
_Waiter = tuple[int, int, "asyncio.Future[None]"]  # (end offset, arrival, its future)


class ProduceWaiters:
    """See the module docstring."""

    def __init__(self) -> None:
        self._waiting: dict[TopicPartition, list[_Waiter]] = {}
        self._arrival = itertools.count()

    async def wait(self, partition: Partition, offset: int, timeout_ms: int) -> None:
        """Until the ISR holds every offset below ``offset`` (see the module docstring)."""
        if partition.replicated(offset):
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        key = (partition.topic, partition.index)
        heapq.heappush(self._waiting.setdefault(key, []), (offset, next(self._arrival), fut))
        timer = loop.call_later(timeout_ms / 1000, _expire, fut, partition.name, offset, timeout_ms)
        try:
            await fut
        finally:
            timer.cancel()

    def wake(self, partition: Partition) -> None:
        """Complete the waiters of ``partition`` that its state now answers."""
        key = (partition.topic, partition.index)
        heap = self._waiting.get(key)
        while heap:
            offset, _, fut = heap[0]
            if not fut.done():
                try:
                    if not partition.replicated(offset):
                        return  # the lowest offset is not there yet: neither are the others
                except KafkaError as exc:
                    fut.set_exception(exc)
                else:
                    fut.set_result(None)
            heapq.heappop(heap)
        self._waiting.pop(key, None)

    def fail(self, key: TopicPartition, why: str, error: type[KafkaError] = NotLeaderOrFollowerError) -> None:
        """The partition is no longer hosted here: its waiters get NOT_LEADER_OR_FOLLOWER
        (or ``error``: KAFKA_STORAGE_ERROR when its log directory failed)."""
        for _, _, fut in self._waiting.pop(key, ()):
            if not fut.done():
                fut.set_exception(error(why))

    @property
    def waiting(self) -> int:
        return sum(1 for heap in self._waiting.values() for _, _, fut in heap if not fut.done())


def _expire(fut: asyncio.Future[None], name: str, offset: int, timeout_ms: int) -> None:
    if not fut.done():
        fut.set_exception(RequestTimedOutError(
            f"{name}: the ISR did not replicate offset {offset - 1} in {timeout_ms} ms"
        ))
