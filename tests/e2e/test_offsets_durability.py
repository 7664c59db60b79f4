"""Committed offsets never go backwards (issue 31, item 4): a commit is served only once the
in-sync replicas of its ``__consumer_offsets`` partition hold it.

Three broker processes (``tests/cluster_fixtures.py``) with the traffic between them
through per-broker proxies, ``min.insync.replicas`` 2 and a replica lag long enough
that a follower cut off stays in the ISR: a commit the coordinator appends while its
followers cannot fetch never reaches the ISR, its OffsetCommit answers
COORDINATOR_NOT_AVAILABLE after ``offsets.commit.timeout.ms``, and OffsetFetch must
go on answering the offset committed before it, on this coordinator and on the next
one, after a kill -9. (Served at append, as before, the coordinator answered the
failed commit's offset, and the next coordinator the older one: the group's offset
went backwards.)
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_fixtures import Cluster
from tests.e2e.rawcoordinator import find_coordinator
from tests.e2e.rawgroups import offset_commit, offset_fetch
from tests.e2e.rawkafka import Connection
from tests.e2e.test_failover import _bucket_behind_a_proxy
from tests.e2e.test_replication import _wait
from tests.service.kafka_wire import WireConnection, example_request

COORDINATOR_LOAD_IN_PROGRESS = 14
TIMEOUT_S = 30.0
NONE, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 0, 15, 16
OFFSETS_PARTITIONS = 6  # the cluster fixture's offsets.topic.num.partitions
SETTINGS = {
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.commit.timeout.ms": "3000",
    # a follower cut off stays in the ISR for the whole test: the leader cannot shrink it
    # to itself, and a kill -9 of the leader elects one of the followers
    "replica.lag.time.max.ms": "60000",
    "replica.fetch.wait.max.ms": "100",
    "metadata.poll.interval.ms": "100",
}


def _partition_for(group: str) -> int:
    """Kafka's ``abs(group.hashCode()) % partitions`` (Java's String.hashCode)."""
    h = 0
    for ch in group:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(1 << 31) else abs(h)) % OFFSETS_PARTITIONS


def _offsets_partitions(cluster: Cluster) -> dict[int, Any]:
    md = AdminClient({"bootstrap.servers": cluster.live_bootstrap()}).list_topics(
        "__consumer_offsets", timeout=TIMEOUT_S)
    topic = md.topics.get("__consumer_offsets")
    return {} if topic is None or topic.error is not None else dict(topic.partitions)


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})


def _committed(bootstrap: str, group: str) -> int:
    """The group's committed offset of jobs-0 as a new librdkafka consumer reads it."""
    consumer = _consumer(bootstrap, group)
    try:
        return int(consumer.committed([TopicPartition("jobs", 0)], timeout=10)[0].offset)
    finally:
        threading.Thread(target=consumer.close, daemon=True).start()  # never wait on a dead broker


