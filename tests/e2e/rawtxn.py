"""Hand-built idempotence and transaction requests: InitProducerId, WriteTxnMarkers,
Produce v3 of producer batches, Fetch v4 with an isolation level.

Batches come from kafka-python's ``DefaultRecordBatchBuilder`` (control batches
are assembled by hand here); like :mod:`tests.e2e.rawkafka`, shares no code
with the broker.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.e2e.rawconsumer import cstring, uvarint
from tests.e2e.rawkafka import (
    API_FETCH,
    API_PRODUCE,
    Connection,
    Reader,
    array,
    frame,
    parse_produce_v3,
    produce_v3_body,
    string,
)

API_INIT_PRODUCER_ID = 22
API_WRITE_TXN_MARKERS = 27

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_RECORD = 87


def producer_batch(values: list[bytes], *, producer_id: int, epoch: int, sequence: int,
                   transactional: bool = False, timestamp: int | None = None) -> bytes:
    """A RecordBatch v2 of ``values`` from producer ``(producer_id, epoch)`` starting at ``sequence``
    (timestamps from now, so no retention removes them)."""
    if timestamp is None:
        timestamp = int(time.time() * 1000)
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=transactional,
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
        batch_size=1 << 30)
    for i, value in enumerate(values):
        builder.append(i, timestamp=timestamp + i, key=b"k%d" % i, value=value, headers=[])
    return bytes(builder.build())


class Flexible:
    """A flexible-version (header v2) call on a raw connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def call(self, api_key: int, version: int, body: bytes) -> Reader:
        conn = self.conn
        conn.correlation_id += 1
        header = struct.pack(">hhi", api_key, version, conn.correlation_id) + string("raw-txn") + b"\0"
        conn.send_raw(frame(header + body))
        payload = conn.read_frame()
        assert payload is not None, "broker closed the connection"
        r = Reader(payload)
        assert r.int32() == conn.correlation_id
        r.int8()  # response header tagged fields (none)
        return r


def init_producer_id(conn: Connection, producer_id: int = -1, epoch: int = -1,
                     transactional_id: str | None = None) -> tuple[int, int, int]:
    """InitProducerId v3: (error code, producer id, epoch)."""
    body = (cstring(transactional_id) + struct.pack(">iqh", 60_000, producer_id, epoch)
            + b"\0")
    r = Flexible(conn).call(API_INIT_PRODUCER_ID, 3, body)
    r.int32()  # throttle
    error, pid, got_epoch = r.take(">hqh")
    return error, pid, got_epoch


def write_txn_markers(conn: Connection, *, producer_id: int, epoch: int, commit: bool,
                      topic: str, partitions: list[int], coordinator_epoch: int = 0) -> dict[int, int]:
    """WriteTxnMarkers v1 with one marker: {partition: error code}."""
    parts = uvarint(len(partitions) + 1) + b"".join(struct.pack(">i", p) for p in partitions)
    topics = uvarint(2) + cstring(topic) + parts + b"\0"
    marker = struct.pack(">qhb", producer_id, epoch, 1 if commit else 0) + topics
    marker += struct.pack(">i", coordinator_epoch) + b"\0"
    r = Flexible(conn).call(API_WRITE_TXN_MARKERS, 1, uvarint(2) + marker + b"\0")
    out: dict[int, int] = {}
    for _ in range(_read_uvarint(r) - 1):
        r.int64()
        for _ in range(_read_uvarint(r) - 1):
            name_length = _read_uvarint(r) - 1
            r.pos += name_length  # the topic name
            for _ in range(_read_uvarint(r) - 1):
                partition, error = r.take(">ih")
                out[partition] = error
                r.int8()
            r.int8()
        r.int8()
    return out


def _read_uvarint(r: Reader) -> int:
    shift = value = 0
    while True:
        byte = r.data[r.pos]
        r.pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7


def produce(conn: Connection, topic: str, partition: int, records: bytes) -> tuple[int, int]:
    """Produce v3 of one record set: (error code, base offset)."""
    payload = conn.call(API_PRODUCE, 3, produce_v3_body(topic, partition, records))
    _, results = parse_produce_v3(payload)
    return results[0].error_code, results[0].base_offset


@dataclass(frozen=True)
class CommittedFetch:
    error_code: int
    high_watermark: int
    last_stable_offset: int
    aborted: list[tuple[int, int]] | None
    records: bytes


def fetch(conn: Connection, topic: str, partition: int, offset: int,
          isolation_level: int = 1) -> CommittedFetch:
    """Fetch v4 of one partition with ``isolation_level`` (1: read_committed)."""
    partitions = array([struct.pack(">iqi", partition, offset, 1 << 20)])
    body = struct.pack(">iiiib", -1, 100, 1, 1 << 20, isolation_level)
    body += array([string(topic) + partitions])
    r = Reader(conn.call(API_FETCH, 4, body))
    r.int32()
    r.int32()  # throttle
    r.int32()  # topics
    r.string()
    r.int32()  # partitions
    r.int32()
    error, hw, lso = r.take(">hqq")
    n = r.int32()
    aborted = None if n < 0 else [r.take(">qq") for _ in range(n)]
    records = r.bytes_() or b""
    return CommittedFetch(error, hw, lso, aborted, records)  # type: ignore[arg-type]


def batch_summaries(records: bytes) -> list[tuple[int, int, int, bool, bool]]:
    """(base offset, record count, producer id, transactional, control) of each batch."""
    out = []
    pos = 0
    while pos + 61 <= len(records):
        base, length = struct.unpack_from(">qi", records, pos)
        attributes = struct.unpack_from(">h", records, pos + 21)[0]
        producer_id = struct.unpack_from(">q", records, pos + 43)[0]
        count = struct.unpack_from(">i", records, pos + 57)[0]
        out.append((base, count, producer_id, bool(attributes & 0x10), bool(attributes & 0x20)))
        pos += 12 + length
    return out



def control_markers(bootstrap: str, topic: str, partition: int) -> list[tuple[int, int]]:
    """``(producer id, control type)`` of every marker in the partition (ABORT 0, COMMIT 1),
    in log order, read from its leader at ``bootstrap``."""
    conn = Connection.to(bootstrap)
    found: list[tuple[int, int]] = []
    offset = 0
    try:
        while True:
            got = fetch(conn, topic, partition, offset, isolation_level=0)
            assert got.error_code == 0, got.error_code
            if not got.records:
                return found
            pos = 0
            while pos + 61 <= len(got.records):
                base, length = struct.unpack_from(">qi", got.records, pos)
                if pos + 12 + length > len(got.records):
                    break
                attributes = struct.unpack_from(">h", got.records, pos + 21)[0]
                last_delta = struct.unpack_from(">i", got.records, pos + 23)[0]
                pid = struct.unpack_from(">q", got.records, pos + 43)[0]
                if attributes & 0x20:
                    found.append((pid, _control_type(got.records, pos + 61)))
                offset = base + last_delta + 1
                pos += 12 + length
    finally:
        conn.sock.close()


def _control_type(data: bytes, pos: int) -> int:
    """The type in the key (int16 version, int16 type) of the control record at ``pos``."""
    pos = _skip_varint(data, pos)  # record length
    pos += 1  # attributes
    pos = _skip_varint(data, pos)  # timestamp delta
    pos = _skip_varint(data, pos)  # offset delta
    pos = _skip_varint(data, pos)  # key length
    return int(struct.unpack_from(">h", data, pos + 2)[0])


def _skip_varint(data: bytes, pos: int) -> int:
    while data[pos] & 0x80:
        pos += 1
    return pos + 1
