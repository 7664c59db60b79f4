"""The metadata log on three real brokers (ADR 0025, issue 33): a broker frozen (SIGSTOP)
while the controller snapshots and trims the log comes back, reloads the newest snapshot,
answers Metadata as the controller's image says, and serves produce and consume with
dense offsets."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from typing import Any

from confluent_kafka.admin import NewTopic

from tests.cluster_fixtures import Cluster
from tests.e2e.helpers import (
    CLIENT_TIMEOUT_S,
    admin,
    consume,
    produce_values,
    topic_name,
    wait_for_topic,
)

#: snapshots every ~2 KB of batches, batches deleted once a snapshot covers them, the head
#: read every second; the frozen broker is not fenced while it is away (no failover noise)
SMALL_LOG = {
    "metadata.log.max.record.bytes.between.snapshots": "2000",
    "metadata.log.retention.ms": "0",
    "metadata.log.head.check.ms": "1000",
    "broker.session.timeout.ms": "60000",
}


def _head(cluster: Cluster) -> dict[str, Any]:
    data = cluster.read_object("cluster/metadata.json")
    assert data is not None
    return dict(json.loads(data))


def _topics_seen_by(cluster: Cluster, node: int) -> dict[str, int]:
    """The user topics in broker ``node``'s own metadata image (its HTTP API answers from it)."""
    url = f"{cluster.brokers[node].admin_url}/v1/topics?kind=user&limit=1000"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return {t["name"]: t["partitions"] for t in json.loads(answer.read())["topics"]}


def test_a_broker_frozen_across_snapshots_reloads_and_serves(start_cluster: Any) -> None:
    cluster: Cluster = start_cluster(3, sets=SMALL_LOG)
    controller = cluster.controller_id()
    away = next(n for n in (1, 2, 3) if n != controller)
    other = next(n for n in (1, 2, 3) if n not in (controller, away))
    before = topic_name("before-freeze")
    client = admin(cluster.brokers[controller].bootstrap)
    client.create_topics([NewTopic(before, 1, 3)])[before].result(CLIENT_TIMEOUT_S)
    wait_for_topic(cluster.brokers[away].bootstrap, before, 1)
    frozen_at = cluster.metadata()["revision"]

    proc = cluster.brokers[away].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        created = [topic_name("while-frozen") for _ in range(12)]
        for name in created:  # each create a batch; ~2 KB of them makes a snapshot
            client.create_topics([NewTopic(name, 2, 1)])[name].result(CLIENT_TIMEOUT_S)
        deadline = time.monotonic() + 30
        # its next slot is trimmed: the head says so, and the slot's object is gone (the
        # controller deletes trimmed slots after it moves the head: a slot still there would
        # let the broker follow the log instead of reloading)
        while (_head(cluster)["log_start"] <= frozen_at + 1
               or cluster.read_object(f"cluster/metadata/log/{frozen_at + 1:020d}.jsonl") is not None):
            assert time.monotonic() < deadline, _head(cluster)
            client.create_topics([NewTopic(n := topic_name("more"), 1, 1)])[n].result(CLIENT_TIMEOUT_S)
            created.append(n)
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGCONT)

    expected = {t["name"]: t["partitions"] for t in cluster.metadata()["topics"]
                if not t["name"].startswith("__")}  # the image replayed from the bucket
    assert set(created) | {before} <= set(expected)
    deadline = time.monotonic() + 20
    for node in (away, other):
        while (seen := _topics_seen_by(cluster, node)) != expected:
            assert time.monotonic() < deadline, (node, sorted(set(expected) - set(seen)))
            time.sleep(0.2)
    assert "reloading from the newest snapshot" in cluster.brokers[away].log_text()
    values = [f"v{i}".encode() for i in range(20)]
    offsets = produce_values(cluster.brokers[away].bootstrap, before, values, acks="all")
    assert offsets == list(range(20))
    got = consume(cluster.brokers[away].bootstrap, before, [0], 20)
    assert [(m.offset(), m.value()) for m in got] == list(enumerate(values))
