"""A broker whose data directory fills up (a real tmpfs) loses no acknowledged record.

While the disk is full, Produce answers KAFKA_STORAGE_ERROR (56) per partition on
a connection that stays open, reads keep working, and DeleteTopics still goes
through (the embedded object store that holds the metadata lives on the same
disk: its reserve pays for the write). Once space is free, the same producer's
retries are acknowledged, without a restart. After restarts, SIGTERM (one of
them on the full disk) and kill -9, every acknowledged record is read back once,
at the offset its acknowledgement named, and the offsets are dense.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from tests.conftest import BrokerProcess, free_port
from tests.tmpfs_fixtures import fill, free_bytes

from . import helpers, rawkafka

KAFKA_STORAGE_ERROR = 56
_DISK_BYTES = 24 * 1024 * 1024


class DefaultProducer(threading.Thread):
    """confluent-kafka on its defaults (acks=all, retries) producing ``t-<n>`` to partition 0."""

    def __init__(self, bootstrap: str, topic: str, start: int) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.next_value = start
        self.producer = Producer({"bootstrap.servers": bootstrap})
        self.acked: dict[bytes, int] = {}
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stop_event = threading.Event()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is None:
                self.acked[msg.value()] = msg.offset()
            else:
                self.errors.append(str(err))

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.producer.produce(self.topic, value=b"t-%07d" % self.next_value, partition=0,
                                      on_delivery=self._on_delivery)
                self.next_value += 1
            except BufferError:
                pass
            self.producer.poll(0.002)

    def abandon(self) -> None:
        """Stop at once, dropping whatever is still queued (test teardown)."""
        self.stop_event.set()
        self.join(10)
        self.producer.purge()
        self.producer.flush(1)

    def finish(self) -> dict[bytes, int]:
        """Stop producing and wait until every record is acknowledged (or failed)."""
        self.stop_event.set()
        self.join(10)
        assert self.producer.flush(60) == 0, "records still in flight 60 s after the disk was freed"
        assert not self.errors, self.errors[:3]
        return dict(self.acked)


@pytest.fixture
def producers() -> Iterator[list[DefaultProducer]]:
    """Producers started by the test; a failed test must not leave one retrying."""
    started: list[DefaultProducer] = []
    yield started
    for producer in started:
        producer.abandon()


@pytest.fixture
def disk_broker(small_tmpfs: Callable[[int], Path], tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker (tiering on, as under `strata up`) whose whole data dir is a 24 MiB tmpfs."""
    disk = small_tmpfs(_DISK_BYTES)
    broker = BrokerProcess(disk / "data", free_port(), log_path=tmp_path / "broker.log",
                           sets={"log.segment.bytes": str(1024 * 1024)})
    try:
        yield broker.start()
    finally:
        broker.kill()


def _produce_raw(conn: rawkafka.Connection, topic: str, batch: bytes) -> int:
    _, results = rawkafka.parse_produce_v3(
        conn.call(rawkafka.API_PRODUCE, 3, rawkafka.produce_v3_body(topic, 0, batch)))
    return results[0].error_code


