"""Regression tests for the wire-protocol defects of issue 21 (1, 2, 3, 4 and 9), on real brokers.

1. A frame with a forged length (array, string, bytes, tagged field) closes that one
   connection; the broker lives (kio's native decoder aborted the process trying to
   allocate what the length claimed).
2. Unknown tagged fields are skipped (an answer comes back); requests that once killed
   a connection's reader leave no socket behind; null in a non-nullable field closes
   that connection with a log line naming the field.
3. Connections that declare 100 MiB and stall hold no memory and are closed once idle
   (``connections.max.idle.ms``).
4. Batches whose records lie inside a correct CRC (garbage gzip, a record length past
   the end, a payload inflating without bound) get INVALID_RECORD, with the record
   singled out from Produce v8; nothing is appended, consumers read on. Large
   compressed batches, checked off the event loop, keep their connection's order.
9. CreateTopics error answers at v5+ are well formed (TOPIC_ALREADY_EXISTS, not a
   closed connection).

The request-memory cap (``queued.max.request.bytes``) is tested in process in
``test_request_memory.py``; every API's error paths in ``test_conformance.py``.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from typing import Any

import pytest
import zstandard
from confluent_kafka import Producer

from tests.service.kafka_wire import (
    WireConnection,
    decode_response,
    error_codes,
    example_request,
    frame,
    read_to_end,
    records,
    with_crc,
)
from tests.service.wire_fuzz import rss_bytes

INVALID_RECORD = 87
TOPIC_ALREADY_EXISTS = 36


def _raw(api: int, version: int, body: bytes, *, flexible: bool, header_tags: bytes = b"\x00") -> bytes:
    """A request frame from hand-made body bytes (header v1, or v2 when ``flexible``)."""
    head = struct.pack(">hhih", api, version, 1, 4) + b"test"
    if flexible:
        head += header_tags
    payload = head + body
    return struct.pack(">i", len(payload)) + payload


_HUGE_VARINT = b"\xff\xff\xff\xff\x07"  # unsigned varint 2^31 - 1
_HUGER_VARINT = b"\xff\xff\xff\xff\x7f"  # 2^35 - 1: kio's native decoder reserved 275 GB and aborted
_HUGE_I32 = struct.pack(">i", 2**31 - 1)
_PAD = bytes(40)

#: (what, frame): each claims far more than the frame holds
FORGED = [
    ("Metadata v12 5-byte compact length", _raw(3, 12, _HUGER_VARINT + _PAD, flexible=True)),
    ("OffsetFetch v8 5-byte compact length", _raw(9, 8, _HUGER_VARINT + _PAD, flexible=True)),
    ("LeaveGroup v5 5-byte compact length", _raw(13, 5, b"\x02g" + _HUGER_VARINT + _PAD, flexible=True)),
    ("ListOffsets v8 5-byte compact length",
     _raw(2, 8, struct.pack(">ib", -1, 0) + _HUGER_VARINT + _PAD, flexible=True)),
    ("Fetch v12 5-byte compact length",
     _raw(1, 12, struct.pack(">iiiibii", -1, 100, 1, 1 << 20, 0, 0, -1) + _HUGER_VARINT + _PAD, flexible=True)),
    ("Metadata v12 compact array", _raw(3, 12, _HUGE_VARINT + _PAD, flexible=True)),
    ("Metadata v8 legacy array", _raw(3, 8, _HUGE_I32 + _PAD, flexible=False)),
    ("Metadata v8 string", _raw(3, 8, struct.pack(">ih", 1, 0x7FFF) + b"a", flexible=False)),
    ("ListOffsets v5 array", _raw(2, 5, struct.pack(">ib", -1, 0) + _HUGE_I32 + _PAD, flexible=False)),
    ("LeaveGroup v3 array", _raw(13, 3, struct.pack(">h", 1) + b"g" + _HUGE_I32 + _PAD, flexible=False)),
    ("OffsetFetch v7 compact array", _raw(9, 7, b"\x02g" + _HUGE_VARINT + _PAD, flexible=True)),
    ("Fetch v4 array", _raw(1, 4, struct.pack(">iiiib", -1, 100, 1, 1 << 20, 0) + _HUGE_I32 + _PAD,
                            flexible=False)),
    ("Produce v3 records", _raw(0, 3, struct.pack(">hhiih", -1, 1, 1000, 1, 1) + b"t"
                                + struct.pack(">ii", 1, 0) + _HUGE_I32 + b"xyz", flexible=False)),
    ("CreateTopics v5 nested compact array",
     _raw(19, 5, b"\x02" + b"\x02t" + struct.pack(">ih", 1, 1) + _HUGE_VARINT + _PAD, flexible=True)),
    ("ApiVersions v3 header tagged field", _raw(18, 3, b"\x02a\x021\x00", flexible=True,
                                                header_tags=b"\x01\x00" + _HUGE_VARINT)),
    ("ApiVersions v3 tagged field count", _raw(18, 3, b"\x02a\x021" + _HUGE_VARINT, flexible=True)),
]


@pytest.fixture(scope="module")
def wire_broker(module_start_broker: Any) -> Any:
    return module_start_broker(sets={"auto.create.topics.enable": "false"})


def _alive(broker: Any) -> None:
    assert broker.running, broker.log_tail()
    with WireConnection(broker.bootstrap) as conn:
        assert error_codes(conn.call(example_request(18, 3))) == [0]


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _create(conn: WireConnection, topic: str, partitions: int = 1) -> None:
    assert error_codes(conn.call(example_request(19, 7, name=topic, num_partitions=partitions))) == [0]


# ------------------------------------------------------------------------------------ defect 1


@pytest.mark.parametrize(("what", "data"), FORGED, ids=[w for w, _ in FORGED])
def test_a_forged_length_closes_only_that_connection(wire_broker: Any, what: str, data: bytes) -> None:
    with WireConnection(wire_broker.bootstrap) as bystander, WireConnection(wire_broker.bootstrap) as conn:
        conn.send(data)
        assert conn.closed_by_peer(), f"{what}: the broker neither answered nor closed"
        assert wire_broker.running, f"{what} killed the broker:\n{wire_broker.log_tail()}"
        assert error_codes(bystander.call(example_request(18, 3))) == [0]  # other connections carry on
    assert "malformed request" in wire_broker.log_text()


# ------------------------------------------------------------------------------------ defect 2


def test_unknown_tagged_fields_are_skipped(wire_broker: Any) -> None:
    """KIP-482: a receiver ignores tags it does not know (header, body and nested struct)."""
    with WireConnection(wire_broker.bootstrap, timeout=5) as conn:
        _create(conn, "tagged")
        unknown = b"\x02\x07\x02hi\x63\x00"  # two tagged fields: tag 7 (2 bytes), tag 99 (empty)
        conn.send(_raw(18, 3, b"\x0cstrata-test\x041.0" + unknown, flexible=True, header_tags=unknown))
        answer = conn.read_frame()
        assert answer is not None, "no answer to ApiVersions v3 with unknown tags"
        # Metadata v12: one topic (uuid, name "tagged", unknown tag), then the request's flags
        topic = bytes(16) + b"\x07tagged" + unknown
        conn.send(_raw(3, 12, b"\x02" + topic + b"\x00\x00" + unknown, flexible=True))
        answer = conn.read_frame()
        assert answer is not None, "no answer to Metadata v12 with unknown tags"
        assert b"\x07tagged" in answer, answer


def test_connections_whose_reader_died_leave_no_socket_behind(wire_broker: Any) -> None:
    """Before: an unknown tag killed the reader silently and the socket stayed in CLOSE-WAIT."""
    pid = wire_broker.pid
    before = _open_fds(pid)
    for _ in range(30):
        conn = WireConnection(wire_broker.bootstrap, timeout=5)
        conn.send(_raw(18, 3, b"\x02a\x021\x01\x05\x00", flexible=True))
        conn.read_frame()
        conn.close()
    deadline = time.monotonic() + 10
    while _open_fds(pid) > before + 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _open_fds(pid) <= before + 3, f"{_open_fds(pid) - before} descriptors left behind"
    _alive(wire_broker)


def test_null_in_a_non_nullable_field_closes_that_connection_with_a_log_line(wire_broker: Any) -> None:
    with WireConnection(wire_broker.bootstrap) as conn:
        conn.send(_raw(19, 2, struct.pack(">iib", -1, 1000, 0), flexible=False))  # CreateTopics topics=null
        assert conn.closed_by_peer()
    assert "non-nullable array 'topics'" in wire_broker.log_text()
    # a nullable array may be null: Metadata topics=null means every topic
    with WireConnection(wire_broker.bootstrap) as conn:
        assert set(error_codes(conn.call(example_request(3, 12, topics=None)))) == {0}
    _alive(wire_broker)


# ------------------------------------------------------------------------------------ defect 3


def test_stalled_100_mib_requests_hold_no_memory_and_idle_connections_close(start_broker: Any) -> None:
    broker = start_broker(sets={"connections.max.idle.ms": "2000"})
    _alive(broker)
    rss_before = rss_bytes(broker.pid)
    stallers = []
    for _ in range(20):
        s = socket.create_connection((broker.host, broker.port), timeout=20)
        s.sendall(struct.pack(">i", 100 * 1024 * 1024) + struct.pack(">hhih", 3, 12, 1, 1) + b"x" + bytes(1000))
        stallers.append(s)
    time.sleep(1.0)
    grown = rss_bytes(broker.pid) - rss_before
    assert grown < 64 * 1024 * 1024, f"20 stalled requests grew the broker by {grown >> 20} MiB"
    try:
        for s in stallers:  # closed by the broker once idle for 2 s
            assert s.recv(1) == b"", "a stalled connection got an answer instead of being closed"
    finally:
        for s in stallers:
            s.close()
    assert "connections.max.idle.ms" in broker.log_text()
    _alive(broker)


# ------------------------------------------------------------------------------------ defect 4


def _produce(conn: WireConnection, version: int, topic: str, batch: bytes) -> Any:
    answer = conn.call(example_request(0, version, name=topic, index=0, records=batch))
    return answer.responses[0].partition_responses[0]


def _lying_batch() -> bytes:
    """Three records declared; record 1's length runs past the batch. CRC recomputed."""
    batch = bytearray(records(3))
    record_1 = 61 + 1 + batch[61] // 2
    batch[record_1] = 0x7E
    return with_crc(batch)


