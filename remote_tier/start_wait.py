"""A starting broker's wait for an object store that does not answer yet.

A cluster restarted as a whole (a power cut, a Kubernetes namespace brought back) often
starts its brokers before its MinIO answers. A KRaft broker in that spot waits for its
controller quorum; a Strata broker, whose cluster metadata is in the bucket, waits for the
bucket: only through failures that may pass by themselves (:class:`ObjectStoreUnreachable`:
no connection, a timeout, a 5xx), for at most ``object.store.start.wait.ms``, and saying
what fails at the first try and every ``every_s`` after. A missing bucket or refused
credentials, which no wait mends, end the start at the first try.

:meth:`StartWait.run` tries a blocking call until it succeeds (the command line's check of
the bucket), :meth:`StartWait.run_async` an awaitable one (the broker's join, on the event
loop); either raises what no wait mends, or the last failure once the wait is over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from common.spell_log import SpellLog
from remote_tier.errors import unreachable_store

__all__ = ["StartWait"]

_log = logging.getLogger(__name__)
T = TypeVar("T")

#: the first pause between two tries; it doubles up to ``MAX_PAUSE_S``
FIRST_PAUSE_S = 0.25
MAX_PAUSE_S = 2.0


class StartWait:
    """One start's wait for ``what`` (e.g. "the object store at s3://b/p"). Not thread-safe."""

    def __init__(self, what: str, wait_ms: int, *, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.wait_s = wait_ms / 1000
        self._clock = clock
        self._spell = SpellLog(every_s, clock)
        self._since = clock()  # the wait counts from the first try
        self._pause = FIRST_PAUSE_S

    def retry_after(self, exc: BaseException) -> float | None:
        """After a failed try: how many seconds to sleep before the next one, or None to give
        up (``exc`` is not an unreachable store, or the wait is over; the caller raises or
        reports it)."""
        down = unreachable_store(exc)
        if down is None:
            return None
        waited = self._clock() - self._since
        if waited >= self.wait_s:
            if self.wait_s > 0:
                _log.error("gave up waiting for %s after %.0f s and %d failed attempt(s) "
                           "(object.store.start.wait.ms=%d)", self.what, waited, self._spell.count + 1,
                           self.wait_s * 1000)
            return None
        if self._spell.failed():
            _log.warning("%s does not answer yet (%s); waiting up to %.0f s more for it "
                         "(object.store.start.wait.ms); %d attempt(s) failed so far", self.what, down,
                         self.wait_s - waited, self._spell.count)
        pause = min(self._pause, self.wait_s - waited)
        self._pause = min(self._pause * 2, MAX_PAUSE_S)
        return pause

    def answered(self) -> None:
        """The try succeeded: says so if tries failed before it."""
        failed = self._spell.ended()
        if failed:
            _log.warning("%s answers: waited %.1f s through %d failed attempt(s)", self.what,
                         self._clock() - self._since, failed)

    def run(self, attempt: Callable[[], T]) -> T:
        """``attempt()`` until it succeeds, sleeping between tries (blocking)."""
        while True:
            try:
                result = attempt()
            except Exception as exc:
                pause = self.retry_after(exc)
                if pause is None:
                    raise
                time.sleep(pause)
                continue
            self.answered()
            return result

    async def run_async(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``await attempt()`` until it succeeds, sleeping on the loop between tries."""
        while True:
            try:
                result = await attempt()
            except Exception as exc:
                pause = self.retry_after(exc)
                if pause is None:
                    raise
                await asyncio.sleep(pause)
                continue
            self.answered()
            return result
