"""Sans-I/O protocol layer: golden bytes, round trips, and the hand-written Fetch encoder
checked against kio's schema-generated decoder."""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from pathlib import Path

import pytest
from kio.index import load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from common.errors import ErrorCode
from common.protocol.codec import (
    FrameError,
    RequestHeader,
    build,
    decode_request,
    encode_response,
    response_module,
    timedelta_to_ms,
)
from fetch.planner import PartitionData
from fetch.response import encode_fetch_response, frame_size
from local_tier.segment import FileRegion
from service.handlers.router import Router, api_table


def _request_frame(api_key: int, version: int, body: object, correlation_id: int = 7) -> bytes:
    from kio.index import load_request_schema

    schema = load_request_schema(api_key, version)
    header_cls = schema.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="test",
        ),
    )
    entity_writer(schema)(buf, body)
    return buf.getvalue()


def test_api_versions_v0_request_golden_bytes_decode() -> None:
    # size-less frame: api key 18, version 0, correlation 1, client id "kcat"
    frame = struct.pack(">hhih", 18, 0, 1, 4) + b"kcat"
    header, body = decode_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 0, 1)
    assert header.client_id == "kcat"
    assert not header.flexible


def test_flexible_request_header_has_tagged_fields() -> None:
    from kio.index import load_request_schema

    body = load_request_schema(18, 3)(client_software_name="x", client_software_version="1")
    header, decoded = decode_request(_request_frame(18, 3, body))
    assert header.flexible and decoded.client_software_name == "x"


def test_trailing_bytes_are_ignored_as_kafka_does() -> None:
    frame = struct.pack(">hhih", 18, 0, 1, 4) + b"kcat" + b"junk"
    header, _ = decode_request(frame)
    assert header.correlation_id == 1


def test_truncated_body_is_a_frame_error() -> None:
    frame = struct.pack(">hhih", 3, 1, 1, 4) + b"kcat" + b"\x00\x00"
    with pytest.raises(FrameError):
        decode_request(frame)


def test_api_versions_v3_response_uses_header_v0() -> None:
    mod = response_module(18, 3)
    body = build(mod.ApiVersionsResponse, error_code=0, api_keys=(), throttle_time=0)
    frame = encode_response(RequestHeader(18, 3, 42, "x", True), body)
    size, corr = struct.unpack_from(">ii", frame)
    assert size == len(frame) - 4 and corr == 42
    # header v0: the body starts right after the correlation id (error code 0)
    assert frame[8:10] == b"\x00\x00"


def test_unknown_api_key_and_unsupported_version_close_or_answer() -> None:
    router = Router(broker=None)  # type: ignore[arg-type]
    with pytest.raises(FrameError, match="unknown API key"):
        router.dispatch(struct.pack(">hhih", 999, 0, 1, -1), None)
    with pytest.raises(FrameError, match="not supported"):
        router.dispatch(struct.pack(">hhih", 0, 99, 1, -1), None)


def test_unsupported_api_versions_version_answers_v0_with_our_ranges() -> None:
    import asyncio

    router = Router(broker=None)  # type: ignore[arg-type]
    frame = asyncio.run(_await(router.dispatch(struct.pack(">hhih", 18, 77, 5, -1), None)))
    size, corr, error, count = struct.unpack_from(">iihi", frame)
    assert (corr, error) == (5, ErrorCode.unsupported_version)
    assert size == len(frame) - 4 and count == len(api_table())
    ranges = {
        struct.unpack_from(">h", frame, 14 + 6 * i)[0]: struct.unpack_from(">hh", frame, 16 + 6 * i)
        for i in range(count)
    }
    assert ranges[0] == (3, api_table()[0].max_version)


async def _await(aw):  # type: ignore[no-untyped-def]
    return await aw


def test_api_table_only_lists_versions_kio_can_decode() -> None:
    """...or that are decoded by hand (ListOffsets v0, which Kafka 4 and kio dropped)."""
    from kio.index import load_request_schema

    from service.handlers.router import hand_decoders

    for spec in api_table().values():
        for version in range(spec.min_version, spec.max_version + 1):
            if (spec.key, version) in hand_decoders():
                continue
            load_request_schema(spec.key, version)
            load_response_schema(spec.key, version)


@pytest.mark.parametrize("version", range(4, 18))
def test_fetch_response_encoder_matches_kafka_schema(version: int, tmp_path: Path) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(b"A" * 10 + b"RECORDS-ONE" + b"B" * 5 + b"RECORDS-TWO!")
    with open(path, "rb", buffering=0) as f:
        parts = [
            PartitionData("t1", 0, ErrorCode.none, 100, 100, 3, [FileRegion(f, 10, 11, 0)], 11),
            PartitionData("t1", 1, ErrorCode.offset_out_of_range, 5, 5, 0, [], 0),
            PartitionData("t2", 2, ErrorCode.none, 9, 9, 1, [FileRegion(f, 26, 12, 0)], 12),
        ]
        ids = {"t1": uuid.uuid4(), "t2": uuid.uuid4()}  # v13+ names topics by id
        out = encode_fetch_response(version, 1234, parts, session_id=0, topic_id=ids.__getitem__)
        raw = b"".join(p if isinstance(p, bytes) else p.read_bytes() for p in out)
    assert struct.unpack_from(">i", raw)[0] == len(raw) - 4 == frame_size(out) - 4
    assert struct.unpack_from(">i", raw, 4)[0] == 1234
    offset = 8 + (1 if version >= 12 else 0)
    schema = load_response_schema(1, version)
    decoded, size = entity_reader(schema)(raw, offset)
    assert offset + size == len(raw)
    names = {v: k for k, v in ids.items()}
    topics = {t.topic if version < 13 else names[t.topic_id]: t.partitions for t in decoded.responses}
    assert list(topics) == ["t1", "t2"]
    p0, p1 = topics["t1"]
    assert (p0.partition_index, p0.high_watermark, p0.records) == (0, 100, b"RECORDS-ONE")
    assert p1.error_code == ErrorCode.offset_out_of_range and not p1.records
    (p2,) = topics["t2"]
    assert p2.records == b"RECORDS-TWO!" and p2.high_watermark == 9
    if version >= 5:
        assert p0.log_start_offset == 3


def test_request_header_versions_exist() -> None:
    assert RequestHeaderV1 is not RequestHeaderV2


def test_timedelta_to_ms_is_exact() -> None:
    # int(td.total_seconds() * 1000) gave 64075 here: a float product below the integer
    for ms in (0, 1, 7_500, 64_076, 2**31 - 1, -1):
        assert timedelta_to_ms(datetime.timedelta(milliseconds=ms)) == ms
