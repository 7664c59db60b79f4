"""bench/kafka_peer_systems.py with a real Strata broker: the CPU it is charged, and a deleted
topic's files gone from its disk before the bench's next run begins."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import kafka_peer  # noqa: E402
from kafka_peer_systems import start_strata  # noqa: E402


def test_a_deleted_topic_is_waited_out_and_the_broker_is_charged_its_cpu(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    system = start_strata(tmp_path / "one", 1)
    try:
        kafka_peer.admin_create(system.bootstrap, "doomed", partitions=2)
        cpu0 = system.cpu_seconds()
        producer = Producer({"bootstrap.servers": system.bootstrap, "linger.ms": 5})
        for i in range(2000):
            producer.produce("doomed", value=b"x" * 1000, partition=i % 2)
        assert producer.flush(30) == 0
        used = system.cpu_seconds() - cpu0
        assert used > 0.0, "the broker took 2 MB of records without being charged any CPU"
        if system.cpu_group is not None:
            assert system.cpu_source.startswith("cgroup")
        logs = system.log_dirs()[0]
        assert sorted(p.name for p in logs.iterdir() if p.name.startswith("doomed-")) == ["doomed-0", "doomed-1"]

        kafka_peer.delete_topic(system, "doomed")
        assert not [p for p in logs.iterdir() if p.name.startswith("doomed-")]
        assert system.wait_deleted("doomed") < 0.5  # already gone: answered at once
    finally:
        assert system.stop() == [0]
    if system.cpu_group is not None:
        assert not system.cpu_group.path.exists(), "the bench leaves no cgroup behind"
