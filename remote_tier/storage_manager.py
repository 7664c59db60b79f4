"""RemoteStorageManager: copy sealed segments to the bucket, retain, clean up, read back.

The cycle for one segment is *upload, then publish*: the ``.log``, ``.index`` and
``.timeindex`` go up under a fresh upload id, and only then is the segment added
to the partition manifest by compare-and-set. Until that commit nothing is
visible; whatever an interrupted upload left behind is an orphan (no manifest
references it) that :meth:`RemoteStorageManager.cleanup_orphans` removes once it is
older than any upload could take. Retention is the reverse: remove segments from
the manifest first, then delete their objects.

Transient store failures (:class:`ObjectStoreUnavailable`) are retried per
operation with exponential backoff, at most ``max_attempts`` times, then raised.

Thread-safety: the manager holds no mutable state, so any thread may call it;
concurrent writers of one partition are serialised by the manifest's
compare-and-set and fenced by leader epoch. Blocking: every method does object
store I/O and must run on a tiered-storage thread (uploader, tiered fetch pool),
never on the event loop.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from common.record.batch import BATCH_OVERHEAD, BatchHeader, iter_batches, read_batch_header
from remote_tier.errors import (
    ObjectStoreError,
    SegmentOverlapError,
)
from remote_tier.filesystem import FileSystemObjectStore, ObjectFile
from remote_tier.layout import PartitionLayout, SegmentFile, new_upload_id
from remote_tier.manifest import ManifestStore, PartitionManifest, RemoteSegment
from remote_tier.retrying import RetryingObjectStore
from remote_tier.store import ObjectStore

__all__ = ["RemoteStorageManager", "SegmentSummary", "summarize_segment"]

_log = logging.getLogger("strata.remote_tier")
#: what summarize_segment reads at a time: many small batches, or the header of a large one
_SCAN_CHUNK = 64 * 1024
TopicId = str | uuid.UUID


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What a local segment's batch headers say (whole batches only)."""

    base_offset: int
    last_offset: int
    size_bytes: int
    min_timestamp: int
    max_timestamp: int
    record_count: int
    epochs: tuple[tuple[int, int], ...]


