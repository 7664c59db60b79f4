"""AlterPartitionManager's log: a request of a few partitions is logged partition by
partition; a large one (a broker's restart at 30,000 partitions) as one summary line, so
logging two lines per partition per round no longer holds up the event loop."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from controller.errors import IneligibleReplicaError
from controller.registrations import PartitionRegistration
from controller.replication_control import AlterPartitionResult
from service.replication.isr import DETAILED_UP_TO, AlterPartitionManager

TOPIC_ID = uuid.uuid4()


@dataclass
class _Partition:
    index: int
    topic: str = "t"
    topic_id: uuid.UUID = TOPIC_ID
    leader_epoch: int = 1
    partition_epoch: int = 1
    isr: tuple[int, ...] = (1,)
    pending_isr: tuple[int, ...] | None = None
    applied: list[Any] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self) -> bool:
        return True

    def apply_isr(self, isr: tuple[int, ...], leader_epoch: int, partition_epoch: int) -> bool:
        self.isr, self.partition_epoch = isr, partition_epoch
        return False


class _Client:
    async def call(self, api: int, request: Any, *, local: Any, answer: Any) -> Any:
        return local()


def _alter(_node: int, _epoch: int, changes: list[Any]) -> list[AlterPartitionResult]:
    """Even partitions committed, odd ones refused INELIGIBLE_REPLICA."""
    return [
        AlterPartitionResult(c.topic_id, c.partition, registration=PartitionRegistration(
            replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=1, partition_epoch=2))
        if c.partition % 2 == 0 else
        AlterPartitionResult(c.topic_id, c.partition, error=IneligibleReplicaError("broker 2 is fenced"))
        for c in changes
    ]


async def _propose(count: int) -> list[_Partition]:
    dropped: list[Any] = []
    manager = AlterPartitionManager(1, _Client(), lambda: 5, _alter,  # type: ignore[arg-type]
                                    on_dropped=dropped.append)
    partitions = [_Partition(i) for i in range(count)]
    for p in partitions:
        manager.submit(p, (1, 2))  # type: ignore[arg-type]
    while manager._task is not None and not manager._task.done():
        await asyncio.sleep(0.01)
    await manager.close()
    assert len(dropped) == count // 2  # the refused ones are looked at again
    return partitions


@pytest.mark.parametrize("count", [4, 3000])
def test_isr_changes_are_logged_per_partition_when_few_and_summed_up_when_many(
    count: int, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="strata.replication.isr")
    partitions = asyncio.run(_propose(count))
    assert [p.isr for p in partitions[:2]] == [(1, 2), (1,)]
    lines = [r.getMessage() for r in caplog.records]
    if count <= DETAILED_UP_TO:
        assert "t-0: ISR is now [1, 2] (partition epoch 2)" in lines
        assert any(line.startswith("t-1: ISR change answered INELIGIBLE_REPLICA") for line in lines)
        assert len(lines) == 2 * count  # asked, answered
    else:
        assert lines == [
            f"ISR changes of {count} partitions answered: {count // 2} committed (e.g. t-0, t-2, t-4), "
            f"{count // 2} INELIGIBLE_REPLICA (proposed again after a backoff) (e.g. t-1, t-3, t-5)"
        ]
