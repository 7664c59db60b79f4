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

Thread-safety: :meth:`MetadataPoller.start` and :meth:`close` from the loop;
the poll runs on its own daemon thread; ``apply`` always on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from controller.commit import Snapshot
from controller.metadata_view import MetadataView

__all__ = ["MetadataPoller"]

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
    ) -> None:
        self._view = view
        self._interval_s = interval_ms / 1000
        self._apply = apply
        self._loop = loop
        self._name = name
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._scheduled = False
        self._lock = threading.Lock()
        self.applied_revision = -1
        view.add_snapshot_listener(self._installed)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def poll_now(self) -> None:
        """Refresh at once instead of at the next interval."""
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._view.refresh()
            except Exception as exc:  # noqa: BLE001 - a store outage must not end polling
                _log.warning("cannot read the cluster metadata: %s", exc)
            self._wake.wait(self._interval_s)
            self._wake.clear()

    def _installed(self, snapshot: Snapshot) -> None:
        """On the installing thread (poll, or the controller's commit)."""
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
        try:
            self._apply(snapshot)
        except Exception:  # noqa: BLE001 - the next snapshot tries again
            _log.exception("applying metadata revision %d failed", snapshot.revision)
            return
        self.applied_revision = snapshot.revision
