"""Tiered reads: fetches below the local log start, served from the bucket.

Reads run on a bounded pool of tiered-fetch threads (``remote.log.reader.threads``,
pinned to ``remote.log.reader.cpus`` when set), never on the event loop. Segment
objects are read with ranged GETs in fixed-size chunks that go through a
byte-bounded LRU :class:`ChunkCache`; concurrent misses of one chunk share one
GET. A sequential reader gets the next chunk fetched ahead (read-ahead) while it
consumes the current one. Remote offset indexes are cached per segment.

Memory is bounded by the cache capacity plus, per tiered-fetch thread, one
response's ``max_bytes``: a hundred consumers reading history at once queue on
the pool instead of each holding its own buffers (the failure of KAFKA-19763).
"""

from __future__ import annotations

import bisect
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from common.errors import OffsetOutOfRangeError
from common.record.batch import LOG_OVERHEAD, decode_batch, read_batch_header
from fetch.affinity import pin_current_thread

__all__ = ["ChunkCache", "RemoteReadResult", "RemoteReader", "RemoteSegmentSource"]

_HEADER_BYTES = 61
_INDEX_ENTRY = struct.Struct(">ii")


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
class RemoteReadResult:
    """Whole batches read from a segment object, as views of cached chunks.

    ``parts`` are zero-copy slices of the chunk cache's buffers: a 16 MiB read is
    handed to the socket as sixteen views, never joined. Copying it would hold the
    GIL for milliseconds, which the event loop serving the live tail would wait out.
    """

    parts: tuple[memoryview, ...]
    first_batch_offset: int
    #: one past the last offset of the batches read (``first_batch_offset`` when none)
    next_offset: int = -1

    @property
    def size(self) -> int:
        return sum(len(p) for p in self.parts)

    @property
    def records(self) -> bytes:
        """The batches as one byte string (a copy; for callers that need one)."""
        return b"".join(self.parts)


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
        self._indexes: OrderedDict[Hashable, tuple[list[int], list[int]]] = OrderedDict()
        self._index_entries = index_cache_entries
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
        """Whole batches from the one containing ``offset``, within ``max_bytes`` (KIP-74)."""
        key = self._source.cache_key(segment)
        pos = self._index_position(segment, key, offset)
        # find the batch holding ``offset``
        while True:
            if pos + LOG_OVERHEAD > segment_size:
                raise OffsetOutOfRangeError(f"offset {offset} is past the end of remote segment {key}")
            header = read_batch_header(self._bytes(segment, key, segment_size, pos, pos + _HEADER_BYTES))
            if header.last_offset >= offset:
                break
            pos += header.size
        start = end = pos
        first = next_offset = header.base_offset
        while end < segment_size:
            if end != start:
                header = read_batch_header(
                    self._bytes(segment, key, segment_size, end, end + _HEADER_BYTES)
                )
            if end + header.size > segment_size:
                break  # incomplete tail: never hand out a partial batch
            if end - start + header.size > max_bytes and not (end == start and min_one_message):
                break
            end += header.size
            next_offset = header.next_offset
        parts = self._views(segment, key, segment_size, start, end) if end > start else ()
        self._prefetch(segment, key, segment_size, end)
        return RemoteReadResult(parts, first, next_offset)

    def offset_for_timestamp(
        self, segment: object, segment_size: int, timestamp: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the segment's first record with a timestamp ≥ ``timestamp``.

        Reads batch headers through the chunk cache and decodes only the batch
        that holds the answer.
        """
        key = self._source.cache_key(segment)
        pos = 0
        while pos + _HEADER_BYTES <= segment_size:
            header = read_batch_header(self._bytes(segment, key, segment_size, pos, pos + _HEADER_BYTES))
            if pos + header.size > segment_size:
                break
            if header.max_timestamp >= timestamp:
                _, records = decode_batch(self._bytes(segment, key, segment_size, pos, pos + header.size))
                for record in records:
                    if record.timestamp >= timestamp:
                        return record.offset, record.timestamp
            pos += header.size
        return None

    def _index_position(self, segment: object, key: Hashable, offset: int) -> int:
        with self._lock:
            entry = self._indexes.get(key)
            if entry is not None:
                self._indexes.move_to_end(key)
        if entry is None:
            raw = self._source.get_offset_index(segment)
            n = len(raw) // _INDEX_ENTRY.size
            rel: list[int] = []
            positions: list[int] = []
            for i in range(n):
                r, p = _INDEX_ENTRY.unpack_from(raw, i * _INDEX_ENTRY.size)
                if rel and (r <= rel[-1] or p < positions[-1]):
                    break  # not monotonic: trust what came before (it is only a hint)
                rel.append(r)
                positions.append(p)
            entry = (rel, positions)
            with self._lock:
                self._indexes[key] = entry
                while len(self._indexes) > self._index_entries:
                    self._indexes.popitem(last=False)
        base = int(segment.base_offset)
        rel, positions = entry
        i = bisect.bisect_right(rel, offset - base) - 1
        return positions[i] if i >= 0 else 0

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
