"""Writing the cluster metadata as the controller of one epoch: the fencing rule.

The metadata is a log in the bucket (format 3, ``docs/adr/0025-metadata-log.md``): a
head naming a snapshot, then one batch of Kafka's records per revision, each written
once into its slot with ``put_if_absent``. A change computed from revision ``n`` is
committed by writing slot ``n+1``; if that slot is taken, another writer got there
first and the change is re-validated against what it wrote
(:class:`StaleSnapshot`). Every batch carries the writer's controller epoch. A write
is refused, before anything is sent, when the image already carries a higher
controller epoch; and a write that loses its slot reads on and is refused the same
way if a higher epoch wrote meanwhile. Since a new controller's first act is a write
with its epoch, every later write of a deposed controller fails: the slot it wants
is taken, and the batches after it show the higher epoch
(``docs/adr/0009-controller-lease.md``).

A format 1 or 2 document (one JSON document rewritten per change) is read as before;
the first commit over it switches the cluster to the log, with one compare-and-set
of the document that ends format-2 writes (ADR 0025 §9).

Epoch 0 is the writer without a lease (the single-node :class:`controller.Controller`):
it may write only metadata that no elected controller has written.

Thread-safe: one commit at a time per committer (the writer's lock); reads from any
thread.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from common.config.broker import BrokerConfig
from controller.document import ClusterMetadata
from controller.document_codec import encode
from controller.errors import ControllerFencedError
from controller.fence_ahead import FenceAhead
from controller.metadata_log import MetadataLog
from controller.metadata_log_format import (
    Batch,
    Head,
    batch_object,
    batch_text,
    decode_batch_text,
    stored_batch_text,
)
from controller.metadata_records import ImageBuilder, records_between, replay
from controller.metadata_store import MetadataConflict, MetadataStore, ObjectStoreMetadataStore
from controller.registrations import NO_LEADER
from remote_tier.store import ObjectStore

__all__ = ["LogPolicy", "MetadataCommitter", "Snapshot", "StaleSnapshot", "check_controller_epoch",
           "current_document"]

_log = logging.getLogger(__name__)

#: compare every committed image with the replay of its batch (the test suite sets it)
VERIFY_REPLAY = os.environ.get("STRATA_VERIFY_METADATA_REPLAY") == "1"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A committed image and its store version: the etag of a format 1/2 document, or
    ``log:<revision>`` for format 3."""

    metadata: ClusterMetadata
    version: str
    format_version: int = 3

    @property
    def revision(self) -> int:
        return self.metadata.revision


@dataclass(frozen=True, slots=True)
class LogPolicy:
    """When the controller snapshots and trims the log (Kafka's key names where they exist)."""

    max_bytes_between_snapshots: int = 20 * 1024 * 1024
    snapshot_interval_ms: int = 3_600_000
    retention_ms: int = 3_600_000

    @classmethod
    def from_config(cls, config: BrokerConfig) -> LogPolicy:
        return cls(
            config.get_int("metadata.log.max.record.bytes.between.snapshots"),
            config.get_int("metadata.log.max.snapshot.interval.ms"),
            config.get_int("metadata.log.retention.ms"),
        )


def _log_version(revision: int) -> str:
    return f"log:{revision}"


class StaleSnapshot(MetadataConflict):
    """The write lost its slot; ``current`` is what the store holds now."""

    def __init__(self, current: Snapshot | None) -> None:
        super().__init__("the cluster metadata changed since it was read")
        self.current = current


#: the fields of a PartitionChangeRecord that leave who leads, and on what, as they were: an
#: ISR change (the leader that asked for it counts its proposal already)
_ISR_CHANGE = frozenset({"type", "topic_id", "partition", "isr", "partition_epoch"})


def _leaves_leadership(record: dict[str, Any]) -> bool:
    """A record a broker that has not read it may lead on without (ADR 0031): an ISR change,
    a block of producer ids, nothing."""
    kind = record.get("type")
    return kind in ("ProducerIdsRecord", "NoOpRecord") or (
        kind == "PartitionChangeRecord" and record.keys() <= _ISR_CHANGE)


