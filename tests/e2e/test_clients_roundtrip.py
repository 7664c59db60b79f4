"""Every record survives a round trip through the broker, with each real client.

For confluent-kafka (librdkafka), kafka-python and aiokafka, and each codec
(none, gzip, snappy, lz4, zstd): create a 3-partition topic with the client's own
admin API, produce N keyed records with headers and explicit timestamps, consume
everything back without a consumer group, and check every key, value, header,
timestamp and offset. Offsets must be dense from 0 and in order per partition,
and each record must sit at the offset its producer was acknowledged with.

N is ``STRATA_E2E_RECORDS`` (default 25 000; 100 000 for a longer run) for the ``slow`` tests; the fast
variants move a few hundred records so every run exercises every codec.

Codec libraries: kafka-python needs ``python-snappy`` (it imports ``snappy``),
``lz4`` and ``zstandard``; aiokafka needs ``cramjam`` for all of snappy, lz4 and
zstd; confluent-kafka has them built into librdkafka.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pytest

from . import helpers

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CLIENTS = ["confluent", "kafka-python", "aiokafka"]
PARTITIONS = 3
SLOW_RECORDS = int(os.environ.get("STRATA_E2E_RECORDS", "25000"))
FAST_RECORDS = 300
WORDS = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"foxtrot", b"golf", b"hotel"]


@dataclass(frozen=True)
class Rec:
    """One record as a client saw it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    create_time: bool


def expected_key(i: int) -> bytes:
    return f"key-{i}".encode()


def expected_value(i: int) -> bytes:
    # Repetitive enough to compress, distinct and checkable per record.
    return b"%09d:" % i + b" ".join(WORDS[(i + j) % len(WORDS)] for j in range(i % 13 + 3))


def expected_headers(i: int, codec: str) -> tuple[tuple[str, bytes], ...]:
    return (("h", str(i).encode()), ("codec", codec.encode()))


def record_count() -> int:
    return SLOW_RECORDS


def check_roundtrip(records: list[Rec], acked: dict[int, tuple[int, int]], n: int, codec: str,
                    base_ts: int) -> None:
    assert len(acked) == n, f"{len(acked)} of {n} records acknowledged"
    assert len(records) == n, f"consumed {len(records)} records, produced {n}"
    by_partition: dict[int, list[int]] = defaultdict(list)
    seen: set[int] = set()
    for rec in records:
        assert rec.key is not None and rec.key.startswith(b"key-"), rec
        i = int(rec.key[4:])
        assert i not in seen, f"record {i} consumed twice"
        seen.add(i)
        assert rec.value == expected_value(i), (i, rec.value)
        assert rec.headers == expected_headers(i, codec), (i, rec.headers)
        assert rec.timestamp == base_ts + i, (i, rec.timestamp, base_ts + i)
        assert rec.create_time, f"record {i}: timestamp type is not CreateTime"
        assert (rec.partition, rec.offset) == acked[i], (i, (rec.partition, rec.offset), acked[i])
        by_partition[rec.partition].append(rec.offset)
    assert seen == set(range(n))
    if n >= 100:
        assert set(by_partition) == set(range(PARTITIONS)), sorted(by_partition)
    for partition, offsets in by_partition.items():
        # in the order received: dense, ascending, from 0
        assert offsets == list(range(len(offsets))), (
            f"partition {partition}: offsets not dense from 0 in order "
            f"(first gap near {next(i for i, o in enumerate(offsets) if o != i)})")


# --------------------------------------------------------------------------- confluent-kafka


def roundtrip_confluent(bootstrap: str, topic: str, codec: str, n: int,
                        base_ts: int) -> tuple[list[Rec], dict[int, tuple[int, int]]]:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition
    from confluent_kafka.admin import NewTopic

    client = helpers.admin(bootstrap)
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)], request_timeout=15)
    for f in futures.values():
        f.result(timeout=20)
    helpers.wait_for_topic(bootstrap, topic, PARTITIONS)

    producer = helpers.producer(
        bootstrap, **{"compression.type": codec, "linger.ms": 5, "batch.size": 1_000_000,
                      "queue.buffering.max.messages": 500_000})
    acked: dict[int, tuple[int, int]] = {}
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[int(msg.key()[4:])] = (msg.partition(), msg.offset())

    for i in range(n):
        while True:
            try:
                producer.produce(topic, key=expected_key(i), value=expected_value(i),
                                 headers=list(expected_headers(i, codec)), timestamp=base_ts + i,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    assert not errors, errors[:3]

    consumer = helpers.consumer(bootstrap, **{"fetch.max.bytes": 50 * 1024 * 1024})
    records: list[Rec] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 300
        while len(records) < n and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                assert msg.error() is None, msg.error()
                ts_type, ts = msg.timestamp()
                records.append(Rec(msg.partition(), msg.offset(), msg.key(), msg.value(),
                                   tuple(msg.headers() or ()), ts, ts_type == 1))
    finally:
        consumer.close()
    return records, acked


# --------------------------------------------------------------------------- kafka-python


def roundtrip_kafka_python(bootstrap: str, topic: str, codec: str, n: int,
                           base_ts: int) -> tuple[list[Rec], dict[int, tuple[int, int]]]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="strata-e2e-admin")
    try:
        response = admin.create_topics(
            [NewTopic(name=topic, num_partitions=PARTITIONS, replication_factor=1)])
        del response  # errors are raised by kafka-python itself
    finally:
        admin.close()
    helpers.wait_for_topic(bootstrap, topic, PARTITIONS)

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all",
        compression_type=None if codec == "none" else codec, linger_ms=5,
        batch_size=256 * 1024, max_request_size=4 * 1024 * 1024)
    futures = []
    try:
        for i in range(n):
            futures.append((i, producer.send(topic, key=expected_key(i), value=expected_value(i),
                                             headers=list(expected_headers(i, codec)),
                                             timestamp_ms=base_ts + i)))
        producer.flush(timeout=120)
        acked = {}
        for i, fut in futures:
            md = fut.get(timeout=60)
            acked[i] = (md.partition, md.offset)
    finally:
        producer.close(timeout=10)

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    records: list[Rec] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 300
        while len(records) < n and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=1000, max_records=10_000).values():
                for m in msgs:
                    records.append(Rec(m.partition, m.offset, m.key, m.value,
                                       tuple((k, v) for k, v in m.headers), m.timestamp,
                                       m.timestamp_type == 0))
    finally:
        consumer.close()
    return records, acked


