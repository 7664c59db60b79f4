"""A cluster of broker processes sharing one bucket (issue #16).

One 3-broker cluster on a moto S3 bucket is shared by the tests that kill
nothing (partitions spread, four clients (also run once on a ``file://`` store), forwarding, the controller-only APIs
and leadership errors, a reassignment under load, a duplicate node.id); the
tests that kill brokers get 3-broker clusters of their own on a ``file://``
store. Timings are short (``tests/cluster_fixtures.py``: a 3 s lease, 3 s broker
sessions).
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic as KNewTopic

from common.protocol.codec import build
from common.record.batch import build_batch
from controller.commit import MetadataCommitter
from controller.document import ClusterMetadata
from controller.errors import ControllerFencedError
from controller.metadata_store import ObjectStoreMetadataStore
from remote_tier.filesystem import FileSystemObjectStore
from service.cluster.channel import BrokerChannel, ChannelConfig
from service.cluster.wire import request_module
from service.handlers.router import api_table
from tests.cluster_fixtures import FAST, Cluster
from tests.conftest import BrokerProcess, free_port, subprocess_env
from tests.s3_fixtures import MotoServer

TIMEOUT_S = 30.0
LEASE_S = int(FAST["controller.lease.ms"]) / 1000


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def s3_cluster(module_start_cluster: Any, moto_server: MotoServer) -> Iterator[Cluster]:
    """Three brokers on one moto S3 bucket, shared by this module's non-destructive tests."""
    moto_server.start()
    bucket = moto_server.create_bucket()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield module_start_cluster(
            3, s3=bucket, sets={"remote.log.manager.task.interval.ms": "300"}
        )


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = _admin(bootstrap).list_topics(topic, timeout=TIMEOUT_S).topics[topic]
    return {p: m.leader for p, m in md.partitions.items()}


def _create(bootstrap: str, topic: NewTopic) -> None:
    client = _admin(bootstrap)
    client.create_topics([topic], request_timeout=TIMEOUT_S)[topic.topic].result(timeout=TIMEOUT_S)