def check_controller_epoch(stored: ClusterMetadata, controller_epoch: int, node_id: int) -> None:
    """``ControllerFencedError`` if ``stored`` was written by a higher controller epoch."""
    if stored.controller_epoch <= controller_epoch:
        return
    if controller_epoch == 0:
        raise ControllerFencedError(
            f"the cluster metadata is managed by an elected controller (node "
            f"{stored.controller_id}, controller epoch {stored.controller_epoch}); a "
            "single-node controller may not write it"
        )
    raise ControllerFencedError(
        f"node {node_id} is no longer the controller: its controller epoch {controller_epoch} "
        f"is fenced by node {stored.controller_id} at controller epoch {stored.controller_epoch}"
    )


class MetadataCommitter:
    """Reads snapshots and commits changes to a :class:`MetadataStore` (see module docstring)."""

    def __init__(
        self,
        store: MetadataStore,
        policy: LogPolicy | None = None,
        *,
        clock: Callable[[], int] = lambda: int(time.time() * 1000),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._log = MetadataLog(store)  # type: ignore[arg-type]
        self._policy = policy or LogPolicy()
        self._clock = clock
        self._monotonic = monotonic
        # the newest revision known to be the log's last, and when that was known
        self._tip = (-1, float("-inf"))
        #: fencings made ahead (:mod:`controller.fence_ahead`): the controller's to write, a
        #: broker's to recognise in what it reads
        self.ahead: FenceAhead | None = None
        #: a write of this committer's that changes more than ISRs and producer ids may have
        #: landed unseen: it failed without an answer, and no read of the log since told what
        #: the log holds (ADR 0031)
        self.in_doubt = False
        self._since_snapshot = 0  # bytes of log written since the last snapshot
        self._last_snapshot = monotonic()
        self._snapshotting = threading.Lock()

    @property
    def store(self) -> MetadataStore:
        return self._store

    @property
    def log(self) -> MetadataLog:
        return self._log

    # -- reads ------------------------------------------------------------------------

    def read(self) -> Snapshot | None:
        """The stored image, or None if the cluster was never initialised: a format 1/2
        document as it is, or format 3's snapshot with the whole log after it replayed."""
        head = self._log.read_head()
        if head is None:
            return None
        if head.head is None:
            assert head.document is not None
            return Snapshot(head.document, head.etag, format_version=2)
        image = self._log.read_snapshot(head.head.snapshot)
        return self.follow(Snapshot(image, _log_version(image.revision)))

    def follow(self, base: Snapshot) -> Snapshot:
        """``base`` (format 3) with every batch written after it applied; ``base`` itself
        when the next slot is empty (one GET). A batch that is a fencing made ahead
        (:attr:`ahead`) from the image it follows is not decoded: the image made ahead is
        the one its replay would give."""
        texts = self._log.read_texts_after(base.revision, self.ahead.known_lines() if self.ahead is not None else ())
        started = self._monotonic()
        self.in_doubt = False
        if not texts:
            self._tip = (base.revision, started)
            return base
        image = _replay_texts(base.metadata, texts, self.ahead)
        self._tip = (image.revision, started)
        return Snapshot(image, _log_version(image.revision))

    def latest(self, base: Snapshot | None) -> Snapshot | None:
        """The newest image after ``base``: the log followed from a format-3 ``base``, or
        the document re-read when its version moved."""
        if base is not None and base.format_version >= 3:
            return self.follow(base)
        if base is not None and self._store.version() == base.version:
            return base
        return self.read()

    def log_start(self) -> int | None:
        """The first slot the log still holds (None: not format 3): one GET of the head."""
        head = self._log.read_head()
        return None if head is None or head.head is None else head.head.log_start

    # -- writes -----------------------------------------------------------------------

    def create(self, metadata: ClusterMetadata) -> Snapshot:
        """Initialise a new cluster's metadata in format 3 (returns the cluster the bucket
        holds then); ``MetadataConflict`` if another node initialised it first.

        The first snapshot is written only if absent: nodes starting together each make a
        cluster id, and the one whose snapshot landed first is the cluster's."""
        now = self._clock()
        if not self._log.create_snapshot(metadata):
            metadata = self._log.read_snapshot(metadata.revision)
        head = Head(metadata.cluster_id, metadata.revision, metadata.revision + 1,
                    NO_LEADER, 0, now, snapshot_written_ms=now)
        if self._log.write_head(head, None) is None:
            raise MetadataConflict("the cluster metadata was initialised by another node")
        self._tip = (metadata.revision, self._monotonic())
        return Snapshot(metadata, _log_version(metadata.revision))

    def commit(
        self,
        base: Snapshot,
        updated: ClusterMetadata,
        *,
        controller_epoch: int,
        controller_id: int = NO_LEADER,
    ) -> Snapshot:
        """Write ``updated`` (computed from ``base``) as controller ``controller_id`` of
        ``controller_epoch``; returns the new snapshot (``base`` when nothing changed).

        The batch goes into slot ``base.revision + 1`` and carries the writer's epoch and
        id. Raises ``ControllerFencedError`` if ``base`` or the log now has a higher
        controller epoch, :class:`StaleSnapshot` (with the stored snapshot) if another
        write of an epoch not above ours took the slot: re-apply the change to
        ``current`` and commit again.
        """
        check_controller_epoch(base.metadata, controller_epoch, controller_id)
        writer = controller_id if controller_epoch > 0 else NO_LEADER
        made = self.ahead.step_to(base.metadata, updated) if self.ahead is not None else None
        records = list(made.records) if made is not None else records_between(base.metadata, updated)
        # the lines (and their deflate) made ahead, written as they are in format 3
        made_lines, deflated = (made.lines, made.deflated) if made is not None and base.format_version >= 3 and records \
            else (None, None)
        md = base.metadata
        if not records and (md.controller_epoch, md.controller_id) == (controller_epoch, writer):
            return base
        # until this write's outcome is known, unless no broker could lead otherwise for it
        self.in_doubt = base.format_version < 3 or not all(map(_leaves_leadership, records))
        if base.format_version < 3:
            base = self._switch_to_log(base, controller_epoch, writer)
            records.append({"type": "FeatureLevelRecord", "name": "strata.metadata.format",
                            "feature_level": 3})
        self._check_position(base, controller_epoch, controller_id)
        batch = Batch(base.revision + 1, writer, controller_epoch, str(uuid.uuid4()),
                      self._clock(), records or [{"type": "NoOpRecord"}], lines=made_lines, deflated=deflated)
        started = self._monotonic()
        size = self._log.append(batch)
        if size is None:
            current = self.follow(base)
            check_controller_epoch(current.metadata, controller_epoch, controller_id)
            raise StaleSnapshot(current)
        if self._monotonic() - started >= self._policy.retention_ms / 2000:
            self._check_still_in_log(batch.revision, controller_id)
        if VERIFY_REPLAY:  # the tests: the replay of the bytes written must give the image computed
            text = batch_text(batch)
            if deflated is not None and stored_batch_text(batch_object(text, batch), batch.revision) != text:
                raise AssertionError(f"metadata revision {batch.revision}: the object written does not inflate to its text")
            _verify(replay(base.metadata, decode_batch_text(text, batch.revision)), updated)
        # what the replay gives (the tests check it at every commit), without its cost; it
        # shares the computed image's objects, which a fencing made ahead recognises
        image = replace(updated, revision=batch.revision, controller_epoch=batch.controller_epoch,
                        controller_id=batch.controller_id)
        self._tip = (image.revision, started)
        self._since_snapshot += size
        committed = Snapshot(image, _log_version(image.revision))
        self.in_doubt = False
        self._maybe_snapshot(committed)
        return committed

    def _switch_to_log(self, base: Snapshot, controller_epoch: int, writer: int) -> Snapshot:
        """Turn a format 1/2 document into a format-3 head whose snapshot is that document
        (ADR 0025 §9); :class:`StaleSnapshot` if the document moved meanwhile."""
        now = self._clock()
        self._log.write_snapshot(base.metadata)
        head = Head(base.metadata.cluster_id, base.revision, base.revision + 1, writer,
                    controller_epoch, now, snapshot_written_ms=now)
        if self._log.write_head(head, base.version) is None:
            current = self.read()
            if current is not None:
                check_controller_epoch(current.metadata, controller_epoch, writer)
            raise StaleSnapshot(current)
        _log.info("cluster metadata switched to the metadata log (format 3) at revision %d",
                  base.revision)
        return Snapshot(base.metadata, _log_version(base.revision))

    def _check_position(self, base: Snapshot, controller_epoch: int, node_id: int) -> None:
        """Refuse to write after ``base`` when its next slot may have been trimmed: a base
        not known to be the log's end within half the retention is checked against the
        head first (a slot below the log start would be written where nobody reads)."""
        revision, seen = self._tip
        if revision == base.revision and self._monotonic() - seen < self._policy.retention_ms / 2000:
            return
        start = self.log_start()
        if start is not None and start > base.revision + 1:
            current = self.read()
            if current is not None:
                check_controller_epoch(current.metadata, controller_epoch, node_id)
            raise StaleSnapshot(current)

    def _check_still_in_log(self, revision: int, node_id: int) -> None:
        start = self.log_start()
        if start is not None and start > revision:
            raise ControllerFencedError(
                f"node {node_id} wrote metadata slot {revision} after the log was trimmed past it "
                "(it was paused longer than half of metadata.log.retention.ms); it is not the controller"
            )

    # -- snapshots ----------------------------------------------------------------------

    def _maybe_snapshot(self, committed: Snapshot) -> None:
        policy, now = self._policy, self._monotonic()
        due = self._since_snapshot >= policy.max_bytes_between_snapshots or (
            self._since_snapshot > 0 and (now - self._last_snapshot) * 1000 >= policy.snapshot_interval_ms
        )
        if not due or not self._snapshotting.acquire(blocking=False):
            return
        self._since_snapshot, self._last_snapshot = 0, now
        threading.Thread(target=self._snapshot_in_background, args=(committed,),
                         name="strata-metadata-snapshot", daemon=True).start()

    def _snapshot_in_background(self, committed: Snapshot) -> None:
        try:
            self.take_snapshot(committed)
        except Exception:  # noqa: BLE001 - the next snapshot tries again; the log stays whole
            _log.exception("cannot snapshot the cluster metadata at revision %d", committed.revision)
        finally:
            self._snapshotting.release()

    def take_snapshot(self, committed: Snapshot) -> Head | None:
        """Snapshot ``committed``, point the head at it and trim the log below the previous
        snapshot once that is older than the retention (ADR 0025 §7). The new head, or
        None when the head already names a snapshot as new, or moved meanwhile. Blocking."""
        image = committed.metadata
        size = self._log.write_snapshot(image)
        current = self._log.read_head()
        if current is None or current.head is None or current.head.snapshot >= image.revision:
            return None
        old, now = current.head, self._clock()
        trim = now - old.snapshot_written_ms >= self._policy.retention_ms
        head = Head(
            image.cluster_id, image.revision, old.snapshot + 1 if trim else old.log_start,
            image.controller_id, image.controller_epoch, now,
            previous_snapshot=old.snapshot, previous_written_ms=old.snapshot_written_ms,
            snapshot_written_ms=now,
        )
        if self._log.write_head(head, current.etag) is None:
            return None
        _log.info("cluster metadata snapshot at revision %d (%d bytes); the log starts at %d",
                  image.revision, size, head.log_start)
        if head.log_start > old.log_start:
            self._log.delete_slots(old.log_start, head.log_start - 1)
        if old.previous_snapshot >= 0:
            self._log.delete_snapshot(old.previous_snapshot)
        return head


def _verify(image: ClusterMetadata, updated: ClusterMetadata) -> None:
    expected = replace(updated, revision=image.revision, controller_epoch=image.controller_epoch,
                       controller_id=image.controller_id)
    if image != expected:
        raise AssertionError(
            f"replaying metadata batch {image.revision} does not give the committed image:\n"
            f"{image!r}\n!=\n{expected!r}"
        )


def current_document(store: ObjectStore, key: str = "cluster/metadata.json") -> dict[str, Any] | None:
    """The newest image in ``store`` as a format-2 document, whatever the stored format
    (None when there is no cluster): for tools and tests that look at the metadata."""
    current = MetadataCommitter(ObjectStoreMetadataStore(store, key)).read()
    return None if current is None else dict(json.loads(encode(current.metadata)))


def _replay_texts(image: ClusterMetadata, texts: list[bytes], ahead: FenceAhead | None) -> ClusterMetadata:
    """``image`` with the batches of ``texts`` (from slot ``image.revision + 1`` on) applied:
    a fencing made ahead from the image it follows is taken as made, the rest replayed."""
    builder: ImageBuilder | None = None
    for revision, text in enumerate(texts, image.revision + 1):
        if ahead is not None and ahead.may_match(text):
            if builder is not None:
                image, builder = builder.build(), None
            made = ahead.image_after(image, text, revision)
            if made is not None:
                if VERIFY_REPLAY:  # the tests: the image made must be the replay's
                    _verify(replay(image, decode_batch_text(text, revision)), made)
                image = made
                continue
        if builder is None:
            builder = ImageBuilder(image)
        builder.apply(decode_batch_text(text, revision))
    return image if builder is None else builder.build()
