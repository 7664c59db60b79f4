"""The hand-written Produce codec: the response encoder gives kio's bytes for every version we
advertise (per-record errors included from v8); the request decoder reads what the generic
bounds-checked reader reads, and refuses what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from service.handlers.produce_codec import (
    PRODUCE_VERSIONS,
    PartitionResult,
    decode_produce_request,
    encode_produce_response,
)
from tests.service.kafka_wire import encode_request, example_request, records

TOPICS = [
    ("orders", [PartitionResult(0, int(ErrorCode.none), 1234, -1, 17),
                PartitionResult(2, int(ErrorCode.none), 0, 1_700_000_000_123, 0)]),
    ("payments-ü", [PartitionResult(7, int(ErrorCode.unknown_topic_or_partition),
                                    error_message="this server does not host this topic-partition"),
                    PartitionResult(8, int(ErrorCode.invalid_record), error_message="record 3 is malformed",
                                    record_errors=((3, "malformed key"), (5, "malformed value")))]),
    ("empty", []),
]


class _Header:
    def __init__(self, version: int, correlation_id: int) -> None:
        self.api_key, self.api_version, self.correlation_id = 0, version, correlation_id


def _kio(version: int, correlation_id: int) -> bytes:
    mod = response_module(0, version)
    topics = []
    for name, parts in TOPICS:
        built = []
        for p in parts:
            fields = {"error_code": ErrorCode(p.error_code), "base_offset": p.base_offset,
                      "log_append_time": p.log_append_time_ms, "log_start_offset": p.log_start_offset}
            if p.error_message is not None:
                fields["error_message"] = p.error_message
            if p.record_errors and version >= 8:
                fields["record_errors"] = tuple(
                    build(mod.BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=m)
                    for i, m in p.record_errors
                )
            built.append(build(mod.PartitionProduceResponse, index=p.index, **fields))
        topics.append(build(mod.TopicProduceResponse, name=name, partition_responses=tuple(built)))
    body = build(mod.ProduceResponse, responses=tuple(topics), throttle_time=0)
    return encode_response(_Header(version, correlation_id), body)  # type: ignore[arg-type]


@pytest.mark.parametrize("version", range(3, 10))
def test_produce_response_bytes_equal_kios_encoding(version: int) -> None:
    assert encode_produce_response(version, 424242, TOPICS) == _kio(version, 424242)


def test_versions_outside_the_advertised_range_are_refused() -> None:
    with pytest.raises(ValueError, match="v10"):
        encode_produce_response(10, 1, TOPICS)


# -- the request decoder against the generic bounds-checked reader ----------------------

def _request_frame(version: int, transactional_id: str | None = "txn-1", client_id: str | None = "client-ü",
                   topics: list[dict[str, Any]] | None = None) -> bytes:
    if topics is None:
        topics = [{"name": "orders", "partition_data": [{"index": 0, "records": records(2)},
                                                         {"index": 5, "records": None}]},
                  {"name": "payments-ü", "partition_data": [{"index": 2, "records": records(1, b"x" * 300)}]},
                  {"name": "empty", "partition_data": []}]
    body = example_request(0, version, transactional_id=transactional_id, acks=-1, timeout=7_500,
                           topic_data=topics)
    return encode_request(body, 31337, client_id=client_id)


def _generic(frame: bytes) -> tuple[Any, Any]:
    header, body = decode_request(frame)
    return header, (body.transactional_id, int(body.acks), timedelta_to_ms(body.timeout),
                    [(t.name, [(p.index, None if p.records is None else bytes(p.records))
                               for p in t.partition_data]) for t in body.topic_data])


def _by_hand(frame: bytes) -> tuple[Any, Any]:
    header, body = decode_produce_request(frame)
    return header, (body.transactional_id, body.acks, body.timeout_ms,
                    [(t.name, [(p.index, None if p.records is None else bytes(p.records))
                               for p in t.partition_data]) for t in body.topic_data])


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@pytest.mark.parametrize("transactional_id,client_id", [("txn-1", "client-ü"), (None, None), ("", "")])
def test_request_decoder_reads_what_the_generic_reader_reads(version: int, transactional_id: str | None,
                                                              client_id: str | None) -> None:
    frame = _request_frame(version, transactional_id, client_id)
    header, body = _by_hand(frame)
    assert (header, body) == _generic(frame)
    assert header == RequestHeader(0, version, 31337, client_id, version >= 9)
    assert body[:3] == (transactional_id, -1, 7_500)
    assert [name for name, _ in body[3]] == ["orders", "payments-ü", "empty"]
    assert body[3][0][1][1] == (5, None)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_request_records_are_a_writable_view_of_the_frame(version: int) -> None:
    frame = bytearray(_request_frame(version))
    _, body = decode_produce_request(memoryview(frame))
    records_view = body.topic_data[0].partition_data[0].records
    assert isinstance(records_view, memoryview) and not records_view.readonly
    records_view[0:8] = b"\xff" * 8  # the log stamps offsets in place
    assert b"\xff" * 8 in frame


def _outcome(decode: Any, frame: bytes) -> Any:
    try:
        return decode(frame)
    except FrameError:
        return FrameError


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(list(PRODUCE_VERSIONS)), data=st.data())
def test_request_decoder_agrees_with_the_generic_reader_on_mutated_frames(version: int, data: Any) -> None:
    """Flipped bytes, forged lengths, cut or grown frames: both refuse, or both read the same."""
    frame = bytearray(_request_frame(version))
    kind = data.draw(st.sampled_from(["flip", "length", "truncate", "extend"]))
    if kind == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            frame[data.draw(st.integers(8, len(frame) - 1))] = data.draw(st.integers(0, 255))
    elif kind == "length":
        forged = data.draw(st.sampled_from([b"\x7f\xff\xff\xff", b"\x7f\xff", b"\xff\xff\xff\xff", b"\xff\xfe",
                                            b"\xff\xff\xff\xff\x07", b"\xff\xff\xff\xff\x7f", b"\xff"]))
        at = data.draw(st.integers(8, len(frame) - 1))
        frame[at : at + len(forged)] = forged
    elif kind == "truncate":
        del frame[data.draw(st.integers(0, len(frame) - 1)):]
    else:
        frame += data.draw(st.binary(min_size=1, max_size=16))
    if len(frame) >= 4:
        frame[0:4] = b"\x00\x00" + version.to_bytes(2, "big")  # the router sends only Produce here
    generic, by_hand = _outcome(_generic, bytes(frame)), _outcome(_by_hand, bytes(frame))
    assert by_hand == generic
