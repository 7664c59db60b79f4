"""How late the event loop runs what is due: :class:`LoopLagProbe`, exported by ``/metrics``.

Every request, replica fetch, lease renewal and heartbeat of the broker runs on
one event loop, so any callback that blocks it (a file removal, a replay, an
fsync) delays all of them by as much. The probe schedules one timer callback
every ``event.loop.lag.probe.interval.ms`` and records how much later than due it
ran: the loop's lag, as Node.js's ``monitorEventLoopDelay`` measures it. A stall
longer than the interval always shows, as at least its length less one interval;
shorter stalls may fall between two probes.

Two views of it, because an operator asks two questions:

* ``strata_event_loop_lag_seconds``, a histogram: how often the loop is late by
  how much (``rate`` of the buckets above 50 ms is the alert: past it produce
  latency and replica fetches suffer); it is exact across any number of scrapers.
* ``strata_event_loop_lag_max_seconds``, a gauge: the worst lag of the last one
  to two minutes, so a single multi-second stall (a client's session or request
  timeout) reads as itself and not as one sample among thousands in a bucket.

Idle cost: one timer callback per interval, no per-partition work (at the
default 20 ms, 50 callbacks a second, each a few microseconds).

Not thread-safe: observed and read on the event loop thread.
"""

from __future__ import annotations

import asyncio
import bisect
import time

__all__ = ["LAG_BUCKETS", "LoopLagProbe"]

#: seconds; from below a healthy loop's timer jitter (1 ms) to a stall clients time out on
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: the max gauge covers the current window and the one before it
_MAX_WINDOW_S = 60.0


class LoopLagProbe:
    """Measures the lateness of a periodic timer callback on the running loop."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.buckets = LAG_BUCKETS
        self.counts = [0] * (len(LAG_BUCKETS) + 1)
        self.total_s = 0.0
        self._window_start = time.monotonic()
        self._window_max = 0.0
        self._previous_max = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    def start(self) -> None:
        """Begin probing on the running loop (idempotent)."""
        if self._handle is None:
            self._schedule(asyncio.get_running_loop())

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        # measured on the monotonic clock: uvloop's loop.time() has millisecond steps and is
        # read once per turn of the loop
        self._due = time.monotonic() + self.interval_s
        self._handle = loop.call_later(self.interval_s, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self.observe(max(0.0, time.monotonic() - self._due))
        self._schedule(loop)

    def observe(self, lag_s: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, lag_s)] += 1
        self.total_s += lag_s
        now = time.monotonic()
        if now - self._window_start >= _MAX_WINDOW_S:
            self._previous_max, self._window_max = self._window_max, 0.0
            self._window_start = now
        if lag_s > self._window_max:
            self._window_max = lag_s

    @property
    def recent_max_s(self) -> float:
        """The largest lag of the current window and the previous one (one to two minutes)."""
        return max(self._window_max, self._previous_max)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, count)`` pairs, cumulative, the last bound ``inf``."""
        out, running = [], 0
        for bound, count in zip((*self.buckets, float("inf")), self.counts):
            running += count
            out.append((bound, running))
        return out
