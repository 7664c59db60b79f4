"""Compacting the bucket's part of a compacted tiered partition (ADR 0019).

One pass, run by the partition's leader on a remote-cleaner thread (blocking I/O):

1. **One key map across the tiers.** The dirty section starts at the manifest's
   ``cleaner_offset`` (the log start when never cleaned) and ends at the first
   uncleanable offset the broker computed from its local log (LSO, active
   segment, ``min.compaction.lag.ms``): remote segments above the cleaner offset
   are read from the bucket (ranged GETs, ``chunk_bytes`` at a time) or from the
   identical local copy when the disk still holds one; the local sealed segments
   past the bucket's end are read from disk. So a bucket record whose key has a
   later record anywhere in the committed log goes.
2. **Clean the bucket's segments** below the map's end, grouped up to
   ``segment.bytes`` (:mod:`local_tier.cleaning.cleaner`), each group into a
   scratch segment on local disk (never more than one group there), uploaded
   under a new upload id: ``.log``, ``.index``, ``.timeindex``, ``.txnindex``
   (when it has entries) and a copy of the producer snapshot at the group's end.
3. **Swap them into the manifest in one compare-and-set**, fenced by leader
   epoch, with ``cleaner_offset`` moved to where the pass ended (at most the
   bucket's end) and the replaced segments listed under ``replaced`` with a
   ``delete_after_ms`` (``remote.log.compaction.object.retention.ms`` from now):
   readers that planned from an older manifest (Spark jobs, tiered fetches) keep
   finding their objects. If the manifest no longer lists every replaced segment
   (retention, another writer), nothing is swapped and the new objects are deleted.
4. :func:`expire_replaced` later removes the expired ``replaced`` entries (one
   compare-and-set), then deletes their objects (unpublish, then delete).

Functions only; the state they need comes in a :class:`RemoteCompactionTask`
taken on the event loop. Blocking; thread-safe as long as one partition is
compacted by one thread at a time.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from local_tier.cleaning.cleaner import (
    CleanContext,
    CleanerIO,
    CleaningAborted,
    FileReader,
    LastRecord,
    SourceSegment,
    build_offset_map,
    clean_group,
    group_segments_by_size,
)
from local_tier.cleaning.local import SegmentSink
from local_tier.cleaning.offset_map import OffsetMap
from local_tier.cleaning.view import CleanableSegment
from local_tier.config import LogConfig
from local_tier.segment import LogSegment
from local_tier.txn_index import AbortedTxn, TxnSearch, decode_aborted
from remote_tier.errors import ObjectNotFound
from remote_tier.layout import SegmentFile, new_upload_id
from remote_tier.manifest import PartitionManifest, RemoteSegment, ReplacedSegment
from remote_tier.storage_manager import RemoteStorageManager, summarize_segment

__all__ = ["RemoteCompactionOutcome", "RemoteCompactionTask", "compact_remote", "expire_replaced"]

_log = logging.getLogger("strata.remote_tier")


@dataclass(frozen=True, slots=True)
class RemoteCompactionTask:
    """What one pass needs, snapshotted on the event loop."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    config: LogConfig
    #: the local log's sealed segments (identity, paths, sizes, transaction entries)
    local_segments: tuple[CleanableSegment, ...]
    local_active_txns: tuple[AbortedTxn, ...]
    first_uncleanable: int
    last_records: dict[int, LastRecord]
    scratch_dir: Path
    now_ms: int
    grace_ms: int


@dataclass(frozen=True, slots=True)
class RemoteCompactionOutcome:
    manifest: PartitionManifest | None
    groups: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    end_offset: int = -1
    replaced: list[RemoteSegment] = field(default_factory=list)


class _RemoteReader:
    """A segment's ``.log`` in the bucket, read with ranged GETs."""

    def __init__(self, rsm: RemoteStorageManager, segment: RemoteSegment, topic_id: uuid.UUID, partition: int) -> None:
        self._rsm, self._segment, self._topic_id, self._partition = rsm, segment, topic_id, partition

    def read(self, position: int, size: int) -> bytes:
        end = min(position + size, self._segment.size_bytes)
        if end <= position:
            return b""
        return self._rsm.read_range(self._segment, self._topic_id, self._partition, position, end)


def _first_dirty(manifest: PartitionManifest) -> int:
    start = max(manifest.log_start_offset, manifest.segments[0].base_offset if manifest.segments else 0)
    return max(start, manifest.cleaner_offset or 0)


def _aborted_entries(rsm: RemoteStorageManager, task: RemoteCompactionTask, manifest: PartitionManifest,
                     remote_end: int) -> list[list[AbortedTxn]]:
    """Every segment's aborted transactions, in offset order: the bucket's, then the disk's."""
    per_segment: list[list[AbortedTxn]] = []
    for segment in manifest.segments:
        raw = rsm.read_txn_index(segment, task.topic_id, task.partition) if segment.txn_index_bytes else b""
        per_segment.append(decode_aborted(raw))
    per_segment += [list(s.txn_entries) for s in task.local_segments if s.base_offset >= remote_end]
    per_segment.append(list(task.local_active_txns))
    return per_segment