# --------------------------------------------------------------------------- aiokafka


async def _roundtrip_aiokafka(bootstrap: str, topic: str, codec: str, n: int,
                              base_ts: int) -> tuple[list[Rec], dict[int, tuple[int, int]]]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name=topic, num_partitions=PARTITIONS, replication_factor=1)])
    finally:
        await admin.close()
    helpers.wait_for_topic(bootstrap, topic, PARTITIONS)

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all",
        compression_type=None if codec == "none" else codec, linger_ms=5,
        max_batch_size=256 * 1024, max_request_size=4 * 1024 * 1024)
    await producer.start()
    acked: dict[int, tuple[int, int]] = {}
    try:
        pending = []
        for i in range(n):
            fut = await producer.send(topic, key=expected_key(i), value=expected_value(i),
                                      headers=list(expected_headers(i, codec)),
                                      timestamp_ms=base_ts + i)
            pending.append((i, fut))
        await producer.flush()
        for i, fut in pending:
            md = await fut
            acked[i] = (md.partition, md.offset)
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    records: list[Rec] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + 300
        while len(records) < n and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            for msgs in batches.values():
                for m in msgs:
                    records.append(Rec(m.partition, m.offset, m.key, m.value,
                                       tuple((k, v) for k, v in m.headers), m.timestamp,
                                       m.timestamp_type == 0))
    finally:
        await consumer.stop()
    return records, acked


def roundtrip_aiokafka(bootstrap: str, topic: str, codec: str, n: int,
                       base_ts: int) -> tuple[list[Rec], dict[int, tuple[int, int]]]:
    return asyncio.run(_roundtrip_aiokafka(bootstrap, topic, codec, n, base_ts))


RUNNERS = {
    "confluent": roundtrip_confluent,
    "kafka-python": roundtrip_kafka_python,
    "aiokafka": roundtrip_aiokafka,
}


def skip_without_codec(client: str, codec: str) -> None:
    if codec == "none":
        return
    if client == "kafka-python":
        import kafka.codec as kc

        has = {"gzip": kc.has_gzip, "snappy": kc.has_snappy, "lz4": kc.has_lz4,
               "zstd": kc.has_zstd}[codec]
        if not has():
            pytest.skip(f"kafka-python cannot use {codec}: install python-snappy / lz4 / "
                        "zstandard")
    elif client == "aiokafka":
        import aiokafka.codec as ac

        has = {"gzip": ac.has_gzip, "snappy": ac.has_snappy, "lz4": ac.has_lz4,
               "zstd": ac.has_zstd}[codec]
        if not has():
            pytest.skip(f"aiokafka cannot use {codec}: install cramjam")


def run_roundtrip(bootstrap: str, client: str, codec: str, n: int, tag: str) -> None:
    skip_without_codec(client, codec)
    topic = helpers.topic_name(f"rt-{tag}-{client}-{codec}")
    # Recent timestamps: old ones would fall to the broker's time-based retention.
    base_ts = int(time.time() * 1000) - n - 60_000
    records, acked = RUNNERS[client](bootstrap, topic, codec, n, base_ts)
    check_roundtrip(records, acked, n, codec, base_ts)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_roundtrip_keeps_keys_values_headers_timestamps_offsets(
        module_broker: Any, client: str, codec: str) -> None:
    run_roundtrip(module_broker.bootstrap, client, codec, FAST_RECORDS, "fast")


@pytest.mark.slow
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_roundtrip_of_many_records_per_codec(
        module_broker: Any, client: str, codec: str) -> None:
    run_roundtrip(module_broker.bootstrap, client, codec, record_count(), "slow")
