"""The producer snapshot file: ``{offset:020d}.snapshot`` beside a partition's segments.

Format (ADR 0011), big-endian, Kafka's header with Strata's entries::

    version int16 (= 2)  crc uint32 (CRC-32C of every byte after it)
    entry_count int32
    entry_count × {
        producer_id int64  producer_epoch int16  coordinator_epoch int32
        last_timestamp int64  current_txn_first_offset int64 (-1: no open transaction)
        batch_count int8 (0..5)
        batch_count × { last_sequence int32  last_offset int64  offset_delta int32  timestamp int64 }
    }

Kafka's version 1 keeps only each producer's last batch; version 2 keeps all five
retained batches, so a retry of any of them after a restart is still recognised
as a duplicate. A Kafka broker refuses version 2 (it reads only 1) rather than
misreading it. Files are written to ``.tmp``, fsynced, then renamed.

Pure I/O helpers; thread-safe (each call has its own file).
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from crc32c import crc32c

from local_tier.producer_entry import BatchMetadata, ProducerStateEntry

__all__ = [
    "SNAPSHOT_SUFFIX",
    "SNAPSHOT_VERSION",
    "CorruptSnapshotError",
    "decode_snapshot",
    "encode_snapshot",
    "read_snapshot",
    "snapshot_path",
    "write_snapshot",
]

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 2
_MAX_BATCHES = 5
_HEAD = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iqiq")


class CorruptSnapshotError(Exception):
    """The snapshot cannot be read (short, bad CRC, unknown version, impossible counts)."""


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    entries = list(entries)
    body = bytearray(struct.pack(">i", len(entries)))
    for e in entries:
        txn = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
        body += _ENTRY.pack(
            e.producer_id, e.producer_epoch, e.coordinator_epoch, e.last_timestamp, txn, len(e.batches)
        )
        for b in e.batches:
            body += _BATCH.pack(b.last_seq, b.last_offset, b.offset_delta, b.timestamp)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Parse snapshot bytes; :class:`CorruptSnapshotError` on anything malformed."""
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is shorter than the snapshot header")
    version, crc, count = _HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot version {version}; this Strata reads {SNAPSHOT_VERSION}")
    if crc32c(data[6:]) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    if count < 0 or count * _ENTRY.size > len(data) - _HEAD.size:
        raise CorruptSnapshotError(f"snapshot says {count} entries, more than its size allows")
    pos = _HEAD.size
    out: list[ProducerStateEntry] = []
    try:
        for _ in range(count):
            pid, epoch, coord, ts, txn, nbatches = _ENTRY.unpack_from(data, pos)
            pos += _ENTRY.size
            if not 0 <= nbatches <= _MAX_BATCHES:
                raise CorruptSnapshotError(f"producer {pid} has {nbatches} batches (at most {_MAX_BATCHES})")
            batches: deque[BatchMetadata] = deque(maxlen=_MAX_BATCHES)
            for _ in range(nbatches):
                batches.append(BatchMetadata(*_BATCH.unpack_from(data, pos)))
                pos += _BATCH.size
            out.append(ProducerStateEntry(pid, epoch, coord, ts, None if txn < 0 else txn, batches))
    except struct.error as exc:
        raise CorruptSnapshotError(f"snapshot ends inside an entry: {exc}") from exc
    if pos != len(data):
        raise CorruptSnapshotError(f"{len(data) - pos} stray bytes after the last entry")
    return out


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorruptSnapshotError(f"cannot read {path.name}: {exc}") from exc
    return decode_snapshot(data)


def write_snapshot(directory: Path, offset: int, data: bytes, *, fsync: bool = True) -> Path:
    """Write ``data`` as the snapshot at ``offset``: to ``.tmp``, fsync (unless the caller makes
    it durable otherwise), rename over any old one."""
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path
