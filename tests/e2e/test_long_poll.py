"""Fetch long-polling: a waiting fetch is answered by a new record, and waiting is not spinning."""

from __future__ import annotations

import threading
import time
from typing import Any

from kafka.record.memory_records import MemoryRecords

from . import helpers, rawkafka


def record_values(records: bytes | None) -> list[bytes]:
    if not records:
        return []
    values = []
    mr = MemoryRecords(records)
    while True:
        batch = mr.next_batch()
        if batch is None:
            return values
        values.extend(r.value for r in batch)


def test_raw_fetch_waiting_on_empty_partition_returns_record_produced_meanwhile(
        module_broker: Any) -> None:
    topic = helpers.topic_name("longpoll-raw")
    helpers.create_topic(module_broker.bootstrap, topic, partitions=1)
    with rawkafka.Connection.to(module_broker.bootstrap, timeout=30) as conn:
        conn.correlation_id += 1
        conn.send_raw(rawkafka.request(
            rawkafka.API_FETCH, 4, conn.correlation_id,
            rawkafka.fetch_v4_body(topic, 0, 0, max_wait_ms=15_000, min_bytes=1)))
        time.sleep(0.5)  # let the fetch reach the broker and park
        helpers.produce_values(module_broker.bootstrap, topic, [b"wake-up"])
        payload = conn.read_frame()
    assert payload is not None, "broker closed the connection"
    _, results = rawkafka.parse_fetch_v4(payload)
    assert [(r.partition, r.error_code) for r in results] == [(0, rawkafka.NONE)]
    assert record_values(results[0].records) == [b"wake-up"]
    assert results[0].high_watermark == 1


def test_kafka_python_long_poll_receives_record_produced_while_waiting(
        module_broker: Any) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic = helpers.topic_name("longpoll-kp")
    helpers.create_topic(module_broker.bootstrap, topic, partitions=1)
    consumer = KafkaConsumer(bootstrap_servers=module_broker.bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=5000,
                             fetch_min_bytes=1, request_timeout_ms=30_000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        assert consumer.poll(timeout_ms=500) == {}
        timer = threading.Timer(
            1.0, helpers.produce_values, args=(module_broker.bootstrap, topic, [b"hello"]))
        timer.start()
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=6000).values():
                got.extend(msgs)
        timer.join()
    finally:
        consumer.close()
    assert [(m.offset, m.value) for m in got] == [(0, b"hello")]


def test_idle_long_poll_does_not_burn_broker_cpu(module_broker: Any) -> None:
    """A resource bound, not a speed one: parked fetches must not busy-wait."""
    from kafka import KafkaConsumer, TopicPartition

    topic = helpers.topic_name("longpoll-idle")
    helpers.create_topic(module_broker.bootstrap, topic, partitions=1)
    consumer = KafkaConsumer(bootstrap_servers=module_broker.bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=5000,
                             request_timeout_ms=30_000)
    stop = threading.Event()

    def raw_waiter() -> None:
        # A second, raw long-poller on the same empty partition.
        with rawkafka.Connection.to(module_broker.bootstrap, timeout=30) as conn:
            while not stop.is_set():
                conn.call(rawkafka.API_FETCH, 4,
                          rawkafka.fetch_v4_body(topic, 0, 0, max_wait_ms=1000))

    waiter = threading.Thread(target=raw_waiter, daemon=True)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        consumer.poll(timeout_ms=500)  # connections and metadata are set up before measuring
        waiter.start()
        time.sleep(0.2)
        cpu_before = module_broker.cpu_seconds()
        window_start = time.monotonic()
        while time.monotonic() - window_start < 3.0:
            assert consumer.poll(timeout_ms=1000) == {}
        cpu_used = module_broker.cpu_seconds() - cpu_before
        wall = time.monotonic() - window_start
    finally:
        stop.set()
        consumer.close()
        waiter.join(5)
    assert cpu_used < 0.5 * max(wall / 3.0, 1.0), (
        f"broker used {cpu_used:.2f}s CPU during {wall:.1f}s of idle long polling")


def test_a_produce_is_answered_after_the_fetches_it_wakes(module_broker: Any) -> None:
    """The broker runs one event loop: a produce that wakes a parked fetch sends that fetch's
    answer first and its own after, so a tailing consumer sees the records a few turns of the
    loop sooner (the producer, with requests in flight, is not held by it). The order is read
    from the kernel's receive timestamps, which on loopback are the broker's send times."""
    topic = helpers.topic_name("longpoll-order")
    helpers.create_topic(module_broker.bootstrap, topic, partitions=1)
    with rawkafka.Connection.to(module_broker.bootstrap, timeout=30) as fetcher, \
            rawkafka.Connection.to(module_broker.bootstrap, timeout=30) as producer:
        for conn in (fetcher, producer):
            conn.stamp_receives()
        for offset in range(5):
            fetcher.correlation_id += 1
            fetcher.send_raw(rawkafka.request(
                rawkafka.API_FETCH, 4, fetcher.correlation_id,
                rawkafka.fetch_v4_body(topic, 0, offset, max_wait_ms=15_000, min_bytes=1)))
            time.sleep(0.3)  # the fetch parks
            producer.correlation_id += 1
            value = b"record %d" % offset
            producer.send_raw(rawkafka.request(
                rawkafka.API_PRODUCE, 3, producer.correlation_id,
                rawkafka.produce_v3_body(topic, 0, rawkafka.record_batch([value]), acks=1)))
            produced_at, produced = producer.read_stamped_frame()
            fetched_at, fetched = fetcher.read_stamped_frame()
            _, (result,) = rawkafka.parse_produce_v3(produced)
            assert (result.error_code, result.base_offset) == (rawkafka.NONE, offset)
            _, (data,) = rawkafka.parse_fetch_v4(fetched)
            assert (data.error_code, record_values(data.records)) == (rawkafka.NONE, [value])
            assert fetched_at < produced_at, (
                f"offset {offset}: the produce was answered {(fetched_at - produced_at) / 1000:.0f} µs "
                "before the fetch it woke")