def _fill_through_kafka(broker: BrokerProcess, topic: str) -> None:
    """Produce large, then small batches to ``topic`` until the broker answers 56 for both."""
    helpers.create_topic(broker.bootstrap, topic)
    with rawkafka.Connection.to(broker.bootstrap) as conn:
        for value_size in (64 * 1024, 1024, 64):  # down to no free page at all
            batch = rawkafka.record_batch([b"f" * value_size] * 4)
            for _ in range(_DISK_BYTES // len(batch) + 100):
                code = _produce_raw(conn, topic, batch)
                if code == KAFKA_STORAGE_ERROR:
                    break
                assert code == rawkafka.NONE, code
            else:
                raise AssertionError(f"the disk never filled ({free_bytes(broker.data_dir)} free)")


def _assert_full_yet_serving(broker: BrokerProcess, topic: str) -> None:
    """56 per partition on a connection that then still answers a Fetch with records."""
    with rawkafka.Connection.to(broker.bootstrap) as conn:
        assert _produce_raw(conn, topic, rawkafka.record_batch([b"x" * 65536] * 4)) == 56
        _, fetched = rawkafka.parse_fetch_v4(conn.call(
            rawkafka.API_FETCH, 4, rawkafka.fetch_v4_body(topic, 0, 0)))
    assert fetched[0].error_code == rawkafka.NONE
    assert fetched[0].high_watermark > 0 and fetched[0].records


def _delete_topic(broker: BrokerProcess, topic: str) -> None:
    client = helpers.admin(broker.bootstrap)
    for future in client.delete_topics([topic], request_timeout=15).values():
        future.result(timeout=20)  # raises KafkaException on KAFKA_STORAGE_ERROR


def _read_all(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    messages = helpers.consume(bootstrap, topic, [0], count, start=OFFSET_BEGINNING)
    return [(m.offset(), m.value()) for m in messages]


def _assert_read_back_once(bootstrap: str, topic: str, acked: dict[bytes, int]) -> None:
    records = _read_all(bootstrap, topic, len(acked))
    assert [offset for offset, _ in records] == list(range(len(acked)))  # dense, from 0
    assert {value: offset for offset, value in records} == acked  # each once, where acked


def _commit(bootstrap: str, topic: str, offset: int, metadata: str = "") -> str | None:
    """Commit ``offset`` for group ``full-disk`` (an __consumer_offsets append); the error name."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "full-disk"})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset, metadata=metadata)],
                        asynchronous=False)
        return None
    except KafkaException as exc:
        return str(exc.args[0].name())
    finally:
        consumer.close()


def _committed(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "full-disk"})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=15)[0].offset)
    finally:
        consumer.close()


def _wait_for_more_acks(producer: DefaultProducer, than: int, what: str) -> None:
    helpers.wait_until(lambda: producer.acked_count() >= than + 200, what, timeout=30)


def test_full_disk_answers_storage_error_and_loses_no_acknowledged_record(
    disk_broker: BrokerProcess, producers: list[DefaultProducer],
) -> None:
    broker = disk_broker
    topic = helpers.topic_name("full-disk")
    helpers.create_topic(broker.bootstrap, topic)
    producer = DefaultProducer(broker.bootstrap, topic, 0)
    producers.append(producer)
    producer.start()
    _wait_for_more_acks(producer, 0, "first acknowledgements")
    assert _commit(broker.bootstrap, topic, 5) is None  # creates __consumer_offsets

    # 1. Full: 56, reads work, DeleteTopics frees space, the producer resumes.
    _fill_through_kafka(broker, "filler-1")
    _assert_full_yet_serving(broker, topic)
    time.sleep(0.5)  # the producer's requests fail (56) and are retried meanwhile
    assert broker.running
    acked_while_full = producer.acked_count()
    _delete_topic(broker, "filler-1")
    _wait_for_more_acks(producer, acked_while_full, "acks after DeleteTopics freed space")

    # 2. Full again (the store's reserve is back), and a clean restart on the full disk.
    acked = producer.finish()
    _fill_through_kafka(broker, "filler-2")
    _assert_full_yet_serving(broker, topic)
    # The group coordinator's appends share the disk: a commit that needs a new page fails
    # whole, with the coordinator error Kafka gives for a failed offsets append.
    assert _commit(broker.bootstrap, topic, 7, metadata="m" * 4000) == "COORDINATOR_NOT_AVAILABLE"
    broker.restart(clean=True)
    _assert_full_yet_serving(broker, topic)
    assert _committed(broker.bootstrap, topic) == 5
    _assert_read_back_once(broker.bootstrap, topic, acked)
    _delete_topic(broker, "filler-2")

    # 3. Space again: the same log takes appends, then survives kill -9.
    producer = DefaultProducer(broker.bootstrap, topic, len(acked))
    producers.append(producer)
    producer.start()
    _wait_for_more_acks(producer, 0, "acks after the restart")
    acked |= producer.finish()
    broker.restart(clean=False)
    _assert_read_back_once(broker.bootstrap, topic, acked)
    log = broker.log_text()
    assert "Traceback" not in log, log[-3000:]
    assert "answering KAFKA_STORAGE_ERROR until a write succeeds" in log


def test_a_topic_created_on_a_full_disk_lets_the_broker_restart_and_comes_online_with_space(
    small_tmpfs: Callable[[int], Path], tmp_path: Path,
) -> None:
    """Issue #36: a topic created while the disk was full could not write its partition's
    topic-id file, and the broker then refused to start ("cannot start the broker ... No
    space left on device"). It starts, serves what it can, answers 56 for the partition
    it cannot open, and opens it once DeleteTopics has freed space. The logs fill their
    disk; the object store (the cluster metadata) is elsewhere, as with S3."""
    broker = BrokerProcess(small_tmpfs(_DISK_BYTES) / "data", free_port(), log_path=tmp_path / "broker.log",
                           sets={"log.segment.bytes": str(1024 * 1024)},
                           args=["--object-store", (tmp_path / "bucket").as_uri()])
    broker.start()
    try:
        _fill_through_kafka(broker, "filler")
        born_full = helpers.topic_name("born-full")
        helpers.create_topic(broker.bootstrap, born_full)  # the metadata's reserve pays for it
        with rawkafka.Connection.to(broker.bootstrap) as conn:
            assert _produce_raw(conn, born_full, rawkafka.record_batch([b"x"])) == KAFKA_STORAGE_ERROR
        broker.stop()
        fill(broker.data_dir / "pad")  # what the clean stop gave back (trimmed indexes) is taken again
        broker.start()  # the old broker refused to start here
        assert broker.running
        with rawkafka.Connection.to(broker.bootstrap) as conn:
            # offline (56) unless the start itself freed a page for it (leftover files removed)
            assert _produce_raw(conn, born_full, rawkafka.record_batch([b"x"])) in (KAFKA_STORAGE_ERROR, 0)
            _, fetched = rawkafka.parse_fetch_v4(conn.call(  # the other topic is served
                rawkafka.API_FETCH, 4, rawkafka.fetch_v4_body("filler", 0, 0)))
            assert fetched[0].error_code == rawkafka.NONE and fetched[0].records
        _delete_topic(broker, "filler")

        def accepted() -> bool:
            with rawkafka.Connection.to(broker.bootstrap) as conn:
                return _produce_raw(conn, born_full, rawkafka.record_batch([b"after"])) == rawkafka.NONE

        helpers.wait_until(accepted, "the partition opened once space was freed", timeout=30, interval=0.5)
        _, end = helpers.watermarks(broker.bootstrap, born_full)
        assert [v for _, v in _read_all(broker.bootstrap, born_full, end)][-1] == b"after"
        assert "Traceback" not in broker.log_text()
    finally:
        broker.kill()
