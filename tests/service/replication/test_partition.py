"""A partition's leadership, leader epoch checks, high watermark and ISR expansion, in process."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.registrations import PartitionRegistration
from local_tier.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from local_tier.log import Log
from service.replication.partition import Partition, Transition
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
    partition.record_follower_fetch(3, 2, -1, 0)
    partition.log.append_as_leader(make_batch(5), 1)
    partition.maybe_increment_high_watermark()
    assert partition.log.high_watermark == 10
    assert partition.expansion_candidates() == []  # it has not reached the high watermark
    partition.record_follower_fetch(3, 10, -1, 0)
    assert partition.expansion_candidates() == [3]
    partition.pending_isr = (1, 3)  # proposed to the controller: counted from now on
    partition.log.append_as_leader(make_batch(5), 1)
    assert not partition.maybe_increment_high_watermark()
    assert partition.log.high_watermark == 10  # 3 does not have 10..14 yet
    assert partition.record_follower_fetch(3, 15, -1, 0)
    assert partition.log.high_watermark == 15
    partition.apply_isr((1, 3), 1, 2)
    assert partition.isr == (1, 3) and partition.pending_isr is None
    with pytest.raises(NotLeaderOrFollowerError):
        partition.record_follower_fetch(2, 0, -1, 0)  # not a replica


def test_a_stale_registration_does_not_undo_an_isr_the_controller_answered(partition: Partition) -> None:
    partition.update(reg(1, 1, (1,), partition_epoch=1))
    partition.apply_isr((1, 3), 1, 2)
    assert partition.update(reg(1, 1, (1,), partition_epoch=1)) is Transition.NONE
    assert partition.isr == (1, 3)
