"""Hand-built Kafka requests for the tests no real client would send.

Frames are size-prefixed (int32 big-endian); requests use header v1
(api_key int16, api_version int16, correlation_id int32, client_id string).
By hand: what the bad-input tests need (ApiVersions v0, Produce v3, Fetch v4,
record batches from kafka-python's ``DefaultRecordBatchBuilder`` with helpers to
corrupt them). Any other API at any version: :func:`call_api`, with kafka-python's
schema-built messages. Shares no code with the broker.
"""

from __future__ import annotations

import socket
import struct
import sys
from dataclasses import dataclass
from typing import Any, Self

from kafka.record.default_records import DefaultRecordBatchBuilder

API_PRODUCE = 0
API_FETCH = 1
API_VERSIONS = 18

# Kafka error codes used by the tests.
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_VERSION = 35

#: Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS), which Python's socket module does not name: the
#: kernel stamps each received segment, on loopback as the peer sends it
SO_TIMESTAMPNS = 35
#: the largest answer :meth:`Connection.read_stamped_frame` takes
MAX_STAMPED_FRAME = 64 << 20


# --------------------------------------------------------------------------- encoding


def string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def bytes_field(value: bytes | None) -> bytes:
    if value is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(value)) + value


def array(items: list[bytes]) -> bytes:
    return struct.pack(">i", len(items)) + b"".join(items)


def request_header(api_key: int, api_version: int, correlation_id: int,
                   client_id: str | None = "strata-raw-test") -> bytes:
    return struct.pack(">hhi", api_key, api_version, correlation_id) + string(client_id)


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def request(api_key: int, api_version: int, correlation_id: int, body: bytes) -> bytes:
    """A complete size-prefixed request frame."""
    return frame(request_header(api_key, api_version, correlation_id) + body)


def produce_v3_body(topic: str, partition: int, records: bytes, acks: int = -1,
                    timeout_ms: int = 10_000) -> bytes:
    partitions = array([struct.pack(">i", partition) + bytes_field(records)])
    topics = array([string(topic) + partitions])
    return struct.pack(">h", -1) + struct.pack(">hi", acks, timeout_ms) + topics


def fetch_v4_body(topic: str, partition: int, offset: int, max_wait_ms: int = 100,
                  min_bytes: int = 1, max_bytes: int = 1 << 20,
                  partition_max_bytes: int = 1 << 20) -> bytes:
    partitions = array([struct.pack(">iqi", partition, offset, partition_max_bytes)])
    topics = array([string(topic) + partitions])
    # replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level
    return struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 0) + topics


