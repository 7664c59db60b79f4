"""Replication across broker processes (issue #17): acks=all with min.insync.replicas,
leader failover with nothing acknowledged lost, the ISR, rack-aware reads.

Every test runs its own 3-broker cluster (``tests/cluster_fixtures.py``) on a
``file://`` store, with the short timings there plus a 2 s replica lag, so a
failover takes about a second: a killed broker's heartbeat connection closes,
the controller probes its listener, finds it refusing connections, fences it and
elects a new leader from the ISR.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_fixtures import Cluster
from tests.e2e.rawkafka import (
    API_PRODUCE,
    Connection,
    parse_produce_v3,
    produce_v3_body,
    record_batch,
)

TIMEOUT_S = 30.0
#: kill -9s of the leader in the random-points test; STRATA_LEADER_KILLS=20 for a longer run
LEADER_KILLS = int(os.environ.get("STRATA_LEADER_KILLS", "8"))
NOT_ENOUGH_REPLICAS = 19
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 3, 6  # retriable: the broker is a poll behind
#: the cluster fixture's timings, plus a short replica lag and a lease short enough that
#: killing a leader that also holds the controller lease costs seconds, not tens of them
REPLICATION = {
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "100",
    "controller.lease.ms": "2000",
    "controller.lease.renew.ms": "300",
    "controller.lease.safety.margin.ms": "400",
    "controller.lease.clock.skew.ms": "200",
    "controller.lease.poll.ms": "100",
    "metadata.poll.interval.ms": "100",
}


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(bootstrap: str, topic: NewTopic) -> None:
    client = _admin(bootstrap)  # kept until the answer: a destroyed client fails its futures
    client.create_topics([topic], request_timeout=TIMEOUT_S)[topic.topic].result(timeout=TIMEOUT_S)


def _partition(cluster: Cluster, topic: str, index: int = 0) -> Any:
    """The partition's metadata (leader, replicas, isrs) as a live broker answers it."""
    md = _admin(cluster.live_bootstrap()).list_topics(topic, timeout=TIMEOUT_S)
    return md.topics[topic].partitions[index]


def _wait(cluster: Cluster, what: str, check: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> Any:
    def safe() -> Any:
        try:
            return check()
        except Exception:  # noqa: BLE001 - a broker mid-failover may not answer
            return None

    return cluster.wait_for(what, safe, timeout_s, 0.1)


def _read_all(bootstrap: str, topic: str, partitions: int = 1,
              isolation: str = "read_committed") -> list[tuple[int, int, bytes]]:
    """Every record of ``topic`` as (partition, offset, value), up to the end offsets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": False, "isolation.level": isolation})
    try:
        ends = {p: _end_offset(consumer, topic, p) for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 60
        while sum(1 for _ in out) < sum(ends.values()):
            assert time.monotonic() < deadline, f"read {len(out)} of {sum(ends.values())}"
            for msg in consumer.consume(1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                out.append((msg.partition(), msg.offset(), msg.value()))
        return out
    finally:
        consumer.close()


def _end_offset(consumer: Consumer, topic: str, partition: int) -> int:
    """The partition's end offset; asked again while the client's view of the brokers settles
    after a failover (librdkafka drops the handle of a broker the metadata no longer lists,
    failing what was in flight on it)."""
    from confluent_kafka import KafkaException

    for attempt in range(20):  # ~10 s: after a controller cut off from the bucket, a CI run
        try:                     # saw the partition unknown to the client for more than 2.5 s
            return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)[1])
        except KafkaException:
            if attempt == 19:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


class _Producing:
    """An idempotent acks=all producer writing "0", "1", ... in a thread; what was acked."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 120_000, "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 200, "topic.metadata.refresh.interval.ms": 1000,
        })
        self._topic = topic
        self.acked: set[bytes] = set()
        self.failed: list[Any] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Producing:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.add(msg.value())
        else:
            self.failed.append(err)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._producer.produce(self._topic, b"%d" % self.sent, partition=0,
                                       on_delivery=self._on_delivery)
                self.sent += 1
            except BufferError:
                pass
            self._producer.poll(0.001 if self.sent % 50 else 0.01)

    def acked_since(self, count: int, timeout_s: float = TIMEOUT_S) -> None:
        """Wait until ``count`` more records than now are acknowledged."""
        target = len(self.acked) + count
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < target:
            assert time.monotonic() < deadline, f"only {len(self.acked)} of {target} acked"
            time.sleep(0.02)

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            assert self._producer.flush(120) == 0


