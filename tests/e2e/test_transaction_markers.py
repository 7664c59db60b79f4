"""Transaction markers across brokers (issue 31): each COMMIT/ABORT marker is written once per
producer and transaction, however often the coordinator has to retry it, and a commit the
in-sync replicas of ``__transaction_state`` never got leaves the transaction open, so the
producer may still abort it.

The markers are counted in the partition's log (read_uncommitted Fetch v4 on its leader,
control batches of the producer); the followers are held with SIGSTOP, never the controller.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from kafka.admin import KafkaAdminClient

from tests.cluster_fixtures import Cluster
from tests.e2e import rawcoordinator as rc
from tests.e2e import rawtxn
from tests.e2e.helpers import admin, create_topic, wait_until
from tests.e2e.rawkafka import Connection

TIMEOUT_S = 30.0
ABORT, COMMIT = 0, 1
COORDINATOR_NOT_AVAILABLE = 15
#: a marker waits 1 s for the in-sync replicas; a stopped follower stays in the ISR and its
#: broker registered (no fencing) for the length of a test
SLOW_FOLLOWER = {
    "offsets.commit.timeout.ms": "1000",
    "replica.lag.time.max.ms": "60000",
    "broker.session.timeout.ms": "60000",
    "transaction.state.log.num.partitions": "1",
}


def markers(bootstrap: str, topic: str, partition: int, producer_id: int) -> list[int]:
    """The control types (ABORT 0, COMMIT 1) of ``producer_id``'s markers in the partition,
    read from its leader at ``bootstrap``."""
    return [kind for pid, kind in rawtxn.control_markers(bootstrap, topic, partition) if pid == producer_id]


@contextmanager
def stopped(cluster: Cluster, node: int) -> Iterator[None]:
    """Broker ``node`` frozen (SIGSTOP) inside the block, resumed after it."""
    proc = cluster.brokers[node].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def describe(bootstrap: str, tid: str) -> Any:
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return client.describe_transactions([tid])[tid]
    finally:
        client.close()


def txn_state(bootstrap: str, tid: str) -> str:
    return str(describe(bootstrap, tid).state.value)


def coordinator_of(cluster: Cluster, tid: str) -> int:
    """The node coordinating ``tid`` (FindCoordinator creates ``__transaction_state``)."""
    def find() -> int | None:
        conn = Connection.to(cluster.brokers[1].bootstrap)
        try:
            error, port = rc.find_coordinator(conn, tid, 1)
        finally:
            conn.sock.close()
        return cluster.node_of_port(port) if error == 0 else None

    return int(cluster.wait_for("a transaction coordinator", find, TIMEOUT_S))


def place(cluster: Cluster, topic: str, replicas: list[int]) -> None:
    """One partition on ``replicas`` (the first leads), known to every broker."""
    client = admin(cluster.bootstrap)
    futures = client.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])
    futures[topic].result(timeout=TIMEOUT_S)

    def led() -> bool:
        conn = Connection.to(cluster.brokers[replicas[0]].bootstrap)
        try:
            return rawtxn.fetch(conn, topic, 0, 0, isolation_level=0).error_code == 0
        finally:
            conn.sock.close()

    cluster.wait_for(f"{topic} led by broker {replicas[0]}", led, TIMEOUT_S)


def test_a_repeated_marker_is_answered_without_a_second_append(start_broker: Any) -> None:
    """The leader's producer state knows the transaction is already ended: a coordinator's
    retry of WriteTxnMarkers (its first answer lost) appends nothing."""
    b = start_broker()
    create_topic(b.bootstrap, "marker-once")
    conn = Connection.to(b.bootstrap)
    _, pid, epoch = rawtxn.init_producer_id(conn)
    batch = rawtxn.producer_batch([b"a", b"b"], producer_id=pid, epoch=epoch, sequence=0, transactional=True)
    assert rawtxn.produce(conn, "marker-once", 0, batch)[0] == 0
    for _ in range(3):
        assert rawtxn.write_txn_markers(conn, producer_id=pid, epoch=epoch, commit=True,
                                        topic="marker-once", partitions=[0]) == {0: 0}
    conn.sock.close()
    assert markers(b.bootstrap, "marker-once", 0, pid) == [COMMIT]


def test_a_marker_retried_while_a_follower_stalls_is_written_once(start_cluster: Any) -> None:
    """A marker waits for the ISR; a follower that does not fetch makes that wait time out
    again and again. Each retry of the coordinator must not append another COMMIT."""
    cluster = start_cluster(3, sets={**SLOW_FOLLOWER, "transaction.state.log.replication.factor": "1"})
    tid = "markers-once"
    coordinator = coordinator_of(cluster, tid)
    controller = cluster.controller_id()
    follower = next(n for n in cluster.brokers if n not in (coordinator, controller))
    place(cluster, "ledger-once", [coordinator, follower])
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid})
    p.init_transactions(TIMEOUT_S)
    for round_ in range(2):
        p.begin_transaction()
        for i in range(5):
            p.produce("ledger-once", b"%d-%d" % (round_, i), partition=0)
        assert p.flush(TIMEOUT_S) == 0
        with stopped(cluster, follower):
            p.commit_transaction(TIMEOUT_S)  # answered once PrepareCommit is written
            time.sleep(3.5)  # the marker's ISR wait times out three times or more
        wait_until(lambda: txn_state(cluster.bootstrap, tid) == "CompleteCommit", "the commit completes",
                   timeout=TIMEOUT_S)
    pid = int(describe(cluster.bootstrap, tid).producer_id)
    assert markers(cluster.brokers[coordinator].bootstrap, "ledger-once", 0, pid) == [COMMIT, COMMIT]


def test_an_unreplicated_commit_can_still_be_aborted_and_sends_no_commit_marker(start_cluster: Any) -> None:
    """EndTxn(commit) whose PrepareCommit does not reach the in-sync replicas of
    ``__transaction_state`` is answered COORDINATOR_NOT_AVAILABLE and must leave the
    transaction open (Kafka): no COMMIT marker goes out, and the producer's abort is
    accepted instead of a fatal INVALID_TXN_STATE."""
    cluster = start_cluster(3, sets={**SLOW_FOLLOWER, "transaction.state.log.replication.factor": "3"})
    tid = "unreplicated-commit"
    coordinator = coordinator_of(cluster, tid)
    controller = cluster.controller_id()
    follower = next(n for n in cluster.brokers if n not in (coordinator, controller))
    place(cluster, "ledger-open", [coordinator])
    conn = Connection.to(cluster.brokers[coordinator].bootstrap, timeout=TIMEOUT_S)
    error, pid, epoch = rc.init_producer_id(conn, tid)
    assert error == 0
    assert rc.add_partitions(conn, tid, pid, epoch, {"ledger-open": [0]}) == {("ledger-open", 0): 0}
    batch = rawtxn.producer_batch([b"x"], producer_id=pid, epoch=epoch, sequence=0, transactional=True)
    assert rawtxn.produce(conn, "ledger-open", 0, batch)[0] == 0
    with stopped(cluster, follower):
        assert rc.end_txn(conn, tid, pid, epoch, True) == COORDINATOR_NOT_AVAILABLE
        time.sleep(0.5)  # markers, if any went out, are written by now
        assert COMMIT not in markers(cluster.brokers[coordinator].bootstrap, "ledger-open", 0, pid)
        first_abort = rc.end_txn(conn, tid, pid, epoch, False)
    assert first_abort in (0, COORDINATOR_NOT_AVAILABLE, rc.CONCURRENT_TRANSACTIONS)

    def aborted() -> bool:
        code = rc.end_txn(conn, tid, pid, epoch, False)
        assert code in (0, COORDINATOR_NOT_AVAILABLE, rc.CONCURRENT_TRANSACTIONS), code
        return code == 0 and txn_state(cluster.bootstrap, tid) == "CompleteAbort"

    cluster.wait_for("the abort completes", aborted, TIMEOUT_S, interval_s=0.3)
    conn.sock.close()
    assert markers(cluster.brokers[coordinator].bootstrap, "ledger-open", 0, pid) == [ABORT]
