"""Tiered reads: fetches below the local log start, served from the bucket.

Reads run on a bounded pool of tiered-fetch threads (``remote.log.reader.threads``,
pinned to ``remote.log.reader.cpus`` when set), never on the event loop. Segment
objects are read with ranged GETs in fixed-size chunks that go through a
byte-bounded LRU :class:`ChunkCache`; concurrent misses of one chunk share one
GET. A sequential reader gets the next chunk fetched ahead (read-ahead) while it
consumes the current one. Remote offset and time indexes are cached per segment.

ListOffsets by timestamp (:meth:`RemoteReader.offset_for_timestamp`) runs on the
same threads: the segment's indexes narrow it to about one index interval, read
with ranged GETs outside the chunk cache (a chunk may be 128 MiB) and bounded by
``max_scan_bytes`` per lookup.

Memory is bounded by the cache capacity plus, per tiered-fetch thread, one
response's ``max_bytes``: a hundred consumers reading history at once queue on
the pool instead of each holding its own buffers (the failure of KAFKA-19763).
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from common.errors import OffsetOutOfRangeError
from common.record.batch import BATCH_OVERHEAD, LOG_OVERHEAD, read_batch_header
from fetch.affinity import pin_current_thread
from fetch.remote_index import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    BoundedScan,
    IndexEntries,
    IndexMismatch,
    TimestampMatch,
    decode_index,
    first_at_or_after,
    time_scan_start,
)
from local_tier.segment import FileRegion

__all__ = ["BucketRegion", "ChunkCache", "RemoteReadResult", "RemoteReader", "RemoteSegmentSource", "TimestampMatch"]

_log = logging.getLogger("strata.fetch")
_HEADER_BYTES = BATCH_OVERHEAD


class RemoteSegmentSource(Protocol):
    """How the reader reaches a remote segment's objects (blocking calls).

    A segment is any object with a ``base_offset``; the source knows the rest.
    """

    def cache_key(self, segment: object) -> Hashable:
        """Identity of the segment's ``.log`` object (unique per upload)."""
        ...

    def get_range(self, segment: object, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the segment's ``.log`` object."""
        ...

    def get_offset_index(self, segment: object) -> bytes:
        """The segment's whole ``.index`` object."""
        ...

    def get_time_index(self, segment: object) -> bytes:
        """The segment's whole ``.timeindex`` object."""
        ...

    # Optional: ``open_log(segment)``, the ``.log`` object as an open file (anything
    # with ``fileno()``) or None, for a source whose objects are local files; the
    # reader then hands out file regions to ``sendfile`` instead of reading chunks.


class _Descriptor(Protocol):
    def fileno(self) -> int: ...


class ChunkCache:
    """LRU of object chunks, bounded in bytes. Thread-safe.

    ``get`` returns the cached chunk or loads it once, however many threads ask
    for it at the same time.
    """

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._chunks: OrderedDict[Hashable, bytes] = OrderedDict()
        self._loading: dict[Hashable, Future[bytes]] = {}
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        return self._size

    def contains(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._chunks or key in self._loading

    def get(self, key: Hashable, load: Callable[[], bytes]) -> bytes:
        with self._lock:
            chunk = self._chunks.get(key)
            if chunk is not None:
                self._chunks.move_to_end(key)
                self.hits += 1
                return chunk
            pending = self._loading.get(key)
            if pending is None:
                self.misses += 1
                pending = Future()
                self._loading[key] = pending
                owner = True
            else:
                self.hits += 1
                owner = False
        if not owner:
            return pending.result()
        try:
            data = load()
        except BaseException as exc:
            with self._lock:
                del self._loading[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._loading[key]
            if len(data) <= self.capacity_bytes:
                self._chunks[key] = data
                self._size += len(data)
                while self._size > self.capacity_bytes:
                    _, evicted = self._chunks.popitem(last=False)
                    self._size -= len(evicted)
        pending.set_result(data)
        return data


@dataclass(frozen=True, slots=True)
class BucketRegion(FileRegion):
    """A region of a segment object's file in a bucket on the local file system: history
    read from the bucket, so sent by the history threads (docs/adr/0005) with
    ``sendfile``, however warm its pages, where a local segment's region may go out
    from the event loop."""


@dataclass(frozen=True, slots=True)
class RemoteReadResult:
    """Whole batches read from a segment object: a region of its file, or views of
    cached chunks.

    ``parts`` are never copies. From a bucket on the local file system they are one
    :class:`BucketRegion` of the object's file, sent with ``sendfile`` like a local
    segment's. From S3 they are slices of the chunk cache's buffers: a 16 MiB read is
    handed to the socket as sixteen views, never joined. Copying it would hold the
    GIL for milliseconds, which the event loop serving the live tail would wait out.
    """

    parts: tuple[memoryview | FileRegion, ...]
    first_batch_offset: int
    #: one past the last offset of the batches read (``first_batch_offset`` when none)
    next_offset: int = -1

    @property
    def size(self) -> int:
        return sum(p.length if isinstance(p, FileRegion) else len(p) for p in self.parts)

    @property
    def records(self) -> bytes:
        """The batches as one byte string (a copy, read from the file for a region:
        blocking; for callers that need one)."""
        return b"".join(p.read_bytes() if isinstance(p, FileRegion) else p for p in self.parts)


class RemoteReader:
    """Reads whole batches of remote segments within a byte budget, on its own threads."""

    def __init__(
        self,
        source: RemoteSegmentSource,
        *,
        threads: int = 10,
        chunk_bytes: int = 1024 * 1024,
        cache_bytes: int = 256 * 1024 * 1024,
        index_cache_entries: int = 1024,
        read_ahead_chunks: int = 1,
        cpus: frozenset[int] = frozenset(),
        max_scan_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        self._source = source
        self.cpus = cpus
        self._chunk = chunk_bytes
        self.cache = ChunkCache(cache_bytes)
        self._read_ahead = read_ahead_chunks
        self._pool = ThreadPoolExecutor(
            max_workers=threads,
            thread_name_prefix="strata-tiered-fetch",
            initializer=pin_current_thread,
            initargs=(cpus,),
        )
        self._indexes: OrderedDict[Hashable, IndexEntries] = OrderedDict()
        self._index_entries_max = index_cache_entries
        #: most ``.log`` bytes one timestamp lookup reads
        self.max_scan_bytes = max_scan_bytes
        self._mismatched: set[Hashable] = set()
        self._lock = threading.Lock()
        # reads queued or running, by what they read: an identical request joins one
        self._inflight: dict[Hashable, Future[RemoteReadResult]] = {}

    @property
    def queue_depth(self) -> int:
        """Distinct reads submitted and not finished yet."""
        return len(self._inflight)

    def submit(
        self, segment: object, segment_size: int, offset: int, max_bytes: int, min_one_message: bool
    ) -> Future[RemoteReadResult]:
        """Queue a :meth:`read`; returns a future of its result for this caller alone.

        A read identical to one still queued or running joins it instead of queuing
        another. A consumer whose fetch gave up after ``remote.fetch.max.wait.ms``
        asks again for the same offset; without this, every retry would queue a
        duplicate behind the abandoned read, and under load the queue would grow
        until no read finished within the wait (every consumer starved). Cancelling
        the returned future never cancels the shared read.
        """
        key = (self._source.cache_key(segment), offset, max_bytes, min_one_message)
        with self._lock:
            shared = self._inflight.get(key)
            created = shared is None
            if shared is None:
                shared = self._inflight[key] = Future()
        if created:
            try:
                job = self._pool.submit(
                    self._run, shared, key, segment, segment_size, offset, max_bytes, min_one_message
                )
            except RuntimeError as exc:  # pool shut down
                self._finish(shared, key, None, exc)
            else:

                def dropped(job: Future[None]) -> None:
                    if job.cancelled():  # the pool shut down before running it
                        self._finish(shared, key, None, RuntimeError("the tiered-fetch pool was shut down"))

                job.add_done_callback(dropped)
        mine: Future[RemoteReadResult] = Future()

        def forward(done: Future[RemoteReadResult]) -> None:
            if not mine.set_running_or_notify_cancel():
                return  # this caller cancelled
            exc = done.exception()
            if exc is not None:
                mine.set_exception(exc)
            else:
                mine.set_result(done.result())

        shared.add_done_callback(forward)
        return mine

    def _run(
        self,
        shared: Future[RemoteReadResult],
        key: Hashable,
        segment: object,
        segment_size: int,
        offset: int,
        max_bytes: int,
        min_one_message: bool,
    ) -> None:
        try:
            result = self.read(segment, segment_size, offset, max_bytes, min_one_message)
        except BaseException as exc:  # noqa: BLE001 - handed to the callers
            self._finish(shared, key, None, exc)
        else:
            self._finish(shared, key, result, None)

    def _finish(
        self,
        shared: Future[RemoteReadResult],
        key: Hashable,
        result: RemoteReadResult | None,
        exc: BaseException | None,
    ) -> None:
        with self._lock:
            if self._inflight.get(key) is shared:
                del self._inflight[key]
        if shared.done():
            return
        if exc is not None:
            shared.set_exception(exc)
        else:
            shared.set_result(result)  # type: ignore[arg-type]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- blocking part, on a tiered-fetch thread ----------------------------

    def read(
        self, segment: object, segment_size: int, offset: int, max_bytes: int, min_one_message: bool
    ) -> RemoteReadResult:
        """Whole batches from the one containing ``offset``, within ``max_bytes`` (KIP-74).

        When the source can open the segment's object as a file (a bucket on the local
        file system), the result is one :class:`BucketRegion` of it that the history
        threads send with ``sendfile``, as local segments go out: the batch headers are
        read with ``pread`` and the records never pass through this process's memory.
        Otherwise they are views of the chunk cache's ranged GETs.
        """
        key = self._source.cache_key(segment)
        pos = self._index_position(segment, key, offset)
        file = self._open_log(segment)
        if file is None:

            def header_at(at: int) -> bytes:
                return self._bytes(segment, key, segment_size, at, at + _HEADER_BYTES)
        else:

            def header_at(at: int) -> bytes:
                return os.pread(file.fileno(), _HEADER_BYTES, at)

        start, end, first, next_offset = _batch_span(
            header_at, key, segment_size, pos, offset, max_bytes, min_one_message
        )
        if file is not None:
            region = BucketRegion(file, start, end - start, first, next_offset)  # type: ignore[arg-type]
            return RemoteReadResult((region,) if end > start else (), first, next_offset)
        parts = self._views(segment, key, segment_size, start, end) if end > start else ()
        self._prefetch(segment, key, segment_size, end)
        return RemoteReadResult(parts, first, next_offset)

    def _open_log(self, segment: object) -> _Descriptor | None:
        """The segment's ``.log`` object as an open file, if the source can give one."""
        open_log = getattr(self._source, "open_log", None)
        return open_log(segment) if open_log is not None else None

    def submit_time_lookup(
        self, segment: object, segment_size: int, timestamp: int, start_offset: int
    ) -> Future[TimestampMatch | None]:
        """Queue an :meth:`offset_for_timestamp` on the tiered-fetch threads."""
        return self._pool.submit(self.offset_for_timestamp, segment, segment_size, timestamp, start_offset)

    def offset_for_timestamp(
        self, segment: object, segment_size: int, timestamp: int, start_offset: int = 0
    ) -> TimestampMatch | None:
        """The segment's first record at or after ``start_offset`` whose timestamp is ≥ ``timestamp``.

        As Kafka, the ``.timeindex`` and ``.index`` objects (one GET each, then
        cached) give the position to start from, and ranged GETs of the ``.log`` from
        there read at most ``max_scan_bytes`` (KAFKA_STORAGE_ERROR beyond): a lookup in
        a 1 GiB segment costs a handful of small GETs, not the segment.

        Where to start (:func:`time_scan_start`): the indexes are written together,
        every ``index.interval.bytes``, the time index only when the running maximum
        timestamp grew; so every batch up to the last offset-index entry below the
        first time entry at or after ``timestamp`` is older than ``timestamp``, and the
        answer lies within about one index interval. An offset-index entry that does
        not name the batch at its position (a damaged index) restarts the scan at 0.
        """
        key = self._source.cache_key(segment)
        base = int(segment.base_offset)  # type: ignore[attr-defined]
        times = self._index_entries(segment, key, _TIME_INDEX)
        offsets = self._index_entries(segment, key, _OFFSET_INDEX)
        position, named, hint = time_scan_start(times, offsets, base, segment_size, timestamp, start_offset)
        scan = BoundedScan(self._source, segment, segment_size, self.max_scan_bytes, hint)
        try:
            return first_at_or_after(scan, position, named, timestamp, start_offset)
        except IndexMismatch:
            if key not in self._mismatched:  # once per segment: its index stays cached
                self._mismatched.add(key)
                _log.warning(
                    "remote segment %s: offset index entry (offset %d, position %d) does not "
                    "match the log; ListOffsets scans it from its start", key, named, position,
                )
            return first_at_or_after(scan, 0, None, timestamp, start_offset)

    def _index_position(self, segment: object, key: Hashable, offset: int) -> int:
        rel, positions, _ = self._index_entries(segment, key, _OFFSET_INDEX)
        i = bisect.bisect_right(rel, offset - int(segment.base_offset)) - 1  # type: ignore[attr-defined]
        return positions[i] if i >= 0 else 0

    def _index_entries(self, segment: object, key: Hashable, kind: _IndexKind) -> IndexEntries:
        """A remote index, decoded and cached per upload (LRU of ``index_cache_entries``)."""
        cache_key = (kind.name, key)
        with self._lock:
            entry = self._indexes.get(cache_key)
            if entry is not None:
                self._indexes.move_to_end(cache_key)
                return entry
        entry = decode_index(kind.load(self._source, segment), kind.entry)
        with self._lock:
            self._indexes[cache_key] = entry
            while len(self._indexes) > self._index_entries_max:
                self._indexes.popitem(last=False)
        return entry

    def _chunk_bytes(self, segment: object, key: Hashable, size: int, index: int) -> bytes:
        start = index * self._chunk
        end = min(size, start + self._chunk)
        return self.cache.get((key, index), lambda: self._source.get_range(segment, start, end))

    def _views(
        self, segment: object, key: Hashable, size: int, start: int, end: int
    ) -> tuple[memoryview, ...]:
        """Bytes ``[start, end)`` of the object as views of its cached chunks (no copy)."""
        end = min(end, size)
        first, last = start // self._chunk, (end - 1) // self._chunk
        parts = []
        for index in range(first, last + 1):
            chunk = memoryview(self._chunk_bytes(segment, key, size, index))
            lo = start - index * self._chunk if index == first else 0
            hi = end - index * self._chunk if index == last else len(chunk)
            parts.append(chunk[lo:hi])
        return tuple(parts)

    def _bytes(self, segment: object, key: Hashable, size: int, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object, copied: for small reads (batch headers)."""
        parts = self._views(segment, key, size, start, end)
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)

    def _prefetch(self, segment: object, key: Hashable, size: int, pos: int) -> None:
        """Read-ahead: fetch the next chunks in the background if they are not cached."""
        next_index = pos // self._chunk
        for index in range(next_index, next_index + self._read_ahead):
            if index * self._chunk >= size or self.cache.contains((key, index)):
                continue
            try:
                self._pool.submit(self._chunk_bytes, segment, key, size, index)
            except RuntimeError:  # pool shut down
                return


def _batch_span(
    header_at: Callable[[int], bytes],
    key: Hashable,
    segment_size: int,
    pos: int,
    offset: int,
    max_bytes: int,
    min_one_message: bool,
) -> tuple[int, int, int, int]:
    """``(start, end, first offset, next offset)`` of the whole batches to send: from the
    one holding ``offset`` (searched from ``pos``) while they fit in ``max_bytes``, the
    first one whatever its size with ``min_one_message``, never a partial tail batch."""
    while True:
        if pos + LOG_OVERHEAD > segment_size:
            raise OffsetOutOfRangeError(f"offset {offset} is past the end of remote segment {key}")
        header = read_batch_header(header_at(pos))
        if header.last_offset >= offset:
            break
        pos += header.size
    start = end = pos
    first = next_offset = header.base_offset
    while end < segment_size:
        if end != start:
            header = read_batch_header(header_at(end))
        if end + header.size > segment_size:
            break  # incomplete tail: never hand out a partial batch
        if end - start + header.size > max_bytes and not (end == start and min_one_message):
            break
        end += header.size
        next_offset = header.next_offset
    return start, end, first, next_offset


class _IndexKind(NamedTuple):
    name: str
    entry: struct.Struct
    load: Callable[[RemoteSegmentSource, object], bytes]


_OFFSET_INDEX = _IndexKind("offset", OFFSET_ENTRY, lambda source, seg: source.get_offset_index(seg))
_TIME_INDEX = _IndexKind("time", TIME_ENTRY, lambda source, seg: source.get_time_index(seg))
