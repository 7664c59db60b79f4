"""A disk that fails under the broker takes its log directory offline; no acknowledged record is lost.

The fault is real: the broker's ``logs`` directory is an ext4 on a loop device whose
backing store fills up (tests/e2e/loop_disk.py), so the kernel fails the write-back and
``fsync`` answers ENOSPC, then EIO. The topics use ``flush.messages=1``: a record is
acknowledged only once fsynced, so every acknowledged record must survive the disk being
unmounted (its unwritten pages dropped) and repaired. Before issue 32 the failed fsync
was logged and the record acknowledged anyway, and the shutdown was marked clean.

* one broker: Produce and Fetch answer KAFKA_STORAGE_ERROR (56) once the fsync failed,
  Metadata still answers, ``strata_offline_log_dirs`` is 1, the SIGTERM leaves no
  clean-shutdown marker, and after the repair and a restart every acknowledged record
  is read back at the offset its acknowledgement named;
* three brokers: the leader's disk fails and the leadership moves at once (the heartbeat
  reports the offline log dir), acks=all producing goes on through the new leader, and
  after a repair and restart of the failed broker every acknowledged record is read back.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from local_tier.manager import CLEAN_SHUTDOWN_FILE
from tests.conftest import BrokerProcess, free_port

from . import helpers, rawkafka
from .loop_disk import LoopDisk

KAFKA_STORAGE_ERROR = 56
_DURABLE = {"flush.messages": "1"}


@pytest.fixture
def disks(tmp_path: Path) -> Iterator[list[LoopDisk]]:
    """The failing disks of a test, unmounted after its brokers are gone (ask for this
    fixture before the cluster's, so it is torn down after it)."""
    made: list[LoopDisk] = []
    yield made
    for disk in made:
        disk.close()


def _produce_one(conn: rawkafka.Connection, topic: str, value: bytes) -> rawkafka.ProducePartitionResult:
    batch = rawkafka.record_batch([value])
    _, results = rawkafka.parse_produce_v3(
        conn.call(rawkafka.API_PRODUCE, 3, rawkafka.produce_v3_body(topic, 0, batch, acks=1)))
    return results[0]


def _read_back(bootstrap: str, topic: str) -> dict[int, bytes]:
    """Every record of partition 0, by offset."""
    _, high = helpers.watermarks(bootstrap, topic)
    return {m.offset(): m.value() for m in helpers.consume(bootstrap, topic, [0], high)}


def _metric(broker: BrokerProcess, name: str) -> float:
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def test_one_broker_answers_56_after_a_failed_fsync_and_loses_no_acknowledged_record(
    tmp_path: Path, disks: list[LoopDisk]
) -> None:
    data = tmp_path / "data"
    disks.append(disk := LoopDisk(tmp_path / "disk", data / "logs"))
    broker = BrokerProcess(data, free_port(), log_path=tmp_path / "broker.log")
    try:
        broker.start()
        topic = "durable"
        helpers.create_topic(broker.bootstrap, topic, config=_DURABLE)
        acked: dict[int, bytes] = {}
        with rawkafka.Connection.to(broker.bootstrap) as conn:
            for i in range(50):
                result = _produce_one(conn, topic, b"before-%04d" % i)
                assert result.error_code == rawkafka.NONE, result
                acked[result.base_offset] = b"before-%04d" % i
            disk.fail()
            codes: list[int] = []
            for i in range(200):  # the first fsync after the fault fails: 56 from then on
                result = _produce_one(conn, topic, b"after-%04d" % i)
                codes.append(result.error_code)
                if result.error_code == rawkafka.NONE:
                    acked[result.base_offset] = b"after-%04d" % i
                elif result.error_code == KAFKA_STORAGE_ERROR and codes[-3:] == [56] * 3:
                    break
            assert codes[-3:] == [KAFKA_STORAGE_ERROR] * 3, codes
            assert set(codes) <= {rawkafka.NONE, KAFKA_STORAGE_ERROR}, codes
            _, fetched = rawkafka.parse_fetch_v4(
                conn.call(rawkafka.API_FETCH, 4, rawkafka.fetch_v4_body(topic, 0, 0)))
            assert fetched[0].error_code == KAFKA_STORAGE_ERROR
        assert topic in helpers.topic_names(broker.bootstrap)  # Metadata still answers
        assert _metric(broker, "strata_offline_log_dirs") == 1
        broker.stop()
        assert not (data / "logs" / CLEAN_SHUTDOWN_FILE).exists()
        disk.heal()
        broker.start()
        assert "no clean shutdown marker; recovering" in broker.log_text()
        found = _read_back(broker.bootstrap, topic)
        missing = {o: v for o, v in acked.items() if found.get(o) != v}
        assert not missing, f"{len(missing)} of {len(acked)} acknowledged records lost: {sorted(missing)[:5]}"
        assert len(acked) >= 50
    finally:
        broker.kill()


class _Delivered:
    def __init__(self) -> None:
        self.acked: dict[bytes, int] = {}
        self.errors: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked[msg.value()] = msg.offset()
        else:
            self.errors.append(str(err))


def _leader(bootstrap: str, topic: str) -> int:
    return helpers.admin(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[0].leader


def test_the_leadership_moves_off_a_broker_whose_disk_fails_and_nothing_acknowledged_is_lost(
    disks: list[LoopDisk], start_cluster: Any
) -> None:
    cluster = start_cluster(3, start=False)
    failing = cluster.brokers[1]
    disks.append(disk := LoopDisk(cluster.base / "disk-1", failing.data_dir / "logs"))
    cluster.start()
    topic = "moves"
    client = helpers.admin(cluster.bootstrap)
    futures = client.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]],
                                             config={**_DURABLE, "min.insync.replicas": "2"})])
    futures[topic].result(timeout=30)
    helpers.wait_until(lambda: _leader(cluster.bootstrap, topic) == 1, "broker 1 leads", timeout=30)

    delivered = _Delivered()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 30_000,
                         "retry.backoff.ms": 100})
    for i in range(100):
        producer.produce(topic, value=b"before-%04d" % i, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0 and len(delivered.acked) == 100, delivered.errors[:3]

    disk.fail()
    started = time.monotonic()
    for i in range(100):
        producer.produce(topic, value=b"after-%04d" % i, partition=0, on_delivery=delivered)
        producer.poll(0.01)
    assert producer.flush(40) == 0, "records still in flight"
    assert not delivered.errors, delivered.errors[:3]
    moved_after = time.monotonic() - started
    new_leader = _leader(cluster.bootstrap, topic)
    assert new_leader in (2, 3)
    brokers = {b["node_id"]: b for b in cluster.metadata()["brokers"]}
    assert brokers[1]["fenced"] is True and not brokers[2]["fenced"], brokers
    assert _metric(failing, "strata_offline_log_dirs") == 1
    with rawkafka.Connection.to(failing.bootstrap) as conn:  # it answers, with 56
        assert _produce_one(conn, topic, b"direct").error_code == KAFKA_STORAGE_ERROR

    cluster.stop(1)
    assert not (failing.data_dir / "logs" / CLEAN_SHUTDOWN_FILE).exists()
    disk.heal()
    cluster.restart(1)
    assert "no clean shutdown marker; recovering" in failing.log_text()
    found = _read_back(cluster.bootstrap, topic)
    by_value = {v: o for o, v in found.items()}
    missing = {v: o for v, o in delivered.acked.items() if by_value.get(v) != o}
    assert not missing, f"{len(missing)} of {len(delivered.acked)} acknowledged records lost"
    assert len(delivered.acked) == 200
    print(f"leadership moved and 100 records were acknowledged {moved_after:.1f} s after the fault")
