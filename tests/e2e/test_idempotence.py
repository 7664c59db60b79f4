"""Idempotent producers against a real broker: raw protocol rules and real clients on defaults."""

from __future__ import annotations

import subprocess
from typing import Any

from tests.conftest import BrokerFactory, BrokerProcess
from tests.e2e import helpers, rawtxn
from tests.e2e.rawkafka import NONE, Connection


def test_retry_is_stored_once_gap_is_out_of_order_and_old_epoch_fenced(
    start_broker: BrokerFactory,
) -> None:
    broker = start_broker()
    topic = helpers.topic_name("idem-raw")
    helpers.create_topic(broker.bootstrap, topic)
    with Connection.to(broker.bootstrap) as conn:
        error, pid, epoch = rawtxn.init_producer_id(conn)
        assert (error, epoch) == (NONE, 0) and pid >= 0
        first = rawtxn.producer_batch([b"a", b"b"], producer_id=pid, epoch=0, sequence=0)
        second = rawtxn.producer_batch([b"c"], producer_id=pid, epoch=0, sequence=2)
        assert rawtxn.produce(conn, topic, 0, first) == (NONE, 0)
        assert rawtxn.produce(conn, topic, 0, second) == (NONE, 2)
        assert rawtxn.produce(conn, topic, 0, first) == (NONE, 0)  # retried: original offsets
        assert rawtxn.produce(conn, topic, 0, second) == (NONE, 2)
        gap = rawtxn.producer_batch([b"x"], producer_id=pid, epoch=0, sequence=9)
        assert rawtxn.produce(conn, topic, 0, gap)[0] == rawtxn.OUT_OF_ORDER_SEQUENCE_NUMBER

        # KIP-360: the same producer re-initialises and gets the next epoch of its id
        assert rawtxn.init_producer_id(conn, pid, 0) == (NONE, pid, 1)
        bumped = rawtxn.producer_batch([b"d"], producer_id=pid, epoch=1, sequence=0)
        assert rawtxn.produce(conn, topic, 0, bumped) == (NONE, 3)
        stale = rawtxn.producer_batch([b"e"], producer_id=pid, epoch=0, sequence=3)
        assert rawtxn.produce(conn, topic, 0, stale)[0] == rawtxn.INVALID_PRODUCER_EPOCH

        fetched = rawtxn.fetch(conn, topic, 0, 0, isolation_level=0)
    assert fetched.high_watermark == 4
    assert [(b[0], b[1]) for b in rawtxn.batch_summaries(fetched.records)] == [(0, 2), (2, 1), (3, 1)]

    # ids are never handed out twice, across a restart
    broker.restart(clean=False)
    with Connection.to(broker.bootstrap) as conn:
        error, new_pid, epoch = rawtxn.init_producer_id(conn)
        assert (error, epoch) == (NONE, 0)
        assert new_pid > pid
        # the partition still knows the producer after the crash
        assert rawtxn.produce(conn, topic, 0, bumped) == (NONE, 3)


def _kafka_python_roundtrip(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap)  # defaults: idempotent, acks=all
    try:
        futures = [producer.send(topic, value=v, partition=0) for v in values]
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(offsets[0], offsets[0] + len(values)))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, offsets[0])
        got: list[bytes] = []
        for _ in range(30):
            for msgs in consumer.poll(timeout_ms=500).values():
                got.extend(m.value for m in msgs)
            if len(got) >= len(values):
                break
        return got
    finally:
        consumer.close()


async def _aiokafka_roundtrip(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        sent = [await producer.send_and_wait(topic, value=v, partition=0) for v in values]
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, sent[0].offset)
        got: list[bytes] = []
        while len(got) < len(values):
            batch = await consumer.getmany(tp, timeout_ms=10_000)
            assert batch, "aiokafka consumer timed out"
            got.extend(m.value for m in batch[tp])  # type: ignore[misc]
        return got
    finally:
        await consumer.stop()


def test_idempotent_clients_produce_and_read_back(broker: BrokerProcess, kcat: str) -> None:
    import asyncio

    topic = helpers.topic_name("idem-clients")
    helpers.create_topic(broker.bootstrap, topic)
    confluent = [b"confluent-%d" % i for i in range(50)]
    offsets = helpers.produce_values(broker.bootstrap, topic, confluent, **{"enable.idempotence": True})
    assert offsets == list(range(50))

    python = [b"kafka-python-%d" % i for i in range(20)]
    assert _kafka_python_roundtrip(broker.bootstrap, topic, python) == python

    aio = [b"aiokafka-%d" % i for i in range(10)]
    assert asyncio.run(_aiokafka_roundtrip(broker.bootstrap, topic, aio)) == aio

    kcat_values = [b"kcat-%d" % i for i in range(10)]
    subprocess.run(
        [kcat, "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-X", "enable.idempotence=true"],
        input=b"\n".join(kcat_values) + b"\n", check=True, timeout=30,
    )
    everything: list[Any] = helpers.consume(broker.bootstrap, topic, [0], 90)
    assert [m.value() for m in everything] == confluent + python + aio + kcat_values
    assert [m.offset() for m in everything] == list(range(90))
