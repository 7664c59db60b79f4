"""A topic deleted and created again under its name is a new topic on every broker.

Three broker processes; the brokers that do not hold the controller lease read the metadata
every 3 s, so the delete and the create reach them in one apply (snapshots that arrive while
one is pending are coalesced). The new topic's leader is such a broker. It reused the old
partition and its log: the new topic served the deleted one's records at once.

And a follower that reads the re-creation before its leader: it fetched by name, at leader
epoch 0 as the old topic's leader answered, and copied the deleted topic's records into the
new topic's log. Fetch v13+ names the topic by id (KIP-516).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_fixtures import Cluster
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


def _old_topic(cluster: Cluster, topic: str) -> tuple[AdminClient, Producer]:
    """``topic`` led by broker 2 (followers 3 and 1) with three records written to every replica."""
    cluster.start(1)  # broker 1 takes the controller lease and applies every change at once
    cluster.start(2, 3)
    assert cluster.controller_id() == 1
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[2, 3, 1]])])[topic].result(timeout=TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for n in range(3):
        producer.produce(topic, f"old-{n}".encode(), partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    return admin, producer


def _create_again(cluster: Cluster, admin: AdminClient, topic: str) -> None:
    admin.delete_topics([topic])[topic].result(timeout=TIMEOUT_S)
    _wait(cluster, "the name free again", lambda: admin.create_topics(
        [NewTopic(topic, 1, replica_assignment=[[2, 3, 1]])])[topic].result(timeout=TIMEOUT_S) is None)


def test_a_topic_deleted_and_created_again_at_once_serves_none_of_the_old_records(start_cluster: Any) -> None:
    cluster = start_cluster(3, start=False, sets=SLOW_POLL)
    admin, producer = _old_topic(cluster, "again")
    assert _wait(cluster, "the old records on the leader", lambda: _watermarks(cluster.bootstrap, "again") == (0, 3))

    _create_again(cluster, admin, "again")
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


def _bytes_on_disk(cluster: Cluster, node: int, topic: str) -> int:
    """What broker ``node``'s log of ``topic``'s partition 0 holds, in its segment files."""
    return sum(f.stat().st_size for f in (cluster.brokers[node].data_dir / "logs" / f"{topic}-0").glob("*.log"))


def _topic_id_on_disk(cluster: Cluster, node: int, topic: str) -> str | None:
    """The topic id in broker ``node``'s ``partition.metadata`` of ``topic``'s partition 0."""
    try:
        text = (cluster.brokers[node].data_dir / "logs" / f"{topic}-0" / "partition.metadata").read_text()
    except FileNotFoundError:
        return None
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("topic_id:")), None)


def test_a_follower_that_reads_the_re_creation_before_its_leader_copies_none_of_the_old_records(
        start_cluster: Any) -> None:
    cluster = start_cluster(3, start=False, sets={"broker.session.timeout.ms": "9000"})
    cluster.brokers[2].sets["metadata.poll.interval.ms"] = "5000"  # the leader reads the change late
    admin, producer = _old_topic(cluster, "twice")  # broker 3, the follower, reads the metadata every 200 ms
    assert _wait(cluster, "the old records on every replica",
                 lambda: all(_bytes_on_disk(cluster, n, "twice") > 0 for n in (1, 2, 3)))

    old_id = _topic_id_on_disk(cluster, 3, "twice")
    assert old_id is not None
    _create_again(cluster, admin, "twice")
    # broker 3 follows broker 2 in the new topic within 200 ms; broker 2 may not read the change
    # for 5 s, and leads the old topic's partition until then
    copied, new_log_seen = 0, False
    deadline = time.monotonic() + 6.0
    while time.monotonic() < deadline:
        try:
            if _topic_id_on_disk(cluster, 3, "twice") not in (None, old_id):
                new_log_seen = True
                copied = max(copied, _bytes_on_disk(cluster, 3, "twice"))
        except FileNotFoundError:  # the old log removed, the new one not made yet
            pass
        time.sleep(0.02)
    assert new_log_seen, "broker 3 made no log of the new topic"
    assert copied == 0, f"the follower copied {copied} bytes of the deleted topic into the new one"

    producer.produce("twice", b"new-0", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    for node in (2, 3, 1):  # every replica, the follower included, holds the new record only
        consumer = Consumer({"bootstrap.servers": cluster.brokers[node].bootstrap, "group.id": f"r{node}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            assert _wait(cluster, f"the new record on broker {node}",
                         lambda: _bytes_on_disk(cluster, node, "twice") > 0)
            consumer.assign([TopicPartition("twice", 0, 0)])
            got = None
            deadline = time.monotonic() + TIMEOUT_S
            while got is None and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got = (msg.offset(), msg.value())
            assert got == (0, b"new-0")
        finally:
            consumer.close()