def summarize_segment(log_path: Path) -> SegmentSummary | None:
    """Walk the batch headers of ``log_path``, reading it in 64 KiB windows.

    Stops at the first incomplete batch; ``size_bytes`` is where it stopped, so
    a torn tail is never counted. None when the file holds no complete batch.
    """
    headers: list[BatchHeader] = []
    position = 0
    with open(log_path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        while file_size - position >= BATCH_OVERHEAD:
            window = memoryview(os.pread(f.fileno(), _SCAN_CHUNK, position))
            used = 0
            for at, header in iter_batches(window):  # the batches whole in the window
                headers.append(header)
                used = at + header.size
            position += used
            tail = window[used:]
            if len(tail) < BATCH_OVERHEAD:
                if used:
                    continue  # the next header starts past the window
                break  # the file shrank under us
            # a batch that ends past the window: its body is skipped, not read (a producer's
            # 1 MB batches made this walk read the whole segment, as much as its upload copies)
            header = read_batch_header(tail)
            if position + header.size > file_size:
                break
            headers.append(header)
            position += header.size
    if not headers:
        return None
    epochs: list[tuple[int, int]] = []
    for header in headers:
        if not epochs or epochs[-1][0] != header.partition_leader_epoch:
            epochs.append((header.partition_leader_epoch, header.base_offset))
    # a cleaned batch's base timestamp may be its delete horizon (attribute 0x40) or -1
    # (no record left): neither is a record's timestamp
    stamped = [h.base_timestamp for h in headers if h.records_count and not h.attributes & 0x40]
    return SegmentSummary(
        base_offset=headers[0].base_offset,
        last_offset=headers[-1].last_offset,
        size_bytes=position,
        min_timestamp=min(stamped) if stamped else max(h.max_timestamp for h in headers),
        max_timestamp=max(h.max_timestamp for h in headers),
        record_count=sum(h.records_count for h in headers),
        epochs=tuple(epochs),
    )


def _size(path: Path | None) -> int:
    """The file's size; 0 when there is no such file (nothing to upload)."""
    if path is None:
        return 0
    try:
        return Path(path).stat().st_size
    except FileNotFoundError:
        return 0


class RemoteStorageManager:
    """Uploads, retains, deletes and reads remote segments of any partition.

    ``prefix`` is the key prefix inside ``store`` (see :mod:`remote_tier.layout`).
    Every store call goes through a :class:`RetryingObjectStore` with the given
    retry settings; ``sleep`` is injectable so tests need not wait out backoffs.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        prefix: str = "",
        max_attempts: int = 5,
        backoff_s: float = 0.1,
        max_backoff_s: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._store = RetryingObjectStore(
            store,
            max_attempts=max_attempts,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            sleep=sleep,
        )
        self._manifests = ManifestStore(self._store, prefix)

    @property
    def store(self) -> RetryingObjectStore:
        """The store every call of this manager goes through (its request counters)."""
        return self._store

    @property
    def manifests(self) -> ManifestStore:
        return self._manifests

    def layout(self, topic_id: TopicId, partition: int) -> PartitionLayout:
        return self._manifests.layout(topic_id, partition)

    def manifest(self, topic_id: TopicId, partition: int) -> PartitionManifest | None:
        """The committed manifest, or None when nothing was ever uploaded."""
        loaded = self._manifests.load(topic_id, partition)
        return loaded[0] if loaded is not None else None

    # -- upload -------------------------------------------------------------------

    def upload_segment(
        self,
        *,
        topic: str,
        topic_id: TopicId,
        partition: int,
        leader_epoch: int,
        log_path: Path,
        index_path: Path,
        timeindex_path: Path,
        txn_index_path: Path | None = None,
        producer_snapshot_path: Path | None = None,
    ) -> RemoteSegment:
        """Upload one sealed segment and publish it in the manifest; idempotent.

        With them, the segment's transaction index (when it holds any entry) and
        the producer snapshot at its end go along (KIP-405), and the manifest
        entry records their sizes.

        Only whole batches count: ``last_offset`` and the sizes stop at the first
        incomplete batch (the ``.log`` object holds the file as it is). If the
        manifest already has a segment covering this base offset, the objects just
        uploaded are deleted and that entry is returned. A segment wholly below
        the manifest's log start offset is not published (its objects are
        deleted) and is returned as computed. Raises :class:`FencedError`,
        :class:`SegmentOverlapError`, ``ValueError`` (no complete batch) or, after
        the retries, :class:`ObjectStoreUnavailable`.
        """
        summary = summarize_segment(Path(log_path))
        if summary is None:
            raise ValueError(f"{log_path}: no complete record batch to upload")
        layout = self.layout(topic_id, partition)
        upload_id = new_upload_id()
        txn_bytes = _size(txn_index_path)
        snapshot_bytes = _size(producer_snapshot_path)
        segment = RemoteSegment(
            base_offset=summary.base_offset,
            last_offset=summary.last_offset,
            size_bytes=Path(log_path).stat().st_size,
            min_timestamp=summary.min_timestamp,
            max_timestamp=summary.max_timestamp,
            leader_epoch=leader_epoch,
            record_count=summary.record_count,
            upload_id=upload_id,
            epochs=summary.epochs,
            txn_index_bytes=txn_bytes,
            producer_snapshot_bytes=snapshot_bytes,
        )
        keys = list(layout.segment_keys(segment.base_offset, upload_id))
        sources = [Path(log_path), Path(index_path), Path(timeindex_path)]
        for size, path, file in (
            (txn_bytes, txn_index_path, SegmentFile.TXN_INDEX),
            (snapshot_bytes, producer_snapshot_path, SegmentFile.PRODUCER_SNAPSHOT),
        ):
            if size and path is not None:
                keys.append(layout.segment_key(segment.base_offset, upload_id, file))
                sources.append(Path(path))
        uploaded: list[str] = []
        outcome: dict[str, RemoteSegment] = {}

        def publish(current: PartitionManifest | None) -> PartitionManifest | None:
            outcome.clear()
            manifest = current or PartitionManifest.empty(topic, topic_id, partition, leader_epoch)
            existing = manifest.find(segment.base_offset)
            if existing is not None:
                outcome["existing"] = existing
                return None
            if segment.last_offset < manifest.log_start_offset:
                outcome["expired"] = segment
                return None
            later = manifest.segments_after(segment.base_offset)
            if later and later[0].base_offset <= segment.last_offset:
                raise SegmentOverlapError(
                    f"{topic}-{partition}: segment {segment.base_offset}..{segment.last_offset} "
                    f"overlaps the committed segment at {later[0].base_offset}"
                )
            return manifest.with_segment(segment)

        try:
            for key, source in zip(keys, sources):
                self._store.put_file(key, source)
                uploaded.append(key)
            self._manifests.update(topic_id, partition, publish, leader_epoch=leader_epoch)
        except BaseException:
            self._discard_unpublished(layout, upload_id, uploaded)
            raise
        existing = outcome.get("existing")
        if existing is not None and existing.upload_id == upload_id:
            return existing  # our own commit, seen again after a retried write
        if existing is not None or "expired" in outcome:
            self._delete_quietly(uploaded)
            return existing or segment
        _log.info(
            "uploaded %s-%d segment %d..%d (%d bytes) as upload %s",
            topic,
            partition,
            segment.base_offset,
            segment.last_offset,
            segment.size_bytes,
            upload_id,
        )
        return segment

    def _discard_unpublished(
        self, layout: PartitionLayout, upload_id: str, keys: list[str]
    ) -> None:
        """After a failure: delete the uploaded objects unless the manifest (as far as
        we can tell) references them; anything left is an orphan for the clean-up."""
        if not keys:
            return
        try:
            loaded = self._manifests.load(layout.topic_id, layout.partition)
        except Exception:  # noqa: BLE001 - cannot tell: leave it to cleanup_orphans
            _log.warning(
                "upload %s failed and the manifest is unreadable; leaving orphans", upload_id
            )
            return
        if loaded is not None and any(s.upload_id == upload_id for s in loaded[0].segments):
            return
        self._delete_quietly(keys)

    def _delete_quietly(self, keys: list[str]) -> None:
        for key in keys:
            try:
                self._store.delete(key)
            except ObjectStoreError as err:
                _log.warning("could not delete %s (left for the orphan clean-up): %s", key, err)

    # -- retention and deletion -------------------------------------------------------

    def apply_retention(
        self,
        topic_id: TopicId,
        partition: int,
        *,
        retention_ms: int,
        retention_bytes: int,
        now_ms: int,
        leader_epoch: int,
        log_start_offset: int | None = None,
        local_only_bytes: int = 0,
    ) -> list[RemoteSegment]:
        """Remove expired segments from the manifest, then delete their objects.

        Kafka's rules over the whole log, oldest segment first, stopping at the
        first segment no rule removes: ``max_timestamp < now_ms - retention_ms``
        (``retention_ms < 0``: no limit); the log stays above ``retention_bytes``
        without the segment (the total counts ``local_only_bytes``, the local
        segments not uploaded yet; ``retention_bytes < 0``: no limit); the segment
        lies wholly below ``log_start_offset``. The manifest's log start offset
        moves to the first remaining offset. Returns the removed segments.
        """
        removed: list[RemoteSegment] = []
        tried: dict[str, RemoteSegment] = {}

        def expire(current: PartitionManifest | None) -> PartitionManifest | None:
            removed.clear()
            if current is None:
                return None
            total = current.size_bytes + local_only_bytes
            for segment in current.segments:
                below_start = (
                    log_start_offset is not None and segment.last_offset < log_start_offset
                )
                too_old = retention_ms >= 0 and segment.max_timestamp < now_ms - retention_ms
                too_big = retention_bytes >= 0 and total - segment.size_bytes >= retention_bytes
                if not (below_start or too_old or too_big):
                    break
                removed.append(segment)
                tried[segment.upload_id] = segment
                total -= segment.size_bytes
            start = max(log_start_offset or 0, removed[-1].next_offset if removed else 0)
            start = min(start, current.next_offset)
            if not removed and start <= current.log_start_offset:
                return None
            return current.without(removed, start)

        committed = self._manifests.update(topic_id, partition, expire, leader_epoch=leader_epoch)
        gone = _unlisted(tried, committed)
        layout = self.layout(topic_id, partition)
        for segment in gone:
            self._delete_quietly(list(layout.all_segment_keys(segment.base_offset, segment.upload_id)))
        return gone

    def move_log_start(
        self,
        topic: str,
        topic_id: TopicId,
        partition: int,
        log_start_offset: int,
        *,
        leader_epoch: int,
    ) -> PartitionManifest | None:
        """DeleteRecords: raise the manifest's log start offset to ``log_start_offset``.

        Creates the manifest when there is none yet (so a segment uploaded later
        cannot bring the deleted records back: a new manifest would start at 0),
        removes the segments wholly below the new start from it, then deletes their
        objects. The start may lie past the last remote offset (the records were
        deleted before being uploaded). Never lowers it. Returns the committed
        manifest (None: there was none and nothing needed one).
        """
        tried: dict[str, RemoteSegment] = {}

        def move(current: PartitionManifest | None) -> PartitionManifest | None:
            manifest = current or PartitionManifest.empty(topic, topic_id, partition, leader_epoch)
            if log_start_offset <= manifest.log_start_offset:
                return current
            removed = [s for s in manifest.segments if s.last_offset < log_start_offset]
            tried.update((s.upload_id, s) for s in removed)
            return manifest.without(removed, log_start_offset)

        committed = self._manifests.update(topic_id, partition, move, leader_epoch=leader_epoch)
        layout = self.layout(topic_id, partition)
        for segment in _unlisted(tried, committed):
            self._delete_quietly(list(layout.segment_keys(segment.base_offset, segment.upload_id)))
        return committed

    def delete_partition(self, topic_id: TopicId, partition: int) -> int:
        """Remove the manifest, then every object under the partition (topic deletion).

        Returns the number of objects deleted besides the manifest.
        """
        layout = self.layout(topic_id, partition)
        self._manifests.delete(topic_id, partition)
        keys = [info.key for info in self._store.list(layout.directory)]
        for key in keys:
            self._store.delete(key)
        return len(keys)

    def cleanup_orphans(
        self, topic_id: TopicId, partition: int, *, min_age_ms: int, now_ms: int
    ) -> int:
        """Delete segment objects the manifest does not reference, older than ``min_age_ms``.

        ``min_age_ms`` must exceed the longest an upload can take from its first put
        to its manifest commit, so in-flight uploads are never touched. Keys that
        are not segment objects of this layout are left alone. Returns the count.
        """
        layout = self.layout(topic_id, partition)
        manifest = self.manifest(topic_id, partition)
        referenced = (
            {s.upload_id for s in manifest.segments} | {r.upload_id for r in manifest.replaced}
            if manifest is not None
            else set()
        )
        deleted = 0
        for info in self._store.list(layout.directory):
            parsed = layout.parse_segment_key(info.key)
            if parsed is None or parsed.upload_id in referenced:
                continue
            if now_ms - info.last_modified_ms < min_age_ms:
                continue
            self._store.delete(info.key)
            deleted += 1
        if deleted:
            _log.info("removed %d orphaned objects under %s", deleted, layout.directory)
        return deleted

    # -- reads ----------------------------------------------------------------------

    def read_range(
        self, segment: RemoteSegment, topic_id: TopicId, partition: int, start: int, end: int
    ) -> bytes:
        """Bytes ``[start, end)`` of the segment's ``.log`` (one ranged GET, clamped)."""
        key = self.layout(topic_id, partition).segment_key(
            segment.base_offset, segment.upload_id, SegmentFile.LOG
        )
        return self._store.get(key, start, end)

    def open_log(self, segment: RemoteSegment, topic_id: TopicId, partition: int) -> ObjectFile | None:
        """The segment's ``.log`` as an open file when the store is a local directory
        (the embedded default), for sending ranges of it with ``sendfile``; None for a
        store that can only be read with GETs (S3)."""
        inner = self._store.inner
        if not isinstance(inner, FileSystemObjectStore):
            return None
        key = self.layout(topic_id, partition).segment_key(
            segment.base_offset, segment.upload_id, SegmentFile.LOG
        )
        return inner.open_read(key)

    def read_txn_index(self, segment: RemoteSegment, topic_id: TopicId, partition: int) -> bytes:
        """The segment's whole ``.txnindex`` (empty when the manifest lists none)."""
        if not segment.txn_index_bytes:
            return b""
        key = self.layout(topic_id, partition).segment_key(
            segment.base_offset, segment.upload_id, SegmentFile.TXN_INDEX
        )
        return self._store.get(key)

    def read_producer_snapshot(self, segment: RemoteSegment, topic_id: TopicId, partition: int) -> bytes | None:
        """The producer snapshot uploaded with the segment (the state at its end), None if
        none was (KIP-405's auxiliary state of a replica that starts from the bucket)."""
        if not segment.producer_snapshot_bytes:
            return None
        key = self.layout(topic_id, partition).segment_key(
            segment.base_offset, segment.upload_id, SegmentFile.PRODUCER_SNAPSHOT
        )
        return self._store.get(key)

    def read_index(
        self,
        segment: RemoteSegment,
        topic_id: TopicId,
        partition: int,
        kind: Literal["offset", "time"],
    ) -> bytes:
        """The whole ``.index`` (``"offset"``) or ``.timeindex`` (``"time"``) of the segment."""
        file = {"offset": SegmentFile.OFFSET_INDEX, "time": SegmentFile.TIME_INDEX}[kind]
        key = self.layout(topic_id, partition).segment_key(
            segment.base_offset, segment.upload_id, file
        )
        return self._store.get(key)


def _unlisted(tried: dict[str, RemoteSegment], committed: PartitionManifest | None) -> list[RemoteSegment]:
    """The segments some attempt of a compare-and-set removed that the committed manifest no
    longer lists (nor keeps for a grace period): an attempt whose write landed though its
    answer was lost, before another writer's, removed them as surely as the last one."""
    listed = set() if committed is None else (
        {s.upload_id for s in committed.segments} | {r.upload_id for r in committed.replaced})
    return sorted((s for uid, s in tried.items() if uid not in listed), key=lambda s: s.base_offset)
