"""A follower restarted behind on many idle partitions catches up on every one of them.

Its first fetch is a full one, bounded by ``replica.fetch.response.max.bytes``: the partitions
that did not fit were then never read again until something was appended to them, since a
follower names in its session only the partitions whose position moved (stop 72: two of
twelve idle partitions back in the ISR after 40 s, the rest never). Three broker processes.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from tests.e2e.test_replication import REPLICATION, _create, _partition, _wait

PARTITIONS = 12


def test_a_follower_restarted_behind_on_idle_partitions_rejoins_every_isr(start_cluster: Any) -> None:
    cluster = start_cluster(3, sets={**REPLICATION, "replica.fetch.response.max.bytes": "1048576"})
    _create(cluster.bootstrap, NewTopic("behind", PARTITIONS, 3))
    every = range(PARTITIONS)
    _wait(cluster, "every ISR full", lambda: all(len(_partition(cluster, "behind", p).isrs) == 3 for p in every))
    cluster.stop(3)
    producer = Producer({"bootstrap.servers": cluster.live_bootstrap(), "acks": "all", "linger.ms": 20})
    for p in every:  # 400 KB behind in each: about two partitions' worth fit in one answer
        for _ in range(400):
            producer.produce("behind", b"v" * 1000, partition=p)
    assert producer.flush(60) == 0
    cluster.restart(3)  # and nothing more is written: every partition is idle
    started = time.monotonic()
    _wait(cluster, "broker 3 back in every ISR",
          lambda: all(3 in _partition(cluster, "behind", p).isrs for p in every), 30)
    assert time.monotonic() - started < 15
