"""A broker's read-only view of the cluster metadata: :class:`MetadataView`.

Every broker (the controller's too) reads the metadata through one of these:
the last snapshot and its revision, who the controller is and where to reach
it, and a way to wait for a revision (a broker that asked the controller for a
change waits until it has loaded the revision the change was committed at, as a
Kafka broker waits for a metadata offset).

Snapshots arrive two ways: :meth:`MetadataView.refresh` polls the bucket, and
:meth:`MetadataView.offer` takes a snapshot the local controller just committed
(no request at all). A poll of the metadata log (format 3,
``docs/adr/0025-metadata-log.md``) is one GET of the slot after the last applied
(404 when nothing happened), then the batches found are replayed onto the image;
every ``metadata.log.head.check.ms`` it also reads the head, and reloads from the
newest snapshot if the log was trimmed past its position while it was away. A
format 1/2 document is polled with a HEAD and re-read when its etag moved. A view
never goes back: it installs a snapshot only if its revision is higher than the
one it has (revisions grow by one with every write, whoever the writer).

Thread-safe; blocking (:meth:`refresh` does object store I/O: not on the event loop).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.errors import KafkaStorageError
from common.spell_log import SpellLog
from controller.commit import MetadataCommitter, Snapshot
from controller.events import MetadataListener, diff_metadata
from controller.fence_ahead import FenceAhead
from controller.fence_plans import FencePlans
from controller.metadata_log_format import MetadataLogError
from controller.metadata_store import ObjectStoreMetadataStore
from controller.records import TopicInfo
from controller.registrations import NO_LEADER, Endpoint
from remote_tier.store import ObjectStore

__all__ = ["ControllerInfo", "MetadataView"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ControllerInfo:
    """The controller named by the metadata: its node id, epoch and endpoint (None when
    it has not registered the asked listener)."""

    node_id: int
    epoch: int
    endpoint: Endpoint | None


#: a refresh slower than this is logged
SLOW_REFRESH_S = 0.25
#: while reads of the metadata keep failing, :meth:`MetadataView.poll_for_revision` warns at
#: the first and then once per this many seconds, not at every try
FAILED_READ_LOG_EVERY_S = 5.0


class MetadataView:
    """The cluster metadata as one broker sees it (see the module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        metadata_key: str = "cluster/metadata.json",
        head_check_ms: int = 60_000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metadata_store = ObjectStoreMetadataStore(store, metadata_key)
        self._committer = MetadataCommitter(self._metadata_store)
        self._head_check_s = head_check_ms / 1000
        self._monotonic = monotonic
        self._next_head_check = monotonic() + self._head_check_s
        self._refreshing = threading.Lock()  # one read of the store at a time
        self._changed = threading.Condition()
        self._install_lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._installed_at = monotonic()
        #: the fencing of each other broker, made ahead from the newest image in quiet time
        #: (:meth:`prepare_ahead`); a batch read that is one of them is not decoded
        self.ahead = FenceAhead()
        self._committer.ahead = self.ahead
        self._plans = FencePlans()  # the elections of those fencings, kept up to date as the controller's
        self._listeners: list[MetadataListener] = []
        self._snapshot_listeners: list[Callable[[Snapshot], None]] = []

    def snapshot(self) -> Snapshot | None:
        """The newest snapshot this view has (None before the first refresh or offer)."""
        return self._snapshot

    @property
    def revision(self) -> int:
        """The revision of :meth:`snapshot`, -1 before there is one."""
        current = self._snapshot
        return -1 if current is None else current.revision

    def add_listener(self, listener: MetadataListener) -> None:
        """Hear the events of every newer snapshot, on the thread that installs it."""
        self._listeners.append(listener)

    def add_snapshot_listener(self, listener: Callable[[Snapshot], None]) -> None:
        """Hear of every newer snapshot installed, on the thread that installs it (before
        the events of :meth:`add_listener`)."""
        self._snapshot_listeners.append(listener)

    def refresh(self) -> bool:
        """Load what changed in the store; True if a newer snapshot was installed."""
        with self._refreshing:
            started = time.perf_counter()
            current = self._snapshot
            try:
                if current is not None and self._trimmed_past(current):
                    fresh = self._committer.read()
                else:
                    fresh = self._committer.latest(current)
            except MetadataLogError as err:
                _log.error("cannot apply the metadata log after revision %d (%s); reloading from "
                           "the newest snapshot", -1 if current is None else current.revision, err)
                fresh = self._committer.read()
            read = time.perf_counter()
            installed = fresh is not None and fresh is not current and self.offer(fresh)
            if installed and time.perf_counter() - started >= SLOW_REFRESH_S:
                _log.info("reading metadata revision %d took %.0f ms, installing it %.0f ms",
                          fresh.revision, (read - started) * 1000, (time.perf_counter() - read) * 1000)
            return installed

    def _trimmed_past(self, current: Snapshot) -> bool:
        """Every ``head_check_ms``: whether the log now starts after ``current``'s next slot
        (this broker was away while it was snapshotted and trimmed)."""
        if current.format_version < 3 or self._monotonic() < self._next_head_check:
            return False
        self._next_head_check = self._monotonic() + self._head_check_s
        start = self._committer.log_start()
        if start is None or start <= current.revision + 1:
            return False
        _log.warning("the metadata log now starts at revision %d, after this broker's %d: "
                     "reloading from the newest snapshot", start, current.revision)
        return True

    def offer(self, snapshot: Snapshot) -> bool:
        """Install ``snapshot`` if it is newer than this view's; True if it was."""
        with self._install_lock:
            previous = self._snapshot
            if previous is not None and snapshot.revision <= previous.revision:
                return False
            with self._changed:
                self._installed_at = self._monotonic()  # first: the ahead thread reads them in the other order
                self._snapshot = snapshot
                self._changed.notify_all()
            for hear in list(self._snapshot_listeners):
                try:
                    hear(snapshot)
                except Exception:  # noqa: BLE001 - a listener bug must not stop the view
                    _log.exception("metadata snapshot listener %r failed", hear)
            if previous is not None and self._listeners:
                for event in diff_metadata(previous.metadata, snapshot.metadata):
                    for listener in list(self._listeners):
                        try:
                            listener(event)
                        except Exception:  # noqa: BLE001 - a listener bug must not stop the view
                            _log.exception("metadata listener %r failed on %r", listener, event)
            return True

    def prepare_ahead(self, node_id: int, quiet_s: float) -> bool:
        """Make one more broker's fencing ahead (:mod:`controller.fence_ahead`) for the
        newest image, once it has been installed ``quiet_s`` without a newer one; ``node_id``
        (this broker) is left out. True when more is to be made for that image. Blocking
        CPU work (tens of milliseconds a broker at 10,000 partitions): on a thread of its
        own, not the one refreshing."""
        snapshot = self._snapshot
        if (snapshot is None or snapshot.format_version < 3
                or self._monotonic() - self._installed_at < quiet_s):
            return False
        md = snapshot.metadata
        if self.ahead.prepared_for is md and self.ahead.complete:
            return False
        if self._plans.prepared_at is not md or not self._plans.complete:  # the elections first
            self._plans.prepare(md)
            return True
        self.ahead.prepare(md, _guess_unclean, self._plans, skip=(node_id,), brokers_per_call=1, keep_records=False)
        return not self.ahead.complete

    def drop_ahead(self) -> None:
        """Forget the fencings made ahead and their plans (this node's controller became the
        active one: it hands this view its own images, nothing here is replayed). Call it on
        the thread that prepares them."""
        if self.ahead.prepared_for is not None:
            self.ahead.clear()
            self._plans = FencePlans()

    def wait_for_revision(self, revision: int, timeout_s: float) -> Snapshot | None:
        """Block until a snapshot of at least ``revision`` is installed (by another
        thread's refresh or offer); it, or None after ``timeout_s``."""
        with self._changed:
            self._changed.wait_for(lambda: self.revision >= revision, timeout_s)
            current = self._snapshot
        return current if current is not None and current.revision >= revision else None

    def poll_for_revision(
        self, revision: int, timeout_s: float, interval_s: float = 0.1
    ) -> Snapshot | None:
        """Refresh every ``interval_s`` until a snapshot of at least ``revision`` is here (None:
        not within ``timeout_s``). A read the store fails is tried again at the next interval:
        a restart's registration once died of one read timing out on a loaded moto (stop 68)."""
        deadline = time.monotonic() + timeout_s
        failures = SpellLog(FAILED_READ_LOG_EVERY_S)
        while True:
            try:
                self.refresh()
            except KafkaStorageError as err:
                if failures.failed():
                    _log.warning("cannot read the cluster metadata yet (%s); %d read(s) failed so far, "
                                 "trying again every %.0f ms", err, failures.count, interval_s * 1000)
            else:
                if failed := failures.ended():
                    _log.info("read the cluster metadata after %d failed read(s)", failed)
            current = self._snapshot
            if current is not None and current.revision >= revision:
                return current
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.wait_for_revision(revision, min(interval_s, left))

    def controller(self, listener: str | None = None) -> ControllerInfo | None:
        """The controller the newest snapshot names, with its ``listener`` endpoint
        (its first one when None); None when no elected controller wrote it yet."""
        current = self._snapshot
        if current is None or current.metadata.controller_id == NO_LEADER:
            return None
        md = current.metadata
        registration = md.brokers.get(md.controller_id)
        endpoint = None if registration is None else registration.endpoint(listener)
        return ControllerInfo(md.controller_id, md.controller_epoch, endpoint)


def _guess_unclean(topic: TopicInfo) -> bool:
    """A broker's guess at the controller's unclean-election policy for a fencing it makes
    ahead: a diskless topic's (always) and a topic's own override; the cluster's default is
    taken as false. Only an election that finds no ISR member to lead asks it; where the
    controller answers otherwise, the batch it writes differs from the one made ahead, and is
    replayed as always."""
    return topic.diskless or topic.configs.get("unclean.leader.election.enable") == "true"
