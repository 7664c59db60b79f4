"""Diskless topics on three real brokers and the moto S3 server (issue 35, ADR 0027).

Every broker takes Produce and Fetch for a diskless partition; the records go writer →
bucket → reader, offsets are given by the partition's sequencer (its leader). The faults
are real: kill -9 of the sequencer and of a writer during produce, a fresh broker that
never saw the topic. Every test counts what was acknowledged and reads it back.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_fixtures import Cluster
from tests.e2e import helpers
from tests.e2e.helpers import CLIENT_TIMEOUT_S
from tests.s3_fixtures import MotoServer, s3_credentials_env

pytestmark = pytest.mark.timeout(300)

#: short windows so merges, deadlines and collections happen within a test; a session of
#: 6 s, not FAST's 3: moto serves this module from the test's own process, one request at a
#: time, and under CI's load a metadata read took it 4 s, so that every broker, blind for two
#: thirds of a 3 s session, stopped leading and asked to be fenced (a killed broker is still
#: found at once: its listener refuses connections)
SETS = {
    "broker.session.timeout.ms": "6000",
    "diskless.batch.ms": "40",
    "diskless.commit.deadline.ms": "3000",
    "diskless.orphan.grace.ms": "12000",
    "diskless.merge.interval.ms": "1500",
    "diskless.collect.interval.ms": "1000",
    "log.segment.bytes": "1048576",
}


#: one rack per broker: a client naming its rack (``strata_rack=`` in its client.id) writes
#: through that broker
RACKS = {1: "a", 2: "b", 3: "c", 4: "d"}


@pytest.fixture(scope="module")
def cluster(module_start_cluster: Any, moto_server: MotoServer) -> Iterator[Cluster]:
    """Brokers 1-3 started on a bucket of their own; broker 4 configured but left stopped
    (the fresh broker). The test credentials stay set for the module's brokers and reads."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in s3_credentials_env.__wrapped__(patch).items():  # type: ignore[attr-defined]
            patch.setenv(name, value)
        moto_server.heal()
        moto_server.start()
        c: Cluster = module_start_cluster(4, s3=moto_server.create_bucket(), sets=SETS, start=False,
                                          racks=RACKS)
        yield c.start(1, 2, 3)


def _bootstraps(cluster: Cluster, nodes: list[int]) -> str:
    return ",".join(cluster.brokers[n].bootstrap for n in nodes)


def _create(cluster: Cluster, name: str, partitions: int = 1, **config: str) -> None:
    for node in (1, 2, 3):  # joined and unfenced, also after a test before this one killed brokers
        cluster.wait_ready(node)
    client = helpers.admin(_bootstraps(cluster, [1, 2, 3]))
    futures = client.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=3,
                                             config={"diskless.enable": "true", **config})],
                                   request_timeout=CLIENT_TIMEOUT_S)
    for future in futures.values():
        future.result(timeout=CLIENT_TIMEOUT_S + 5)
    for node in (1, 2, 3):  # every broker knows it (a raw request goes to one broker, with no retry)
        helpers.wait_until(lambda node=node: _knows(cluster.brokers[node].admin_url, name),
                           f"broker {node} knows topic {name}")
    # and each partition is answered: a broker whose metadata has not caught up answers
    # UNKNOWN_TOPIC_OR_PARTITION, and one still taking the partition over for longer than a
    # read waits NOT_LEADER_OR_FOLLOWER; clients retry both, but not librdkafka's watermark query
    for p in range(partitions):
        helpers.wait_until(lambda p=p: _answers_list_offsets(cluster.brokers[1].bootstrap, name, p),
                           f"partition {p} of {name} sequenced")


def _knows(admin_url: str, topic: str) -> bool:
    """Whether the broker's own metadata holds ``topic`` (its admin API answers from it;
    Metadata through a client may be answered by any broker)."""
    try:
        with urllib.request.urlopen(f"{admin_url}/v1/topics/{topic}", timeout=CLIENT_TIMEOUT_S):
            return True
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
        return False


def _answers_list_offsets(bootstrap: str, topic: str, partition: int) -> bool:
    try:
        helpers.watermarks(bootstrap, topic, partition)
    except KafkaException as exc:
        if exc.args[0].code() not in (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise
        return False
    return True


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, **conf: Any) -> dict[bytes, int]:
    """Each value's acknowledged offset (every one must be acknowledged)."""
    acked: dict[bytes, int] = {}
    errors: list[Any] = []
    producer = helpers.producer(bootstrap, **{"enable.idempotence": True, "linger.ms": 2, **conf})

    def done(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.value()] = msg.offset()

    for value in values:
        producer.produce(topic, value=value, partition=partition, on_delivery=done)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return acked


