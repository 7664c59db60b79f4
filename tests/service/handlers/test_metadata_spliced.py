"""A Metadata answer spliced from cached topic bytes is byte for byte the answer encoded
whole, at every version (the topics array sits before the fields that end the body)."""

from __future__ import annotations

import datetime
import uuid

import pytest

from common.protocol.codec import (
    RequestHeader,
    SplicedResponse,
    build,
    encode_entity,
    encode_response,
    response_module,
)


def _topic(mod, name: str, partitions: int, error_code: int = 0):  # type: ignore[no-untyped-def]
    return build(
        mod.MetadataResponseTopic, error_code=error_code, name=name, topic_id=uuid.uuid4(),
        is_internal=False, topic_authorized_operations=-2147483648,
        partitions=tuple(
            build(mod.MetadataResponsePartition, error_code=0, partition_index=p, leader_id=p % 3,
                  leader_epoch=7, replica_nodes=(0, 1, 2), isr_nodes=(0, 1), offline_replicas=(2,))
            for p in range(partitions)),
    )


@pytest.mark.parametrize("version", range(13))
@pytest.mark.parametrize("count", [0, 2, 130])  # 130 topics: a two-byte varint count in v9+
def test_a_spliced_metadata_answer_equals_the_whole_encoding(version: int, count: int) -> None:
    mod = response_module(3, version)
    topics = tuple(_topic(mod, f"t{i}", i % 4, error_code=3 if i == 1 else 0) for i in range(count))
    broker = build(mod.MetadataResponseBroker, node_id=1, host="h", port=9092, rack=None)
    body = build(mod.MetadataResponse, throttle_time=0, brokers=(broker,), cluster_id="c",
                 controller_id=1, topics=(), cluster_authorized_operations=-2147483648)
    header = RequestHeader(3, version, 42, "client", version >= 9)
    whole = encode_response(header, build(mod.MetadataResponse, throttle_time=0, brokers=(broker,),
                                          cluster_id="c", controller_id=1, topics=topics,
                                          cluster_authorized_operations=-2147483648))
    suffix = (4 if 8 <= version <= 10 else 0) + (1 if version >= 9 else 0)
    spliced = SplicedResponse(body, tuple(encode_entity(t) for t in topics), version >= 9, suffix)
    assert spliced.encode(header) == whole
    if version >= 3:  # the router sets a quota's throttle on the body it splices into
        throttled = SplicedResponse(body, spliced.items, version >= 9, suffix,
                                    throttle_time=datetime.timedelta(milliseconds=250))
        assert throttled.encode(header)[8 + (version >= 9):][:4] == (250).to_bytes(4, "big")
