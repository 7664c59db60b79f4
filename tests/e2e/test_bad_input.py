"""Bad input gets a Kafka error code or a closed connection, never a dead broker.

Malformed frames are sent over raw sockets (``rawkafka``); well-formed but
refused requests go through real clients where they can express them.
"""

from __future__ import annotations

import os
import struct
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from . import helpers, rawkafka


@pytest.fixture(scope="module")
def strict_broker(module_start_broker: Any) -> Any:
    """A broker that does not create topics on first use."""
    return module_start_broker(sets={"auto.create.topics.enable": "false"})


def assert_alive(broker: Any) -> None:
    assert broker.running, broker.log_tail()
    apis = rawkafka.api_versions(broker.bootstrap)
    assert rawkafka.API_PRODUCE in apis


def closed_or_error_response(conn: rawkafka.Connection) -> str:
    """'closed' if the broker hung up, 'response' if it answered with a frame."""
    try:
        payload = conn.read_frame()
    except TimeoutError:
        return "timeout"
    return "closed" if payload is None else "response"


# --------------------------------------------------------------------------- framing


def test_truncated_frame_then_close_leaves_broker_serving(strict_broker: Any) -> None:
    with rawkafka.Connection.to(strict_broker.bootstrap) as conn:
        full = rawkafka.request(rawkafka.API_VERSIONS, 0, 1, b"")
        conn.send_raw(struct.pack(">i", 100) + full[4:])  # promises 100 bytes, sends fewer
    assert_alive(strict_broker)


def test_half_sent_size_prefix_then_close_leaves_broker_serving(strict_broker: Any) -> None:
    with rawkafka.Connection.to(strict_broker.bootstrap) as conn:
        conn.send_raw(b"\x00\x00")
    assert_alive(strict_broker)


@pytest.mark.parametrize("size", [-1, -2_000_000_000, 200 * 1024 * 1024, 2**31 - 1])
def test_garbage_frame_size_closes_connection(strict_broker: Any, size: int) -> None:
    with rawkafka.Connection.to(strict_broker.bootstrap, timeout=10) as conn:
        conn.send_raw(struct.pack(">i", size) + b"\x00" * 16)
        assert conn.closed_by_peer(), f"connection left open after frame size {size}"
    assert_alive(strict_broker)


def test_garbage_bytes_do_not_kill_the_broker(strict_broker: Any) -> None:
    with rawkafka.Connection.to(strict_broker.bootstrap, timeout=5) as conn:
        body = os.urandom(64)
        conn.send_raw(struct.pack(">i", len(body)) + body)
        closed_or_error_response(conn)
    assert_alive(strict_broker)


def test_unknown_api_key_gets_error_or_close(strict_broker: Any) -> None:
    with rawkafka.Connection.to(strict_broker.bootstrap, timeout=10) as conn:
        conn.send_raw(rawkafka.request(999, 0, 7, b""))
        assert closed_or_error_response(conn) in ("closed", "response")
    assert_alive(strict_broker)


def test_unsupported_produce_version_gets_error_or_close(strict_broker: Any) -> None:
    body = rawkafka.produce_v3_body("anything", 0, bytes(rawkafka.record_batch([b"x"])))
    with rawkafka.Connection.to(strict_broker.bootstrap, timeout=10) as conn:
        conn.send_raw(rawkafka.request(rawkafka.API_PRODUCE, 99, 8, body))
        outcome = closed_or_error_response(conn)
        assert outcome in ("closed", "response")
    assert_alive(strict_broker)


def test_api_versions_v0_answers_with_produce_and_fetch_for_record_batch_v2(
        strict_broker: Any) -> None:
    apis = rawkafka.api_versions(strict_broker.bootstrap)
    assert apis[rawkafka.API_VERSIONS][0] == 0
    assert apis[rawkafka.API_PRODUCE][1] >= 3
    assert apis[rawkafka.API_FETCH][1] >= 4
    for key, (lo, hi) in apis.items():
        assert 0 <= lo <= hi, (key, lo, hi)