def _jobs_and_offsets_ready(cluster: Cluster) -> dict[int, int]:
    """Topic ``jobs`` (RF 3), and ``__consumer_offsets`` created by a first commit
    (FindCoordinator) with three in-sync replicas everywhere: the leader of each of its partitions."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("jobs", 1, 3)])["jobs"].result(timeout=TIMEOUT_S)
    warm = _consumer(cluster.bootstrap, "warm-up")
    _wait(cluster, "a first commit", lambda: warm.commit(
        offsets=[TopicPartition("jobs", 0, 1)], asynchronous=False))
    warm.close()
    _wait(cluster, "__consumer_offsets with three in-sync replicas everywhere", lambda: (
        (parts := _offsets_partitions(cluster)) and len(parts) == OFFSETS_PARTITIONS
        and all(len(p.isrs) == 3 and p.leader > 0 for p in parts.values())))
    return {i: p.leader for i, p in _offsets_partitions(cluster).items()}


def test_a_commit_that_misses_the_isr_is_never_served_and_the_offset_never_goes_back(
    start_cluster: Any,
) -> None:
    cluster = start_cluster(3, proxied=True, sets=SETTINGS)
    leaders = _jobs_and_offsets_ready(cluster)
    # a group coordinated by a broker that does not hold the controller lease (cutting the
    # controller off would fence the followers and shrink the ISR to it)
    controller = cluster.controller_id()
    group = next(g for g in (f"workers-{n}" for n in range(200))
                 if leaders[_partition_for(g)] != controller)
    old = leaders[_partition_for(group)]

    # two commits the ISR holds: answered, then served
    consumer = _consumer(cluster.bootstrap, group)
    for offset in (10, 20):
        committed = consumer.commit(offsets=[TopicPartition("jobs", 0, offset)], asynchronous=False)
        assert [(tp.partition, tp.offset, tp.error) for tp in committed] == [(0, offset, None)]
    assert _committed(cluster.bootstrap, group) == 20
    threading.Thread(target=consumer.close, daemon=True).start()

    # the coordinator's followers cannot fetch: the commit of 50 reaches its log only
    cluster.proxies[old].partition()
    with Connection.to(cluster.brokers[old].bootstrap, timeout=TIMEOUT_S) as conn:
        started = time.monotonic()
        codes = offset_commit(conn, group, -1, "", {("jobs", 0): 50})
        assert codes == {("jobs", 0): COORDINATOR_NOT_AVAILABLE}, codes
        assert time.monotonic() - started >= 2.5  # answered after offsets.commit.timeout.ms
        for _ in range(3):  # and it stays so while the write waits for the ISR
            error, offsets = offset_fetch(conn, group, {"jobs": [0]})
            assert (error, offsets) == (NONE, {("jobs", 0): 20}), "served an offset not on the ISR"
            time.sleep(0.5)
    assert _committed(cluster.brokers[old].bootstrap, group) == 20  # librdkafka's view too

    # the coordinator dies: the next one has 20, the last offset answered success
    cluster.kill(old)
    _wait(cluster, "a new coordinator", lambda: (
        (leader := _offsets_partitions(cluster)[_partition_for(group)].leader) > 0 and leader != old))
    held = _wait(cluster, "the new coordinator's answer",
                 lambda: (o := _committed(cluster.live_bootstrap(), group)) >= 0 and o)
    assert held == 20, f"the group's offset went from 20 to {held}"



def test_a_coordinator_paused_past_its_session_serves_no_offset_from_before_the_pause(
    start_cluster: Any, moto_server: Any,
) -> None:
    """SIGSTOP of a group's coordinator until another broker coordinates the group and a
    newer commit is acknowledged there. An OffsetFetch that waited in the paused broker's
    socket is answered when it resumes, and its way to the bucket is cut meanwhile, so it
    cannot learn from the metadata that it lost the partition: it must answer
    NOT_COORDINATOR, never the offset from before the pause. (It answered that offset from
    its groups in memory until the coordinator checked that its broker may still lead: a
    consumer in the lean Jepsen test saw its committed offset go backwards.)"""
    bucket, bucket_link = _bucket_behind_a_proxy(moto_server)  # broker 2's way to the bucket
    cluster = start_cluster(3, start=False, s3=bucket, s3_endpoints={2: f"http://127.0.0.1:{bucket_link.port}"},
                            sets={"offsets.topic.replication.factor": "3", "min.insync.replicas": "2"})
    try:
        cluster.start(1)  # broker 1 takes the controller lease: broker 2 pauses, not the controller
        cluster.start(2, 3)
        assert cluster.controller_id() == 1
        leaders = _jobs_and_offsets_ready(cluster)
        group = next(g for g in (f"workers-{n}" for n in range(200)) if leaders[_partition_for(g)] == 2)
        others = ",".join(cluster.brokers[n].bootstrap for n in (1, 3))
        proc = cluster.brokers[2].proc
        assert proc is not None

        with Connection.to(cluster.brokers[2].bootstrap, timeout=TIMEOUT_S) as conn:
            assert offset_commit(conn, group, -1, "", {("jobs", 0): 10}) == {("jobs", 0): NONE}
            assert offset_fetch(conn, group, {"jobs": [0]}) == (NONE, {("jobs", 0): 10})
            # broker 2's reads of the bucket take 0.15 s, so one is likely in flight at the pause;
            # its answer arrives during the pause (the link is cut after it), with the metadata
            # from before it: that read must not count as fresh when the broker wakes up
            bucket_link.slow_s = 0.15
            time.sleep(0.5)
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                time.sleep(0.3)
                bucket_link.partition()
                _wait(cluster, "another coordinator", lambda: (
                    AdminClient({"bootstrap.servers": others}).list_topics("__consumer_offsets", timeout=5)
                    .topics["__consumer_offsets"].partitions[_partition_for(group)].leader in (1, 3)))
                consumer = _consumer(others, group)
                committed = _wait(cluster, "a commit on the new coordinator", lambda: consumer.commit(
                    offsets=[TopicPartition("jobs", 0, 30)], asynchronous=False))
                assert [(tp.offset, tp.error) for tp in committed] == [(30, None)]
                threading.Thread(target=consumer.close, daemon=True).start()
                answer: list[tuple[int, dict[tuple[str, int], int]]] = []
                asking = threading.Thread(target=lambda: answer.append(offset_fetch(conn, group, {"jobs": [0]})))
                asking.start()
                time.sleep(0.3)  # the request waits in the paused broker's socket
            finally:
                os.kill(proc.pid, signal.SIGCONT)
            asking.join(TIMEOUT_S)
            assert answer, "the resumed broker did not answer OffsetFetch"
            assert answer[0] == (NOT_COORDINATOR, {}), f"the resumed coordinator answered {answer[0]}"
            time.sleep(1.0)  # a heartbeat answered: still fenced, still blind
            assert offset_fetch(conn, group, {"jobs": [0]}) == (NOT_COORDINATOR, {})
            # nor does it name itself the coordinator: a client would bounce between the two
            assert find_coordinator(conn, group, 0) == (COORDINATOR_NOT_AVAILABLE, -1)
            with WireConnection(cluster.brokers[2].bootstrap) as wire:  # nor lists its groups as its own
                listed = wire.call(example_request(16, 4, states_filter=()))
            assert (listed.error_code, listed.groups) == (COORDINATOR_LOAD_IN_PROGRESS, ())
        bucket_link.slow_s = 0.0
        bucket_link.heal()
        assert _committed(others, group) == 30
        assert _wait(cluster, "broker 2 back in every ISR of __consumer_offsets", lambda: all(
            2 in p.isrs for p in _offsets_partitions(cluster).values()), 60)
        assert _committed(cluster.bootstrap, group) == 30
    finally:
        bucket_link.close()
