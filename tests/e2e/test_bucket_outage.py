"""A bucket outage every broker sees, and its end (ADR 0031).

Three broker processes, each reaching the bucket (moto) through its own proxy; RF 3, one
partition led by each broker, acks=1 writers (a leader that led when it should not have
would lose acknowledged writes to the truncation that follows). Before ADR 0031 every
partition stopped taking writes within a session of the outage's start, although no
broker could have been elected in another's place.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, TopicPartition

from tests.e2e.test_failover import (
    TIMEOUT_S,
    _check_nothing_lost,
    acks1_cluster_behind_bucket_links,
)
from tests.e2e.test_replication import _partition, _wait

if TYPE_CHECKING:
    from tests.cluster_fixtures import Cluster

#: a broker stops leading once it has not read the metadata for 2/3 of a session: 4 s here,
#: after the controller's lease has run out (2.5 s after its last renewal), as with the
#: defaults (6 s and 3.5 s); a heartbeat (and OutageHold request) every 250 ms leaves a
#: grant (3/8 of the 3 s lease) the slack the defaults leave it (1.9 s against 0.5 s); a
#: loaded machine's followers lagging 2 s made ISR changes as the outage began, and a broker
#: that had not read the last one yet cannot report (it leads on an older revision)
OUTAGE = {"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "250",
          "replica.lag.time.max.ms": "10000", "replica.fetch.wait.max.ms": "100"}
OUTAGE_S = 9.0


def test_a_bucket_outage_every_broker_sees_stops_no_partition_and_a_broker_that_reads_it_again_takes_over(
    start_cluster: Any, moto_server: Any
) -> None:
    cluster, links, writers = acks1_cluster_behind_bucket_links(start_cluster, moto_server, "outage", (1, 2, 3),
                                                                OUTAGE)
    try:
        try:
            for link in links.values():
                link.partition()
            cut_at = time.monotonic()
            time.sleep(OUTAGE_S)
            silence = writers.longest_silence(cut_at, time.monotonic())
            held = "holds the cluster as it is" in cluster.brokers[1].log_text()

            # broker 2 reads the bucket again: the hold ends, broker 2 takes the lease over and
            # leads all three partitions (brokers 1 and 3, still blind, stop leading)
            links[2].heal()
            healed_at = time.monotonic()
            _wait(cluster, "broker 2 the controller", lambda: cluster.controller_id() == 2, 30)
            _wait(cluster, "every partition led by broker 2",
                  lambda: all(_partition(cluster, "outage", p).leader == 2 for p in range(3)), 30)
            moved_s = time.monotonic() - healed_at
            writers.mark()
            assert len(writers.wait_all_written(TIMEOUT_S)) == 3
            for n in (1, 3):
                links[n].heal()
            _wait(cluster, "brokers 1 and 3 back in every ISR",
                  lambda: all(len(_partition(cluster, "outage", p).isrs) == 3 for p in range(3)), 60)
        finally:
            writers.stop()
        # two runs in about ten saw a new client's Metadata lack a partition for over 10 s here
        # (librdkafka's UNKNOWN_PARTITION, cause not found): read once a new client sees them all
        _wait(cluster, "every partition known to a new client", lambda: _known_to_a_new_client(cluster), 60)
        _check_nothing_lost(cluster, "outage", writers)
        assert max(silence.values()) < 2.0, f"longest time without an acknowledged write: {silence}"
        assert held, "broker 1 never said it holds the cluster"
        assert moved_s < 20, f"the partitions moved to broker 2 {moved_s:.1f} s after it read the bucket"
    finally:
        for link in links.values():
            link.close()


def _known_to_a_new_client(cluster: Cluster) -> bool:
    consumer = Consumer({"bootstrap.servers": cluster.live_bootstrap(), "group.id": "outage-probe"})
    try:
        return all(consumer.get_watermark_offsets(TopicPartition("outage", p), timeout=5)[1] >= 0
                   for p in range(3))
    finally:
        consumer.close()
