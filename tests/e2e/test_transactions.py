"""Transactions end to end: real clients on their defaults plus a transactional.id.

confluent-kafka and aiokafka commit and abort; with either client, a second
producer with the same transactional.id fences the first, and a transaction left
open past its timeout is aborted by the coordinator; the coordinator's error paths over the raw
protocol; DescribeProducers; ``strata transactions list|describe|describe-producers``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import ProducerFenced
from confluent_kafka import KafkaException, Producer
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    InvalidTopicError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)
from kafka.protocol.consumer import OffsetFetchRequest

from tests.conftest import REPO_ROOT, BrokerProcess, subprocess_env
from tests.e2e import rawcoordinator as rawtxn
from tests.e2e import rawkafka as rk
from tests.e2e.helpers import (
    consume,
    consumer,
    create_topic,
    produce_values,
    topic_name,
    wait_until,
    watermarks,
)
from tests.e2e.rawkafka import Connection

UNSTABLE_OFFSET_COMMIT = 88

SETS = {
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "transaction.max.timeout.ms": "60000",
}


@pytest.fixture(scope="module")
def txn_broker(module_start_broker: Any) -> BrokerProcess:
    return module_start_broker(sets=SETS)


def describe(bootstrap: str, tid: str) -> Any:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return admin.describe_transactions([tid])[tid]
    finally:
        admin.close()


def state(bootstrap: str, tid: str) -> str:
    return str(describe(bootstrap, tid).state.value)


def txn_producer(bootstrap: str, tid: str, **conf: Any) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **conf})
    p.init_transactions(30)
    return p


def new_topic(bootstrap: str, prefix: str) -> str:
    topic = topic_name(prefix)
    create_topic(bootstrap, topic)
    return topic


def open_transaction(bootstrap: str, tid: str, value: bytes, **conf: Any) -> tuple[str, Producer]:
    """A new topic and a producer whose open transaction has ``value`` in it (flushed)."""
    topic = new_topic(bootstrap, f"txn-{tid}")
    p = txn_producer(bootstrap, tid, **conf)
    p.begin_transaction()
    p.produce(topic, value, partition=0)
    p.flush(30)
    return topic, p


def values_of(bootstrap: str, topic: str, count: int, **conf: Any) -> list[bytes]:
    return [m.value() for m in consume(bootstrap, topic, [0], count, timeout=30, **conf)]


# --------------------------------------------------------------------------- clients


def test_confluent_kafka_commit_and_abort(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    topic = topic_name("txn-ck")
    create_topic(b, topic)
    p = txn_producer(b, "ck-1")
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, f"committed-{i}".encode(), partition=0)
    p.commit_transaction(30)
    assert state(b, "ck-1") == "CompleteCommit"
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, f"aborted-{i}".encode(), partition=0)
    p.flush(30)  # written, so the abort has something to abort
    p.abort_transaction(30)
    d = describe(b, "ck-1")
    assert (str(d.state.value), d.producer_epoch) == ("CompleteAbort", 0)
    # 5 + 3 records and one marker per transaction in the log
    assert watermarks(b, topic)[1] == 10
    got = values_of(b, topic, 8, **{"isolation.level": "read_uncommitted"})
    assert got == [f"committed-{i}".encode() for i in range(5)] + [f"aborted-{i}".encode() for i in range(3)]
    # read_committed (librdkafka's default) sees only the committed ones
    assert values_of(b, topic, 5) == [f"committed-{i}".encode() for i in range(5)]


def test_aiokafka_commit_and_abort(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    topic = new_topic(b, "txn-aio")

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=b, transactional_id="aio-1")
        await p.start()
        try:
            async with p.transaction():
                for i in range(4):
                    await p.send_and_wait(topic, f"committed-{i}".encode(), partition=0)
            await p.begin_transaction()
            await p.send_and_wait(topic, b"aborted", partition=0)
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(run())
    assert state(b, "aio-1") == "CompleteAbort"
    assert watermarks(b, topic)[1] == 7
    got = values_of(b, topic, 5, **{"isolation.level": "read_uncommitted"})
    assert got == [f"committed-{i}".encode() for i in range(4)] + [b"aborted"]

    async def read_committed() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        c = AIOKafkaConsumer(bootstrap_servers=b, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            c.assign([TopicPartition(topic, 0)])
            out: list[bytes] = []
            for _ in range(20):
                batches = await c.getmany(timeout_ms=300)
                out += [m.value for ms in batches.values() for m in ms]
                if await c.position(TopicPartition(topic, 0)) >= 7:
                    break
            return out
        finally:
            await c.stop()

    assert asyncio.run(read_committed()) == [f"committed-{i}".encode() for i in range(4)]


def test_a_second_producer_fences_the_first(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    topic, first = open_transaction(b, "fence-1", b"zombie")
    second = txn_producer(b, "fence-1")  # aborts the zombie's transaction, bumps the epoch
    d = describe(b, "fence-1")
    assert (str(d.state.value), d.producer_epoch) == ("Empty", 2)
    with pytest.raises(KafkaException) as failed:
        first.commit_transaction(30)
    assert failed.value.args[0].fatal() or "fenced" in str(failed.value).lower()
    second.begin_transaction()
    second.produce(topic, b"winner", partition=0)
    second.commit_transaction(30)
    assert state(b, "fence-1") == "CompleteCommit"
    assert values_of(b, topic, 1) == [b"winner"]  # the zombie's record was aborted


def test_a_transaction_open_past_its_timeout_is_aborted(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    topic, p = open_transaction(b, "slow-1", b"abandoned", **{"transaction.timeout.ms": 1500})
    assert state(b, "slow-1") == "Ongoing"
    wait_until(lambda: state(b, "slow-1") == "CompleteAbort", "the coordinator aborts it", timeout=20)
    d = describe(b, "slow-1")
    assert d.producer_epoch == 1  # bumped: the abandoned producer is fenced
    assert watermarks(b, topic)[1] == 2  # the record and the ABORT marker
    assert values_of(b, topic, 0) == []  # read_committed: nothing
    with pytest.raises(KafkaException):
        p.commit_transaction(10)


def test_aiokafka_second_producer_fences_the_first(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    topic = new_topic(b, "txn-aio-fence")

    async def run() -> None:
        first = AIOKafkaProducer(bootstrap_servers=b, transactional_id="aio-fence")
        second = AIOKafkaProducer(bootstrap_servers=b, transactional_id="aio-fence")
        await first.start()
        try:
            await first.begin_transaction()
            await first.send_and_wait(topic, b"zombie", partition=0)
            await second.start()  # aborts the zombie's transaction, bumps the epoch
            d = describe(b, "aio-fence")
            assert (str(d.state.value), d.producer_epoch) == ("Empty", 2)
            with pytest.raises(ProducerFenced):
                await first.commit_transaction()
            async with second.transaction():
                await second.send_and_wait(topic, b"winner", partition=0)
        finally:
            await first.stop()
            await second.stop()

    asyncio.run(run())
    assert state(b, "aio-fence") == "CompleteCommit"
    assert values_of(b, topic, 1) == [b"winner"]  # the zombie's record was aborted


def test_aiokafka_transaction_open_past_its_timeout_is_aborted(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    topic = new_topic(b, "txn-aio-slow")

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=b, transactional_id="aio-slow", transaction_timeout_ms=1500)
        await p.start()
        try:
            await p.begin_transaction()
            await p.send_and_wait(topic, b"abandoned", partition=0)
            assert state(b, "aio-slow") == "Ongoing"
            await asyncio.to_thread(wait_until, lambda: state(b, "aio-slow") == "CompleteAbort",
                                    "the coordinator aborts it", 20)
            with pytest.raises(ProducerFenced):  # the coordinator bumped the epoch
                await p.commit_transaction()
        finally:
            await p.stop()

    asyncio.run(run())
    assert describe(b, "aio-slow").producer_epoch == 1
    assert watermarks(b, topic)[1] == 2  # the record and the ABORT marker
    assert values_of(b, topic, 0) == []  # read_committed: nothing


def test_offsets_of_a_kip848_consumer_stay_unstable_until_the_commit(txn_broker: BrokerProcess) -> None:
    """send_offsets_to_transaction from a consumer-protocol member (its member epoch checked);
    OffsetFetch with require_stable (KIP-447) answers UNSTABLE_OFFSET_COMMIT until the commit."""
    b = txn_broker.bootstrap
    source, sink, group = topic_name("txn-in"), topic_name("txn-out"), topic_name("txn-group")
    create_topic(b, source)
    create_topic(b, sink)
    produce_values(b, source, [b"a", b"b", b"c"])
    c = consumer(b, **{"group.id": group, "group.protocol": "consumer"})
    c.subscribe([source])
    got: list[Any] = []
    wait_until(lambda: got.extend(m for m in c.consume(3, 0.5) if m.error() is None) or len(got) == 3,
               "the member consumes its assignment", timeout=30)
    p = txn_producer(b, "kip848-eos")
    p.begin_transaction()
    p.produce(sink, b"derived", partition=0)
    p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)

    def fetch(stable: bool) -> tuple[int, int]:
        request = OffsetFetchRequest(group_id=group, require_stable=stable, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=source, partition_indexes=[0])])
        (answer,) = rk.call(b, request, 7).topics[0].partitions
        return answer.error_code, answer.committed_offset

    assert fetch(stable=True) == (UNSTABLE_OFFSET_COMMIT, -1)
    assert fetch(stable=False) == (rawtxn.NONE, -1)  # pending: not committed yet
    p.commit_transaction(30)
    assert fetch(stable=True) == (rawtxn.NONE, 3)
    c.close()


# --------------------------------------------------------------------------- raw protocol


def test_coordinator_error_paths_over_the_raw_protocol(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    topic = topic_name("txn-raw")
    create_topic(b, topic)
    with Connection.to(b) as conn:
        assert rawtxn.find_coordinator(conn, "raw-1") == (rawtxn.NONE, txn_broker.port)
        assert rawtxn.find_coordinator(conn, "")[0] == rawtxn.INVALID_REQUEST
        assert rawtxn.init_producer_id(conn, "raw-1", 60_001)[0] == rawtxn.INVALID_TRANSACTION_TIMEOUT
        error, pid, epoch = rawtxn.init_producer_id(conn, "raw-1")
        assert (error, epoch) == (rawtxn.NONE, 0)
        assert rawtxn.end_txn(conn, "raw-1", pid, epoch, True) == rawtxn.INVALID_TXN_STATE
        assert rawtxn.end_txn(conn, "raw-1", pid + 1, epoch, True) == rawtxn.INVALID_PRODUCER_ID_MAPPING
        assert rawtxn.add_partitions(conn, "raw-1", pid, epoch, {"no-such-topic": [0], topic: [0]}) == {
            ("no-such-topic", 0): rawtxn.UNKNOWN_TOPIC_OR_PARTITION, (topic, 0): 55,  # OPERATION_NOT_ATTEMPTED
        }
        assert rawtxn.add_partitions(conn, "raw-1", pid, epoch, {topic: [0]}) == {(topic, 0): rawtxn.NONE}
        assert rawtxn.add_offsets(conn, "raw-1", pid, epoch, "raw-group") == rawtxn.NONE
        # Another InitProducerId fences this epoch: its open transaction is aborted first.
        assert rawtxn.init_producer_id(conn, "raw-1")[0] == rawtxn.CONCURRENT_TRANSACTIONS
        # v1 answers a fenced epoch with INVALID_PRODUCER_EPOCH (PRODUCER_FENCED is v2+)
        assert rawtxn.add_partitions(conn, "raw-1", pid, epoch, {topic: [0]}) == {
            (topic, 0): rawtxn.INVALID_PRODUCER_EPOCH}
        assert rawtxn.end_txn(conn, "raw-1", pid, epoch, False) == rawtxn.INVALID_PRODUCER_EPOCH
        wait_until(lambda: state(b, "raw-1") == "CompleteAbort", "the fenced transaction is aborted")
        error, pid2, epoch2 = rawtxn.init_producer_id(conn, "raw-1")
        assert (error, pid2, epoch2) == (rawtxn.NONE, pid, 2)
        assert rawtxn.end_txn(conn, "raw-1", pid, epoch2, False) == rawtxn.INVALID_TXN_STATE
    with pytest.raises(TransactionalIdNotFoundError):
        describe(b, "never-seen")


# --------------------------------------------------------------------------- CLI


def strata(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service", *args], cwd=REPO_ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=60, check=False)


def test_cli_lists_and_describes_transactions(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    topic, p = open_transaction(b, "cli-open", b"x")
    listed = strata("transactions", "list", "--bootstrap-server", b)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert rows["cli-open"][3] == "Ongoing"
    only = strata("transactions", "list", "--state", "Ongoing", "--bootstrap-server", b)
    assert [line.split()[0] for line in only.stdout.splitlines()[1:]] == ["cli-open"]
    described = strata("transactions", "describe", "--transactional-id", "cli-open", "--bootstrap-server", b)
    assert described.returncode == 0, described.stderr
    header, row = described.stdout.splitlines()
    fields = dict(zip(header.split(), row.split()))
    assert fields["TransactionState"] == "Ongoing"
    assert fields["TopicPartitions"] == f"{topic}-0"
    assert fields["ProducerEpoch"] == "0"
    producers = strata("transactions", "describe-producers", "--topic", topic, "--partition", "0",
                       "--bootstrap-server", b)
    assert producers.returncode == 0, producers.stderr
    header, row = producers.stdout.splitlines()
    open_txn = dict(zip(header.split(), row.split()))
    assert open_txn["ProducerId"] == fields["ProducerId"]
    assert (open_txn["ProducerEpoch"], open_txn["LastSequence"]) == ("0", "0")
    assert open_txn["CurrentTransactionStartOffset"] == "0"
    p.commit_transaction(30)
    producers = strata("transactions", "describe-producers", "--topic", topic, "--partition", "0",
                       "--bootstrap-server", b)
    header, row = producers.stdout.splitlines()
    committed = dict(zip(header.split(), row.split()))
    assert (committed["LatestCoordinatorEpoch"], committed["CurrentTransactionStartOffset"]) == ("0", "None")
    missing = strata("transactions", "describe", "--transactional-id", "nope", "--bootstrap-server", b)
    assert missing.returncode == 1 and "TransactionalIdNotFound" in missing.stderr
    missing = strata("transactions", "describe-producers", "--topic", topic, "--partition", "7",
                     "--broker-id", "1", "--bootstrap-server", b)
    assert missing.returncode == 1 and "UnknownTopicOrPartition" in missing.stderr


def test_describe_producers_error_paths(txn_broker: BrokerProcess) -> None:
    """Kafka's answers: an illegal name, an unknown topic, a partition the topic lacks."""
    topic = topic_name("txn-producers")
    create_topic(txn_broker.bootstrap, topic)
    admin = KafkaAdminClient(bootstrap_servers=txn_broker.bootstrap)
    try:
        for tp, error in ((TopicPartition("bad/name", 0), InvalidTopicError),
                          (TopicPartition("no-such-topic", 0), UnknownTopicOrPartitionError),
                          (TopicPartition(topic, 1), UnknownTopicOrPartitionError)):
            with pytest.raises(error):
                admin.describe_producers([tp], broker_id=1)
        # nothing written yet: no active producer
        assert admin.describe_producers([TopicPartition(topic, 0)])[TopicPartition(topic, 0)].active_producers == []
    finally:
        admin.close()