def test_api_versions_with_unsupported_version_answers_unsupported_version(
        strict_broker: Any) -> None:
    # KIP-511: the broker answers ApiVersions it cannot parse with error 35 in a v0 body.
    with rawkafka.Connection.to(strict_broker.bootstrap) as conn:
        payload = conn.call(rawkafka.API_VERSIONS, 127, b"")
    _, error_code, apis = rawkafka.parse_api_versions_v0(payload)
    assert error_code == rawkafka.UNSUPPORTED_VERSION
    assert rawkafka.API_VERSIONS in apis


# --------------------------------------------------------------------------- produce errors


def test_batch_with_wrong_crc_is_refused_as_corrupt_message(strict_broker: Any) -> None:
    topic = helpers.topic_name("bad-crc")
    helpers.create_topic(strict_broker.bootstrap, topic)
    good = rawkafka.record_batch([b"one", b"two", b"three"])

    for bad in (rawkafka.corrupt_crc(good), rawkafka.corrupt_payload(good)):
        result = rawkafka.produce(strict_broker.bootstrap, topic, 0, bad)
        assert (result.topic, result.partition, result.error_code) == (
            topic, 0, rawkafka.CORRUPT_MESSAGE)
    assert helpers.watermarks(strict_broker.bootstrap, topic) == (0, 0)

    result = rawkafka.produce(strict_broker.bootstrap, topic, 0, bytes(good))
    assert (result.error_code, result.base_offset) == (rawkafka.NONE, 0)
    assert helpers.watermarks(strict_broker.bootstrap, topic) == (0, 3)


def test_truncated_batch_is_refused_as_corrupt_message(strict_broker: Any) -> None:
    topic = helpers.topic_name("short-batch")
    helpers.create_topic(strict_broker.bootstrap, topic)
    good = bytes(rawkafka.record_batch([b"a" * 100, b"b" * 100]))

    result = rawkafka.produce(strict_broker.bootstrap, topic, 0, good[:-40])
    assert result.error_code == rawkafka.CORRUPT_MESSAGE
    assert_alive(strict_broker)
    assert helpers.watermarks(strict_broker.bootstrap, topic) == (0, 0)


def test_batch_over_max_message_bytes_is_refused_as_message_too_large(
        strict_broker: Any) -> None:
    topic = helpers.topic_name("too-large")
    helpers.create_topic(strict_broker.bootstrap, topic, config={"max.message.bytes": "2048"})
    big = bytes(rawkafka.record_batch([os.urandom(4096)]))
    small = bytes(rawkafka.record_batch([b"fits"]))

    assert rawkafka.produce(strict_broker.bootstrap, topic, 0, big).error_code == (
        rawkafka.MESSAGE_TOO_LARGE)
    result = rawkafka.produce(strict_broker.bootstrap, topic, 0, small)
    assert (result.error_code, result.base_offset) == (rawkafka.NONE, 0)


def test_produce_to_unknown_topic_without_auto_create_is_unknown_topic(
        strict_broker: Any) -> None:
    topic = helpers.topic_name("never-created")
    result = rawkafka.produce(strict_broker.bootstrap, topic, 0,
                              bytes(rawkafka.record_batch([b"x"])))
    assert (result.topic, result.error_code) == (topic, rawkafka.UNKNOWN_TOPIC_OR_PARTITION)
    assert topic not in helpers.topic_names(strict_broker.bootstrap)


def test_produce_to_missing_partition_is_unknown_topic_or_partition(strict_broker: Any) -> None:
    topic = helpers.topic_name("one-partition")
    helpers.create_topic(strict_broker.bootstrap, topic, partitions=1)
    result = rawkafka.produce(strict_broker.bootstrap, topic, 5,
                              bytes(rawkafka.record_batch([b"x"])))
    assert (result.partition, result.error_code) == (5, rawkafka.UNKNOWN_TOPIC_OR_PARTITION)


