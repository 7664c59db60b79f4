"""A partition's leadership, leader epoch checks, high watermark, ISR expansion and shrink,
min.insync.replicas and a follower's truncation, in process."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from common.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from controller.registrations import PartitionRegistration
from local_tier.log import Log
from service.replication.fetch_state import truncate_to_leader
from service.replication.partition import Partition, Transition, monotonic_ms
from tests.local_tier.batches import make_batch, small_config


@pytest.fixture()
def partition(tmp_path: Path) -> Iterator[Partition]:
    log = Log(tmp_path / "t-0", "t", 0, small_config(), needs_recovery=False)
    yield Partition("t", 0, uuid.uuid4(), log, local_id=1)
    log.close()


def reg(leader: int, epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 3),
        partition_epoch: int | None = None) -> PartitionRegistration:
    return PartitionRegistration(replicas, isr, leader, epoch,
                                 epoch if partition_epoch is None else partition_epoch)


def test_requests_are_checked_against_the_leader_epoch_as_kafka_does(partition: Partition) -> None:
    assert partition.update(reg(1, 4, (1,))) is Transition.LEADER
    assert partition.check_leader(4) is partition.log
    assert partition.check_leader(-1) is partition.log
    with pytest.raises(FencedLeaderEpochError):
        partition.check_leader(3)
    with pytest.raises(UnknownLeaderEpochError):
        partition.check_leader(5)
    assert partition.update(reg(3, 5, (3,))) is Transition.FOLLOWER
    with pytest.raises(NotLeaderOrFollowerError):
        partition.check_leader(5)
    assert partition.check_leader(5, require_leader=False) is partition.log  # a follower's log
    assert partition.update(reg(3, 5, (3,))) is Transition.NONE  # the same snapshot again


def test_becoming_leader_records_the_epoch_where_it_starts(partition: Partition) -> None:
    partition.update(reg(1, 0, (1,)))
    partition.log.append_as_leader(make_batch(3), 0)
    partition.update(reg(3, 1, (3,)))
    partition.update(reg(1, 2, (1,)))
    assert partition.log.leader_epoch_cache.entries == [(0, 0), (2, 3)]
    assert partition.leader_epoch_start_offset == 3


def test_the_high_watermark_waits_for_every_replica_of_the_maximal_isr(partition: Partition) -> None:
    partition.update(reg(1, 1, (1,)))
    partition.log.append_as_leader(make_batch(5), 1)
    assert partition.maybe_increment_high_watermark() and partition.log.high_watermark == 5
    # replica 3 fetches from 2: not in the ISR, so it does not hold the high watermark back
    partition.record_follower_fetch(3, 2, 0, -1, 0)
    partition.log.append_as_leader(make_batch(5), 1)
    partition.maybe_increment_high_watermark()
    assert partition.log.high_watermark == 10
    assert partition.expansion_candidates() == []  # it has not reached the high watermark
    partition.record_follower_fetch(3, 10, 0, -1, 0)
    assert partition.expansion_candidates() == [3]
    partition.pending_isr = (1, 3)  # proposed to the controller: counted from now on
    partition.log.append_as_leader(make_batch(5), 1)
    assert not partition.maybe_increment_high_watermark()
    assert partition.log.high_watermark == 10  # 3 does not have 10..14 yet
    assert partition.record_follower_fetch(3, 15, 0, -1, 0)
    assert partition.log.high_watermark == 15
    partition.apply_isr((1, 3), 1, 2)
    assert partition.isr == (1, 3) and partition.pending_isr is None
    with pytest.raises(NotLeaderOrFollowerError):
        partition.record_follower_fetch(2, 0, 0, -1, 0)  # not a replica


def test_a_stale_registration_does_not_undo_an_isr_the_controller_answered(partition: Partition) -> None:
    partition.update(reg(1, 1, (1,), partition_epoch=1))
    partition.apply_isr((1, 3), 1, 2)
    assert partition.update(reg(1, 1, (1,), partition_epoch=1)) is Transition.NONE
    assert partition.isr == (1, 3)


def test_a_follower_that_stops_catching_up_is_out_of_sync_after_the_lag_time(partition: Partition) -> None:
    partition.update(reg(1, 1, (1, 3)))
    now = monotonic_ms()
    assert partition.out_of_sync(now + 5_000, 10_000) == []  # a full lag window from leadership
    partition.log.append_as_leader(make_batch(5), 1)
    partition.record_follower_fetch(3, 5, 0, -1, now)  # caught up at the log end
    partition.log.append_as_leader(make_batch(5), 1)
    assert partition.out_of_sync(now + 9_000, 10_000) == []
    assert partition.out_of_sync(now + 11_000, 10_000) == [3]  # behind since then
    # a fetch that reaches the log end the previous one saw catches up as of that one
    partition.record_follower_fetch(3, 5, 0, -1, now + 11_500)
    partition.record_follower_fetch(3, 10, 0, -1, now + 12_000)
    assert partition.out_of_sync(now + 12_000, 10_000) == []
    # a follower whose log end equals the leader's is in sync however long it is quiet
    assert partition.out_of_sync(now + 60_000, 10_000) == []
    partition.pending_isr = (1,)  # a shrink already asked for: nothing more meanwhile
    partition.log.append_as_leader(make_batch(1), 1)
    assert partition.out_of_sync(now + 60_000, 10_000) == []


def test_a_pending_shrink_keeps_the_high_watermark_until_the_controller_commits_it(
    partition: Partition,
) -> None:
    partition.update(reg(1, 1, (1, 3)))
    partition.log.append_as_leader(make_batch(5), 1)
    partition.record_follower_fetch(3, 5, 0, -1, monotonic_ms())
    assert partition.log.high_watermark == 5
    partition.log.append_as_leader(make_batch(5), 1)
    partition.pending_isr = (1,)
    assert not partition.maybe_increment_high_watermark() and partition.log.high_watermark == 5
    assert partition.apply_isr((1,), 1, 2)  # committed: the leader alone, the records count
    assert partition.log.high_watermark == 10


def test_min_insync_replicas_refuses_before_and_flags_after_the_append(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", "t", 0, replace(small_config(), min_insync_replicas=2),
              needs_recovery=False)
    partition = Partition("t", 0, uuid.uuid4(), log, local_id=1)
    partition.update(reg(1, 1, (1,)))
    with pytest.raises(NotEnoughReplicasError):
        partition.check_min_isr()
    partition.update(reg(1, 1, (1, 3), partition_epoch=2))
    partition.check_min_isr()
    log.append_as_leader(make_batch(2), 1)
    assert not partition.replicated(2)  # 3 has not fetched it
    partition.record_follower_fetch(3, 2, 0, -1, monotonic_ms())
    assert partition.replicated(2)
    log.append_as_leader(make_batch(2), 1)
    partition.update(reg(1, 1, (1,), partition_epoch=3))  # the controller dropped 3
    partition.maybe_increment_high_watermark()
    with pytest.raises(NotEnoughReplicasAfterAppendError):
        partition.replicated(4)
    log.close()


def _epochs(log: Log, runs: list[tuple[int, int]]) -> None:
    """Append ``count`` records at each ``(epoch, count)`` as a leader would, in batches of 5
    (a log is cut at batch boundaries)."""
    for epoch, count in runs:
        if epoch > log.leader_epoch_cache.latest_epoch:
            log.leader_epoch_cache.assign(epoch, log.log_end_offset)
        for _ in range(count // 5):
            log.append_as_leader(make_batch(5), epoch)


def test_truncation_takes_the_smaller_end_when_the_leader_names_an_older_epoch(
    partition: Partition,
) -> None:
    # follower epochs [(0, 0), (2, 100)], log end 150; the leader's copy of epoch 2 is
    # unknown to it: it answers (1, 120). Kafka (KIP-279) cuts at min(120, where the
    # follower's own epoch <= 1 ends: 100), then asks again.
    _epochs(partition.log, [(0, 100), (2, 50)])
    assert not truncate_to_leader(partition, 1, 120)
    assert partition.log.log_end_offset == 100
    assert partition.log.leader_epoch_cache.entries == [(0, 0)]
    # the next round asks for epoch 0: the leader's ends at 80
    assert truncate_to_leader(partition, 0, 80)
    assert partition.log.log_end_offset == 80


def test_truncation_to_the_same_epoch_cuts_at_the_leaders_end(partition: Partition) -> None:
    _epochs(partition.log, [(0, 10), (1, 10)])
    assert truncate_to_leader(partition, 1, 15)
    assert partition.log.log_end_offset == 15
    assert truncate_to_leader(partition, 1, 40)  # the leader has more: nothing to cut
    assert partition.log.log_end_offset == 15
    partition.log.update_high_watermark(10)
    assert truncate_to_leader(partition, -1, -1)  # the leader knows no such epoch: keep the HW
    assert partition.log.log_end_offset == 10
