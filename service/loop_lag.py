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

Idle cost: one timer callback per interval, no per-partition work. The default is
100 ms, 10 wakeups a second: at 20 ms the probe was a third of an idle broker's
event-loop time (py-spy, 10,000 partitions), each wakeup a turn of the loop.

A stall is also told in the log, with where the loop thread was: :class:`StallWatch`, a
daemon thread, looks at the probe when it would be late by ``event.loop.stall.log.ms`` and,
when it is, takes the loop thread's stack; it then looks every quarter of that bound until
the loop runs again, and logs the stall's length and that stack. Full garbage collections
longer than the same bound are logged too (they hold every thread; the watch cannot see
them from inside).

Not thread-safe: observed and read on the event loop thread (the watch only reads the
probe's due time, one float).
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import logging
import sys
import threading
import time
import traceback
from typing import Any

__all__ = ["LAG_BUCKETS", "LoopLagProbe", "StallWatch"]

log = logging.getLogger("strata.loop")

#: seconds; from below a healthy loop's timer jitter (1 ms) to a stall clients time out on
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: the max gauge covers the current window and the one before it
_MAX_WINDOW_S = 60.0


class LoopLagProbe:
    """Measures the lateness of a periodic timer callback on the running loop."""

    def __init__(self, interval_s: float, stall_log_s: float = 0.0) -> None:
        self.interval_s = interval_s
        #: stalls longer than this are logged with the loop thread's stack (0: not watched)
        self.watch = StallWatch(self, stall_log_s) if stall_log_s > 0 else None
        self.buckets = LAG_BUCKETS
        self.counts = [0] * (len(LAG_BUCKETS) + 1)
        self.total_s = 0.0
        self._window_start = time.monotonic()
        self._window_max = 0.0
        self._previous_max = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    @classmethod
    def of(cls, config: Any) -> LoopLagProbe:
        """The probe a broker's configs ask for."""
        return cls(config.get_int("event.loop.lag.probe.interval.ms") / 1000,
                   config.get_int("event.loop.stall.log.ms") / 1000)

    def start(self) -> None:
        """Begin probing on the running loop (idempotent)."""
        if self._handle is None:
            self._schedule(asyncio.get_running_loop())
            if self.watch is not None:
                self.watch.start(threading.get_ident())

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self.watch is not None:
            self.watch.stop()

    @property
    def due(self) -> float:
        """When the next probe is due (``time.monotonic()``)."""
        return self._due

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


class StallWatch:
    """Logs each stall of the loop longer than ``threshold_s`` with the loop thread's stack
    taken during it, and each full garbage collection longer than that (module docstring).
    Its thread wakes when the pending probe would be late by ``threshold_s`` (at the default
    100 ms probe and 200 ms threshold, three to five times a second), and four times per
    ``threshold_s`` while a stall goes on; nothing else runs while the loop is fine."""

    def __init__(self, probe: LoopLagProbe, threshold_s: float) -> None:
        self.threshold_s = threshold_s
        self.stalls = 0
        self.gc_pauses = 0
        self.looks = 0  # wake-ups of the watch's thread
        self._probe = probe
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_thread = 0
        self._gc_start = 0.0

    def start(self, loop_thread: int) -> None:
        self._loop_thread = loop_thread
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="strata-stall-watch", daemon=True)
        self._thread.start()
        gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        self._stop.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _run(self) -> None:
        seen_due, stack, worst = -1.0, "", 0.0
        during = max(self.threshold_s / 4, 0.005)  # the wait while a stall goes on
        wait = during
        while not self._stop.wait(wait):
            self.looks += 1
            due = self._probe.due
            now = time.monotonic()
            late = now - due
            if seen_due >= 0 and due != seen_due:  # the loop ran again: tell the stall, once
                self.stalls += 1
                log.warning("the event loop stalled for at least %.0f ms; its thread was running:\n%s",
                            worst * 1000, stack.rstrip())
                seen_due, stack, worst = -1.0, "", 0.0
            if due == seen_due:
                worst = max(worst, late)  # the same stall, still going on
            elif late > self.threshold_s:
                frame = sys._current_frames().get(self._loop_thread)
                stack = "".join(traceback.format_stack(frame, limit=25)) if frame is not None else "(unknown)\n"
                seen_due, worst = due, late
            # A stall shows first when the pending probe is late by more than the threshold:
            # until then there is nothing to look at (a fixed quarter-threshold wait woke an
            # idle broker twenty times a second, each wake-up taking the interpreter's lock
            # from the loop thread)
            wait = during if seen_due >= 0 else max(due + self.threshold_s * 1.05 - now, 0.005)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
            return
        took = time.perf_counter() - self._gc_start
        if took > self.threshold_s:
            self.gc_pauses += 1
            log.warning("a garbage collection of generation %d held every thread for %.0f ms (%d collected)",
                        info.get("generation", -1), took * 1000, info.get("collected", 0))