def record_batch(values: list[bytes], *, key_prefix: bytes = b"k", timestamp: int = 1_700_000_000_000,
                 compression_type: int = 0, timestamps: list[int] | None = None) -> bytearray:
    """A valid RecordBatch v2 (magic 2) holding ``values``; record i at ``timestamp + i``
    unless ``timestamps`` gives each record's."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression_type, is_transactional=False,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, value in enumerate(values):
        ts = timestamps[i] if timestamps is not None else timestamp + i
        builder.append(i, timestamp=ts, key=key_prefix + str(i).encode(), value=value, headers=[])
    return builder.build()


# RecordBatch v2 layout: baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 |
# magic int8 | crc uint32 | attributes ... ; the CRC covers everything after it.
CRC_OFFSET = 8 + 4 + 4 + 1


def corrupt_crc(batch: bytes | bytearray) -> bytes:
    """The same batch with its CRC-32C field flipped (payload intact)."""
    out = bytearray(batch)
    (crc,) = struct.unpack_from(">I", out, CRC_OFFSET)
    struct.pack_into(">I", out, CRC_OFFSET, crc ^ 0xFFFFFFFF)
    return bytes(out)


def corrupt_payload(batch: bytes | bytearray) -> bytes:
    """The same batch with one byte of the last record flipped (CRC now wrong)."""
    out = bytearray(batch)
    out[-2] ^= 0xFF
    return bytes(out)


# --------------------------------------------------------------------------- decoding


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> tuple[int, ...]:
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def int8(self) -> int:
        return self.take(">b")[0]

    def int16(self) -> int:
        return self.take(">h")[0]

    def int32(self) -> int:
        return self.take(">i")[0]

    def int64(self) -> int:
        return self.take(">q")[0]

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        return raw.decode()

    def bytes_(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            return None
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        return raw

    def partition_codes(self) -> dict[tuple[str, int], int]:
        """A non-flexible ``[topic [partition error_code]]`` answer (OffsetCommit, AddPartitionsToTxn)."""
        out: dict[tuple[str, int], int] = {}
        for _ in range(self.int32()):
            topic = self.string() or ""
            for _ in range(self.int32()):
                partition = self.int32()
                out[(topic, partition)] = self.int16()
        return out


@dataclass(frozen=True)
class ProducePartitionResult:
    topic: str
    partition: int
    error_code: int
    base_offset: int
    log_append_time: int


def parse_produce_v3(payload: bytes) -> tuple[int, list[ProducePartitionResult]]:
    """(correlation_id, partition results) of a Produce v3 response (header v0)."""
    r = Reader(payload)
    correlation_id = r.int32()
    results = []
    for _ in range(r.int32()):
        topic = r.string() or ""
        for _ in range(r.int32()):
            partition = r.int32()
            error_code = r.int16()
            base_offset = r.int64()
            log_append_time = r.int64()
            results.append(ProducePartitionResult(topic, partition, error_code, base_offset,
                                                  log_append_time))
    r.int32()  # throttle_time_ms
    return correlation_id, results


@dataclass(frozen=True)
class FetchPartitionResult:
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    records: bytes | None


def parse_fetch_v4(payload: bytes) -> tuple[int, list[FetchPartitionResult]]:
    r = Reader(payload)
    correlation_id = r.int32()
    r.int32()  # throttle_time_ms
    results = []
    for _ in range(r.int32()):
        topic = r.string() or ""
        for _ in range(r.int32()):
            partition = r.int32()
            error_code = r.int16()
            high_watermark = r.int64()
            r.int64()  # last_stable_offset
            aborted = r.int32()
            for _ in range(max(aborted, 0)):
                r.int64()
                r.int64()
            records = r.bytes_()
            results.append(FetchPartitionResult(topic, partition, error_code, high_watermark,
                                                records))
    return correlation_id, results


def parse_api_versions_v0(payload: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """(correlation_id, error_code, {api_key: (min_version, max_version)})."""
    r = Reader(payload)
    correlation_id = r.int32()
    error_code = r.int16()
    apis: dict[int, tuple[int, int]] = {}
    for _ in range(r.int32()):
        key, lo, hi = r.take(">hhh")
        apis[key] = (lo, hi)
    return correlation_id, error_code, apis


# --------------------------------------------------------------------------- connection


class Connection:
    """A blocking socket to the broker that sends frames and reads whole responses."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.correlation_id = 0

    @classmethod
    def to(cls, bootstrap: str, timeout: float = 10.0) -> Connection:
        host, _, port = bootstrap.rpartition(":")
        return cls(host, int(port), timeout)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def call(self, api_key: int, api_version: int, body: bytes) -> bytes:
        """Send one request, return the response payload (starting at correlation_id)."""
        self.correlation_id += 1
        self.send_raw(request(api_key, api_version, self.correlation_id, body))
        payload = self.read_frame()
        if payload is None:
            raise ConnectionError("broker closed the connection instead of answering")
        (got,) = struct.unpack_from(">i", payload)
        assert got == self.correlation_id, (got, self.correlation_id)
        return payload

    def read_frame(self) -> bytes | None:
        """One response payload, or None when the broker closed the connection."""
        head = self._read_exactly(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._read_exactly(size)

    def stamp_receives(self) -> None:
        """Have the kernel stamp what this socket receives (for :meth:`read_stamped_frame`)."""
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)

    def read_stamped_frame(self) -> tuple[int, bytes]:
        """(when the first bytes of the answer were received, ns since the epoch: on loopback,
        when the broker sent them; the payload). Needs :meth:`stamp_receives`."""
        stamp, head = -1, b""
        while len(head) < 4:
            data, ancdata, _, _ = self.sock.recvmsg(4 - len(head), socket.CMSG_SPACE(16))
            if not data:
                raise ConnectionError("broker closed the connection instead of answering")
            for level, kind, value in ancdata:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and stamp < 0:
                    seconds, nanos = struct.unpack("qq", value[:16])
                    stamp = seconds * 1_000_000_000 + nanos
            head += data
        if stamp < 0:
            raise RuntimeError("no receive timestamp (SO_TIMESTAMPNS)")
        (size,) = struct.unpack(">i", head)
        if not 4 <= size <= MAX_STAMPED_FRAME:
            raise ValueError(f"an answer of {size} bytes")
        payload = self._read_exactly(size)
        if payload is None:
            raise ConnectionError("broker closed the connection mid-answer")
        return stamp, payload

    def closed_by_peer(self) -> bool:
        """True when the broker closes the connection (EOF or reset) within the timeout."""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def _read_exactly(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 over a fresh connection: {api_key: (min, max)}; asserts no error."""
    with Connection.to(bootstrap) as conn:
        payload = conn.call(API_VERSIONS, 0, b"")
    _, error_code, apis = parse_api_versions_v0(payload)
    assert error_code == NONE, error_code
    return apis


def produce(bootstrap: str, topic: str, partition: int,
            records: bytes) -> ProducePartitionResult:
    """Produce v3 of one batch over a fresh connection; the partition's result."""
    with Connection.to(bootstrap) as conn:
        payload = conn.call(API_PRODUCE, 3, produce_v3_body(topic, partition, records))
    _, results = parse_produce_v3(payload)
    assert len(results) == 1, results
    return results[0]


def fetch(bootstrap: str, topic: str, partition: int, offset: int) -> FetchPartitionResult:
    with Connection.to(bootstrap) as conn:
        payload = conn.call(API_FETCH, 4, fetch_v4_body(topic, partition, offset))
    _, results = parse_fetch_v4(payload)
    assert len(results) == 1, results
    return results[0]


# --------------------------------------------------------------------------- any API, any version


def call_api(conn: Connection, request: Any, version: int, client_id: str = "strata-raw-test") -> Any:
    """Send a kafka-python ``ApiMessage`` request at ``version``; its decoded response.

    kafka-python 3 builds every message from Kafka's own JSON schemas (versions
    Kafka 4 dropped included, e.g. ListOffsets v0), with no code shared with the
    broker: the tests use it for the versions and fields real clients do not send.
    """
    conn.correlation_id += 1
    request.with_header(correlation_id=conn.correlation_id, client_id=client_id)
    conn.send_raw(bytes(request.encode(version=version, header=True, framed=True)))
    payload = conn.read_frame()
    if payload is None:
        raise ConnectionError("broker closed the connection instead of answering")
    response_class = type(request).__name__.replace("Request", "Response")
    module = sys.modules[type(request).__module__]
    response = getattr(module, response_class).decode(payload, version=version, header=True)
    assert response.header.correlation_id == conn.correlation_id
    return response


def call(bootstrap: str, request: Any, version: int) -> Any:
    """:func:`call_api` over a fresh connection."""
    with Connection.to(bootstrap) as conn:
        return call_api(conn, request, version)
