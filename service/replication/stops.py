"""Partitions the metadata took from this broker, stopped a slice of the loop at a time: :class:`Stops`.

A topic deleted, or moved away, leaves the replica manager's table at once (requests for it
answer as for any partition not hosted here, and follower fetches for it end), but what
stopping a partition does besides (its leadership listeners, its log handed to the deletes,
the produces waiting on it failed) takes 25-35 us per partition: a 1,000-partition topic
deleted held the event loop 31 ms on a quiet machine, and twice that under load, where the
loop-lag test saw probes more than 50 ms late. Here those stops run for at most
:data:`SLICE_S` per turn of the loop, in the order the partitions left; a partition opened
again before its turn (its topic created again under the same name, or moved back) is
stopped first (:meth:`Stops.settle`), so its listeners hear the resignation before the new
leadership and its new log never meets the old one.

Not thread-safe: the replica manager's event loop owns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import NamedTuple

from service.replication.partition import Partition

__all__ = ["SLICE_S", "Stop", "Stops"]

TopicPartition = tuple[str, int]
#: the stops of one turn of the loop take about this long at most
SLICE_S = 0.005
#: the next slice waits this long: a timer, so I/O and timers run in between
NEXT_TURN_S = 0.001


class Stop(NamedTuple):
    """A partition that left the table, and why."""

    key: TopicPartition
    partition: Partition
    deleted: bool  # its topic is gone (not only moved away)
    reason: str


class Stops:
    """The stops not run yet (module docstring). ``stop_one`` stops one; ``drained`` runs each
    time no stop is left (the deleted logs are then closed and renamed)."""

    def __init__(self, stop_one: Callable[[Stop], None], drained: Callable[[], None]) -> None:
        self._stop_one = stop_one
        self._drained = drained
        self._pending: dict[TopicPartition, Stop] = {}
        self._scheduled = False

    def __contains__(self, key: object) -> bool:
        return key in self._pending

    def add(self, stop: Stop) -> None:
        self._pending[stop.key] = stop

    def run(self) -> None:
        """Stop partitions for one slice, the rest on later turns; all at once without a
        running loop (start-up and tests apply before the loop runs)."""
        loop = _running_loop()
        ends = time.monotonic() + SLICE_S if loop is not None else float("inf")
        pending = self._pending
        try:
            while pending:
                self._stop_one(pending.pop(next(iter(pending))))
                if pending and time.monotonic() > ends:
                    break
        finally:  # a stop that raised leaves the rest to the next turn, not to the next apply
            if pending and loop is not None and not self._scheduled:
                self._scheduled = True
                loop.call_later(NEXT_TURN_S, self._next)
        if not pending:
            self._drained()

    def _next(self) -> None:
        """The next slice; or, when :meth:`settle` took the last ones meanwhile, the drain."""
        self._scheduled = False
        self.run()

    def settle(self, key: TopicPartition) -> None:
        """``key`` is about to be opened again: stop its predecessor now."""
        stop = self._pending.pop(key, None)
        if stop is not None:
            self._stop_one(stop)

    def finish(self) -> None:
        """Stop every one left now (the broker shuts down)."""
        while self._pending:
            self.settle(next(iter(self._pending)))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    with contextlib.suppress(RuntimeError):
        return asyncio.get_running_loop()
    return None