def _read_all(bootstrap: str, topic: str, count: int, partition: int = 0) -> list[tuple[int, bytes]]:
    return [(m.offset(), m.value()) for m in helpers.consume(bootstrap, topic, [partition], count, timeout=90)]


def _topic(cluster: Cluster, topic: str) -> dict[str, Any]:
    return next(t for t in cluster.metadata()["topics"] if t["name"] == topic)


def _sequencer(cluster: Cluster, topic: str, partition: int = 0) -> int:
    """The partition's leader in the bucket's metadata: its sequencer (Metadata answers name
    the broker asked); -1 when the image read does not hold the topic."""
    found = [t for t in cluster.metadata().get("topics", ()) if t["name"] == topic]
    return int(found[0]["partition_states"][partition]["leader"]) if found else -1


def test_every_broker_takes_writes_to_one_partition_and_offsets_are_dense(cluster: Cluster) -> None:
    topic = helpers.topic_name("diskless-any")
    _create(cluster, topic)
    sequencer = _sequencer(cluster, topic)
    plain = helpers.admin(cluster.brokers[1].bootstrap).list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    assert plain.topics[topic].partitions[0].leader == sequencer  # no rack named: the sequencer
    acked: dict[bytes, int] = {}
    writers = {}
    for node in (1, 2, 3):  # a client in broker N's rack writes through broker N
        rack = {"client.id": f"app-1,strata_rack={RACKS[node]}"}
        named = helpers.admin(cluster.bootstrap).list_topics(topic, timeout=CLIENT_TIMEOUT_S)
        local = AdminClient({"bootstrap.servers": cluster.bootstrap, **rack}).list_topics(topic, timeout=10)
        writers[node] = local.topics[topic].partitions[0].leader
        assert named.topics[topic].partitions[0].leader == sequencer
        acked |= _produce(cluster.bootstrap, topic, [b"%d-%d" % (node, i) for i in range(150)], **rack)
    assert writers == {1: 1, 2: 2, 3: 3}
    wal = {k.key.split("/")[-2] for k in cluster.object_store().list("diskless/wal/")}
    assert wal >= {"1", "2", "3"}, f"write-ahead objects only from brokers {wal}"
    assert len(acked) == 450
    assert sorted(acked.values()) == list(range(450)), "offsets given twice or skipped"
    for node in (1, 2, 3):  # and any broker serves every record, at the offset it was acknowledged with
        read = [(m.offset(), m.value()) for m in helpers.consume(
            cluster.bootstrap, topic, [0], 450, timeout=90, **{"client.id": f"strata_rack={RACKS[node]}"})]
        assert [offset for offset, _ in read] == list(range(450))
        assert {value: offset for offset, value in read} == acked
    low, high = helpers.watermarks(cluster.brokers[2].bootstrap, topic)
    assert (low, high) == (0, 450)


