"""A topic deleted and created again under its name is a new topic on every broker.

Three broker processes; the brokers that do not hold the controller lease read the metadata
every 3 s, so the delete and the create reach them in one apply (snapshots that arrive while
one is pending are coalesced). The new topic's leader is such a broker. It reused the old
partition and its log: the new topic served the deleted one's records at once.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.test_replication import _wait

TIMEOUT_S = 30.0
#: a session long enough that a broker reading the metadata every 3 s is never "blind" (2/3 of it)
SLOW_POLL = {"metadata.poll.interval.ms": "3000", "broker.session.timeout.ms": "9000"}


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4()}"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def test_a_topic_deleted_and_created_again_at_once_serves_none_of_the_old_records(start_cluster: Any) -> None:
    cluster = start_cluster(3, start=False, sets=SLOW_POLL)
    cluster.start(1)  # broker 1 takes the controller lease and applies every change at once
    cluster.start(2, 3)
    assert cluster.controller_id() == 1
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    admin.create_topics([NewTopic("again", 1, replica_assignment=[[2, 3, 1]])])["again"].result(timeout=TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for n in range(3):
        producer.produce("again", f"old-{n}".encode(), partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    assert _wait(cluster, "the old records on the leader", lambda: _watermarks(cluster.bootstrap, "again") == (0, 3))

    admin.delete_topics(["again"])["again"].result(timeout=TIMEOUT_S)
    _wait(cluster, "the name free again", lambda: admin.create_topics(
        [NewTopic("again", 1, replica_assignment=[[2, 3, 1]])])["again"].result(timeout=TIMEOUT_S) is None)
    time.sleep(7.0)  # brokers 2 and 3 read the metadata twice more (every 3 s): the delete and the create together

    assert _wait(cluster, "the new topic led", lambda: _watermarks(cluster.bootstrap, "again")) == (0, 0), \
        "the new topic serves the deleted topic's records"
    producer.produce("again", b"new-0", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("again", 0, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while not got and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.value()))
        assert got == [(0, b"new-0")]
    finally:
        consumer.close()