# --------------------------------------------------------------------------- fetch errors


def test_raw_fetch_past_the_end_is_offset_out_of_range(strict_broker: Any) -> None:
    topic = helpers.topic_name("fetch-oor")
    helpers.create_topic(strict_broker.bootstrap, topic)
    helpers.produce_values(strict_broker.bootstrap, topic, [b"a", b"b", b"c"])

    at_end = rawkafka.fetch(strict_broker.bootstrap, topic, 0, 3)
    assert (at_end.error_code, at_end.high_watermark) == (rawkafka.NONE, 3)
    past = rawkafka.fetch(strict_broker.bootstrap, topic, 0, 1000)
    assert past.error_code == rawkafka.OFFSET_OUT_OF_RANGE
    negative = rawkafka.fetch(strict_broker.bootstrap, topic, 0, -5)
    assert negative.error_code == rawkafka.OFFSET_OUT_OF_RANGE


def test_consumer_with_reset_error_reports_offset_out_of_range(strict_broker: Any) -> None:
    topic = helpers.topic_name("consumer-oor")
    helpers.create_topic(strict_broker.bootstrap, topic)
    helpers.produce_values(strict_broker.bootstrap, topic, [b"a", b"b"])
    consumer = helpers.consumer(strict_broker.bootstrap, **{"auto.offset.reset": "error"})
    try:
        consumer.assign([TopicPartition(topic, 0, 500)])
        error = None
        deadline = time.monotonic() + 30
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is not None, f"unexpected record at {msg.offset()}"
                error = msg.error()
    finally:
        consumer.close()
    assert error is not None, "no error reported for offset 500 of a 2-record partition"
    assert error.code() == KafkaError._AUTO_OFFSET_RESET, error


# --------------------------------------------------------------------------- admin errors


def create_error(bootstrap: str, topic: NewTopic) -> KafkaError:
    client = helpers.admin(bootstrap)
    futures = client.create_topics([topic], request_timeout=15)
    with pytest.raises(KafkaException) as info:
        futures[topic.topic].result(timeout=20)
    err = info.value.args[0]
    assert isinstance(err, KafkaError)
    return err


@pytest.mark.parametrize("name", ["bad name!", "x" * 250, "..", "slash/topic"])
def test_create_topic_with_invalid_name_is_invalid_topic(strict_broker: Any, name: str) -> None:
    err = create_error(strict_broker.bootstrap,
                       NewTopic(name, num_partitions=1, replication_factor=1))
    assert err.code() == KafkaError.TOPIC_EXCEPTION, err  # 17 INVALID_TOPIC_EXCEPTION


def test_create_topic_twice_is_topic_already_exists(strict_broker: Any) -> None:
    topic = helpers.topic_name("twice")
    helpers.create_topic(strict_broker.bootstrap, topic, partitions=2)
    err = create_error(strict_broker.bootstrap,
                       NewTopic(topic, num_partitions=2, replication_factor=1))
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS, err  # 36


@pytest.mark.parametrize("config", [{"retention.ms": "not-a-number"},
                                    {"cleanup.policy": "shred"},
                                    {"max.message.bytes": "-7"}])
def test_create_topic_with_invalid_config_value_is_invalid_config(
        strict_broker: Any, config: dict[str, str]) -> None:
    topic = helpers.topic_name("bad-config")
    err = create_error(strict_broker.bootstrap, NewTopic(topic, num_partitions=1,
                                                         replication_factor=1, config=config))
    assert err.code() == KafkaError.INVALID_CONFIG, err  # 40
    assert topic not in helpers.topic_names(strict_broker.bootstrap)


def test_broker_survived_the_whole_module(strict_broker: Any) -> None:
    assert_alive(strict_broker)