def _with_payload(codec: int, payload: bytes) -> bytes:
    """A one-record batch whose attributes name ``codec`` and whose record section is ``payload``."""
    batch = bytearray(records(1))[:61] + payload
    struct.pack_into(">i", batch, 8, len(batch) - 12)  # batch length
    struct.pack_into(">h", batch, 21, codec)  # attributes
    return with_crc(batch)


def _garbage_gzip_batch() -> bytes:
    return _with_payload(1, b"\x1f\x8b\x08" + b"not gzip at all " * 4)


def _zstd_bomb() -> bytes:
    """A zstd batch whose payload inflates to 160 MiB of zeros (a few KB on the wire)."""
    compressor = zstandard.ZstdCompressor(level=1).compressobj()
    zeros = bytes(1 << 20)
    return _with_payload(4, b"".join(compressor.compress(zeros) for _ in range(512)) + compressor.flush())


def test_batches_that_lie_inside_a_correct_crc_are_invalid_records(wire_broker: Any) -> None:
    topic = "lying-batches"
    with WireConnection(wire_broker.bootstrap) as conn:
        _create(conn, topic)
        assert _produce(conn, 9, topic, records(2, b"before")).error_code == 0
        for version in (3, 8, 9):
            for batch in (_lying_batch(), _garbage_gzip_batch()):
                result = _produce(conn, version, topic, batch)
                assert result.error_code == INVALID_RECORD, (version, result)
        result = _produce(conn, 9, topic, _lying_batch())
        assert [e.batch_index for e in result.record_errors] == [1], result
        assert "record 1" in result.error_message
        started = time.monotonic()
        result = _produce(conn, 9, topic, _zstd_bomb())
        assert result.error_code == INVALID_RECORD and "inflate" in result.error_message, result
        assert time.monotonic() - started < 20
        assert _produce(conn, 9, topic, records(2, b"after")).base_offset == 2  # nothing appended between
    assert read_to_end(wire_broker.bootstrap, topic) == [b"before"] * 2 + [b"after"] * 2
    _alive(wire_broker)


