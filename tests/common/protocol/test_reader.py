"""The bounds-checked request reader (common/protocol/reader.py).

* It reads every request the broker advertises exactly as kio's native reader does
  (property test over kio's own entity strategies).
* No length on the wire is trusted: forging any 4 or 5 bytes of a valid frame into
  a huge length gives ``MalformedRequest`` (or a request), never another exception
  and never an allocation of what the length claims.
* Unknown tagged fields are skipped, at any depth; null is refused where the schema
  says a field is not nullable and accepted where it is.
"""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_reader as native_reader
from kio.serial import entity_writer
from kio.static.primitive import Records

from common.protocol.codec import FrameError, decode_request
from common.protocol.reader import MalformedRequest, request_reader
from service.handlers.router import api_table, hand_decoders
from tests.service.kafka_wire import encode_request, example_request

ADVERTISED = [(s.key, v) for s in api_table().values() for v in range(s.min_version, s.max_version + 1)
              if (s.key, v) not in hand_decoders()]  # kio has no schema for those

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))


def _encode(entity: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def test_reads_every_advertised_request_as_kio_does() -> None:
    for api, version in ADVERTISED:
        cls = load_request_schema(api, version)
        for values in ({}, {"name": "é" * 200, "topic": "t", "group_id": "g" * 130, "transactional_id": "x"}):
            data = _encode(example_request(api, version, **values))
            assert request_reader(cls)(data, 0) == native_reader(cls)(data, 0), (api, version, values)


#: requests with every kind of field between them (legacy and compact, nested, tagged, nullable)
VARIED = [(0, 3), (1, 12), (3, 12), (8, 9), (19, 7), (32, 4)]


@pytest.mark.parametrize(("api", "version"), VARIED, ids=[f"{a}v{v}" for a, v in VARIED])
def test_reads_random_requests_as_kio_does(api: int, version: int) -> None:
    cls = load_request_schema(api, version)
    ours, theirs = request_reader(cls), native_reader(cls)

    @settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def check(entity: object) -> None:
        data = _encode(entity)
        try:
            expected = theirs(data, 0)
        except ValueError:  # e.g. a timedelta kio cannot hold: ours clamps instead
            return
        assert ours(data, 0) == expected

    check()


_HUGE = [struct.pack(">i", 2**31 - 1), b"\xff\xff\xff\xff\x07", b"\xff\xff\xff\xff\x7f", struct.pack(">h", 0x7FFF)]


def test_forged_lengths_are_malformed_requests_not_allocations() -> None:
    for api, version in ADVERTISED:
        frame = encode_request(example_request(api, version), 1)
        for at in range(8, len(frame)):
            for huge in _HUGE:
                forged = frame[:at] + huge + frame[at + len(huge):]
                try:
                    decode_request(forged)
                except FrameError as exc:
                    assert isinstance(exc.__cause__, MalformedRequest), (api, version, at, exc)


def test_unknown_tagged_fields_are_skipped_at_any_depth() -> None:
    unknown = b"\x02\x07\x02hi\x63\x00"  # tag 7 with two bytes, tag 99 empty
    frame = (struct.pack(">hhih", 3, 12, 5, 1) + b"c" + unknown  # header v2 with tags
             + b"\x02" + bytes(16) + b"\x02t" + unknown  # one topic, with tags
             + b"\x01\x00" + unknown)  # flags, request tags
    header, request = decode_request(frame)
    assert header.correlation_id == 5 and header.client_id == "c"
    assert [t.name for t in request.topics] == ["t"] and request.allow_auto_topic_creation


def test_a_known_tagged_field_must_fill_its_declared_size() -> None:
    # ApiVersions v3 has no tagged fields of its own; Fetch v12 has cluster_id (tag 0)
    body = encode_request(example_request(1, 12, topic="t"), 1)
    assert body.endswith(b"\x00")
    forged = body[:-1] + b"\x01\x00\x03\x02xy"  # tag 0, size 3, holding a 2-byte string
    with pytest.raises(FrameError, match="declares 3 bytes"):
        decode_request(forged)


def test_null_is_refused_where_the_schema_forbids_it_and_read_where_it_allows_it() -> None:
    create_topics_null = struct.pack(">hhih", 19, 2, 1, 1) + b"c" + struct.pack(">iib", -1, 1000, 0)
    with pytest.raises(FrameError, match="non-nullable array 'topics'"):
        decode_request(create_topics_null)
    _, metadata = decode_request(struct.pack(">hhih", 3, 8, 1, 1) + b"c" + struct.pack(">ibbb", -1, 1, 0, 0))
    assert metadata.topics is None
    produce_null_name = struct.pack(">hhih", 0, 3, 1, 1) + b"c" + struct.pack(">hhiih", -1, 1, 1000, 1, -1)
    with pytest.raises(FrameError, match="non-nullable string"):
        decode_request(produce_null_name)


def test_records_are_views_of_the_frame_not_copies() -> None:
    frame = encode_request(example_request(0, 9, name="t"), 1)
    _, request = decode_request(memoryview(frame))
    records = request.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.readonly and records.obj is frame
    # a writable frame (the server's) gives writable views: Produce stamps batches in place
    writable = bytearray(frame)
    _, request = decode_request(memoryview(writable))
    records = request.topic_data[0].partition_data[0].records
    assert not records.readonly and records.obj is writable
