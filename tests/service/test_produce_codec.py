"""The hand-written Produce response encoder gives kio's bytes for every version we advertise
(per-record errors included from v8)."""

from __future__ import annotations

import pytest

from local_tier.errors import ErrorCode
from service.produce_codec import PartitionResult, encode_produce_response
from service.protocol import build, encode_response, response_module

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
