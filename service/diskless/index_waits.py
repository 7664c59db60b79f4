"""The long polls a sequencer holds for DisklessIndex: :class:`IndexWaits` (ADR 0027, "On the
wire"), and when a poll's answers are :func:`enough` to send.

A poll waits for a commit to any of its partitions (:meth:`IndexWaits.touch`) or for its
reader's ``wake`` (another sequencer answered that reader first). A wake can arrive before
its poll (it comes on another connection), or between a commit's touch and the poll's
next look: it is kept for a while and the poll, when it looks, answers at once.

Not thread-safe: the event loop owns it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence

from common.errors import KafkaError
from service.diskless.rpc import IndexAnswer, IndexRead

__all__ = ["IndexWaits", "enough"]

Key = tuple[uuid.UUID, int]

#: a wake that came before its poll is kept this long, and at most this many
_WOKEN_TTL_S = 30.0
_WOKEN_MAX = 1024


class IndexWaits:
    """See the module docstring."""

    def __init__(self) -> None:
        self._watch: dict[Key, list[asyncio.Future[bool]]] = {}
        self._polls: dict[str, asyncio.Future[bool]] = {}
        self._woken: dict[str, float] = {}  # poll -> when its wake came, before the poll

    def touch(self, key: Key) -> None:
        """A commit to ``key`` (or its sequencer changed): its polls look again."""
        for waiting in self._watch.pop(key, ()):
            if not waiting.done():
                waiting.set_result(False)

    def wake(self, poll: str) -> None:
        """End the wait of the long poll ``poll``; kept for a while if it has not arrived."""
        waiting = self._polls.get(poll)
        if waiting is not None and not waiting.done():
            waiting.set_result(True)
            return
        # not arrived yet, or just touched by a commit and about to look again (a poll
        # waiting for min_bytes): kept, so its next look answers
        now = time.monotonic()
        self._woken[poll] = now
        if len(self._woken) > _WOKEN_MAX:
            stale = [p for p, at in self._woken.items() if now - at > _WOKEN_TTL_S] or list(self._woken)[:_WOKEN_MAX // 2]
            for p in stale:
                del self._woken[p]

    def woken_before(self, poll: str) -> bool:
        """Whether ``poll``'s wake came before it (then it answers at once)."""
        at = self._woken.pop(poll, None)
        return at is not None and time.monotonic() - at <= _WOKEN_TTL_S

    async def wait_any(self, keys: set[Key], timeout_s: float, poll: str) -> bool:
        """Until a commit to one of ``keys``, ``poll``'s wake, or ``timeout_s``; True when
        woken (the poll must answer now)."""
        waiting: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._watch.setdefault(key, []).append(waiting)
        if poll:
            self._polls[poll] = waiting
        try:
            return await asyncio.wait_for(waiting, timeout_s)
        except TimeoutError:
            return False
        finally:
            if poll and self._polls.get(poll) is waiting:
                del self._polls[poll]
            for key in keys:
                watching = self._watch.get(key)
                if watching is not None and waiting in watching:
                    watching.remove(waiting)
                    if not watching:
                        del self._watch[key]

    async def wait_out(self, keys: set[Key], busy: Callable[[Key], bool], timeout_s: float, poll: str) -> bool:
        """Until none of ``keys`` is ``busy`` (a takeover in progress: it touches its key when
        it ends), ``poll``'s wake, or ``timeout_s``; True when woken (the poll must answer now)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (left := deadline - loop.time()) > 0 and (still := {key for key in keys if busy(key)}):
            if await self.wait_any(still, left, poll):
                return True
        return False


def enough(reads: Sequence[IndexRead], answers: Sequence[IndexAnswer | KafkaError], min_bytes: int) -> bool:
    """Whether a poll answers now: its entries hold ``min_bytes`` (at least one entry), or
    a partition has something else to act on."""
    size = 0
    for read, answer in zip(reads, answers, strict=True):
        if isinstance(answer, KafkaError) or read.offset < answer.start_offset or read.offset > answer.end_offset:
            return True
        size += sum(entry.size for entry in answer.entries)
    return size > 0 and size >= min_bytes
