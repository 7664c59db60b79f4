"""Transactions on the partition side, end to end: data and markers written with the raw
protocol (WriteTxnMarkers, no coordinator) or by confluent-kafka's transactional producers
(through the coordinator), tiered to the bucket and deleted locally, then read by
read_committed consumers through the broker."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition

from tests.conftest import BrokerFactory, BrokerProcess
from tests.e2e import helpers, rawtxn
from tests.e2e.rawkafka import NONE, Connection

TIERED_SETS = {
    "log.segment.bytes": "1024",
    "remote.log.manager.task.interval.ms": "200",
    "log.retention.check.interval.ms": "200",
    "log.local.retention.bytes": "0",
    "log.segment.delete.delay.ms": "0",
}
COORDINATOR_SETS = {"transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1"}
VALUE = b"x" * 60


@dataclass
class TxnHistory:
    topic: str
    committed: list[bytes]  # the values a read_committed reader must return, in order
    everything: list[bytes]  # every data record, in offset order
    aborted_producer: int
    end: int  # log end offset after the last marker


def write_history(bootstrap: str, topic: str) -> TxnHistory:
    """Committed and aborted transactions (interleaved, spanning segments) and plain records."""
    committed: list[bytes] = []
    everything: list[bytes] = []
    with Connection.to(bootstrap) as conn:
        pids = [rawtxn.init_producer_id(conn)[1] for _ in range(3)]
        a, b, plain = pids
        seq = {pid: 0 for pid in pids}

        def send(pid: int, tag: str, n: int, txn: bool, keep: bool) -> None:
            values = [VALUE + b"%s-%d" % (tag.encode(), seq[pid] + i) for i in range(n)]
            batch = rawtxn.producer_batch(values, producer_id=pid, epoch=0, sequence=seq[pid],
                                          transactional=txn)
            assert rawtxn.produce(conn, topic, 0, batch)[0] == NONE
            seq[pid] += n
            everything.extend(values)
            if keep:
                committed.extend(values)

        def end(pid: int, commit: bool) -> None:
            codes = rawtxn.write_txn_markers(conn, producer_id=pid, epoch=0, commit=commit,
                                             topic=topic, partitions=[0])
            assert codes == {0: NONE}

        for round_ in range(3):
            for _ in range(4):
                send(a, "commit", 3, True, True)
                send(b, "abort", 3, True, False)
            end(b, commit=False)  # the abort marker lands in a later segment than B's first records
            send(plain, "plain", 2, False, True)
            end(a, commit=True)
        for _ in range(12):  # roll past everything above so it all seals and tiers
            send(plain, "tail", 3, False, True)
        fetched = rawtxn.fetch(conn, topic, 0, 0)
    return TxnHistory(topic, committed, everything, b, fetched.high_watermark)


def write_client_history(bootstrap: str, topic: str) -> TxnHistory:
    """The same shape as :func:`write_history`, written by confluent-kafka clients through the
    transaction coordinator: producer A commits, B aborts, interleaved, plain records between."""
    committed: list[bytes] = []
    everything: list[bytes] = []
    a, b = (Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-{name}"}) for name in "ab")
    plain = helpers.producer(bootstrap)
    count = 0

    def send(p: Producer, tag: str, n: int, keep: bool) -> None:
        nonlocal count
        values = [VALUE + b"%s-%d" % (tag.encode(), count + i) for i in range(n)]
        for i, v in enumerate(values):
            p.produce(topic, v, key=b"k%d" % i, partition=0)
        assert p.flush(30) == 0  # in the log in this order
        count += n
        everything.extend(values)
        if keep:
            committed.extend(values)

    for p in (a, b):
        p.init_transactions(30)
    for _ in range(3):
        a.begin_transaction()
        b.begin_transaction()
        for _ in range(4):
            send(a, "commit", 3, True)
            send(b, "abort", 3, False)
        b.abort_transaction(30)  # the abort marker lands in a later segment than B's first records
        send(plain, "plain", 2, True)
        a.commit_transaction(30)
    for _ in range(12):  # roll past everything above so it all seals and tiers
        send(plain, "tail", 3, True)
    with Connection.to(bootstrap) as conn:
        fetched = rawtxn.fetch(conn, topic, 0, 0)
    assert fetched.aborted
    (b_id,) = {pid for pid, _ in fetched.aborted}
    return TxnHistory(topic, committed, everything, b_id, fetched.high_watermark)


def _consume_values(bootstrap: str, topic: str, isolation: str, count: int) -> list[bytes]:
    consumer = helpers.consumer(bootstrap, **{"isolation.level": isolation})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(out) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                out.append(msg.value())
        out.extend(m.value() for m in consumer.consume(num_messages=100, timeout=0.5) if m.error() is None)
        return out
    finally:
        consumer.close()


def _first_local_base(data_dir: Path, topic: str) -> int:
    logs = sorted((data_dir / "logs" / f"{topic}-0").glob("*.log"))
    return int(logs[0].stem) if logs else -1


@pytest.mark.parametrize("writer", [write_history, write_client_history], ids=["raw", "confluent-kafka"])
def test_read_committed_from_disk_and_from_the_bucket_returns_exactly_the_committed_records(
    start_broker: BrokerFactory, writer: Callable[[str, str], TxnHistory],
) -> None:
    """raw: batches and WriteTxnMarkers sent directly; confluent-kafka: transactional producers
    committing and aborting through the coordinator."""
    broker: BrokerProcess = start_broker(sets={**TIERED_SETS, **COORDINATOR_SETS})
    topic = helpers.topic_name("txn-tiered")
    helpers.create_topic(broker.bootstrap, topic)
    history = writer(broker.bootstrap, topic)

    with Connection.to(broker.bootstrap) as conn:
        local = rawtxn.fetch(conn, topic, 0, 0)
    assert local.last_stable_offset == local.high_watermark == history.end
    assert local.aborted and all(pid == history.aborted_producer for pid, _ in local.aborted)

    # every sealed segment goes to the bucket and leaves the disk
    helpers.wait_until(lambda: _first_local_base(broker.data_dir, topic) > history.end - 40,
                       "local segments deleted after upload", timeout=60)
    with Connection.to(broker.bootstrap) as conn:
        remote = rawtxn.fetch(conn, topic, 0, 0)
    assert remote.error_code == NONE and remote.records
    assert remote.aborted == local.aborted[: len(remote.aborted)] and remote.aborted

    assert _consume_values(broker.bootstrap, topic, "read_committed", len(history.committed)) == history.committed
    assert _consume_values(broker.bootstrap, topic, "read_uncommitted", len(history.everything)) == history.everything


def test_an_open_transaction_holds_the_lso_for_read_committed_readers(broker: BrokerProcess) -> None:
    topic = helpers.topic_name("txn-open")
    helpers.create_topic(broker.bootstrap, topic)
    with Connection.to(broker.bootstrap) as conn:
        _, plain, _ = rawtxn.init_producer_id(conn)
        _, txn, _ = rawtxn.init_producer_id(conn)
        batch = rawtxn.producer_batch([b"before"], producer_id=plain, epoch=0, sequence=0)
        assert rawtxn.produce(conn, topic, 0, batch) == (NONE, 0)
        open_txn = rawtxn.producer_batch([b"open"], producer_id=txn, epoch=0, sequence=0, transactional=True)
        assert rawtxn.produce(conn, topic, 0, open_txn) == (NONE, 1)
        batch = rawtxn.producer_batch([b"after"], producer_id=plain, epoch=0, sequence=1)
        assert rawtxn.produce(conn, topic, 0, batch) == (NONE, 2)
        fetched = rawtxn.fetch(conn, topic, 0, 0)
        assert (fetched.high_watermark, fetched.last_stable_offset) == (3, 1)
        assert [b[0] for b in rawtxn.batch_summaries(fetched.records)] == [0]
        assert rawtxn.fetch(conn, topic, 0, 0, isolation_level=0).last_stable_offset == 1
        consumer = helpers.consumer(broker.bootstrap)  # librdkafka's default: read_committed
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            assert (low, high) == (0, 1)  # ListOffsets latest for read_committed is the LSO
        finally:
            consumer.close()
        # a stale epoch cannot end it; the coordinator's marker can
        assert rawtxn.write_txn_markers(conn, producer_id=txn, epoch=0, commit=True, topic=topic,
                                        partitions=[0, 7]) == {0: NONE, 7: 3}
        fetched = rawtxn.fetch(conn, topic, 0, 0)
        assert fetched.last_stable_offset == fetched.high_watermark == 4
    values = _consume_values(broker.bootstrap, topic, "read_committed", 3)
    assert values == [b"before", b"open", b"after"]