def _aborted_for(entries: list[list[AbortedTxn]], start: int, upper: int) -> list[AbortedTxn]:
    search = TxnSearch(start, upper, [])
    for segment_entries in entries:
        search.add(segment_entries)
        if search.complete:
            break
    return search.found


def compact_remote(
    rsm: RemoteStorageManager,
    task: RemoteCompactionTask,
    offset_map: OffsetMap,
    io: CleanerIO,
    *,
    load_factor: float = 0.9,
) -> RemoteCompactionOutcome:
    """One pass (see the module docstring); the committed manifest afterwards."""
    manifest = rsm.manifest(task.topic_id, task.partition)
    if manifest is None or not manifest.segments:
        return RemoteCompactionOutcome(manifest)
    remote_end = manifest.next_offset
    first_dirty = _first_dirty(manifest)
    uncleanable = max(task.first_uncleanable, first_dirty)
    entries = _aborted_entries(rsm, task, manifest, remote_end)
    local_by_range = {(s.base_offset, s.upper, s.size): s for s in task.local_segments}
    readers: list[FileReader] = []

    def reader(segment: RemoteSegment) -> object:
        local = local_by_range.get((segment.base_offset, segment.next_offset, segment.size_bytes))
        if local is not None and segment.base_offset >= first_dirty:  # never cleaned: the same bytes
            try:
                readers.append(FileReader(local.log_path))
                return readers[-1]
            except FileNotFoundError:
                pass
        return _RemoteReader(rsm, segment, task.topic_id, task.partition)

    try:
        dirty = [
            SourceSegment(reader(s), s.base_offset, s.next_offset, s.size_bytes, 0,  # type: ignore[arg-type]
                          _aborted_for(entries, s.base_offset, s.next_offset))
            for s in manifest.segments if s.next_offset > first_dirty and s.base_offset < uncleanable
        ]
        for s in task.local_segments:
            if s.base_offset >= remote_end and s.base_offset < uncleanable:
                readers.append(FileReader(s.log_path))
                dirty.append(SourceSegment(readers[-1], s.base_offset, s.upper, s.size, 0,
                                           _aborted_for(entries, s.base_offset, s.upper)))
        if not dirty:
            return RemoteCompactionOutcome(manifest)
        build_offset_map(dirty, first_dirty, uncleanable, offset_map, io, load_factor=load_factor)
    finally:
        for r in readers:
            r.close()
    end_offset = min(offset_map.latest_offset + 1, remote_end)
    io.pause("remote-mapped")
    to_clean = [s for s in manifest.segments if s.base_offset < end_offset]
    if not to_clean:
        return RemoteCompactionOutcome(manifest)
    sources = [
        SourceSegment(_RemoteReader(rsm, s, task.topic_id, task.partition), s.base_offset, s.next_offset,
                      s.size_bytes, s.size_bytes // max(1, task.config.index_interval_bytes) * 20,
                      _aborted_for(entries, s.base_offset, s.next_offset))
        for s in to_clean
    ]
    groups = group_segments_by_size(sources, task.config.segment_bytes, task.config.segment_index_bytes, uncleanable)
    by_base = {s.base_offset: s for s in to_clean}
    ctx = CleanContext(offset_map, task.now_ms, task.config.delete_retention_ms, task.last_records)
    cleaned: list[tuple[list[RemoteSegment], RemoteSegment]] = []
    uploaded_keys: list[str] = []
    try:
        for group in groups:
            old = [by_base[s.base_offset] for s in group]
            new, keys = _clean_and_upload(rsm, task, group, old, ctx, io)
            uploaded_keys += keys
            cleaned.append((old, new))
        io.pause("remote-uploaded")
        committed = _swap(rsm, task, cleaned, end_offset)
    except BaseException:
        _delete(rsm, uploaded_keys)
        raise
    if committed is None:
        _delete(rsm, uploaded_keys)
        raise CleaningAborted(f"{task.topic}-{task.partition}: the manifest changed under the remote cleaner")
    io.pause("remote-swapped")
    stats = io.stats
    return RemoteCompactionOutcome(
        committed, len(cleaned), stats.bytes_read + stats.map_bytes_read, stats.bytes_written, end_offset,
        [s for old, _ in cleaned for s in old],
    )


