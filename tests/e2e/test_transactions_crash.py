"""Transactions across kill -9: of the broker between EndTxn and the markers, and of an
exactly-once consume-transform-produce application (confluent-kafka, and aiokafka)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient

from tests.conftest import REPO_ROOT, subprocess_env
from tests.e2e.helpers import consume, create_topic, produce_values, wait_until

SETS = {
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
}


def log_end(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The log end offset (read_uncommitted ListOffsets: not held back at the last stable offset)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": "read_uncommitted"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
    finally:
        c.close()


def txn_state(bootstrap: str, tid: str) -> str:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return str(admin.describe_transactions([tid])[tid].state.value)
    finally:
        admin.close()


def test_broker_killed_between_commit_and_markers_completes_the_commit(start_broker: Any) -> None:
    from confluent_kafka import Producer

    # The test hook holds the markers back for a minute after PrepareCommit is written.
    b = start_broker(sets={**SETS, "transaction.markers.delay.ms": "60000"})
    create_topic(b.bootstrap, "crash-commit", partitions=2)
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "crash-1"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(6):
        p.produce("crash-commit", f"v{i}".encode(), partition=i % 2)
    p.commit_transaction(30)  # answered once PrepareCommit is in __transaction_state
    assert txn_state(b.bootstrap, "crash-1") == "PrepareCommit"
    assert [log_end(b.bootstrap, "crash-commit", part) for part in (0, 1)] == [3, 3]  # no marker
    assert consume(b.bootstrap, "crash-commit", [0, 1], 0) == []  # read_committed: not yet stable
    b.kill()
    b.sets["transaction.markers.delay.ms"] = "0"
    b.start()
    wait_until(lambda: txn_state(b.bootstrap, "crash-1") == "CompleteCommit", "the commit completes")
    assert [log_end(b.bootstrap, "crash-commit", part) for part in (0, 1)] == [4, 4]  # one marker each
    got = sorted(m.value() for m in consume(b.bootstrap, "crash-commit", [0, 1], 6))
    assert got == [f"v{i}".encode() for i in range(6)]


@pytest.mark.parametrize("client", ["confluent-kafka", "aiokafka"])
def test_consume_transform_produce_is_exactly_once_across_kill_9(start_broker: Any, client: str) -> None:
    b = start_broker(sets=SETS)
    bootstrap = b.bootstrap
    create_topic(bootstrap, "eos-in")
    create_topic(bootstrap, "eos-out")
    total = 300
    produce_values(bootstrap, "eos-in", [str(i).encode() for i in range(total)])
    command = [sys.executable, "-m", "tests.e2e.eos_app", bootstrap, "eos-in", "eos-out", "eos-g", "eos-1",
               client]
    app = subprocess.Popen(command, cwd=REPO_ROOT, env=subprocess_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert app.stdout is not None and app.stderr is not None
        committed = 0
        while committed < 60:  # some transactions committed, the run is well under way
            line = app.stdout.readline()
            assert line, "the application stopped before committing anything: " + app.stderr.read()[-3000:]
            committed = int(line.split()[1])
    finally:
        app.kill()  # kill -9, likely inside a transaction
        app.wait()
        app.stdout.close()
        app.stderr.close()
    assert committed < total
    again = subprocess.run(command, cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True,
                           timeout=120, check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    end = log_end(bootstrap, "eos-out")
    out = consume(bootstrap, "eos-out", [0], total)  # read_committed; and nothing more
    counts = Counter(m.value() for m in out)
    assert counts == Counter(str(i).encode() for i in range(total))
    assert end > total  # markers (and any aborted records) are in the log too
