"""Merging a diskless partition's committed tail into an ordinary tiered segment: :func:`merge`.

ADR 0027, section 7. The sequencer cuts its oldest committed entries out of their
write-ahead objects (each object read once), writes them with their offsets into a local
segment built by :class:`~local_tier.segment.LogSegment` (so the ``.index`` and
``.timeindex`` are the classic ones), adds the producer snapshot at its end, and publishes
it with :meth:`~remote_tier.storage_manager.RemoteStorageManager.upload_segment` (upload,
then publish in the manifest, fenced by the leader epoch). From then on the tiered reader,
retention, ListOffsets and Spark's bucket reader serve those offsets; the sequence forgets
them (:meth:`~service.diskless.sequence.PartitionSequence.merged_up_to`). Only entries of
objects older than the commit deadline are merged, so no writer proposes their places again.

Blocking (object store and local files): run it off the event loop; it reads no sequence
(the loop picks the entries with :func:`mergeable` and applies the result).
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from local_tier.config import LogConfig
from local_tier.producer_entry import ProducerStateEntry
from local_tier.segment import LogSegment
from remote_tier.diskless.commits import CommitEntry
from remote_tier.diskless.wal import WalKey
from remote_tier.manifest import RemoteSegment
from remote_tier.storage_manager import RemoteStorageManager
from service.diskless.reader import committed_batch
from service.diskless.sequence import PartitionSequence, count_producer, producer_state

__all__ = ["Merged", "MergedFiles", "merge", "mergeable", "write_segment"]


@dataclass(frozen=True, slots=True)
class MergedFiles:
    """A segment written locally from committed entries, ready to upload."""

    log: Path
    index: Path
    timeindex: Path
    producer_snapshot: Path
    next_offset: int
    producers: tuple[ProducerStateEntry, ...]


def mergeable(sequence: PartitionSequence, *, now_ms: int, commit_deadline_ms: int, max_bytes: int) -> list[CommitEntry]:
    """The oldest durable entries to merge: from the sequence's start, while their objects
    are past the commit deadline, up to ``max_bytes`` (``segment.bytes``; at least one)."""
    chosen: list[CommitEntry] = []
    size = 0
    for entry in sequence.durable:
        if now_ms - WalKey.parse(entry.object_key).created_ms <= commit_deadline_ms:
            break
        if chosen and size + entry.size > max_bytes:
            break
        chosen.append(entry)
        size += entry.size
    return chosen


def write_segment(directory: Path, entries: Sequence[CommitEntry], read_object: Callable[[str], bytes],
                  config: LogConfig, base_producers: Sequence[ProducerStateEntry], name: str) -> MergedFiles:
    """``entries`` (consecutive offsets) as a local segment in ``directory`` and the producer
    state at its end (``base_producers`` with the entries counted in)."""
    key, data = "", b""  # one object held at a time: consecutive entries mostly share one
    segment = LogSegment.open(directory, entries[0].base_offset, config, create=True)
    try:
        for entry in entries:
            if entry.object_key != key:
                key, data = entry.object_key, read_object(entry.object_key)
            segment.append(entry.last_offset, entry.max_timestamp, entry.last_offset, committed_batch(entry, data))
        segment.flush()
        paths = (segment.log_path, segment.offset_index.path, segment.time_index.path)
    finally:
        segment.close()
    producers = producer_state(directory, name, base_producers)
    for entry in entries:
        count_producer(producers, entry)
    producers.map_end_offset = entries[-1].last_offset + 1
    snapshot = producers.take_snapshot()
    return MergedFiles(*paths, snapshot, entries[-1].last_offset + 1, tuple(producers.producers.values()))


def merge(rsm: RemoteStorageManager, topic: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
          entries: Sequence[CommitEntry], read_object: Callable[[str], bytes], config: LogConfig,
          base_producers: Sequence[ProducerStateEntry], work_dir: Path | None = None) -> Merged:
    """Publish ``entries`` (from :func:`mergeable`, taken on the loop) as a tiered segment.
    Runs off the loop and leaves the sequence alone: the loop then calls
    ``sequence.merged_up_to(merged.next_offset, merged.producers)``. Raises what the upload
    raises (FencedError: a newer sequencer)."""
    with tempfile.TemporaryDirectory(prefix="strata-merge-", dir=work_dir) as tmp:
        files = write_segment(Path(tmp), entries, read_object, config, base_producers, f"{topic}-{partition}")
        segment = rsm.upload_segment(
            topic=topic, topic_id=topic_id, partition=partition, leader_epoch=leader_epoch,
            log_path=files.log, index_path=files.index, timeindex_path=files.timeindex,
            producer_snapshot_path=files.producer_snapshot)
    return Merged(segment, files.next_offset, files.producers)


@dataclass(frozen=True, slots=True)
class Merged:
    """A published merge: the segment, the offset the sequence starts at now, and the
    producer state there."""

    segment: RemoteSegment
    next_offset: int
    producers: tuple[ProducerStateEntry, ...]