class _Load:
    """A producer thread writing numbered values as fast as acknowledgements allow, counting
    what was acknowledged (and when) and what failed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked: dict[bytes, int] = {}
        self.failed: list[bytes] = []
        self.ack_times: list[float] = []
        self._stop = threading.Event()
        self._producer = helpers.producer(bootstrap, **{"enable.idempotence": True, "linger.ms": 5,
                                                        "message.timeout.ms": 60_000,
                                                        "queue.buffering.max.messages": 20_000})
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _done(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(msg.value())
        else:
            self.acked[msg.value()] = msg.offset()
            self.ack_times.append(time.monotonic())

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(self._topic, value=b"v-%08d" % i, partition=0, on_delivery=self._done)
                i += 1
            except BufferError:  # the queue is full (a fault): wait, never spin (moto shares this process)
                self._producer.poll(0.05)
            self._producer.poll(0.002)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(90) == 0

    def abandon(self) -> None:
        """Stop producing without waiting for what is queued (a failed test: the module's next
        tests must not share the cluster with this load)."""
        self._stop.set()
        self._thread.join(30)
        self._producer.purge()
        self._producer.flush(5)

    def longest_gap(self, since: float) -> float:
        times = sorted(t for t in self.ack_times if t >= since)
        return max((b - a for a, b in zip(times, times[1:])), default=0.0)


def test_kill_9_of_the_sequencer_then_of_a_writer_loses_no_acknowledged_record(cluster: Cluster) -> None:
    topic = helpers.topic_name("diskless-kill")
    _create(cluster, topic)
    load = _Load(_bootstraps(cluster, [1, 2, 3]), topic)
    started = time.monotonic()
    try:
        helpers.wait_until(lambda: len(load.acked) > 300, "records acknowledged before the kill", timeout=60)
        sequencer = _sequencer(cluster, topic)
        cluster.kill(sequencer)  # kill -9, mid-produce
        helpers.wait_until(lambda: _sequencer(cluster, topic) not in (sequencer, -1), "a new sequencer", timeout=60)
        count = len(load.acked)
        helpers.wait_until(lambda: len(load.acked) > count + 300, "records acknowledged by the new sequencer",
                           timeout=60)
        cluster.restart(sequencer)
        now = helpers.wait_until(lambda: max(_sequencer(cluster, topic), 0), "the sequencer in the metadata",
                                 timeout=30)
        writer = next(n for n in (1, 2, 3) if n not in (sequencer, now))
        cluster.kill(writer)  # a broker that only writes and reads for this partition
        count = len(load.acked)
        helpers.wait_until(lambda: len(load.acked) > count + 300, "records acknowledged after the writer died",
                           timeout=60)
        cluster.restart(writer)
        load.stop()
    except BaseException:
        # what the brokers said, and the cluster whole again for the module's next tests
        # (a failure here once left a broker down and failed the eight after it)
        load.abandon()
        for node in (1, 2, 3):
            print(f"--- broker {node}, the end of its log ---\n{cluster.brokers[node].log_tail(6000)}")
            if not cluster.brokers[node].running:
                cluster.restart(node)
        raise
    assert not load.failed, f"{len(load.failed)} records failed (delivery timeout 60 s): {load.failed[:3]}"
    high = helpers.watermarks(cluster.brokers[writer].bootstrap, topic)[1]
    read = _read_all(_bootstraps(cluster, [1, 2, 3]), topic, high)
    offsets = [offset for offset, _ in read]
    assert offsets == list(range(high)), "offsets are not dense"
    values = Counter(value for _, value in read)
    assert not [v for v, n in values.items() if n > 1], "a record was written twice"
    assert {v: o for o, v in read if v in load.acked} == load.acked, "an acknowledged record is missing or moved"
    gap = load.longest_gap(started)
    print(f"diskless kill -9: {len(load.acked)} acknowledged, read back exactly once; longest time "
          f"without an acknowledgement {gap:.1f} s")
    assert gap < 30


def test_a_fresh_broker_serves_a_diskless_topic_at_once(cluster: Cluster) -> None:
    topic = helpers.topic_name("diskless-fresh")
    _create(cluster, topic, partitions=2)
    acked = {p: _produce(_bootstraps(cluster, [1, 2, 3]), topic, [b"%d-%d" % (p, i) for i in range(200)], p)
             for p in (0, 1)}
    cluster.start(4)  # never saw the topic, holds nothing of it
    try:
        for p in (0, 1):
            read = _read_all(cluster.brokers[4].bootstrap, topic, 200, p)
            assert {v: o for o, v in read} == acked[p]
        more = _produce(cluster.brokers[4].bootstrap, topic, [b"fresh-%d" % i for i in range(50)], 0)
        assert sorted(more.values()) == list(range(200, 250))
    finally:
        cluster.stop(4)


def test_merged_segments_serve_old_offsets_and_the_collector_removes_merged_objects(cluster: Cluster) -> None:
    from remote_tier.diskless.wal import WalKey
    from remote_tier.manifest import ManifestStore

    topic = helpers.topic_name("diskless-merge")
    _create(cluster, topic)
    acked = _produce(_bootstraps(cluster, [1, 2, 3]), topic, [b"m-%d" % i for i in range(500)])
    store = cluster.object_store()
    topic_id = _topic(cluster, topic)["topic_id"]
    manifests = ManifestStore(store, "")

    def merged_end() -> int:
        loaded = manifests.load(topic_id, 0)
        return loaded[0].next_offset if loaded is not None else 0

    helpers.wait_until(lambda: merged_end() == 500, "every offset merged into tiered segments", timeout=60)
    manifest = manifests.load(topic_id, 0)[0]  # type: ignore[index]
    assert manifest.segments[0].base_offset == 0 and manifest.segments[-1].last_offset == 499
    read = _read_all(cluster.brokers[3].bootstrap, topic, 500)  # from the merged segments
    assert {v: o for o, v in read} == acked
    written = {k.key for k in store.list("diskless/wal/")}
    assert written, "no write-ahead object in the bucket"
    newest = max(WalKey.parse(k).created_ms for k in written)
    helpers.wait_until(lambda: not {k.key for k in store.list("diskless/wal/")} & written
                       or time.time() * 1000 - newest > 40_000, "merged objects collected", timeout=60)
    assert not {k.key for k in store.list("diskless/wal/")} & written, "merged objects were not collected"
    assert {v: o for o, v in _read_all(cluster.brokers[1].bootstrap, topic, 500)} == acked


def test_transactions_on_a_diskless_topic_fail_clearly_and_write_nothing(cluster: Cluster) -> None:
    topic = helpers.topic_name("diskless-txn")
    _create(cluster, topic)
    producer = helpers.producer(_bootstraps(cluster, [1, 2, 3]), **{"transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    errors: list[Any] = []
    producer.produce(topic, value=b"t", partition=0, on_delivery=lambda err, msg: errors.append(err))
    with pytest.raises(Exception) as raised:
        producer.commit_transaction(30)
    producer.flush(5)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.INVALID_TXN_STATE, errors
    assert "diskless" in str(errors[0]) or "INVALID_TXN_STATE" in str(raised.value)
    assert helpers.watermarks(cluster.brokers[1].bootstrap, topic) == (0, 0)


def test_diskless_enable_cannot_be_changed_after_creation(cluster: Cluster) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    topic = helpers.topic_name("diskless-immutable")
    _create(cluster, topic)
    client = helpers.admin(_bootstraps(cluster, [1, 2, 3]))
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("diskless.enable", "false", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="cannot be changed"):
        for future in client.incremental_alter_configs([resource]).values():
            future.result(timeout=CLIENT_TIMEOUT_S)
    classic = helpers.topic_name("classic-stays-classic")
    helpers.create_topic(_bootstraps(cluster, [1, 2, 3]), classic)
    resource = ConfigResource("topic", classic, incremental_configs=[
        ConfigEntry("diskless.enable", "true", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="cannot be changed"):
        for future in client.incremental_alter_configs([resource]).values():
            future.result(timeout=CLIENT_TIMEOUT_S)


def test_list_offsets_by_time_and_a_consumer_group_on_a_diskless_topic(cluster: Cluster) -> None:
    from confluent_kafka import TopicPartition

    topic = helpers.topic_name("diskless-offsets")
    _create(cluster, topic)
    base = int(time.time() * 1000) - 100_000
    producer = helpers.producer(cluster.brokers[1].bootstrap, **{"linger.ms": 0})
    for i in range(100):  # timestamps one second apart, given by the producer
        producer.produce(topic, value=b"t-%d" % i, partition=0, timestamp=base + i * 1000)
        producer.flush(30)
    consumer = helpers.consumer(cluster.brokers[2].bootstrap, **{"group.id": topic})
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 41_500)], timeout=CLIENT_TIMEOUT_S)
        assert found[0].error is None and found[0].offset == 42
        late = consumer.offsets_for_times([TopicPartition(topic, 0, base + 500_000)], timeout=CLIENT_TIMEOUT_S)
        assert late[0].offset == -1  # after every record: none (the end)
        consumer.subscribe([topic])
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while len(got) < 100 and time.monotonic() < deadline:
            got += [m for m in consumer.consume(100, timeout=0.5) if m.error() is None]
        assert [m.offset() for m in got] == list(range(100))
        consumer.commit(offsets=[TopicPartition(topic, 0, 100)], asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=CLIENT_TIMEOUT_S)
        assert committed[0].offset == 100
    finally:
        consumer.close()


def test_a_deleted_diskless_topic_leaves_nothing_readable_and_its_manifest_goes(cluster: Cluster) -> None:
    from remote_tier.manifest import ManifestStore

    topic = helpers.topic_name("diskless-deleted")
    _create(cluster, topic)
    _produce(_bootstraps(cluster, [1, 2, 3]), topic, [b"d-%d" % i for i in range(100)])
    topic_id = _topic(cluster, topic)["topic_id"]
    manifests = ManifestStore(cluster.object_store(), "")
    helpers.wait_until(lambda: manifests.load(topic_id, 0) is not None, "the partition's manifest", timeout=30)
    client = helpers.admin(_bootstraps(cluster, [1, 2, 3]))
    for future in client.delete_topics([topic], request_timeout=CLIENT_TIMEOUT_S).values():
        future.result(CLIENT_TIMEOUT_S)
    helpers.wait_until(lambda: manifests.load(topic_id, 0) is None, "the manifest deleted", timeout=30)
    # (a producer's metadata refresh may auto-create the name again: a new topic, a new id)
    assert topic_id not in {t["topic_id"] for t in cluster.metadata()["topics"]}


def test_a_failing_bucket_during_produce_loses_and_duplicates_nothing(cluster: Cluster, moto_server: MotoServer) -> None:
    topic = helpers.topic_name("diskless-s3-fails")
    _create(cluster, topic)
    load = _Load(_bootstraps(cluster, [1, 2, 3]), topic)
    try:
        helpers.wait_until(lambda: len(load.acked) > 200, "records acknowledged before the fault", timeout=60)
        for suffix in (".wal", ".json"):  # the write-ahead objects' PUTs, then the commit slots'
            started = time.monotonic()
            failed = moto_server.fail("PUT", suffix)
            assert failed.wait(30), f"no PUT of a {suffix} object was failed"
            time.sleep(2)
            moto_server.heal()
            count = len(load.acked)
            helpers.wait_until(lambda count=count: len(load.acked) > count + 100, "acknowledged after healing",
                               timeout=60)
            back = time.monotonic() - started
            print(f"PUTs of {suffix} failed for 2 s: acknowledgements again {back:.1f} s after the fault began")
            assert back < 15, f"produce recovered only {back:.1f} s after a 2 s fault of the bucket"
    finally:
        moto_server.heal()
        load.stop()
    assert not load.failed, f"{len(load.failed)} records failed (delivery timeout 60 s): {load.failed[:3]}"
    high = helpers.watermarks(cluster.brokers[1].bootstrap, topic)[1]
    read = _read_all(_bootstraps(cluster, [1, 2, 3]), topic, high)
    assert [offset for offset, _ in read] == list(range(high)), "offsets are not dense"
    assert not [v for v, n in Counter(v for _, v in read).items() if n > 1], "a record was written twice"
    assert {v: o for o, v in read if v in load.acked} == load.acked, "an acknowledged record is missing or moved"


def test_an_idempotent_retry_through_another_broker_gets_its_first_offsets(cluster: Cluster) -> None:
    from tests.e2e import rawtxn
    from tests.e2e.rawkafka import NONE, Connection

    UNKNOWN_TOPIC_OR_PARTITION = 3  # noqa: N806

    topic = helpers.topic_name("diskless-idem")
    _create(cluster, topic)
    brokers = [Connection.to(cluster.brokers[n].bootstrap) for n in (1, 2, 3)]
    try:
        error, pid, epoch = rawtxn.init_producer_id(brokers[0])
        assert (error, epoch) == (NONE, 0)
        first = rawtxn.producer_batch([b"a", b"b"], producer_id=pid, epoch=0, sequence=0)
        second = rawtxn.producer_batch([b"c"], producer_id=pid, epoch=0, sequence=2)
        answer = rawtxn.produce(brokers[0], topic, 0, first)
        for _ in range(50):  # a broker that has not applied the new topic yet says so: as a client, retry
            if answer[0] != UNKNOWN_TOPIC_OR_PARTITION:
                break
            time.sleep(0.1)
            answer = rawtxn.produce(brokers[0], topic, 0, first)
        assert answer == (NONE, 0)
        assert rawtxn.produce(brokers[1], topic, 0, second) == (NONE, 2)
        # retries of both, each through a broker that did not write it: the first offsets
        assert rawtxn.produce(brokers[2], topic, 0, first) == (NONE, 0)
        assert rawtxn.produce(brokers[0], topic, 0, second) == (NONE, 2)
        gap = rawtxn.producer_batch([b"x"], producer_id=pid, epoch=0, sequence=9)
        assert rawtxn.produce(brokers[1], topic, 0, gap)[0] == rawtxn.OUT_OF_ORDER_SEQUENCE_NUMBER
        fetched = rawtxn.fetch(brokers[2], topic, 0, 0, isolation_level=0)
    finally:
        for conn in brokers:
            conn.close()
    assert fetched.high_watermark == 3
    assert [(b[0], b[1]) for b in rawtxn.batch_summaries(fetched.records)] == [(0, 2), (2, 1)]