def test_large_compressed_batches_keep_their_connection_order(wire_broker: Any) -> None:
    """Big gzip batches are checked on threads; small ones that follow must not overtake them."""
    topic = "ordered-compressed"
    big = records(3000, os.urandom(200), compression_type=1)  # ~600 KB inflated: off the event loop
    with WireConnection(wire_broker.bootstrap) as conn:
        _create(conn, topic)
        expected = []
        for i in range(6):
            batch = big if i % 2 == 0 else records(1, b"small-%d" % i)
            conn.correlation_id += 1
            conn.send(frame(example_request(0, 9, name=topic, index=0, records=batch), conn.correlation_id))
            expected.append(3000 if i % 2 == 0 else 1)
        offsets = []
        for _ in expected:  # pipelined: answers come in request order
            payload = conn.read_frame()
            assert payload is not None
            part = decode_response(0, 9, payload)[1].responses[0].partition_responses[0]
            assert part.error_code == 0, part
            offsets.append(part.base_offset)
    assert offsets == [0, 3000, 3001, 6001, 6002, 9002]
    values = read_to_end(wire_broker.bootstrap, topic)
    assert [values.index(b"small-%d" % i) for i in (1, 3, 5)] == [3000, 6001, 9002]


def test_large_compressed_batches_from_many_connections_at_once(wire_broker: Any) -> None:
    """They are validated on two threads at the same time (a shared zstd context crashed the broker)."""
    topic = "concurrent-compressed"
    with WireConnection(wire_broker.bootstrap) as conn:
        _create(conn, topic, partitions=6)
    failures: list[str] = []

    def produce(partition: int, codec: int) -> None:
        batch = records(3000, b"%d" % codec * 100, compression_type=codec)  # ~300 KB inflated
        with WireConnection(wire_broker.bootstrap) as conn:
            for i in range(8):
                conn.send(frame(example_request(0, 9, name=topic, index=partition, records=batch), i + 1))
            for _ in range(8):
                payload = conn.read_frame()
                if payload is None:
                    failures.append(f"codec {codec}: connection closed")
                    return
                part = decode_response(0, 9, payload)[1].responses[0].partition_responses[0]
                if part.error_code != 0:
                    failures.append(f"codec {codec}: {part}")

    codecs = (4, 4, 4, 1, 2, 3)  # zstd, gzip, snappy, lz4
    threads = [threading.Thread(target=produce, args=(p, codec)) for p, codec in enumerate(codecs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    assert wire_broker.running, wire_broker.log_tail()
    assert len(read_to_end(wire_broker.bootstrap, topic, 6)) == 6 * 8 * 3000


def test_valid_compressed_batches_of_every_codec_are_accepted(wire_broker: Any) -> None:
    topic = "codecs"
    with WireConnection(wire_broker.bootstrap) as conn:
        _create(conn, topic)
    producer_values = []
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        producer = Producer({"bootstrap.servers": wire_broker.bootstrap, "compression.type": codec})
        for i in range(50):
            value = f"{codec}-{i}".encode()
            producer.produce(topic, value)
            producer_values.append(value)
        assert producer.flush(30) == 0
    assert read_to_end(wire_broker.bootstrap, topic) == producer_values


# ------------------------------------------------------------------------------------ defect 9


@pytest.mark.parametrize("version", [5, 6, 7])
def test_create_topics_error_answers_are_well_formed_at_v5_and_up(wire_broker: Any, version: int) -> None:
    with WireConnection(wire_broker.bootstrap) as conn:
        _create(conn, f"exists-v{version}")
        answer = conn.call(example_request(19, version, name=f"exists-v{version}"))
    topic = answer.topics[0]
    assert topic.error_code == TOPIC_ALREADY_EXISTS and topic.configs is None, answer
    assert (topic.num_partitions, topic.replication_factor) == (-1, -1)


# ------------------------------------------------------------------------- found by the fuzzer


def _until_none(conn: WireConnection, request: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        answer = conn.call(request)
        if error_codes(answer) == [0] or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def test_add_offsets_to_txn_before_the_offsets_topic_exists(start_broker: Any) -> None:
    """AddOffsetsToTxn before anything made ``__consumer_offsets``: the handler raised, and
    the broker closed the connection with a traceback (the wire fuzzer found it). It makes
    the topic, as FindCoordinator does, and adds the group's partition to the transaction."""
    broker = start_broker(sets={"offsets.topic.num.partitions": "1"})
    txn = {"transactional_id": "early", "group_id": "early-group"}
    with WireConnection(broker.bootstrap) as conn:
        assert error_codes(_until_none(conn, example_request(10, 3, key_type=1, key="early",
                                                             coordinator_keys=("early",)))) == [0]
        init = _until_none(conn, example_request(22, 4, transactional_id="early", producer_id=-1,
                                                 producer_epoch=-1))
        assert error_codes(init) == [0], init
        producer = {"producer_id": int(init.producer_id), "producer_epoch": int(init.producer_epoch)}
        add = conn.call(example_request(25, 3, **txn, **producer))
        assert error_codes(add) == [0], add
        described = conn.call(example_request(65, 0, transactional_ids=("early",)))
        assert [(t.topic, tuple(t.partitions)) for t in described.transaction_states[0].topics] == \
            [("__consumer_offsets", (0,))]
    assert "Traceback" not in broker.log_text()