def _clean_and_upload(
    rsm: RemoteStorageManager,
    task: RemoteCompactionTask,
    group: Sequence[SourceSegment],
    old: list[RemoteSegment],
    ctx: CleanContext,
    io: CleanerIO,
) -> tuple[RemoteSegment, list[str]]:
    """One group cleaned into a scratch segment and uploaded (not published)."""
    scratch = task.scratch_dir / f"{task.topic}-{task.partition}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    base = group[0].base_offset
    segment = LogSegment.open(scratch, base, task.config, create=True)
    keys: list[str] = []
    try:
        clean_group(group, SegmentSink(segment), ctx, io)
        segment.on_become_inactive()
        segment.flush()
        summary = summarize_segment(segment.log_path)
        if summary is None:
            raise CleaningAborted(f"group at {base} cleaned to nothing")
        layout = rsm.layout(task.topic_id, task.partition)
        upload_id = new_upload_id()
        store = rsm.manifests.store
        files = [(SegmentFile.LOG, segment.log_path), (SegmentFile.OFFSET_INDEX, segment.offset_index.path),
                 (SegmentFile.TIME_INDEX, segment.time_index.path)]
        txn_bytes = segment.txn_index.path.stat().st_size if segment.txn_index.path.exists() else 0
        if txn_bytes:
            files.append((SegmentFile.TXN_INDEX, segment.txn_index.path))
        for file, path in files:
            key = layout.segment_key(base, upload_id, file)
            keys.append(key)
            store.put_file(key, path)
        snapshot_bytes = _copy_snapshot(rsm, task, old[-1], base, upload_id, keys)
        io.throttle(summary.size_bytes)
        return RemoteSegment(
            base_offset=base,
            last_offset=summary.last_offset,
            size_bytes=summary.size_bytes,
            min_timestamp=summary.min_timestamp,
            max_timestamp=summary.max_timestamp,
            leader_epoch=task.leader_epoch,
            record_count=summary.record_count,
            upload_id=upload_id,
            epochs=summary.epochs,
            txn_index_bytes=txn_bytes,
            producer_snapshot_bytes=snapshot_bytes,
        ), keys
    except BaseException:
        _delete(rsm, keys)
        raise
    finally:
        segment.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _copy_snapshot(rsm: RemoteStorageManager, task: RemoteCompactionTask, last: RemoteSegment, base: int,
                   upload_id: str, keys: list[str]) -> int:
    """The producer snapshot at the group's end is the last replaced segment's (same end offset)."""
    if not last.producer_snapshot_bytes:
        return 0
    layout = rsm.layout(task.topic_id, task.partition)
    store = rsm.manifests.store
    try:
        data = store.get(layout.segment_key(last.base_offset, last.upload_id, SegmentFile.PRODUCER_SNAPSHOT))
    except ObjectNotFound:
        return 0
    key = layout.segment_key(base, upload_id, SegmentFile.PRODUCER_SNAPSHOT)
    keys.append(key)
    store.put(key, data)
    return len(data)


def _swap(
    rsm: RemoteStorageManager,
    task: RemoteCompactionTask,
    cleaned: list[tuple[list[RemoteSegment], RemoteSegment]],
    end_offset: int,
) -> PartitionManifest | None:
    """The compare-and-set that publishes the cleaned segments; None when the manifest no
    longer lists every segment they replace (nothing written)."""
    outcome: list[bool] = []
    delete_after = task.now_ms + task.grace_ms

    def change(current: PartitionManifest | None) -> PartitionManifest | None:
        outcome.clear()
        if current is None:
            return None
        listed = {s.upload_id for s in current.segments}
        if all(new.upload_id in listed for _, new in cleaned):
            outcome.append(True)  # published already: this swap, whose answer was lost
            return None
        if any(s.upload_id not in listed for old, _ in cleaned for s in old):
            return None
        gone = {s.upload_id: s for old, _ in cleaned for s in old}
        segments = [s for s in current.segments if s.upload_id not in gone] + [new for _, new in cleaned]
        segments.sort(key=lambda s: s.base_offset)
        outcome.append(True)
        return replace(
            current,
            segments=tuple(segments),
            cleaner_offset=max(current.cleaner_offset or 0, end_offset),
            replaced=current.replaced + tuple(
                ReplacedSegment(s.base_offset, s.upload_id, delete_after) for s in gone.values()
            ),
        )

    committed = rsm.manifests.update(task.topic_id, task.partition, change, leader_epoch=task.leader_epoch)
    return committed if outcome else None


def expire_replaced(
    rsm: RemoteStorageManager, topic_id: uuid.UUID, partition: int, *, now_ms: int, leader_epoch: int
) -> int:
    """Unlist the replaced objects whose grace period is over, then delete them; how many."""
    expired: list[ReplacedSegment] = []

    def change(current: PartitionManifest | None) -> PartitionManifest | None:
        expired.clear()
        if current is None:
            return None
        expired.extend(r for r in current.replaced if r.delete_after_ms <= now_ms)
        if not expired:
            return None
        return replace(current, replaced=tuple(r for r in current.replaced if r.delete_after_ms > now_ms))

    rsm.manifests.update(topic_id, partition, change, leader_epoch=leader_epoch)
    layout = rsm.layout(topic_id, partition)
    _delete(rsm, [key for r in expired for key in layout.all_segment_keys(r.base_offset, r.upload_id)])
    return len(expired)


def _delete(rsm: RemoteStorageManager, keys: list[str]) -> None:
    store = rsm.manifests.store
    for key in keys:
        try:
            store.delete(key)
        except Exception as exc:  # noqa: BLE001 - left to the orphan clean-up
            _log.warning("could not delete %s (left for the orphan clean-up): %s", key, exc)


RemoteCompactor = Callable[[RemoteCompactionTask], RemoteCompactionOutcome]