def _known_everywhere(cluster: Cluster, topic: str, known: bool = True) -> None:
    """Wait until every live broker's metadata has (or, ``known=False``, no longer has) the
    topic: a change reaches the brokers within a metadata poll, not at once."""

    behind: list[int] = []

    def check() -> bool:
        behind[:] = [n for n, b in cluster.brokers.items() if b.running
                     and (topic in _admin(b.bootstrap).list_topics(timeout=TIMEOUT_S).topics) != known]
        return not behind

    try:  # one CI run (stop 73) did not see a delete everywhere within 10 s: the message now says where
        cluster.wait_for(f"{topic} {'known' if known else 'gone'} on every broker", check, 30.0, 0.1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: brokers {behind} still {'lack' if known else 'list'} it") from None


def _controller_named(broker: BrokerProcess) -> int:
    """The controller DescribeCluster (60) names, asked of one broker (Metadata names the
    same one: tests/e2e/test_metadata_controller.py; ADR 0016)."""
    answer = _raw(broker, 60, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
    assert int(answer.error_code) == 0
    return int(answer.controller_id)


def _raw(broker: BrokerProcess, api_key: int, fields: Any) -> Any:
    """One request to one broker, as another broker would send it."""
    versions = {spec.key: spec.max_version for spec in api_table().values()}

    async def send() -> Any:
        channel = BrokerChannel(0, broker.host, broker.port, ChannelConfig("test"), versions)
        try:
            return (await channel.request(api_key, fields, timeout_s=TIMEOUT_S))[1]
        finally:
            await channel.close()

    return asyncio.run(send())


def _http_json(broker: BrokerProcess, path: str) -> Any:
    with urllib.request.urlopen(broker.admin_url + path, timeout=10) as r:
        return json.loads(r.read())


def _consume_all(bootstrap: str, topic: str, count: int, group: str) -> dict[tuple[int, int], bytes]:
    """(partition, offset) -> value of ``count`` records read by a confluent group consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got[(msg.partition(), msg.offset())] = msg.value()
    finally:
        consumer.close()
    return got


def _dense(offsets: list[tuple[int, int]]) -> bool:
    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset in offsets:
        by_partition[partition].append(offset)
    return all(sorted(o) == list(range(len(o))) for o in by_partition.values())


# --------------------------------------------------------------------------- shared cluster


def test_partitions_spread_over_three_brokers_and_four_clients_use_them_all(
    s3_cluster: Cluster, kcat: str
) -> None:
    _four_clients_use_partitions_led_by_every_broker(s3_cluster, kcat, "spread", per_client=300)


def test_four_clients_use_partitions_led_by_every_broker_on_a_file_store(start_cluster: Any, kcat: str) -> None:
    """The same on a ``file://`` store (a lean run: fewer records)."""
    _four_clients_use_partitions_led_by_every_broker(start_cluster(3), kcat, "spread-file", per_client=40)


def _four_clients_use_partitions_led_by_every_broker(cluster: Cluster, kcat: str, topic: str,
                                                     per_client: int) -> None:
    """6 partitions, 2 led by each broker; confluent-kafka, kafka-python (bootstrapped at broker
    2, read back at broker 3), aiokafka and kcat each produce, and each reads back every record."""
    bootstrap = cluster.bootstrap
    _create(bootstrap, NewTopic(topic, num_partitions=6, replication_factor=1))
    leaders = _leaders(bootstrap, topic)
    assert sorted(Counter(leaders.values()).values()) == [2, 2, 2], leaders  # 2 per broker
    # every broker in Metadata (the answering broker's image may be a poll behind, and on a
    # loaded machine a broker may miss a 3 s session and be fenced for a moment)
    cluster.wait_for("Metadata naming all three brokers", lambda: sorted(
        _admin(bootstrap).list_topics(timeout=TIMEOUT_S).brokers) == [1, 2, 3], TIMEOUT_S)
    for broker in cluster.brokers.values():  # every broker names the lease holder
        assert _controller_named(broker) == cluster.controller_id() != -1
    _known_everywhere(cluster, topic)
    for broker in cluster.brokers.values():  # bootstrapping from any one broker: the same picture
        cluster.wait_for(f"broker {broker.bootstrap}'s picture", lambda b=broker: (
            (one := _admin(b.bootstrap).list_topics(topic, timeout=TIMEOUT_S)) is not None
            and sorted(one.brokers) == [1, 2, 3]
            and {p: m.leader for p, m in one.topics[topic].partitions.items()} == leaders), TIMEOUT_S)

    sent: set[bytes] = set()
    confluent = Producer({"bootstrap.servers": bootstrap})  # librdkafka's defaults: acks=all, not idempotent
    for i in range(per_client):
        value = b"confluent-%d" % i
        confluent.produce(topic, key=b"k%d" % i, value=value)
        sent.add(value)
    assert confluent.flush(TIMEOUT_S) == 0

    kp = KafkaProducer(bootstrap_servers=cluster.brokers[2].bootstrap)  # kafka-python's defaults
    futures = [kp.send(topic, key=b"k%d" % i, value=b"kafka-python-%d" % i) for i in range(per_client)]
    for f in futures:
        f.get(timeout=TIMEOUT_S)
    kp.close()
    sent |= {b"kafka-python-%d" % i for i in range(per_client)}

    async def aio_produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for i in range(per_client):
                await producer.send_and_wait(topic, b"aiokafka-%d" % i, key=b"k%d" % i)
        finally:
            await producer.stop()

    asyncio.run(aio_produce())
    sent |= {b"aiokafka-%d" % i for i in range(per_client)}

    lines = "".join(f"kcat-{i}\n" for i in range(per_client))
    subprocess.run([kcat, "-b", bootstrap, "-P", "-t", topic], input=lines, text=True,
                   check=True, timeout=TIMEOUT_S)
    sent |= {b"kcat-%d" % i for i in range(per_client)}
    total = len(sent)

    got = _consume_all(bootstrap, topic, total, f"{topic}-confluent")
    assert sorted(got.values()) == sorted(sent)  # every record once
    assert _dense(list(got))
    assert {p for p, _ in got} == set(range(6))

    kc = KafkaConsumer(topic, bootstrap_servers=cluster.brokers[3].bootstrap, group_id=f"{topic}-kp",
                       auto_offset_reset="earliest", consumer_timeout_ms=int(TIMEOUT_S * 1000))
    kp_read = []
    for record in kc:
        kp_read.append(record.value)
        if len(kp_read) == total:
            break
    kc.close()
    assert sorted(kp_read) == sorted(sent)

    async def aio_consume() -> list[bytes]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-aio",
                                    auto_offset_reset="earliest")
        await consumer.start()
        out: list[bytes] = []
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while len(out) < total and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                out += [r.value for records in batches.values() for r in records]
        finally:
            await consumer.stop()
        return out

    assert sorted(asyncio.run(aio_consume())) == sorted(sent)

    read = subprocess.run([kcat, "-b", bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%s\n"],
                          capture_output=True, text=True, check=True, timeout=TIMEOUT_S)
    assert sorted(read.stdout.split()) == sorted(v.decode() for v in sent)


def test_admin_writes_sent_to_any_broker_reach_the_controller(s3_cluster: Cluster) -> None:
    controller = s3_cluster.controller_id()
    other = next(b for n, b in s3_cluster.brokers.items() if n != controller)
    # kafka-python's admin client sends CreateTopics to the controller its Metadata names:
    # the broker it asked, which relays it (Envelope) and answers once its view has it
    admin = KafkaAdminClient(bootstrap_servers=other.bootstrap)
    try:
        admin.create_topics([KNewTopic("forwarded", 4, 1)])
        md = _admin(other.bootstrap).list_topics("forwarded", timeout=TIMEOUT_S).topics["forwarded"]
        assert md.error is None and len(md.partitions) == 4  # at once: no retry needed
    finally:
        admin.close()
    client = _admin(other.bootstrap)
    resource = ConfigResource("topic", "forwarded", incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)
    described = client.describe_configs([ConfigResource("topic", "forwarded")])
    entries = next(iter(described.values())).result(timeout=TIMEOUT_S)
    assert entries["retention.ms"].value == "7200000"
    # librdkafka sends it to the controller some Metadata named: maybe not `other`
    client.delete_topics(["forwarded"], request_timeout=TIMEOUT_S)["forwarded"].result(TIMEOUT_S)
    _known_everywhere(s3_cluster, "forwarded", known=False)


def test_create_partitions_places_new_partitions_on_the_replicas_asked_for(s3_cluster: Cluster) -> None:
    """CreatePartitions' Assignments are the new partitions' replicas, in order, as in Kafka
    (librdkafka's 0081_admin asks for them; they were ignored and the placer chose)."""
    _create(s3_cluster.bootstrap, NewTopic("grown", num_partitions=1, replica_assignment=[[1, 2]]))
    asked = [[3, 2], [3, 1], [3, 2]]
    admin = _admin(s3_cluster.bootstrap)
    admin.create_partitions([NewPartitions("grown", 4, replica_assignment=asked)],
                            request_timeout=TIMEOUT_S)["grown"].result(timeout=TIMEOUT_S)

    def replicas() -> list[list[int]] | None:
        parts = _admin(s3_cluster.bootstrap).list_topics("grown", timeout=TIMEOUT_S).topics["grown"].partitions
        return [list(parts[p].replicas) for p in sorted(parts)] if len(parts) == 4 else None

    assert s3_cluster.wait_for("four partitions", replicas, TIMEOUT_S) == [[1, 2], *asked]
    with pytest.raises(KafkaException) as refused:  # a broker that does not exist: Kafka's error
        admin.create_partitions([NewPartitions("grown", 5, replica_assignment=[[3, 9]])],
                                request_timeout=TIMEOUT_S)["grown"].result(timeout=TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT


def test_controller_apis_and_partition_leadership_are_checked(s3_cluster: Cluster) -> None:
    controller = s3_cluster.controller_id()
    others = [n for n in s3_cluster.brokers if n != controller]
    _create(s3_cluster.bootstrap, NewTopic("lead", num_partitions=1, replica_assignment=[[others[0]]]))
    _known_everywhere(s3_cluster, "lead")  # else a broker may answer UNKNOWN_TOPIC_OR_PARTITION
    led_at = s3_cluster.wait_for("a leader epoch", lambda: (e := _partition_epoch(s3_cluster, "lead", 0))
                                 is not None and [e])[0]
    heartbeat = {"broker_id": others[0], "broker_epoch": 1, "current_metadata_offset": 0,
                 "want_fence": False, "want_shut_down": False, "offline_log_dirs": ()}
    # controller-only APIs: NOT_CONTROLLER (41) anywhere else
    assert int(_raw(s3_cluster.brokers[others[0]], 63, heartbeat).error_code) == 41
    allocate = {"broker_id": others[0], "broker_epoch": 1}
    assert int(_raw(s3_cluster.brokers[others[1]], 67, allocate).error_code) == 41
    # the controller checks the broker epoch: STALE_BROKER_EPOCH (77)
    assert int(_raw(s3_cluster.brokers[controller], 63, heartbeat).error_code) == 77
    # and the refused heartbeat's connection, now closed, was never the broker's: it does not
    # cut the live broker's session short (it did: the broker was fenced, its partition lost
    # its leader, whenever its next heartbeat came later than broker.session.connection.loss.ms)
    time.sleep(1.5)
    assert _partition_epoch(s3_cluster, "lead", 0) == led_at
    s3_cluster.wait_for("Metadata naming all three brokers", lambda: sorted(
        _admin(s3_cluster.bootstrap).list_topics(timeout=TIMEOUT_S).brokers) == [1, 2, 3], TIMEOUT_S)

    leader, follower = s3_cluster.brokers[others[0]], s3_cluster.brokers[others[1]]
    md = _admin(s3_cluster.bootstrap).list_topics("lead", timeout=TIMEOUT_S).topics["lead"]
    epoch = s3_cluster.wait_for(
        "the leader's metadata", lambda: (e := _leader_epoch(s3_cluster, "lead")) is not None and [e]
    )[0]
    assert md.partitions[0].leader == others[0]

    def list_offsets(broker: BrokerProcess, current_epoch: int) -> int:
        return _list_offsets(broker, "lead", current_epoch)

    assert list_offsets(leader, epoch) == 0
    assert list_offsets(follower, -1) == 6  # NOT_LEADER_OR_FOLLOWER
    assert list_offsets(leader, epoch + 1) == 75  # UNKNOWN_LEADER_EPOCH
    assert _raw_produce(follower, "lead") == 6  # a Produce to a broker that does not lead it
    assert _raw_produce(leader, "lead") == 0
    producer = Producer({"bootstrap.servers": follower.bootstrap})
    producer.produce("lead", b"x")
    assert producer.flush(TIMEOUT_S) == 0  # a client finds the leader itself


def _list_offsets(broker: BrokerProcess, topic: str, current_epoch: int) -> int:
    return _list_offsets_partition(broker, topic, 0, current_epoch)


def _list_offsets_partition(broker: BrokerProcess, topic: str, partition: int, current_epoch: int) -> int:
    """The error code of a ListOffsets (latest) of ``partition`` naming ``current_epoch``."""

    def fields(version: int) -> Any:
        mod = request_module(2, version)
        part = build(mod.ListOffsetsPartition, partition_index=partition,
                     current_leader_epoch=current_epoch, timestamp=-1)
        return build(mod.ListOffsetsRequest, replica_id=-1, isolation_level=0, timeout=5000,
                     topics=(build(mod.ListOffsetsTopic, name=topic, partitions=(part,)),))

    return int(_raw(broker, 2, fields).topics[0].partitions[0].error_code)


def _raw_produce(broker: BrokerProcess, topic: str) -> int:
    """The error code of an acks=1 Produce of one record to partition 0."""
    batch = build_batch([(None, b"raw", (), int(time.time() * 1000))])

    def fields(version: int) -> Any:
        mod = request_module(0, version)
        data = build(mod.PartitionProduceData, index=0, records=batch)
        return build(mod.ProduceRequest, transactional_id=None, acks=1, timeout=10_000,
                     topic_data=(build(mod.TopicProduceData, name=topic, partition_data=(data,)),))

    return int(_raw(broker, 0, fields).responses[0].partition_responses[0].error_code)


def _leader_epoch(cluster: Cluster, topic: str) -> int | None:
    return _partition_epoch(cluster, topic, 0)


def _partition_epoch(cluster: Cluster, topic: str, partition: int) -> int | None:
    """The leader epoch of a partition in the bucket's metadata."""
    for t in cluster.metadata().get("topics", []):
        if t["name"] == topic:
            return int(t["partition_states"][partition]["leader_epoch"])
    return None


def test_a_partition_moves_to_another_broker_under_load(s3_cluster: Cluster) -> None:
    bootstrap = s3_cluster.bootstrap
    _create(bootstrap, NewTopic("moving", num_partitions=1, replica_assignment=[[1]],
                                config={"segment.bytes": "32768"}))
    acked: list[tuple[int, bytes]] = []
    failed: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked.append((msg.offset(), msg.value()))

    stop = threading.Event()  # stop producing
    produced = threading.Event()  # the producer has flushed: every answer is in
    consumed: dict[int, bytes] = {}

    def produce() -> None:
        # batches under the topic's 32 KiB segments even when records queue up during the move
        # (a larger one is RECORD_LIST_TOO_LARGE, in Kafka too)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384})
        i = 0
        while not stop.is_set():
            producer.produce("moving", value=b"rec-%06d-" % i + b"x" * 100, callback=on_delivery)
            producer.poll(0)
            i += 1
            time.sleep(0.002)  # a steady ~300 records/s
        producer.flush(TIMEOUT_S)

    def consume() -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "moving-reader",
                             "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition("moving", 0, 0)])
        deadline = float("inf")
        while not produced.is_set() or len(consumed) < max((o for o, _ in acked), default=-1) + 1:
            if produced.is_set() and deadline == float("inf"):
                deadline = time.monotonic() + TIMEOUT_S
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                consumed[msg.offset()] = msg.value()
            if time.monotonic() > deadline:
                break
        consumer.close()

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    try:
        s3_cluster.wait_for("some segments in the bucket", lambda: _remote_start(s3_cluster, 1))
        out = subprocess.run(
            ["python", "-m", "service", "topics", "reassign", "moving", "--partition", "0",
             "--replicas", "3", "--bootstrap-server", bootstrap],
            capture_output=True, text=True, timeout=TIMEOUT_S, env=subprocess_env(), check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        s3_cluster.wait_for("the move", lambda: _leaders(bootstrap, "moving") == {0: 3}, TIMEOUT_S)
        listed = subprocess.run(
            ["python", "-m", "service", "topics", "reassign", "--list", "--bootstrap-server", bootstrap],
            capture_output=True, text=True, timeout=TIMEOUT_S, env=subprocess_env(), check=False,
        )
        assert listed.returncode == 0 and "moving" not in listed.stdout, listed.stdout
        moved_at = len(acked)
        s3_cluster.wait_for("records acknowledged by the new leader", lambda: len(acked) > moved_at + 200)
    finally:
        stop.set()
        threads[0].join(TIMEOUT_S * 2)
        produced.set()
        threads[1].join(TIMEOUT_S * 2)
    assert not failed, failed[:5]
    offsets = [o for o, _ in acked]
    assert len(set(offsets)) == len(offsets)  # each offset acknowledged once
    # the log is dense (librdkafka's default producer is not idempotent: a batch retried
    # after the leader moved may be in the log twice, its first copy unacknowledged)
    assert sorted(consumed) == list(range(len(consumed)))
    lost = [o for o, v in acked if consumed.get(o) != v]
    assert not lost, f"acknowledged records lost: {lost[:20]} ({len(lost)}; read {len(consumed)})"
    assert len(consumed) >= moved_at + 200  # the consumer followed the leader to broker 3
    state = _http_json(s3_cluster.brokers[3], "/v1/topics/moving/partitions")["partitions"][0]
    # broker 3 took the tiered part from the bucket: its local log starts after it
    assert state["local_log_start_offset"] > 0
    assert state["log_start_offset"] == 0
    assert not (s3_cluster.brokers[1].data_dir / "logs" / "moving-0").exists()


def _remote_start(cluster: Cluster, node: int) -> bool:
    try:
        parts = _http_json(cluster.brokers[node], "/v1/topics/moving/partitions")["partitions"]
    except OSError:
        return False
    return bool(parts) and parts[0]["remote_segments"] >= 2


def test_a_broker_with_the_node_id_of_a_live_one_is_refused(
    s3_cluster: Cluster, tmp_path: Path
) -> None:
    live = s3_cluster.brokers[2]
    twin = BrokerProcess(tmp_path / "twin", free_port(), sets=FAST,
                         args=["--node-id", "2", *live.args[2:]])
    try:
        try:
            twin.start()  # it may listen before it is refused, or be refused first
        except RuntimeError:
            pass
        assert twin.proc is not None
        code = twin.proc.wait(TIMEOUT_S)
    finally:
        twin.kill()
    assert code != 0
    assert "node.id 2 is already held by a live broker" in twin.log_text()
    assert live.running
    s3_cluster.wait_for("broker 2 still in Metadata",  # any broker answers: one may be a poll behind
                        lambda: 2 in _admin(s3_cluster.bootstrap).list_topics(timeout=TIMEOUT_S).brokers,
                        TIMEOUT_S)


# --------------------------------------------------------------------------- brokers killed


def test_the_active_controller_killed_hands_over_within_the_lease(start_cluster: Any) -> None:
    cluster = start_cluster(3)  # a file:// store
    bootstrap = cluster.bootstrap
    _create(bootstrap, NewTopic("before", num_partitions=3, replication_factor=1))
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(90):
        producer.produce("before", value=b"v%d" % i)
    assert producer.flush(TIMEOUT_S) == 0
    assert len(_consume_all(bootstrap, "before", 90, "before-g")) == 90  # across all three

    old = cluster.controller_id()
    old_epoch = int(cluster.lease()["epoch"])
    led_by_old = next(p for p, leader in _leaders(bootstrap, "before").items() if leader == old)
    epoch_before = _partition_epoch(cluster, "before", led_by_old)
    cluster.kill(old)
    killed_at = time.monotonic()
    # the brokers still up keep serving their partitions while the lease runs out (acks=all)
    acked: list[bytes] = []
    # (the dead broker's partition may already show no leader: it is fenced within ms now)
    survivor_partitions = [p for p, leader in _leaders(bootstrap, "before").items() if leader not in (old, -1)]
    during = Producer({"bootstrap.servers": cluster.live_bootstrap(), "acks": "all"})
    for i in range(60):
        during.produce("before", value=b"during-%d" % i, partition=survivor_partitions[i % len(survivor_partitions)],
                       on_delivery=lambda err, msg: err is None and acked.append(msg.value()))
    assert during.flush(TIMEOUT_S) == 0 and len(acked) == 60
    new = cluster.wait_for("a new controller", lambda: (h := cluster.controller_id()) not in (old, -1)
                           and h, LEASE_S + 10, 0.05)
    took_over_s = time.monotonic() - killed_at
    assert took_over_s <= LEASE_S + 2, f"the lease was taken over after {took_over_s:.1f} s"

    live = cluster.live_bootstrap()

    def created() -> bool:
        try:
            _create(live, NewTopic("after", num_partitions=2, replication_factor=1))
        except Exception:  # noqa: BLE001 - retried until the new controller serves
            return False
        return True

    cluster.wait_for("a topic created through the new controller", created, TIMEOUT_S, 0.2)

    cluster.restart(old)  # rejoins as a plain broker
    assert cluster.controller_id() == new
    # its partition is back (once the metadata naming it leader reaches the answering broker),
    # at a new leader epoch: the old one is fenced (FENCED_LEADER_EPOCH)
    cluster.wait_for(f"broker {old} leading its partition again",
                     lambda: _leaders(bootstrap, "before")[led_by_old] == old)
    assert _partition_epoch(cluster, "before", led_by_old) > epoch_before
    assert _list_offsets_partition(cluster.brokers[old], "before", led_by_old, epoch_before) == 74
    assert {_controller_named(b) for b in cluster.brokers.values()} == {new}
    cluster.wait_for(f"broker {old} back in Metadata",  # any broker answers: one may be a poll behind
                     lambda: old in _admin(bootstrap).list_topics(timeout=TIMEOUT_S).brokers, TIMEOUT_S)
    read_back = set(_consume_all(bootstrap, "before", 150, "before-again").values())
    assert set(acked) <= read_back and len(read_back) == 150  # every acknowledged record

    # a metadata write stamped with the old controller's epoch is refused
    committer = MetadataCommitter(ObjectStoreMetadataStore(FileSystemObjectStore(cluster.store_dir)))
    snapshot = committer.read()
    assert snapshot is not None and snapshot.metadata.controller_epoch > old_epoch
    stale: ClusterMetadata = snapshot.metadata.without_topic("after")
    with pytest.raises(ControllerFencedError):
        committer.commit(snapshot, stale, controller_epoch=old_epoch, controller_id=old)
    assert "after" in _admin(bootstrap).list_topics(timeout=TIMEOUT_S).topics


def test_a_topic_created_through_one_broker_is_known_at_once_to_the_others(
    start_cluster: Any,
) -> None:
    """No broker answers "unknown" for a topic committed before the request, though its
    poll of the metadata has not come round: a consumer group's leader that heard
    "unknown" from the coordinator would assign nothing until its next metadata refresh
    (minutes). The polls are made to never come round here."""
    cluster = start_cluster(3, sets={"metadata.poll.interval.ms": "600000"})
    controller = cluster.controller_id()
    via, asked = (n for n in cluster.brokers if n != controller)
    _create(cluster.brokers[via].bootstrap, NewTopic("fresh", num_partitions=2, replication_factor=1))

    def metadata(version: int) -> Any:
        mod = request_module(3, version)
        wanted = build(mod.MetadataRequestTopic, topic_id=uuid.UUID(int=0), name="fresh")
        return build(mod.MetadataRequest, topics=(wanted,), allow_auto_topic_creation=False,
                     include_cluster_authorized_operations=False,
                     include_topic_authorized_operations=False)

    answer = _raw(cluster.brokers[asked], 3, metadata).topics[0]
    assert (answer.name, int(answer.error_code)) == ("fresh", 0)
    assert sorted(p.partition_index for p in answer.partitions) == [0, 1]
    assert all(p.leader_id in cluster.brokers for p in answer.partitions)


def test_a_group_member_lives_through_the_kill_of_its_coordinator_and_continues_from_its_commits(
    start_cluster: Any,
) -> None:
    """A member commits, the broker leading its ``__consumer_offsets`` partition is killed -9
    and stays down until that partition is offline, then comes back: the same member (never
    closed, polling throughout) finds the coordinator again, which has reloaded its commits; a
    second member joins, and each goes on from the commits made before the kill. Every record
    is read once, and the last commits are where the log ends. (Issue #16's case: one replica
    of ``__consumer_offsets``, so its partition is offline while its broker is down;
    tests/e2e/test_replication.py has the replicated case.)"""
    cluster = start_cluster(3, sets={"offsets.topic.replication.factor": "1"})
    bootstrap = cluster.bootstrap
    client = _admin(bootstrap)
    group = "survivors"

    def find_coordinator() -> int | None:
        try:
            found = client.describe_consumer_groups([group])[group].result(TIMEOUT_S).coordinator
        except Exception:  # noqa: BLE001 - __consumer_offsets is being created
            return None
        return found.id if found is not None and found.id >= 0 else None

    coordinator = cluster.wait_for("a coordinator", find_coordinator)
    elsewhere = [n for n in cluster.brokers if n != coordinator]
    survivors = ",".join(cluster.brokers[n].bootstrap for n in elsewhere)
    _create(bootstrap, NewTopic("work", num_partitions=2, replica_assignment=[[n] for n in elsewhere]))
    producer = Producer({"bootstrap.servers": bootstrap})

    def produce(first: int, count: int) -> None:
        for i in range(first, first + count):
            producer.produce("work", key=b"%d" % i, value=b"job-%d" % i, partition=i % 2)
        assert producer.flush(TIMEOUT_S) == 0

    work = [TopicPartition("work", p) for p in range(2)]
    members: list[Consumer] = []
    assigned: dict[int, list[list[int]]] = {}
    read: list[tuple[int, int, int, bytes]] = []  # (member, partition, offset, value)

    def join() -> Consumer:
        n = len(members)
        member = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
        member.subscribe(["work"], on_assign=lambda c, ps: assigned.setdefault(n, []).append(
            sorted(p.partition for p in ps)))
        members.append(member)
        return member

    def poll_all() -> None:
        for n, member in enumerate(members):
            msg = member.poll(0.1)
            if msg is not None and msg.error() is None:
                read.append((n, msg.partition(), msg.offset(), msg.value()))

    def committed(member: Consumer) -> dict[int, int] | None:
        try:
            return {tp.partition: tp.offset for tp in member.committed(work, timeout=5)}
        except Exception:  # noqa: BLE001 - no coordinator yet, or it is still loading
            return None

    first = join()
    produce(0, 100)
    cluster.wait_for("the first 100 read", lambda: poll_all() or len(read) == 100, TIMEOUT_S, 0)
    first.commit(asynchronous=False)
    assert committed(first) == {0: 50, 1: 50}

    coordinated = [p for p, leader in _leaders(survivors, "__consumer_offsets").items() if leader == coordinator]
    cluster.kill(coordinator)

    def offline() -> bool:
        poll_all()  # the member stays in its poll loop through the outage
        leaders = _leaders(survivors, "__consumer_offsets")
        return all(leaders[p] == -1 for p in coordinated)

    cluster.wait_for("the coordinator's partitions offline", offline, TIMEOUT_S)
    cluster.restart(coordinator)  # replication factor 1: the partition returns with its broker
    # the commits made before the kill, from the coordinator's reloaded log
    assert cluster.wait_for("the commits read back", lambda: poll_all() or committed(first)) == {0: 50, 1: 50}

    second = join()  # a rebalance on the reloaded coordinator: the members split the partitions
    cluster.wait_for("one partition each", lambda: poll_all() or (
        len(assigned.get(1, [])) >= 1 and assigned[0][-1] != [0, 1]), TIMEOUT_S, 0)
    produce(100, 100)
    cluster.wait_for("all 200 read", lambda: poll_all() or len(read) >= 200, TIMEOUT_S, 0)
    for member in members:
        member.commit(asynchronous=False)
    assert committed(second) == {0: 100, 1: 100}
    for member in members:
        member.close()
    assert assigned[0][0] == [0, 1] and sorted(assigned[0][-1] + assigned[1][-1]) == [0, 1]
    assert sorted(v for *_, v in read) == sorted(b"job-%d" % i for i in range(200))  # each once, none lost
    after_kill = [(p, o) for n, p, o, _ in read[100:]]
    for partition in range(2):  # each partition resumed exactly at the commit made before the kill
        assert min(o for p, o in after_kill if p == partition) == 50


def _coordinator(broker: BrokerProcess, key: str, key_type: int) -> int:
    """The node FindCoordinator names for a group id (key type 0) or a transactional id (1);
    -1: none yet."""
    answer = _raw(broker, 10, {"key": key, "key_type": key_type, "coordinator_keys": (key,)})
    found = answer.coordinators[0] if getattr(answer, "coordinators", None) else answer
    return int(found.node_id) if int(found.error_code) == 0 else -1


def _read_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every committed value of ``topic`` (read_committed, from the start to the end)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-reader",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is None:
                values.append(msg.value())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
    finally:
        consumer.close()
    assert len(at_end) == partitions, "the read_committed consumer did not reach the end"
    return values


def test_transactions_span_brokers_and_survive_their_coordinator_killed(start_cluster: Any) -> None:
    """The transaction coordinator is the leader of the id's __transaction_state partition;
    its markers reach partitions led by the other brokers (WriteTxnMarkers). Killed with a
    transaction open, it comes back with its partition (replication factor 1): the next
    producer of the id aborts that transaction and commits its own."""
    cluster = start_cluster(3)
    bootstrap = cluster.bootstrap
    tid = "spanning"
    coordinator = cluster.wait_for("a transaction coordinator",
                                   lambda: (n := _coordinator(cluster.brokers[1], tid, 1)) >= 0 and [n])[0]
    elsewhere = [n for n in cluster.brokers if n != coordinator]
    _create(bootstrap, NewTopic("ledger", num_partitions=2, replica_assignment=[[n] for n in elsewhere]))
    _known_everywhere(cluster, "ledger")

    def send(producer: Producer, label: str) -> None:
        producer.begin_transaction()
        for i in range(20):
            producer.produce("ledger", value=b"%s-%d" % (label.encode(), i), partition=i % 2)

    first = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    first.init_transactions(TIMEOUT_S)
    send(first, "one")
    first.commit_transaction(TIMEOUT_S)  # COMMIT markers on two other brokers
    send(first, "two")
    assert first.flush(TIMEOUT_S) == 0  # in the logs, not committed

    cluster.kill(coordinator)
    cluster.restart(coordinator)
    second = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    second.init_transactions(TIMEOUT_S)  # fences `first`; its open transaction is aborted
    send(second, "three")
    # offsets in the transaction: TxnOffsetCommit to the group's coordinator, on another broker
    # than the transaction's, which sends the marker to it (WriteTxnMarkers)
    group_id = next(g for g in (f"ledger-app-{i}" for i in range(100))
                    if _coordinator(cluster.brokers[1], g, 0) not in (-1, coordinator))
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id})
    second.send_offsets_to_transaction([TopicPartition("ledger", 0, 7)], group.consumer_group_metadata(),
                                       TIMEOUT_S)
    second.commit_transaction(TIMEOUT_S)

    values = _read_committed(bootstrap, "ledger", 2)
    expected = {b"%s-%d" % (label, i) for label in (b"one", b"three") for i in range(20)}
    assert sorted(values) == sorted(expected)  # nothing of "two", each committed record once
    committed = _committed_retrying(group, TopicPartition("ledger", 0))
    group.close()
    assert committed.offset == 7


def _committed_retrying(consumer: Consumer, tp: TopicPartition) -> TopicPartition:
    """``committed()``, again while the answer is a retriable coordinator error (the group's
    coordinator may move as leaderships settle after the restart; librdkafka's committed()
    hands NOT_COORDINATOR back instead of looking the coordinator up again, so an
    application retries it, as here)."""
    from confluent_kafka import KafkaError, KafkaException

    moving = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
              KafkaError.COORDINATOR_NOT_AVAILABLE}
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            return consumer.committed([tp], timeout=TIMEOUT_S)[0]
        except KafkaException as exc:
            if exc.args[0].code() not in moving or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _free_ports(count: int) -> int:
    """The first of ``count`` consecutive free ports on 127.0.0.1."""
    for _ in range(50):
        base = free_port()
        if base + count > 65535:
            continue
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no consecutive free ports")


def test_strata_up_brokers_3_starts_a_cluster_and_ctrl_c_stops_it(tmp_path: Path) -> None:
    base = _free_ports(3)
    cmd = [sys.executable, "-m", "service", "up", "--brokers", "3", "--listen", f"127.0.0.1:{base}",
           "--http", "off", "--data-dir", str(tmp_path / "strata-data")]
    for key, value in FAST.items():
        cmd += ["--set", f"{key}={value}"]
    proc = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    bootstrap = ",".join(f"127.0.0.1:{base + k}" for k in range(3))
    try:
        def three_brokers() -> bool:
            try:
                return sorted(_admin(bootstrap).list_topics(timeout=2).brokers) == [1, 2, 3]
            except Exception:  # noqa: BLE001 - not listening yet
                return False

        deadline = time.monotonic() + 45
        while not three_brokers():
            assert proc.poll() is None and time.monotonic() < deadline, "the cluster did not start"
            time.sleep(0.3)
        _create(bootstrap, NewTopic("local", num_partitions=3, replication_factor=1))
        assert sorted(_leaders(bootstrap, "local").values()) == [1, 2, 3]
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        out, _ = proc.communicate(timeout=60)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert "all 3 broker(s) stopped" in text
    assert all((tmp_path / "strata-data" / f"broker-{k}" / "meta.properties").exists() for k in (1, 2, 3))
