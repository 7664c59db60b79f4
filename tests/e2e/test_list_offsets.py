"""ListOffsets as librdkafka's tests and Sarama-based tools use it: max timestamp per
record (issue 21, defect 13), v0 (Burrow), latest-tiered (-5, v9+)."""

from __future__ import annotations

import struct
import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec
from kafka.protocol.consumer import ListOffsetsRequest

from tests.e2e import helpers
from tests.e2e import rawkafka as rk

T = helpers.CLIENT_TIMEOUT_S
LATEST, EARLIEST, MAX_TIMESTAMP, LATEST_TIERED = -1, -2, -3, -5
UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture(scope="module")
def broker(module_start_broker: Any) -> Any:
    return module_start_broker()


def _list_offsets(bootstrap: str, topic: str, timestamp: int, version: int, max_num: int = 1,
                  partition: int = 0) -> Any:
    part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=partition, timestamp=timestamp, max_num_offsets=max_num)
    request = ListOffsetsRequest(replica_id=-1, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[part])])
    (answer,) = rk.call(bootstrap, request, version).topics[0].partitions
    return answer


@pytest.mark.parametrize("compression", [0, 1], ids=["uncompressed", "gzip"])
def test_max_timestamp_answers_the_record_holding_it_not_the_batch_end(
    broker: Any, compression: int
) -> None:
    """Three records at +100, +400, +250 in one batch: Kafka ≥ 3.8 answers offset 1."""
    topic = helpers.topic_name("max-ts")
    helpers.create_topic(broker.bootstrap, topic)
    base = int(time.time() * 1000) - 10_000
    batch = rk.record_batch([b"a", b"b", b"c"], compression_type=compression,
                            timestamps=[base + 100, base + 400, base + 250])
    assert rk.produce(broker.bootstrap, topic, 0, bytes(batch)).error_code == 0
    later = rk.record_batch([b"d", b"e"], timestamps=[base + 10, base + 20])
    assert rk.produce(broker.bootstrap, topic, 0, bytes(later)).error_code == 0

    tp = TopicPartition(topic, 0)
    client = helpers.admin(broker.bootstrap)  # held: its futures die with it
    futures = client.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=T)
    found = futures[tp].result(timeout=T + 5)
    assert (found.offset, found.timestamp) == (1, base + 400)


def test_list_offsets_v0_answers_segment_offsets_newest_first(broker: Any) -> None:
    """Sarama (Burrow) sends v0: up to max_num_offsets offsets, the high watermark first."""
    topic = helpers.topic_name("v0")
    helpers.create_topic(broker.bootstrap, topic, config={"segment.bytes": "1024"})
    helpers.produce_values(broker.bootstrap, topic, [b"v" * 200] * 30,
                           **{"linger.ms": 0, "batch.num.messages": 1})

    latest = _list_offsets(broker.bootstrap, topic, LATEST, 0)
    assert (latest.error_code, latest.old_style_offsets) == (0, [30])
    earliest = _list_offsets(broker.bootstrap, topic, EARLIEST, 0)
    assert (earliest.error_code, earliest.old_style_offsets) == (0, [0])
    every = _list_offsets(broker.bootstrap, topic, LATEST, 0, max_num=1000).old_style_offsets
    assert every[0] == 30 and every[-1] == 0 and len(every) >= 4  # log end and segment bases
    assert every == sorted(set(every), reverse=True)
    assert _list_offsets(broker.bootstrap, topic, LATEST, 0, max_num=2).old_style_offsets == every[:2]
    # by time: segments written before a timestamp
    assert _list_offsets(broker.bootstrap, topic, 1, 0, max_num=10).old_style_offsets == []
    future = int(time.time() * 1000) + 3_600_000
    assert _list_offsets(broker.bootstrap, topic, future, 0, max_num=10).old_style_offsets[0] == 30

    missing = _list_offsets(broker.bootstrap, helpers.topic_name("nope"), LATEST, 0)
    assert (missing.error_code, missing.old_style_offsets) == (UNKNOWN_TOPIC_OR_PARTITION, [])


def test_malformed_list_offsets_v0_closes_only_that_connection(broker: Any) -> None:
    body = struct.pack(">ii", -1, 2**31 - 1)  # replica_id, then a topic count no frame holds
    with rk.Connection.to(broker.bootstrap, timeout=5) as conn:
        conn.send_raw(rk.request(2, 0, 1, body))
        assert conn.closed_by_peer()
    assert rk.api_versions(broker.bootstrap)[2] == (0, 10)


def test_latest_tiered_is_minus_one_on_a_topic_without_tiered_storage(broker: Any) -> None:
    topic = helpers.topic_name("not-tiered")
    helpers.create_topic(broker.bootstrap, topic, config={"remote.storage.enable": "false"})
    helpers.produce_values(broker.bootstrap, topic, [b"x"] * 3)
    answer = _list_offsets(broker.bootstrap, topic, LATEST_TIERED, 9)
    assert (answer.error_code, answer.offset, answer.leader_epoch) == (0, -1, -1)
    assert _list_offsets(broker.bootstrap, topic, LATEST, 10).offset == 3
