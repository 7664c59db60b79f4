"""Partition manifests: which remote segments of a partition are committed.

A segment is visible to readers only once the partition's ``manifest.json`` lists
it. The manifest is written only by compare-and-set (:meth:`ManifestStore.update`:
read with its etag, change, ``put_if_match``; on conflict re-read and retry) and
is fenced by the writer's leader epoch: a writer whose epoch is below the stored
one gets :class:`FencedError` and writes nothing.

The JSON format is versioned (``format_version``) and documented in
``docs/object-layout.md``; a reader refuses a version it does not know.

:class:`RemoteSegment` and :class:`PartitionManifest` are frozen values (thread-safe).
:class:`ManifestStore` keeps no state besides its store: thread-safe, and safe
across processes (the compare-and-set is the only synchronisation). Blocking I/O:
never call it on the event loop.

Invariants of a manifest: segments are sorted by base offset and do not overlap;
every segment's ``last_offset >= log_start_offset`` (segments wholly below it are
removed); ``revision`` grows by one on every write, so no two versions have the
same bytes (and etag).
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from remote_tier.errors import (
    FencedError,
    ManifestConflictError,
    ManifestFormatError,
    ObjectNotFound,
    PreconditionFailed,
)
from remote_tier.layout import PartitionLayout
from remote_tier.store import ObjectStore

__all__ = [
    "FORMAT_VERSION",
    "DisklessChainStart",
    "ManifestStore",
    "PartitionManifest",
    "RemoteSegment",
    "ReplacedSegment",
]

FORMAT_VERSION = 3  # written only when compaction fields are present; 2 otherwise
READABLE_VERSIONS = (1, 2, 3)  # 1: no .txnindex/.snapshot objects; 3: compacted (ADR 0019)
_CONSISTENT_READ_ATTEMPTS = 10
_log = logging.getLogger("strata.remote_tier")


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """One committed remote segment (the ``.log`` bytes exactly as on local disk).

    ``leader_epoch`` is the epoch of the leader that uploaded it;
    ``epochs`` is the leader-epoch history inside the segment, from its batches'
    partition leader epochs: ``(epoch, first offset of that epoch)`` pairs,
    ascending. ``size_bytes`` is the ``.log`` object's size; ``last_offset`` the
    last offset of the last complete batch.
    """

    base_offset: int
    last_offset: int
    size_bytes: int
    min_timestamp: int
    max_timestamp: int
    leader_epoch: int
    record_count: int
    upload_id: str
    epochs: tuple[tuple[int, int], ...] = ()
    #: size of the ``.txnindex`` object (0: none, the segment ends no aborted transaction)
    txn_index_bytes: int = 0
    #: size of the ``.snapshot`` object (0: none uploaded)
    producer_snapshot_bytes: int = 0

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "base_offset": self.base_offset,
            "last_offset": self.last_offset,
            "size_bytes": self.size_bytes,
            "min_timestamp": self.min_timestamp,
            "max_timestamp": self.max_timestamp,
            "leader_epoch": self.leader_epoch,
            "record_count": self.record_count,
            "upload_id": self.upload_id,
            "epochs": [[epoch, start] for epoch, start in self.epochs],
            "txn_index_bytes": self.txn_index_bytes,
            "producer_snapshot_bytes": self.producer_snapshot_bytes,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> RemoteSegment:
        return cls(
            base_offset=_int(obj, "base_offset"),
            last_offset=_int(obj, "last_offset"),
            size_bytes=_int(obj, "size_bytes"),
            min_timestamp=_int(obj, "min_timestamp"),
            max_timestamp=_int(obj, "max_timestamp"),
            leader_epoch=_int(obj, "leader_epoch"),
            record_count=_int(obj, "record_count"),
            upload_id=_str(obj, "upload_id"),
            epochs=tuple((int(e), int(s)) for e, s in obj.get("epochs", ())),
            txn_index_bytes=_int(obj, "txn_index_bytes") if "txn_index_bytes" in obj else 0,
            producer_snapshot_bytes=(
                _int(obj, "producer_snapshot_bytes") if "producer_snapshot_bytes" in obj else 0
            ),
        )


@dataclass(frozen=True, slots=True)
class ReplacedSegment:
    """Objects a remote compaction replaced: no longer part of the log, kept until
    ``delete_after_ms`` so reads planned from an older manifest finish (ADR 0019)."""

    base_offset: int
    upload_id: str
    delete_after_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"base_offset": self.base_offset, "upload_id": self.upload_id,
                "delete_after_ms": self.delete_after_ms}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ReplacedSegment:
        return cls(_int(obj, "base_offset"), _str(obj, "upload_id"), _int(obj, "delete_after_ms"))


@dataclass(frozen=True, slots=True)
class DisklessChainStart:
    """Where a diskless partition's commits are in one sequencer's chain (ADR 0027, section
    4): the chain, the first slot that may hold them, that sequencer's leader epoch, and the
    last slot its successor read (``end_slot``; None while it sequences): a slot written after
    that by a sequencer that did not know it was replaced is never read. A manifest lists
    one per leadership since the last merge, oldest first. The key is optional in every
    format version (readers that do not know it ignore it)."""

    chain: str
    slot: int
    leader_epoch: int
    end_slot: int | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"chain": self.chain, "slot": self.slot, "leader_epoch": self.leader_epoch}
        if self.end_slot is not None:
            doc["end_slot"] = self.end_slot
        return doc

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DisklessChainStart:
        end = _int(obj, "end_slot") if obj.get("end_slot") is not None else None
        return cls(_str(obj, "chain"), _int(obj, "slot"), _int(obj, "leader_epoch"), end)


@dataclass(frozen=True, slots=True)
class PartitionManifest:
    """The committed remote state of one partition (see the module invariants)."""

    topic: str
    topic_id: str
    partition: int
    leader_epoch: int
    log_start_offset: int
    segments: tuple[RemoteSegment, ...] = ()
    revision: int = 0
    #: compacted topics (format 3): the first offset the remote cleaner has not cleaned
    #: (None: never cleaned), and the objects it replaced, still readable for a while
    cleaner_offset: int | None = None
    replaced: tuple[ReplacedSegment, ...] = ()
    #: a diskless topic's partition: the chains holding its unmerged commits (ADR 0027)
    diskless: tuple[DisklessChainStart, ...] = ()
    _bases: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)
    #: the largest ``max_timestamp`` of the segments up to each one: never decreasing, so
    #: the first segment holding a timestamp at or after T is found by bisection
    _reached: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "topic_id", str(uuid.UUID(str(self.topic_id))))
        object.__setattr__(self, "_bases", tuple(s.base_offset for s in self.segments))
        reached = itertools.accumulate((s.max_timestamp for s in self.segments), max)
        object.__setattr__(self, "_reached", tuple(reached))
        for before, after in zip(self.segments, self.segments[1:]):
            if after.base_offset <= before.last_offset:
                raise ManifestFormatError(
                    f"manifest of {self.topic}-{self.partition}: segment at "
                    f"{after.base_offset} overlaps or precedes the one at {before.base_offset}"
                )

    @classmethod
    def empty(
        cls, topic: str, topic_id: str | uuid.UUID, partition: int, leader_epoch: int
    ) -> PartitionManifest:
        return cls(topic, str(topic_id), partition, leader_epoch, 0)

    # -- queries ----------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        """One past the last remote offset (``log_start_offset`` when there is none)."""
        if not self.segments:
            return self.log_start_offset
        return max(self.segments[-1].next_offset, self.log_start_offset)

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    def segment_for(self, offset: int) -> RemoteSegment | None:
        """The segment holding ``offset``, else the first one after it (a gap);
        None when ``offset`` is below ``log_start_offset`` or at/after ``next_offset``."""
        if offset < self.log_start_offset or offset >= self.next_offset:
            return None
        i = bisect.bisect_right(self._bases, offset) - 1
        if i >= 0 and self.segments[i].last_offset >= offset:
            return self.segments[i]
        return self.segments[i + 1] if i + 1 < len(self.segments) else None

    def segments_after(self, offset: int) -> tuple[RemoteSegment, ...]:
        """The segments whose base offset is above ``offset``, in order."""
        return self.segments[bisect.bisect_right(self._bases, offset) :]

    def segment_for_timestamp(self, timestamp: int) -> RemoteSegment | None:
        """The first segment holding a record with a timestamp at or after ``timestamp``."""
        return next(self.segments_for_timestamp(timestamp), None)

    def segments_for_timestamp(self, timestamp: int, start_offset: int = 0) -> Iterator[RemoteSegment]:
        """The segments holding a record with a timestamp at or after ``timestamp`` and an
        offset at or after ``start_offset``, in offset order (ListOffsets by time).

        The first is found by bisection over the running maximum of the segments' max
        timestamps (timestamps need not grow with offsets), in O(log n) for a manifest of
        n segments. Only when a segment wholly below ``start_offset`` holds a later
        timestamp (a DeleteRecords not yet applied to the manifest) are the segments
        from ``start_offset`` on filtered one by one.
        """
        first = bisect.bisect_left(self._reached, timestamp)
        from_start = bisect.bisect_right(self._bases, start_offset) - 1
        if from_start >= 0 and self.segments[from_start].last_offset < start_offset:
            from_start += 1
        later = self.segments[max(first, from_start, 0) :]
        return (s for s in later if s.max_timestamp >= timestamp)

    def find(self, base_offset: int) -> RemoteSegment | None:
        """The segment covering ``base_offset`` (``base <= base_offset <= last``), if any."""
        i = bisect.bisect_right(self._bases, base_offset) - 1
        if i >= 0 and self.segments[i].last_offset >= base_offset:
            return self.segments[i]
        return None

    # -- changes (new values) -------------------------------------------------------

    def with_segment(self, segment: RemoteSegment) -> PartitionManifest:
        """This manifest plus ``segment`` (which must not overlap any segment)."""
        segments = sorted((*self.segments, segment), key=lambda s: s.base_offset)
        return replace(self, segments=tuple(segments))

    def without(self, removed: Sequence[RemoteSegment], log_start_offset: int) -> PartitionManifest:
        """This manifest less ``removed``, with the log start offset raised to
        ``log_start_offset`` (never lowered)."""
        gone = {s.upload_id for s in removed}
        return replace(
            self,
            segments=tuple(s for s in self.segments if s.upload_id not in gone),
            log_start_offset=max(self.log_start_offset, log_start_offset),
        )

    # -- JSON -----------------------------------------------------------------------

    @property
    def compacted(self) -> bool:
        """The remote cleaner has rewritten this partition (format 3)."""
        return self.cleaner_offset is not None or bool(self.replaced)

    def to_json_bytes(self) -> bytes:
        doc: dict[str, Any] = {
            "format_version": FORMAT_VERSION if self.compacted else 2,
            "topic": self.topic,
            "topic_id": self.topic_id,
            "partition": self.partition,
            "leader_epoch": self.leader_epoch,
            "log_start_offset": self.log_start_offset,
            "revision": self.revision,
            "segments": [s.to_json() for s in self.segments],
        }
        if self.compacted:
            doc["cleaner_offset"] = self.cleaner_offset
            doc["replaced"] = [r.to_json() for r in self.replaced]
        if self.diskless:
            doc["diskless"] = [c.to_json() for c in self.diskless]
        return (json.dumps(doc, indent=1, sort_keys=False) + "\n").encode()

    @classmethod
    def from_json_bytes(cls, data: bytes) -> PartitionManifest:
        """Parse a manifest; :class:`ManifestFormatError` for bad JSON or an unknown version."""
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ManifestFormatError(f"partition manifest is not valid JSON: {err}") from err
        if not isinstance(doc, dict):
            raise ManifestFormatError("partition manifest is not a JSON object")
        version = doc.get("format_version")
        if version not in READABLE_VERSIONS:
            raise ManifestFormatError(
                f"partition manifest has format_version {version!r}; this Strata reads "
                f"versions {READABLE_VERSIONS} (a newer Strata probably wrote it: upgrade)"
            )
        try:
            return cls(
                topic=_str(doc, "topic"),
                topic_id=_str(doc, "topic_id"),
                partition=_int(doc, "partition"),
                leader_epoch=_int(doc, "leader_epoch"),
                log_start_offset=_int(doc, "log_start_offset"),
                revision=_int(doc, "revision"),
                segments=tuple(RemoteSegment.from_json(s) for s in doc.get("segments", ())),
                cleaner_offset=(
                    _int(doc, "cleaner_offset") if doc.get("cleaner_offset") is not None else None
                ),
                replaced=tuple(ReplacedSegment.from_json(r) for r in doc.get("replaced", ())),
                diskless=tuple(DisklessChainStart.from_json(c) for c in doc.get("diskless", ())),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ManifestFormatError(f"partition manifest is malformed: {err!r}") from err


def _int(obj: Mapping[str, Any], name: str) -> int:
    value = obj[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    return value


def _str(obj: Mapping[str, Any], name: str) -> str:
    value = obj[name]
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, not {value!r}")
    return value


ManifestChange = Callable[[PartitionManifest | None], PartitionManifest | None]
"""Given the current manifest (None: none yet), the new one, or None (or the same
object) to write nothing. Called again after every lost compare-and-set, so it
must be a pure function of its argument."""


class ManifestStore:
    """Loads and compare-and-sets partition manifests in ``store`` under ``prefix``.

    Stateless (thread-safe, multi-process-safe); blocking.
    """

    def __init__(self, store: ObjectStore, prefix: str = "", *, max_attempts: int = 10) -> None:
        self._store = store
        self._prefix = prefix
        self._max_attempts = max_attempts

    @property
    def store(self) -> ObjectStore:
        return self._store

    def layout(self, topic_id: str | uuid.UUID, partition: int) -> PartitionLayout:
        return PartitionLayout(self._prefix, str(topic_id), partition)

    def load(
        self, topic_id: str | uuid.UUID, partition: int
    ) -> tuple[PartitionManifest, str] | None:
        """The committed manifest and its etag, or None when the partition has none.

        A consistent read (``head``, ``get``, ``head`` until both etags agree), so the
        etag is exactly that of the returned manifest.
        """
        key = self.layout(topic_id, partition).manifest_key
        for _ in range(_CONSISTENT_READ_ATTEMPTS):
            try:
                before = self._store.head(key).etag
                data = self._store.get(key)
                after = self._store.head(key).etag
            except ObjectNotFound:
                return None
            if before == after:
                return PartitionManifest.from_json_bytes(data), after
        raise ManifestConflictError(f"manifest {key!r} kept changing while being read; retry")

    def update(
        self,
        topic_id: str | uuid.UUID,
        partition: int,
        fn: ManifestChange,
        *,
        leader_epoch: int,
    ) -> PartitionManifest | None:
        """Apply ``fn`` by compare-and-set; returns the manifest now committed.

        The written manifest carries ``leader_epoch`` and the next revision. Raises
        :class:`FencedError` when the stored manifest's leader epoch is above
        ``leader_epoch``, :class:`ManifestConflictError` after ``max_attempts`` lost
        races, and lets :class:`ObjectStoreUnavailable` through (the write may or
        may not have happened: load again to know).
        """
        layout = self.layout(topic_id, partition)
        written: PartitionManifest | None = None  # a write that lost its compare-and-set
        for _ in range(self._max_attempts):
            loaded = self.load(topic_id, partition)
            current, etag = loaded if loaded is not None else (None, None)
            if written is not None and current == written:
                return written  # it landed: a retry of the request found the manifest changed by itself
            if current is not None and current.leader_epoch > leader_epoch:
                raise FencedError(
                    f"{current.topic}-{partition}: the manifest belongs to leader epoch "
                    f"{current.leader_epoch}; this writer's epoch {leader_epoch} is fenced"
                )
            changed = fn(current)
            if changed is None or changed is current:
                return current
            new = replace(
                changed,
                leader_epoch=leader_epoch,
                revision=(current.revision + 1) if current is not None else 0,
            )
            data = new.to_json_bytes()
            try:
                if etag is None:
                    self._store.put_if_absent(layout.manifest_key, data)
                else:
                    self._store.put_if_match(layout.manifest_key, data, etag)
            except PreconditionFailed:
                _log.debug("manifest %s changed under us; retrying", layout.manifest_key)
                written = new
                continue
            return new
        raise ManifestConflictError(
            f"manifest {layout.manifest_key!r}: {self._max_attempts} compare-and-set "
            "attempts lost to concurrent writers; retry later"
        )

    def delete(self, topic_id: str | uuid.UUID, partition: int) -> None:
        """Remove the manifest (topic deletion); idempotent."""
        self._store.delete(self.layout(topic_id, partition).manifest_key)