def test_acks_all_records_survive_the_leader_killed_at_random_points(start_cluster: Any) -> None:
    """Replication factor 3, min.insync.replicas 2, an idempotent acks=all producer: kill -9
    the partition's leader at LEADER_KILLS random points while producing (restarting it each time);
    every acknowledged record is read back once, at dense offsets."""
    cluster = start_cluster(3, sets=REPLICATION)
    _create(cluster.bootstrap, NewTopic("durable", 1, 3, config={"min.insync.replicas": "2"}))
    rng = random.Random(17)
    leaders_killed: list[int] = []
    with _Producing(cluster.bootstrap, "durable") as producing:
        producing.acked_since(200)
        for _ in range(LEADER_KILLS):
            time.sleep(rng.uniform(0.05, 0.6))
            leader = _wait(cluster, "a leader", lambda: (p := _partition(cluster, "durable")).leader > 0
                           and p.leader)
            cluster.kill(leader)
            leaders_killed.append(leader)
            _wait(cluster, "a new leader", lambda l=leader: _partition(cluster, "durable").leader
                  not in (l, -1))
            producing.acked_since(50)  # writes go on under the new leader
            cluster.restart(leader)
            _wait(cluster, "the restarted broker back in the ISR",
                  lambda l=leader: l in _partition(cluster, "durable").isrs)
        producing.acked_since(100)
    assert not producing.failed, producing.failed[:3]
    assert LEADER_KILLS < 2 or len(set(leaders_killed)) > 1  # the leadership really moved around
    records = _read_all(cluster.bootstrap, "durable")
    values = [v for _, _, v in records]
    assert [o for _, o, _ in records] == list(range(len(records)))  # dense offsets
    assert len(values) == len(set(values)), "a record was written twice"
    assert producing.acked <= set(values), f"{len(producing.acked - set(values))} acked records lost"


def _produce_raw(bootstrap: str, topic: str, values: list[bytes], acks: int) -> int:
    with Connection.to(bootstrap) as conn:
        payload = conn.call(API_PRODUCE, 3, produce_v3_body(topic, 0, record_batch(values), acks=acks))
    _, results = parse_produce_v3(payload)
    return int(results[0].error_code)


