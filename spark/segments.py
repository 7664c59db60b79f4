"""Reading segment objects on executors: ranged GETs, batch walking, decoding to Arrow.

A segment object is a run of Kafka RecordBatch v2 batches (``docs/object-layout.md``).
This module walks batch headers itself (61 bytes, big-endian) and decodes the
records of the batches it keeps with aiokafka's Cython record reader, about ten
times faster than a pure-Python decoder; it checks each batch's CRC-32C and
handles every codec (gzip, snappy, lz4, zstd). Records are gathered column by
column into Arrow record batches with Spark's Kafka schema.

Reads go in ranged GETs of ``chunk_bytes``; a batch cut by a chunk boundary is
completed by the next GET, never decoded in part.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import crc32c
import numpy as np
import pyarrow as pa
from aiokafka.errors import CorruptRecordException
from aiokafka.record._crecords import DefaultRecordBatch

from common.record.compression import decompress
from spark.bucket import Bucket
from spark.options import StrataSourceError

__all__ = [
    "ARROW_SCHEMA",
    "AbortedRanges",
    "AbortedTxn",
    "Columns",
    "SegmentRef",
    "arrow_schema",
    "offset_for_timestamp",
    "read_segment",
    "seek_position",
    "transaction_batches",
]

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = _HEADER.size  # 61
_LOG_OVERHEAD = 12
_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_CONTROL_BIT = 0x20
_TRANSACTIONAL_BIT = 0x10
#: where a batch header holds its producer id
_PRODUCER_ID_AT = 43
_PRODUCER_ID = struct.Struct(">q")
#: the CRC-32C (after base offset, length, leader epoch and magic) covers the rest of the batch
_CRC_AT = 17
_CRC = struct.Struct(">I")
ROWS_PER_BATCH = 65_536
#: Arrow batch size of the C decoder's path (see :attr:`FastColumns.full`)
FAST_ROWS_PER_BATCH = 4_096
#: an Arrow batch is cut before its keys or values pass this (binary offsets are int32)
BYTES_PER_BATCH = 256 * 1024 * 1024
_CODEC_MASK = 0x07
_LOG_APPEND_BIT = 0x08

try:  # the C column decoder (setup.py builds it; optional)
    from spark import _decode as _fast
except ImportError:  # pragma: no cover - without a compiler: aiokafka's reader
    _fast = None

_HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_FIELDS = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
]
ARROW_SCHEMA = pa.schema(_FIELDS)


def arrow_schema(include_headers: bool) -> pa.Schema:
    return pa.schema(_FIELDS + [("headers", _HEADERS_TYPE)]) if include_headers else ARROW_SCHEMA


@dataclass(frozen=True)
class SegmentRef:
    """A segment object of one partition, as a manifest lists it."""

    topic: str
    partition: int
    key: str  # the .log object; .index, .timeindex, .txnindex and .snapshot share its stem
    base_offset: int
    last_offset: int
    size: int
    #: sizes of the segment's .txnindex and .snapshot objects (format 2; 0: there is none)
    txn_index_bytes: int = 0
    snapshot_bytes: int = 0

    def sibling(self, ext: str) -> str:
        return self.key[: -len(".log")] + "." + ext


#: an aborted transaction: (producer id, first offset, last offset = its ABORT marker's offset)
AbortedTxn = tuple[int, int, int]


class AbortedRanges:
    """The aborted transactions a slice must skip (``kafka.isolation.level=read_committed``).

    A transactional batch of producer ``pid`` is aborted when an aborted range of
    ``pid`` holds its base offset: a batch never straddles a transaction's bounds,
    and one producer's transactions never overlap. This is what Kafka's consumer
    decides (``CompletedFetch``) with its queue of aborted first offsets and the
    ABORT markers, without needing the batches in order. Immutable: thread-safe.
    """

    def __init__(self, txns: Iterable[AbortedTxn]) -> None:
        ranges: dict[int, list[tuple[int, int]]] = {}
        for pid, first, last in txns:
            ranges.setdefault(int(pid), []).append((int(first), int(last)))
        self._firsts: dict[int, list[int]] = {}
        self._lasts: dict[int, list[int]] = {}
        for pid, spans in ranges.items():
            spans.sort()
            self._firsts[pid] = [f for f, _ in spans]
            self._lasts[pid] = [last for _, last in spans]

    def __bool__(self) -> bool:
        return bool(self._firsts)

    def holds(self, producer_id: int, offset: int) -> bool:
        """Whether ``offset`` lies in an aborted transaction of ``producer_id``."""
        firsts = self._firsts.get(producer_id)
        if firsts is None:
            return False
        i = bisect.bisect_right(firsts, offset) - 1
        return i >= 0 and self._lasts[producer_id][i] >= offset


class Columns:
    """Rows of one partition gathered column by column, cut into Arrow batches."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []
        self.headers: list[list[dict[str, object]]] = []
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def full(self) -> bool:
        return len(self.offsets) >= ROWS_PER_BATCH or self.bytes >= BYTES_PER_BATCH

    def add(self, key: bytes | None, value: bytes | None, offset: int, timestamp_ms: int,
            timestamp_type: int, headers: list[tuple[str, bytes | None]] | None) -> None:
        self.keys.append(key)
        self.values.append(value)
        self.bytes += len(key or b"") + len(value or b"")
        self.offsets.append(offset)
        self.timestamps.append(timestamp_ms)
        self.types.append(timestamp_type)
        if self.include_headers:
            self.headers.append([{"key": k, "value": v} for k, v in headers or ()])

    def add_batch(self, batch: DefaultRecordBatch, lo: int, hi: int) -> None:
        """Records of ``batch`` with offsets in ``[lo, hi)``."""
        kind = batch.timestamp_type
        with_headers = self.include_headers
        keys, values, offsets, stamps = self.keys, self.values, self.offsets, self.timestamps
        headers = self.headers
        count = size = 0
        for record in batch:
            offset = record.offset
            if offset < lo:
                continue
            if offset >= hi:
                break
            key, value = record.key, record.value
            keys.append(key)
            values.append(value)
            size += (len(key) if key else 0) + (len(value) if value else 0)
            offsets.append(offset)
            stamps.append(record.timestamp)
            if with_headers:
                headers.append([{"key": k, "value": v} for k, v in record.headers])
            count += 1
        self.types.extend([kind] * count)
        self.bytes += size

    def take(self) -> pa.RecordBatch:
        n = len(self.offsets)
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([self.topic] * n, pa.string()) if n else pa.array([], pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array([t * 1000 for t in self.timestamps], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array(self.types, pa.int32()),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, _HEADERS_TYPE))
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


