"""Metadata reaching the broker: :class:`MetadataPoller`.

A thread refreshes the :class:`controller.MetadataView` every
``metadata.poll.interval.ms`` (one HEAD of ``cluster/metadata.json``, a GET only
when it changed), off the event loop. Every newer snapshot the view installs --
from this poll, or offered by this broker's own controller right after it
committed -- is handed to the event loop, where ``apply(snapshot)`` runs with
the newest snapshot only (snapshots that arrive while one is pending are
coalesced: applying is idempotent, it reconciles the broker with the snapshot).

So a change committed by the controller reaches every broker within one poll
interval plus a GET (500 ms by default), and the controller's own broker at once.
When a peer is lost (its controller-channel or replica-fetcher connection drops: a
broker died, or the controller), leaderships are about to move: the poll then runs
every :data:`FAST_INTERVAL_S` for :data:`FAST_FOR_S` (:meth:`MetadataPoller.poll_fast`),
so the new leaders learn of the controller's fencing batch within 10 ms (plus a GET) of
its commit instead of up to a whole interval later (up to 300 GETs of an empty slot per lost
peer; on S3, whose GETs take longer than that, the polls simply follow one another).
A request that would otherwise be answered "unknown" (a topic created a moment ago
through another broker) calls :meth:`MetadataPoller.refresh` first: one read of the
store, shared by every request waiting at that moment, at most one every
:data:`MIN_REFRESH_INTERVAL_S`, so clients never act on a view older than that.

Thread-safety: :meth:`MetadataPoller.start`, :meth:`refresh` and :meth:`close` from the loop;
the poll runs on its own daemon thread; ``apply`` always on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from controller.commit import Snapshot
from controller.lease_record import monotonic_ms
from controller.metadata_view import MetadataView

__all__ = ["FAST_FOR_S", "FAST_INTERVAL_S", "MIN_REFRESH_INTERVAL_S", "MetadataPoller"]

#: a read-through :meth:`MetadataPoller.refresh` starts at most this often (a client
#: asking again and again for a topic that does not exist costs one HEAD per interval)
MIN_REFRESH_INTERVAL_S = 0.05

#: after a peer is lost, the poll runs this often (50 ms until stop 53: on average 25 ms of
#: every failover was spent waiting for the next poll) ...
FAST_INTERVAL_S = 0.01
#: ... for this long (the controller fences a broker whose connection dropped at once, or
#: after its session when the drop was a network fault; a new controller takes over)
FAST_FOR_S = 3.0
#: the other brokers' fencings are made ahead once the newest image has been still this long
#: (the controller's fencing plans wait as long) ...
AHEAD_QUIET_S = 2.0
#: ... looked at this often, and made a step at a time this far apart; a look that finds
#: nothing to do doubles the wait up to AHEAD_IDLE_S, and a newly installed image brings the
#: next look at once (an idle broker's ahead thread woke ten times a second)
AHEAD_CHECK_S = 0.1
AHEAD_STEP_S = 0.02
AHEAD_IDLE_S = 0.5

#: an apply slower than this is logged
SLOW_APPLY_S = 0.25

_log = logging.getLogger("strata.cluster.metadata")


class MetadataPoller:
    """Polls the view on a thread and applies newer snapshots on the loop."""

    def __init__(
        self,
        view: MetadataView,
        interval_ms: int,
        apply: Callable[[Snapshot], None],
        loop: asyncio.AbstractEventLoop,
        name: str = "strata-metadata",
        *,
        ahead_node_id: int | None = None,
        may_prepare_ahead: Callable[[], bool] = lambda: True,
        plan_ahead: Callable[[], bool] = lambda: False,
    ) -> None:
        self._view = view
        #: this broker's id, to make the other brokers' fencings ahead (None: none made)
        self._ahead_node_id = ahead_node_id
        self._may_prepare_ahead = may_prepare_ahead
        #: one more step of this broker's applies of those fencings (and of the local active
        #: controller's) worked out ahead; True when more are to be made
        self._plan_ahead = plan_ahead
        self._ahead_thread: threading.Thread | None = None
        self._interval_s = interval_ms / 1000
        self._apply = apply
        self._loop = loop
        self._name = name
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._ahead_wake = threading.Event()  # a new image, or closing: the ahead thread looks
        self._fast_until = float("-inf")  # time.monotonic() until which the poll runs fast
        self._thread: threading.Thread | None = None
        self._scheduled = False
        self._lock = threading.Lock()
        self.applied_revision = -1
        #: the read-through refresh callers wait for that has not started yet, and whether one runs
        self._next_refresh: asyncio.Future[None] | None = None
        self._refreshing = False
        self._last_refresh_start = float("-inf")
        # when the last read of the store that succeeded started (seconds of monotonic_ms)
        self._last_read_s = monotonic_ms() / 1000
        view.add_snapshot_listener(self._installed)

    def age_s(self) -> float:
        """Seconds since a read of the cluster metadata from the store that then succeeded
        started (a broker cut off from the bucket sees it grow; any thread)."""
        return monotonic_ms() / 1000 - self._last_read_s

    def _read_succeeded(self, started: float) -> None:
        """A read that started at ``started`` succeeded: what it read is as new as its start,
        not its end. A read in flight when the process was paused (SIGSTOP, a VM freeze)
        completes on waking with the metadata from before the pause; counted from its end,
        the broker took itself for up to date, asked the controller to be unfenced, and
        served a group's offsets from before the pause (a CI run of the paused-coordinator
        test)."""
        self._last_read_s = max(self._last_read_s, started)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        if self._ahead_node_id is not None and self._ahead_thread is None:
            self._ahead_thread = threading.Thread(target=self._prepare_ahead, name=f"{self._name}-ahead",
                                                  daemon=True)
            self._ahead_thread.start()

    def _prepare_ahead(self) -> None:
        """The other brokers' fencings made ahead from the newest image once it has been
        still for :data:`AHEAD_QUIET_S` (``controller.fence_ahead``), a broker at a time, never
        while the poll runs fast (a peer was just lost) or the local controller is the
        active one (it hands this view its own images: nothing here is replayed). Then this
        broker's applies of those fencings, or of the local controller's, worked out ahead
        (``service.replication.apply_plan``)."""
        assert self._ahead_node_id is not None
        wait = AHEAD_CHECK_S
        while True:
            woken = self._ahead_wake.wait(wait)
            self._ahead_wake.clear()
            if self._stop.is_set():
                return
            steps = 0
            try:
                if not self._may_prepare_ahead():
                    self._view.drop_ahead()
                # a step at a time (a chunk of elections, one broker's batches, one batch's
                # apply), with a pause between: the loop thread keeps its share of the interpreter
                while (time.monotonic() >= self._fast_until and self._may_prepare_ahead()
                       and self._view.prepare_ahead(self._ahead_node_id, AHEAD_QUIET_S)
                       and not self._stop.wait(AHEAD_STEP_S)):
                    steps += 1
                while (time.monotonic() >= self._fast_until and self._plan_ahead()
                       and not self._stop.wait(AHEAD_STEP_S)):
                    steps += 1
            except Exception:  # noqa: BLE001 - a cache: the batches are replayed as always
                _log.exception("making the fencings ahead failed")
            wait = AHEAD_CHECK_S if woken or steps else min(wait * 2, AHEAD_IDLE_S)
            fast_left = self._fast_until - time.monotonic()
            if fast_left > 0:  # look again when the poll stops running fast
                wait = min(wait, fast_left + AHEAD_CHECK_S)

    def poll_now(self) -> None:
        """Refresh at once instead of at the next interval."""
        self._wake.set()

    def poll_fast(self, for_s: float = FAST_FOR_S) -> None:
        """Refresh at once, then every :data:`FAST_INTERVAL_S` for ``for_s`` (a peer was
        lost: leaderships are about to move). Any thread."""
        self._fast_until = max(self._fast_until, time.monotonic() + for_s)
        self._wake.set()

    def _next_interval_s(self) -> float:
        if time.monotonic() < self._fast_until:
            return min(self._interval_s, FAST_INTERVAL_S)
        return self._interval_s

    async def refresh(self) -> None:
        """Read the store's newest metadata and apply it, before returning.

        The read starts after this call (unless one started less than
        :data:`MIN_REFRESH_INTERVAL_S` ago), so a change the controller committed
        before the call is applied when it returns; callers arriving while a read is
        in flight share the next one. A failed read is logged, not raised: the caller
        answers from the view it has.
        """
        if self._next_refresh is None:
            self._next_refresh = self._loop.create_future()
            if not self._refreshing:
                self._refreshing = True
                self._loop.create_task(self._refresh_rounds(), name=f"{self._name}-refresh")
        await asyncio.shield(self._next_refresh)

    async def _refresh_rounds(self) -> None:
        try:
            while self._next_refresh is not None:
                waiting, self._next_refresh = self._next_refresh, None
                if time.monotonic() - self._last_refresh_start >= MIN_REFRESH_INTERVAL_S:
                    self._last_refresh_start = time.monotonic()
                    started = monotonic_ms() / 1000
                    try:
                        await asyncio.to_thread(self._view.refresh)
                        self._read_succeeded(started)
                    except Exception as exc:  # noqa: BLE001 - answered from the view it has
                        _log.warning("cannot read the cluster metadata: %s", exc)
                    self._apply_latest()
                waiting.set_result(None)
        finally:
            self._refreshing = False

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._ahead_wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._ahead_thread is not None:
            self._ahead_thread.join(timeout=10)
            self._ahead_thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            started = monotonic_ms() / 1000
            try:
                self._view.refresh()
                self._read_succeeded(started)
            except Exception as exc:  # noqa: BLE001 - a store outage must not end polling
                _log.warning("cannot read the cluster metadata: %s", exc)
            self._wake.wait(self._next_interval_s())
            self._wake.clear()

    def _installed(self, snapshot: Snapshot) -> None:
        """On the installing thread (poll, or the controller's commit)."""
        self._ahead_wake.set()
        with self._lock:
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._apply_latest)
        except RuntimeError:  # the loop is closed: shutting down
            pass

    def apply_latest(self) -> None:
        """Apply the view's newest snapshot now, on the loop (start-up calls this)."""
        self._apply_latest()

    def _apply_latest(self) -> None:
        with self._lock:
            self._scheduled = False
        snapshot = self._view.snapshot()
        if snapshot is None or snapshot.revision <= self.applied_revision:
            return
        started = time.perf_counter()
        try:
            self._apply(snapshot)
        except Exception:  # noqa: BLE001 - the next snapshot tries again
            _log.exception("applying metadata revision %d failed", snapshot.revision)
            return
        took = time.perf_counter() - started
        if took >= SLOW_APPLY_S:
            _log.info("applying metadata revision %d took %.0f ms", snapshot.revision, took * 1000)
        self.applied_revision = snapshot.revision