def _produce_to_new_leader(bootstrap: str, topic: str, values: list[bytes], acks: int) -> int:
    """:func:`_produce_raw` to a broker the controller just made the leader, retried as a
    client retries while that broker's own metadata is a poll behind (nothing was appended)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        code = _produce_raw(bootstrap, topic, values, acks)
        if code not in (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER) or time.monotonic() > deadline:
            return code
        time.sleep(0.1)


def test_acks_all_fails_with_two_of_three_brokers_down_and_resumes_when_one_returns(
    start_cluster: Any,
) -> None:
    cluster = start_cluster(3, sets=REPLICATION)
    survivor = cluster.controller_id()
    others = [n for n in cluster.brokers if n != survivor]
    # the survivor leads: it stays the controller, so the ISR can shrink to it alone
    _create(cluster.bootstrap, NewTopic("quorum", num_partitions=1, replica_assignment=[[survivor, *others]],
                                        config={"min.insync.replicas": "2"}))
    leader_bootstrap = cluster.brokers[survivor].bootstrap
    _wait(cluster, "a full ISR", lambda: len(_partition(cluster, "quorum").isrs) == 3)
    acked = [b"before-%d" % i for i in range(50)]
    assert _produce_to_new_leader(leader_bootstrap, "quorum", acked, acks=-1) == 0
    for node in others:
        cluster.kill(node)
    _wait(cluster, "the ISR down to the survivor",
          lambda: list(_partition(cluster, "quorum").isrs) == [survivor])
    # acks=all: refused before anything is appended; acks=1 still takes writes
    assert _produce_raw(leader_bootstrap, "quorum", [b"refused"], acks=-1) == NOT_ENOUGH_REPLICAS
    one = [b"acks1-%d" % i for i in range(10)]
    assert _produce_raw(leader_bootstrap, "quorum", one, acks=1) == 0
    acked += one
    cluster.restart(others[0])
    _wait(cluster, "the returned broker in the ISR",
          lambda: others[0] in _partition(cluster, "quorum").isrs)
    after = [b"after-%d" % i for i in range(50)]
    assert _produce_raw(leader_bootstrap, "quorum", after, acks=-1) == 0
    acked += after
    values = [v for _, _, v in _read_all(cluster.live_bootstrap(), "quorum")]
    assert values == acked  # nothing lost, and the refused record was never written


def test_a_consumer_reads_from_the_replica_in_its_rack(start_cluster: Any) -> None:
    """KIP-392: with client.rack set, the leader sends the consumer to an in-sync replica
    in its rack, which serves the records."""
    racks = {1: "rack-a", 2: "rack-b", 3: "rack-c"}
    cluster = start_cluster(3, racks=racks, sets={
        **REPLICATION,
        "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    })
    _create(cluster.bootstrap, NewTopic("racked", 1, 3))
    _wait(cluster, "a full ISR", lambda: len(_partition(cluster, "racked").isrs) == 3)
    leader = _partition(cluster, "racked").leader
    follower = next(n for n in racks if n != leader)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(500):
        producer.produce("racked", b"r%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    _wait(cluster, "the follower caught up", lambda: _out_bytes(cluster, follower, "replica") > 0)
    before = {n: _out_bytes(cluster, n, "racked") for n in racks}
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "racked",
                         "client.rack": racks[follower], "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("racked", 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < 500 and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=0.5):
            if msg.error() is None:
                got.append(msg.value())
            else:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
    consumer.close()
    assert got == [b"r%d" % i for i in range(500)]
    served = {n: _out_bytes(cluster, n, "racked") - before[n] for n in racks}
    assert served[follower] > 0 and served[leader] == 0, served


def _out_bytes(cluster: Cluster, node: int, topic: str) -> float:
    """A broker's ``strata_topic_bytes_out_total`` for ``topic`` (``"replica"``: the bytes it
    fetched as a follower)."""
    import urllib.request

    with urllib.request.urlopen(f"{cluster.brokers[node].admin_url}/metrics", timeout=5) as r:
        text = r.read().decode()
    if topic == "replica":
        name, label = "strata_replica_fetched_bytes_total", ""
    else:
        name, label = "strata_topic_bytes_out_total", f'{{topic="{topic}"}}'
    for line in text.splitlines():
        if line.startswith(name + label + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _metric(cluster: Cluster, node: int, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"{cluster.brokers[node].admin_url}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the metrics of broker {node}")


def test_sigterm_hands_leadership_away_and_the_preferred_leader_gets_it_back(start_cluster: Any) -> None:
    """Controlled shutdown moves a broker's leaderships before it exits; meanwhile its
    partitions are under-replicated (metrics, ``strata topics describe
    --under-replicated-partitions``); once it returns and catches up, the controller moves
    the leaderships back to their preferred replicas (auto.leader.rebalance.enable)."""
    from tests.service.cli.helpers import ok, strata

    cluster = start_cluster(3, sets={**REPLICATION, "leader.imbalance.check.interval.seconds": "1"})
    _create(cluster.bootstrap, NewTopic("handover", 3, 3))
    _wait(cluster, "full ISRs", lambda: all(
        len(_partition(cluster, "handover", p).isrs) == 3 for p in range(3)))
    preferred = {p: list(_partition(cluster, "handover", p).replicas)[0] for p in range(3)}
    leaving = next(n for n in cluster.brokers if n != cluster.controller_id())
    with _Producing(cluster.bootstrap, "handover") as producing:
        producing.acked_since(200)
        cluster.stop(leaving)  # SIGTERM: returns once the broker has exited
        leaders = {p: _partition(cluster, "handover", p).leader for p in range(3)}
        assert leaving not in leaders.values() and -1 not in leaders.values(), leaders
        producing.acked_since(200)  # writes go on
        _wait(cluster, "the ISRs without the stopped broker", lambda: all(
            leaving not in _partition(cluster, "handover", p).isrs for p in range(3)))
        under = ok(strata("topics", "describe", "handover", "--under-replicated-partitions",
                          bootstrap=cluster.live_bootstrap())).stdout
        assert sorted(line.split("Partition: ")[1].split("\t")[0] for line in under.splitlines()) \
            == ["0", "1", "2"], under
        live = [n for n in cluster.brokers if n != leaving]
        assert sum(_metric(cluster, n, "strata_under_replicated_partitions") for n in live) == 3
        cluster.restart(leaving)
        _wait(cluster, "leaderships back on the preferred replicas", lambda: all(
            _partition(cluster, "handover", p).leader == preferred[p] for p in range(3)))
        # the returning broker rejoins the ISRs of the partitions it does not lead as it catches up
        _wait(cluster, "no under-replicated partition", lambda: not ok(strata(
            "topics", "describe", "handover", "--under-replicated-partitions", bootstrap=cluster.bootstrap)).stdout.strip())
        producing.acked_since(200)
    assert not producing.failed, producing.failed[:3]
    values = {v for _, _, v in _read_all(cluster.bootstrap, "handover", 1)}
    assert producing.acked <= values


def _http_json(cluster: Cluster, node: int, path: str) -> Any:
    import json
    import urllib.request

    with urllib.request.urlopen(cluster.brokers[node].admin_url + path, timeout=10) as r:
        return json.loads(r.read())


def _labelled(cluster: Cluster, node: int, name: str, labels: str) -> float:
    return _metric(cluster, node, f"{name}{{{labels}}}")


def test_a_new_replica_starts_from_the_bucket_and_copies_only_the_leaders_tail(
    start_cluster: Any,
) -> None:
    """A third replica added to a tiered partition starts after what the bucket holds: it
    GETs the manifest and the producer snapshot, never a segment, and fetches from the
    leader only the untiered tail. Made the leader, it serves the whole log (history from
    the bucket), and the idempotent producer carries on with it (its state came along)."""
    cluster = start_cluster(3, sets={**REPLICATION, "remote.log.manager.task.interval.ms": "200",
                                     "log.retention.check.interval.ms": "500",
                                     "leader.imbalance.check.interval.seconds": "1"})
    _create(cluster.bootstrap, NewTopic(
        "backfill", num_partitions=1, replica_assignment=[[1, 2]],
        config={"remote.storage.enable": "true", "segment.bytes": "32768",
                "local.retention.bytes": "65536"}))
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 16384})  # batches within segment.bytes
    errors: list[Any] = []

    def produce(values: list[bytes]) -> None:
        for value in values:
            producer.produce("backfill", value, partition=0,
                             on_delivery=lambda err, _: err is None or errors.append(err))
            producer.poll(0)
        assert producer.flush(TIMEOUT_S) == 0
        assert not errors, errors[:3]

    sent = [b"b-%05d-" % i + b"x" * 200 for i in range(3000)]  # ~670 KB: ~20 segments
    produce(sent[:2500])

    def tiered() -> Any:
        part = _http_json(cluster, 1, "/v1/topics/backfill/partitions")["partitions"][0]
        return part["remote_segments"] >= 10 and part["local_log_start_offset"] > 0 and part

    leader_state = _wait(cluster, "the history tiered and gone from the leader's disk", tiered)
    # the follower drops local segments once the manifest lists them, as the leader does
    follower_dir = cluster.brokers[2].data_dir / "logs" / "backfill-0"
    _wait(cluster, "broker 2's local copies of tiered segments gone",
          lambda: min(int(p.stem) for p in follower_dir.glob("*.log")) > 0)
    gets_before = _labelled(cluster, 3, "strata_object_store_requests_total", 'op="get"')
    bytes_before = _labelled(cluster, 3, "strata_object_store_bytes_total", 'op="get"')
    from tests.service.cli.helpers import ok, strata

    ok(strata("topics", "reassign", "backfill", "--partition", "0", "--replicas", "3,1,2",
              bootstrap=cluster.bootstrap))
    _wait(cluster, "broker 3 in the ISR", lambda: 3 in _partition(cluster, "backfill").isrs)
    gets = _labelled(cluster, 3, "strata_object_store_requests_total", 'op="get"') - gets_before
    got_bytes = _labelled(cluster, 3, "strata_object_store_bytes_total", 'op="get"') - bytes_before
    fetched = _metric(cluster, 3, "strata_replica_fetched_bytes_total")
    log_bytes = sum(len(v) + 70 for v in sent[:2500])  # values plus record overhead, roughly
    print(f"broker 3 caught up with {gets:.0f} GETs ({got_bytes:.0f} bytes) and {fetched:.0f} "
          f"bytes fetched from the leader (the log is ~{log_bytes} bytes)")
    # the manifest and a snapshot, no segment (one is ~32 KB: past the byte bound); the manifest may be
    # read again when broker 3 takes the leadership meanwhile (it is the new preferred replica)
    assert 1 <= gets <= 6 and got_bytes < 32768
    assert 0 < fetched < log_bytes / 3  # the leader's untiered tail only
    # preferred replica 3 takes the leadership (auto rebalance), and serves everything
    _wait(cluster, "broker 3 leading", lambda: _partition(cluster, "backfill").leader == 3)
    # broker 3's own view lists the partition once its log is open as the leader's
    state = _wait(cluster, "broker 3's view of the partition it leads", lambda: next(
        (p for p in _http_json(cluster, 3, "/v1/topics/backfill/partitions")["partitions"] if p["leader"] == 3),
        None))
    assert state["local_log_start_offset"] >= leader_state["local_log_start_offset"]
    assert state["log_start_offset"] == 0  # the history is in the bucket
    produce(sent[2500:])
    records = _read_all(cluster.bootstrap, "backfill")
    assert [v for _, _, v in records] == sent
    assert [o for _, o, _ in records] == list(range(len(sent)))


def test_a_follower_cut_off_from_its_leader_leaves_the_isr_and_rejoins(start_cluster: Any) -> None:
    """A TCP proxy between the brokers stops the follower's fetches: the leader drops it
    from the ISR after replica.lag.time.max.ms (acks=all goes on with the leader alone),
    and takes it back once it has caught up after the partition heals."""
    cluster = start_cluster(3, proxied=True, sets=REPLICATION)
    controller = cluster.controller_id()
    leader, follower = (n for n in cluster.brokers if n != controller)
    # only the follower talks to the leader: its heartbeats go to the controller, unproxied
    _create(cluster.bootstrap, NewTopic("cutoff", num_partitions=1, replica_assignment=[[leader, follower]]))
    _wait(cluster, "a full ISR", lambda: len(_partition(cluster, "cutoff").isrs) == 2)
    with _Producing(cluster.bootstrap, "cutoff") as producing:
        producing.acked_since(200)
        cluster.proxies[leader].partition()
        _wait(cluster, "the follower out of the ISR",
              lambda: list(_partition(cluster, "cutoff").isrs) == [leader])
        producing.acked_since(300)  # acks=all: the ISR is the leader alone now
        cluster.proxies[leader].heal()
        _wait(cluster, "the follower back in the ISR",
              lambda: sorted(_partition(cluster, "cutoff").isrs) == sorted([leader, follower]))
        producing.acked_since(200)
    assert not producing.failed, producing.failed[:3]
    assert _metric(cluster, leader, "strata_isr_shrinks_total") >= 1
    assert _metric(cluster, leader, "strata_isr_expands_total") >= 1
    records = _read_all(cluster.bootstrap, "cutoff")
    values = [v for _, _, v in records]
    assert [o for _, o, _ in records] == list(range(len(records)))
    assert len(values) == len(set(values)) and producing.acked <= set(values)


def test_a_leader_partitioned_away_loses_the_acks1_writes_it_took_meanwhile(
    start_cluster: Any, moto_server: Any
) -> None:
    """The leader is cut off from the other broker (the controller) and from the bucket,
    but not from a client, which goes on writing to it with acks=1. The controller fences
    it and the other replica leads; after healing, the old leader truncates those writes
    (OffsetForLeaderEpoch) and no consumer ever read them: they stayed above its high
    watermark. acks=all to it meanwhile is never acknowledged."""
    import os

    from tests.e2e.rawkafka import API_FETCH, fetch_v4_body, parse_fetch_v4
    from tests.e2e.tcp_proxy import CuttingProxy

    moto_server.start()
    bucket = moto_server.create_bucket()
    bucket_link = CuttingProxy(moto_server.port)  # the leader's way to the bucket
    for key, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                       ("AWS_DEFAULT_REGION", "us-east-1")):
        os.environ.setdefault(key, value)
    cluster = start_cluster(2, start=False, s3=bucket, proxied=True, sets=REPLICATION,
                            s3_endpoints={2: f"http://127.0.0.1:{bucket_link.port}"})
    try:
        cluster.start(1)  # broker 1 takes the controller lease
        cluster.start(2)
        assert cluster.controller_id() == 1
        _create(cluster.bootstrap, NewTopic("split", num_partitions=1, replica_assignment=[[2, 1]]))
        _wait(cluster, "a full ISR", lambda: len(_partition(cluster, "split").isrs) == 2)
        old_leader = cluster.brokers[2].bootstrap
        committed = [b"c-%d" % i for i in range(100)]
        # the ISR was read from another broker: broker 2 may be a metadata poll behind
        assert _produce_to_new_leader(old_leader, "split", committed, acks=-1) == 0
        for link in (cluster.proxies[1], cluster.proxies[2], bucket_link):
            link.partition()
        stranded = [b"stranded-%d" % i for i in range(20)]
        assert _produce_raw(old_leader, "split", stranded, acks=1) == 0  # it still thinks it leads
        with Connection.to(old_leader) as conn:  # acks=all: never acknowledged (times out)
            body = produce_v3_body("split", 0, record_batch([b"never"]), acks=-1, timeout_ms=1000)
            _, results = parse_produce_v3(conn.call(API_PRODUCE, 3, body))
        assert results[0].error_code != 0
        with Connection.to(old_leader) as conn:  # consumers see nothing beyond the high watermark
            _, fetched = parse_fetch_v4(conn.call(API_FETCH, 4, fetch_v4_body("split", 0, 100)))
        assert fetched[0].high_watermark == 100 and not fetched[0].records, fetched
        # the controller fences the silent broker (its session) and broker 1 leads
        _wait(cluster, "broker 1 leading", lambda: _partition(cluster, "split").leader == 1)
        after = [b"after-%d" % i for i in range(50)]
        assert _produce_to_new_leader(cluster.brokers[1].bootstrap, "split", after, acks=-1) == 0
        for link in (cluster.proxies[1], cluster.proxies[2], bucket_link):
            link.heal()
        # broker 1 leading with both in the ISR: only a view taken after broker 2 followed
        # (the healed broker's own stale view says ISR [2, 1] too, with itself leading)
        _wait(cluster, "the old leader back in the ISR, truncated",
              lambda: (p := _partition(cluster, "split")).leader == 1 and sorted(p.isrs) == [1, 2],
              timeout_s=60)
        for isolation in ("read_uncommitted", "read_committed"):
            values = [v for _, _, v in _read_all(cluster.bootstrap, "split", isolation=isolation)]
            assert values == committed + after, isolation
        # broker 2's own log holds exactly the same (its divergent tail is gone): read it as
        # the leader once broker 1 is gone
        cluster.kill(1)
        _wait(cluster, "broker 2 leading", lambda: _partition(cluster, "split").leader == 2, 60)
        values = [v for _, _, v in _read_all(cluster.live_bootstrap(), "split", isolation="read_uncommitted")]
        assert values == committed + after
    finally:
        bucket_link.close()


def test_an_offset_commit_is_acknowledged_only_once_on_the_isr(start_cluster: Any) -> None:
    """__consumer_offsets has three replicas and OffsetCommit is answered only once its ISR
    holds the commit. Here the coordinator's followers are cut off (a proxy) while a commit
    is in flight, and the coordinator is killed before they leave the ISR: the commit is
    either refused or retried by the client against the next coordinator, and whatever the
    client was told is what the next coordinator has. (Answered at append, the commit would
    be acknowledged, then lost with the broker.)"""
    from confluent_kafka import KafkaException

    cluster = start_cluster(3, proxied=True, sets=REPLICATION)
    _create(cluster.bootstrap, NewTopic("jobs", 2, 3))
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(400):
        producer.produce("jobs", b"job-%d" % i, partition=i % 2)
    assert producer.flush(TIMEOUT_S) == 0
    def coordinator() -> int | None:
        # a client of its own each time: librdkafka 2.16 may send an admin request to the
        # handle of a broker the metadata just dropped (the killed one) and wait it out
        admin = _admin(cluster.live_bootstrap())
        found = admin.describe_consumer_groups(["workers"])["workers"].result(TIMEOUT_S).coordinator
        return found.id if found is not None and found.id > 0 else None

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "workers",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe(["jobs"])
    seen: list[bytes] = []

    def read(count: int) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < count:
            assert time.monotonic() < deadline, f"read {len(seen)} of {count}"
            for msg in consumer.consume(50, timeout=0.5):
                if msg.error() is None:
                    seen.append(msg.value())

    parts = [TopicPartition("jobs", p) for p in range(2)]
    read(150)
    first = {(tp.partition, tp.offset) for tp in consumer.commit(asynchronous=False)}
    old = _wait(cluster, "the group's coordinator", coordinator)
    read(300)
    cluster.proxies[old].partition()  # its followers cannot fetch the next commit
    outcome: list[Any] = []

    def commit() -> None:
        try:
            outcome.append({(tp.partition, tp.offset) for tp in consumer.commit(asynchronous=False)})
        except KafkaException as exc:
            outcome.append(exc)

    committing = threading.Thread(target=commit)
    committing.start()
    time.sleep(1.0)  # the commit waits for the ISR (replica.lag.time.max.ms is 2 s)
    assert not outcome, "the commit was acknowledged before the ISR held it"
    cluster.kill(old)
    committing.join(TIMEOUT_S * 2)
    _wait(cluster, "a new coordinator", lambda: (c := coordinator()) not in (None, old) and c)
    held = {(tp.partition, tp.offset) for tp in consumer.committed(parts, timeout=TIMEOUT_S)}
    told = outcome[0]
    assert held == (first if isinstance(told, KafkaException) else told), (told, held, first)
    # reading resumes at the commits: exactly the records after them (a reader of its own:
    # librdkafka 2.16 may keep asking the killed broker's handle for a while)
    threading.Thread(target=consumer.close, daemon=True).start()
    resumed = Consumer({"bootstrap.servers": cluster.live_bootstrap(), "group.id": "workers-check",
                        "enable.auto.commit": False})
    resumed.assign([TopicPartition("jobs", p, o) for p, o in held])
    after: list[tuple[int, int]] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(after) < 400 - sum(o for _, o in held):
        assert time.monotonic() < deadline, f"read {len(after)} after the commits"
        after += [(m.partition(), m.offset()) for m in resumed.consume(100, timeout=0.5)
                  if m.error() is None]
    resumed.close()
    assert sorted(after) == sorted((p, o) for p, start in held for o in range(start, 200))


def test_a_leader_that_holds_the_controller_lease_killed_moves_within_the_lease(
    start_cluster: Any,
) -> None:
    """The leader is also the controller: once another broker takes the expired lease it
    fences the old holder at once (not after a fresh session), the partition moves, and no
    live broker is fenced on the way (their heartbeats retry at once when the controller
    goes, and the new one touches their sessions as their heartbeats arrive)."""
    cluster = start_cluster(3, sets=REPLICATION)
    controller = cluster.controller_id()
    others = [n for n in cluster.brokers if n != controller]
    _create(cluster.bootstrap, NewTopic("both", num_partitions=1,
                                        replica_assignment=[[controller, *others]]))
    _wait(cluster, "a full ISR", lambda: len(_partition(cluster, "both").isrs) == 3)
    with _Producing(cluster.bootstrap, "both") as producing:
        producing.acked_since(100)
        cluster.kill(controller)
        killed = time.monotonic()
        moved = _wait(cluster, "a new leader", lambda: (p := _partition(cluster, "both")).leader
                      in others and p)
        took = time.monotonic() - killed
        lease = (int(REPLICATION["controller.lease.ms"])
                 + int(REPLICATION["controller.lease.clock.skew.ms"])) / 1000
        # about lease + 0.6 s; a fresh session for the old holder made it lease + 3 s and more
        assert took < lease + 2.5, f"the partition moved {took:.1f} s after the kill"
        assert sorted(moved.isrs) == sorted(others), moved.isrs  # no live broker fenced
        producing.acked_since(100)
    assert not producing.failed, producing.failed[:3]
    assert producing.acked <= {v for _, _, v in _read_all(cluster.live_bootstrap(), "both")}
