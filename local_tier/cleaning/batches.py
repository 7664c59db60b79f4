"""Records of a stored batch, and Kafka's rewrite of a batch that lost some (``filterTo``).

The cleaner keeps a batch's identity when it removes records from it, as
Kafka's ``MemoryRecords.filterTo`` does: the retained records go into a batch
with the same base offset, last offset delta (so the producer's last sequence
survives), partition leader epoch, producer id, epoch, base sequence,
transactional and control bits, timestamp type and codec. Offsets therefore
have gaps afterwards, and the record count may be lower than
``lastOffsetDelta + 1`` (0 for a batch kept only for its producer metadata).

A batch holding a tombstone or a marker the cleaner will remove later gets
Kafka's *delete horizon* (KIP-534): attribute bit 0x40 set and the base
timestamp replaced by the time after which those may be removed; the record
timestamp deltas are rewritten so every record keeps its timestamp.

Pure functions; thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from crc32c import crc32c

from common.errors import CorruptRecordError
from common.record._varint import read_varint, write_varint
from common.record.batch import BATCH_OVERHEAD, LOG_OVERHEAD, BatchHeader
from common.record.compression import Compression, compress, decompress

__all__ = [
    "DELETE_HORIZON_BIT",
    "MAX_INFLATED_BYTES",
    "WalkedRecord",
    "batch_records",
    "delete_horizon",
    "empty_batch",
    "rebuild_batch",
    "walk_records",
]

DELETE_HORIZON_BIT = 0x40
#: how far a compressed batch may inflate while cleaning (as Produce allows)
MAX_INFLATED_BYTES = 128 * 1024 * 1024
_HEADER = struct.Struct(">qiibIhiqqqhii")
_UINT32 = struct.Struct(">I")
_CRC_POS = 17
_ATTRIBUTES_POS = 21
_KEEP_ON_EMPTY = 0x08 | 0x10 | 0x20  # timestamp type, transactional, control

WalkedRecord = tuple[int, bytes | None, bool, int, int, int, int, int]
"""``(offset_delta, key, has_value, timestamp_delta, start, body, ts_end, end)``: one
record of a batch's (decompressed) record section; ``start`` is where its length
varint begins, ``body`` where its attributes byte is, ``ts_end`` just after its
timestamp delta, ``end`` one past its last byte."""


def delete_horizon(header: BatchHeader) -> int | None:
    """The batch's delete horizon (ms), when the cleaner has set one."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None


def batch_records(batch: bytes | bytearray | memoryview, header: BatchHeader) -> bytes:
    """The record section of ``batch`` (one whole batch), decompressed."""
    payload = memoryview(batch)[BATCH_OVERHEAD : header.size]
    if header.compression == Compression.NONE:
        return bytes(payload)
    return decompress(header.compression, payload, max_size=MAX_INFLATED_BYTES)


def walk_records(data: bytes, count: int) -> list[WalkedRecord]:
    """Every record of a record section: offsets, keys, tombstones, where each lies.

    Reads lengths and varints only (headers are skipped). Raises
    CorruptRecordError when the section does not hold ``count`` whole records.
    """
    out: list[WalkedRecord] = []
    append = out.append
    size = len(data)
    pos = 0
    try:
        for _ in range(count):
            start = pos
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = read_varint(data, pos)
            body = pos
            end = pos + length
            if length < 1 or end > size:
                raise CorruptRecordError(f"record at byte {start} runs past its batch")
            pos += 1  # attributes
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = read_varint(data, pos)
            ts_end = pos
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = read_varint(data, pos)
            b = data[pos]
            if b < 0x80:
                key_length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                key_length, pos = read_varint(data, pos)
            key = None
            if key_length >= 0:
                key = data[pos : pos + key_length]
                pos += key_length
            b = data[pos]
            value_length = (b >> 1) ^ -(b & 1) if b < 0x80 else read_varint(data, pos)[0]
            if pos > end:
                raise CorruptRecordError(f"record at byte {start} runs past its length")
            append((offset_delta, key, value_length >= 0, ts_delta, start, body, ts_end, end))
            pos = end
    except (IndexError, ValueError) as exc:
        raise CorruptRecordError(f"malformed record in a stored batch: {exc}") from None
    if pos != size:
        raise CorruptRecordError("bytes remain after the batch's records")
    return out


def _finish(
    header: BatchHeader, attributes: int, base_ts: int, max_ts: int, count: int, payload: bytes
) -> bytes:
    batch = bytearray(BATCH_OVERHEAD) + payload
    _HEADER.pack_into(
        batch,
        0,
        header.base_offset,
        len(batch) - LOG_OVERHEAD,
        header.partition_leader_epoch,
        2,
        0,
        attributes,
        header.last_offset_delta,
        base_ts,
        max_ts,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    _UINT32.pack_into(batch, _CRC_POS, crc32c(memoryview(batch)[_ATTRIBUTES_POS:]))
    return bytes(batch)


def empty_batch(header: BatchHeader) -> bytes:
    """The batch with no record left: kept only for its offsets and producer metadata.

    As Kafka's ``writeEmptyHeader``: no codec, base timestamp -1, the max
    timestamp kept.
    """
    return _finish(header, header.attributes & _KEEP_ON_EMPTY, -1, header.max_timestamp, 0, b"")


def rebuild_batch(
    header: BatchHeader,
    data: bytes,
    retained: Sequence[WalkedRecord],
    horizon_ms: int | None,
) -> bytes:
    """A batch of ``retained`` records of the batch ``header`` describes (``data``: its
    decompressed record section), compressed again with the batch's codec.

    ``horizon_ms``: the delete horizon to carry (None: none). Record timestamps
    are kept: when the base timestamp changes, each delta is rewritten.
    """
    base_ts = header.base_timestamp
    new_base = base_ts if horizon_ms is None else horizon_ms
    log_append_time = header.timestamp_type == 1
    body = bytearray()
    max_ts = -1
    for _, _, _, ts_delta, start, rec_body, ts_end, end in retained:
        timestamp = base_ts + ts_delta
        if timestamp > max_ts:
            max_ts = timestamp
        if new_base == base_ts:
            body += data[start:end]
            continue
        inner = bytearray(data[rec_body : rec_body + 1])
        write_varint(timestamp - new_base, inner)
        inner += data[ts_end:end]
        write_varint(len(inner), body)
        body += inner
    if log_append_time or not retained:
        max_ts = header.max_timestamp
    attributes = header.attributes & ~DELETE_HORIZON_BIT
    if horizon_ms is not None:
        attributes |= DELETE_HORIZON_BIT
    payload = compress(header.compression, body) if header.compression else bytes(body)
    return _finish(header, attributes, new_base, max_ts, len(retained), payload)
