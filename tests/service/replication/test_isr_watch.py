"""Issue 33: the ISR check (every ``replica.lag.time.max.ms`` / 2) looks only at the led
partitions where a follower may be short of the log end, not at every led partition; a
follower that stops fetching after an append is still dropped from the ISR. Counted, not timed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.document import ClusterMetadata
from controller.records import TopicInfo
from controller.registrations import PartitionRegistration
from fetch.waiter import AppendWaiters
from local_tier.manager import LogManager
from service.replication.partition import Partition, monotonic_ms
from service.replication.replica_manager import FollowerFetch, ReplicaManager
from tests.local_tier.batches import make_batch, small_config

PARTITIONS = 30
MAX_LAG_MS = 30_000


class Submitted:
    """The ISR changes proposed (AlterPartition is not sent in process)."""

    def __init__(self) -> None:
        self.proposals: list[tuple[str, tuple[int, ...]]] = []

    def submit(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        self.proposals.append((partition.name, new_isr))


@pytest.fixture()
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    """Broker 1 leads ``t-0`` .. ``t-29`` with broker 3 in every ISR (replication factor 2)."""
    logs = LogManager(tmp_path)
    logs.load(lambda _topic: small_config())
    manager = ReplicaManager(1, logs, lambda _topic: small_config(), AppendWaiters())
    manager.isr_changes = Submitted()
    topic = TopicInfo("t", uuid.uuid4(), PARTITIONS)
    registrations = tuple(PartitionRegistration((1, 3), (1, 3), 1, 0, 0) for _ in range(PARTITIONS))
    manager.apply(ClusterMetadata("c", topics={"t": topic}, partitions={topic.topic_id: registrations}))
    yield manager
    logs.shutdown()


def _fetch_to_end(manager: ReplicaManager, partition: Partition) -> None:
    manager.record_follower_fetch(FollowerFetch("t", partition.index, 3, partition.log.log_end_offset))


def test_the_isr_check_of_idle_partitions_looks_at_none_of_them(
    replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked: list[str] = []
    real = Partition.out_of_sync

    def counted(partition: Partition, now_ms: float, max_lag_ms: int) -> list[int]:
        looked.append(partition.name)
        return real(partition, now_ms, max_lag_ms)

    monkeypatch.setattr(Partition, "out_of_sync", counted)
    for partition in replicas.partitions.values():
        _fetch_to_end(replicas, partition)
    assert replicas.shrink_isrs(MAX_LAG_MS) == 0  # every follower holds the log end
    looked.clear()
    for _ in range(3):
        assert replicas.shrink_isrs(MAX_LAG_MS) == 0
    assert looked == []


def test_a_follower_that_stops_after_an_append_is_still_dropped_from_the_isr(
    replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    for partition in replicas.partitions.values():
        _fetch_to_end(replicas, partition)
    replicas.shrink_isrs(MAX_LAG_MS)
    stalled = replicas.partitions[("t", 7)]
    stalled.log.append_as_leader(make_batch(3), stalled.leader_epoch)
    replicas.after_append(stalled)
    assert replicas.shrink_isrs(MAX_LAG_MS) == 0  # not for long enough yet
    later = monotonic_ms() + MAX_LAG_MS + 1
    monkeypatch.setattr("service.replication.replica_manager.monotonic_ms", lambda: later)
    assert replicas.shrink_isrs(MAX_LAG_MS) == 1
    submitted = replicas.isr_changes
    assert isinstance(submitted, Submitted) and submitted.proposals == [("t-7", (1,))]


def test_a_follower_fetching_from_behind_the_log_end_is_watched_again(
    replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower that lost its tail (e.g. a restart without its page cache) fetches from behind
    a log end it had reached: it must catch up again within the lag, or leave the ISR."""
    behind = replicas.partitions[("t", 4)]
    behind.log.append_as_leader(make_batch(3), behind.leader_epoch)
    replicas.after_append(behind)
    for partition in replicas.partitions.values():
        _fetch_to_end(replicas, partition)
    assert replicas.shrink_isrs(MAX_LAG_MS) == 0
    assert len(replicas.isr_watch) == 0
    replicas.record_follower_fetch(FollowerFetch("t", 4, 3, 1))
    assert len(replicas.isr_watch) == 1
    later = monotonic_ms() + MAX_LAG_MS + 1
    monkeypatch.setattr("service.replication.replica_manager.monotonic_ms", lambda: later)
    assert replicas.shrink_isrs(MAX_LAG_MS) == 1