class FastColumns:
    """Columns filled by the C decoder (``spark._decode``), batch by batch, as Arrow buffers.

    No Python object per record: each RecordBatch becomes a few byte strings that
    are joined and wrapped with ``pa.Array.from_buffers``. Headers are not decoded
    (the headers column goes through :class:`Columns`).
    """

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.schema = ARROW_SCHEMA
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.bytes = 0
        self.parts: list[tuple] = []
        self.types: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return self.rows

    @property
    def full(self) -> bool:
        # flushed at FAST_ROWS_PER_BATCH: a Kafka batch of that many records or more
        # becomes an Arrow batch on its own, its buffers wrapped without a copy
        # (joining one part is free); only small Kafka batches are joined
        return self.rows >= FAST_ROWS_PER_BATCH or self.bytes >= BYTES_PER_BATCH

    def add_raw(self, buf: memoryview, pos: int, size: int, lo: int, hi: int) -> None:
        """Records of the batch at ``buf[pos:pos + size]`` with offsets in ``[lo, hi)``."""
        (base, _len, _epoch, _magic, _crc, attributes, _last, base_ts, max_ts, _pid, _pepoch, _seq,
         count) = _HEADER.unpack_from(buf, pos)
        payload = buf[pos + HEADER_BYTES:pos + size]
        codec = attributes & _CODEC_MASK
        if codec:
            payload = decompress(codec, payload)
        log_append = bool(attributes & _LOG_APPEND_BIT)
        try:
            part = _fast.decode(payload, count, base, base_ts, max_ts, log_append, lo, hi)
        except ValueError as exc:
            raise StrataSourceError(f"batch at offset {base}: {exc}") from exc
        if part[0]:
            self.parts.append(part)
            self.types.append((part[0], 1 if log_append else 0))
            self.rows += part[0]
            self.bytes += len(part[4]) + len(part[6])

    def take(self) -> pa.RecordBatch:
        n = self.rows
        parts = self.parts
        offsets = np.frombuffer(b"".join(p[1] for p in parts), np.int64)
        stamps = pa.py_buffer(b"".join(p[2] for p in parts))
        topic = self.topic.encode()
        arrays = [
            _binary(b"".join(p[3] for p in parts), b"".join(p[4] for p in parts), n),
            _binary(b"".join(p[5] for p in parts), b"".join(p[6] for p in parts), n),
            pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.arange(n + 1, dtype=np.int32)
                                                                      * len(topic)),
                                                   pa.py_buffer(topic * n)]),
            pa.array(np.full(n, self.partition, np.int32)),
            pa.array(offsets),
            pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, stamps]),
            pa.array(np.repeat(np.array([k for _, k in self.types], np.int32),
                               [c for c, _ in self.types])),
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _binary(lengths_raw: bytes, data: bytes, n: int) -> pa.Array:
    """An Arrow binary array from int32 lengths (-1 for null) and the concatenated bytes."""
    lengths = np.frombuffer(lengths_raw, np.int32)
    valid = lengths >= 0
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.where(valid, lengths, 0), out=offsets[1:])
    nulls = n - int(valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def _batches(buf: memoryview, pos: int) -> Iterator[tuple[int, int, int, int, int, int]]:
    """(position, size, base offset, last offset, max timestamp, attributes) of complete batches."""
    end = len(buf)
    while pos + HEADER_BYTES <= end:
        (base, length, _epoch, magic, _crc, attributes, last_delta, _base_ts, max_ts,
         *_rest) = _HEADER.unpack_from(buf, pos)
        size = _LOG_OVERHEAD + length
        if magic != 2 or length < HEADER_BYTES - _LOG_OVERHEAD:
            raise StrataSourceError(f"not a RecordBatch v2 at byte {pos} (magic {magic}, length {length})")
        if pos + size > end:
            return
        yield pos, size, base, base + last_delta, max_ts, attributes
        pos += size


def _chunks(bucket: Bucket, key: str, start: int, end: int, chunk: int) -> Iterator[tuple[int, memoryview]]:
    """``(position, bytes)`` of complete batches from ``start`` up to ``end``, chunk by chunk.

    A batch cut by the end of a GET is read again, whole, by the next GET, which
    starts at that batch: re-reading at most one batch per chunk costs less than
    joining every chunk to the cut-off bytes of the one before. A batch larger
    than ``chunk`` gets a GET of its own size.

    GETs are received into one reused buffer: what is yielded is valid until the
    generator is resumed (callers decode a chunk's batches before the next).
    """
    pos = start
    want = chunk
    recv = memoryview(bytearray(0))  # every GET lands here: no fresh pages per chunk
    while pos < end:
        stop = min(end, pos + want)
        if end - stop < chunk // 4:
            stop = end  # no GET for a short remainder: the next one would mostly re-read
        if stop - pos > len(recv):
            recv = memoryview(bytearray(max(stop - pos, chunk + chunk // 4)))  # a new one: views may remain
        data = bucket.get_into(key, pos, stop, recv)
        if not data:
            break
        buf = memoryview(data)
        used = 0
        for p, size, *_ in _batches(buf, 0):
            used = p + size
        if used:
            yield pos, buf[:used]
            pos += used
            want = chunk
            continue
        # not one whole batch in what we got
        at_end = pos + len(data) >= end
        if len(data) < HEADER_BYTES and at_end:
            break  # a few stray bytes at the very end: nothing to decode (as before)
        need = _LOG_OVERHEAD + _HEADER.unpack_from(data, 0)[1] if len(data) >= HEADER_BYTES else HEADER_BYTES
        if at_end or len(data) >= need or len(data) < stop - pos:
            # the object ends (or a GET came back short) inside a batch
            raise StrataSourceError(
                f"object {key!r} ends inside a batch at byte {pos} ({len(data)} of "
                f"{need} bytes): the segment object is truncated"
            )
        want = max(chunk, need)


def read_segment(
    bucket: Bucket,
    seg: SegmentRef,
    lo: int,
    hi: int,
    *,
    start_pos: int,
    end_pos: int,
    columns: Columns,
    chunk_bytes: int,
    aborted: AbortedRanges | None = None,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records with offsets in ``[lo, hi)`` in bytes ``[start_pos, end_pos)``.

    Control batches are never returned; with ``aborted`` (read_committed), neither
    are the transactional batches it holds. Both are skipped whole, before any
    decoding, so either decoder sees only the batches that are kept.
    Without headers, records are decoded column-wise in C when the extension is
    built; otherwise (or with ``includeHeaders``) through aiokafka's reader.
    """
    fast = FastColumns(columns.topic, columns.partition) if _fast and not columns.include_headers else None
    for _, buf in _chunks(bucket, seg.key, start_pos, end_pos, chunk_bytes):
        done = False
        for pos, size, base, last, _max_ts, attributes in _batches(buf, 0):
            if last < lo or attributes & _CONTROL_BIT:
                continue
            if base >= hi:
                done = True
                break
            if (aborted and attributes & _TRANSACTIONAL_BIT
                    and aborted.holds(_PRODUCER_ID.unpack_from(buf, pos + _PRODUCER_ID_AT)[0], base)):
                continue
            (stored_crc,) = _CRC.unpack_from(buf, pos + _CRC_AT)
            if crc32c.crc32c(buf[pos + _CRC_AT + 4:pos + size]) != stored_crc:
                raise StrataSourceError(
                    f"CRC mismatch in the batch at offset {base} of object {seg.key!r}: "
                    "the segment object is corrupt"
                )
            if fast is not None:
                fast.add_raw(buf, pos, size, lo, hi)
                if fast.full:
                    yield fast.take()
            else:
                try:
                    columns.add_batch(DefaultRecordBatch(buf[pos:pos + size]), lo, hi)
                except (CorruptRecordException, ValueError) as exc:  # under a matching CRC: a bad writer
                    raise StrataSourceError(
                        f"batch at offset {base} of object {seg.key!r} is malformed: {exc}"
                    ) from exc
                if columns.full:
                    yield columns.take()
        if done:
            break
    if fast is not None and len(fast):
        yield fast.take()
    if len(columns):
        yield columns.take()


def transaction_batches(bucket: Bucket, seg: SegmentRef, chunk_bytes: int) -> Iterator[tuple[int, int, bool]]:
    """(producer id, base offset, is a control batch) of the segment's transactional and control
    batches, in order, from their headers alone (nothing is decompressed)."""
    for _, buf in _chunks(bucket, seg.key, 0, seg.size, chunk_bytes):
        for pos, _size, base, _last, _max_ts, attributes in _batches(buf, 0):
            if attributes & (_TRANSACTIONAL_BIT | _CONTROL_BIT):
                (pid,) = _PRODUCER_ID.unpack_from(buf, pos + _PRODUCER_ID_AT)
                yield pid, base, bool(attributes & _CONTROL_BIT)


def seek_position(bucket: Bucket, seg: SegmentRef, offset: int) -> int:
    """Byte position to start reading for ``offset``, from the segment's offset index (0 if none)."""
    if offset <= seg.base_offset:
        return 0
    try:
        raw = bucket.get(seg.sibling("index"))
    except StrataSourceError:
        return 0  # indexes are derived data: without one, read from the start
    rel = offset - seg.base_offset
    best = 0
    for i in range(len(raw) // _INDEX_ENTRY.size):
        r, p = _INDEX_ENTRY.unpack_from(raw, i * _INDEX_ENTRY.size)
        if r > rel or p > seg.size:
            break
        best = p
    return best


def offset_for_timestamp(bucket: Bucket, seg: SegmentRef, timestamp: int, chunk_bytes: int) -> int | None:
    """Offset of the segment's first record with a timestamp ≥ ``timestamp`` (None if none).

    The time index holds running maxima: every record up to an entry's offset has a
    timestamp at most the entry's, so the scan starts after the last entry below
    ``timestamp``. Only the batch that holds the answer is decoded.
    """
    start = 0
    try:
        raw = bucket.get(seg.sibling("timeindex"))
    except StrataSourceError:
        raw = b""
    stamps: list[int] = []
    rels: list[int] = []
    for i in range(len(raw) // _TIME_ENTRY.size):
        t, r = _TIME_ENTRY.unpack_from(raw, i * _TIME_ENTRY.size)
        stamps.append(t)
        rels.append(r)
    i = bisect.bisect_left(stamps, timestamp) - 1
    if i >= 0:
        start = seek_position(bucket, seg, seg.base_offset + rels[i] + 1)
    for _, buf in _chunks(bucket, seg.key, start, seg.size, chunk_bytes):
        for pos, size, _base, _last, max_ts, attributes in _batches(buf, 0):
            if max_ts < timestamp or attributes & _CONTROL_BIT:
                continue
            for record in DefaultRecordBatch(buf[pos:pos + size]):
                if record.timestamp >= timestamp:
                    return int(record.offset)
    return None
