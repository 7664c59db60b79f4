"""The hand-written ListOffsets v0 codec against kafka-python's schema-built messages."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from common.protocol.codec import FrameError
from service.handlers.list_offsets_v0 import decode_request, encode_response

Topic = ListOffsetsRequest.ListOffsetsTopic
Partition = Topic.ListOffsetsPartition


def _frame(topics: list[Topic], client_id: str | None = "c") -> bytes:
    request = ListOffsetsRequest(replica_id=-1, topics=topics)
    request.with_header(correlation_id=42, client_id=client_id)
    return bytes(request.encode(version=0, header=True))


def test_decodes_what_a_v0_client_sends() -> None:
    frame = _frame([Topic(name="t", partitions=[Partition(partition_index=3, timestamp=-1,
                                                          max_num_offsets=5)]),
                    Topic(name="u", partitions=[])])
    header, body = decode_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (2, 0, 42)
    assert header.client_id == "c" and body.replica_id == -1
    assert [(t.name, [(p.partition_index, p.timestamp, p.max_num_offsets) for p in t.partitions])
            for t in body.topics] == [("t", [(3, -1, 5)]), ("u", [])]


def test_encodes_what_a_v0_client_reads() -> None:
    frame = encode_response(7, [("t", [(0, 0, [30, 12, 0]), (1, 3, [])])])
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    response = ListOffsetsResponse.decode(frame[4:], version=0, header=True)
    assert response.header.correlation_id == 7
    (topic,) = response.topics
    assert [(p.partition_index, p.error_code, p.old_style_offsets) for p in topic.partitions] == [
        (0, 0, [30, 12, 0]), (1, 3, [])]


@pytest.mark.parametrize("cut", [1, 9, 14, 20, 30])
def test_a_truncated_frame_is_a_frame_error(cut: int) -> None:
    frame = _frame([Topic(name="topic", partitions=[Partition(partition_index=0, timestamp=-2,
                                                              max_num_offsets=1)])])
    with pytest.raises(FrameError):
        decode_request(frame[: len(frame) - cut])


def test_counts_larger_than_the_frame_are_refused_before_allocating() -> None:
    head = struct.pack(">hhih", 2, 0, 1, -1)  # api, version, correlation id, null client id
    for count in (2**31 - 1, 1_000, -5):
        with pytest.raises(FrameError):
            decode_request(head + struct.pack(">ii", -1, count))
    partitions = struct.pack(">h", 1) + b"t" + struct.pack(">i", 2**30)
    with pytest.raises(FrameError):
        decode_request(head + struct.pack(">ii", -1, 1) + partitions)
