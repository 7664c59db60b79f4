"""Issue 33: a death's apply worked out ahead (service/replication/apply_plan.py). A broker
takes the plan made for a fencing made ahead, and ends where the diff computed at the apply
would have taken it; where the last apply is still taking partitions, or the images are not
the ones planned, it computes the diff as always."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from controller.document import ClusterMetadata
from controller.fence_ahead import FenceAhead, Step
from controller.records import TopicInfo
from controller.registrations import BrokerRegistration, Endpoint, PartitionRegistration
from fetch.waiter import AppendWaiters
from local_tier.manager import LogManager
from service.replication import apply_plan
from service.replication.replica_manager import TAKE_ON_USE, ReplicaManager
from tests.local_tier.batches import small_config

TOPICS, PER_TOPIC = 8, 50  # 400 partitions of RF 3: each broker leads 133, more than TAKE_ON_USE


def _metadata() -> ClusterMetadata:
    brokers = {n: BrokerRegistration(n, uuid.UUID(int=n), 1, (Endpoint("PLAINTEXT", "h", 9000 + n),), fenced=False)
               for n in (1, 2, 3)}
    topics = {f"t{i}": TopicInfo(f"t{i}", uuid.UUID(int=100 + i), PER_TOPIC) for i in range(TOPICS)}
    partitions = {}
    for i, topic in enumerate(topics.values()):
        regs = []
        for p in range(PER_TOPIC):
            replicas = tuple((i + p + k) % 3 + 1 for k in range(3))
            regs.append(PartitionRegistration(replicas, replicas, replicas[0], 0, 0))
        partitions[topic.topic_id] = tuple(regs)
    return ClusterMetadata("c", revision=5, brokers=brokers, topics=topics, partitions=partitions)


def _managers(tmp_path: Path) -> Iterator[ReplicaManager]:
    for name in ("planned", "unplanned"):
        logs = LogManager(tmp_path / name)
        logs.load(lambda _topic: small_config())
        yield ReplicaManager(1, logs, lambda _topic: small_config(), AppendWaiters())


@pytest.fixture()
def managers(tmp_path: Path) -> Iterator[tuple[ReplicaManager, ReplicaManager]]:
    planned, unplanned = _managers(tmp_path)
    yield planned, unplanned
    for manager in (planned, unplanned):
        manager._logs.shutdown()


def _steps(md: ClusterMetadata, dead: int) -> tuple[Step, Step]:
    ahead = FenceAhead()
    ahead.prepare(md, lambda _topic: False, keep_records=False)
    first, second = (next(s for s in ahead.steps if s.node_id == dead and s.first is f) for f in (True, False))
    return first, second


def _state(manager: ReplicaManager) -> dict[tuple[str, int], tuple[int, int, bool, tuple[int, ...]]]:
    return {key: (p.leader_id, p.leader_epoch, p.is_leader, tuple(p.isr)) for key, p in manager.partitions.items()}


async def _settled(manager: ReplicaManager) -> None:
    for _ in range(500):
        if not manager._pending:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the apply's slices did not finish")


def test_a_death_planned_ahead_is_applied_from_its_plan_and_ends_as_the_diff_would(
    managers: tuple[ReplicaManager, ReplicaManager]
) -> None:
    planned, unplanned = managers
    md = _metadata()
    first, second = _steps(md, dead=3)
    pairs = [(first.base, first.image), (second.base, second.image)]
    made = 0
    while planned.plans.make(pairs):
        made += 1
    assert made == 1 and len(planned.plans) == 2  # one batch's plan per call

    async def run() -> None:
        for manager in (planned, unplanned):
            manager.apply(md)
            await _settled(manager)
            # as a broker reads them: the images made ahead, with the revision of their slot
            manager.apply(replace(first.image, revision=6))
            assert len(manager._pending) > TAKE_ON_USE and manager._taking is not None
            assert manager._taking.leaders_at is not None  # in bulk: every leadership served from now
            await _settled(manager)
            manager.apply(replace(second.image, revision=7))
            await _settled(manager)

    asyncio.run(run())
    assert planned.plans.taken == 2 and unplanned.plans.taken == 0
    assert _state(planned) == _state(unplanned)
    led = {key for key, (_leader, _epoch, is_leader, _isr) in _state(planned).items() if is_leader}
    expected = {(name, index) for name, topic in md.topics.items()
                for index, reg in enumerate(md.partitions[topic.topic_id])
                if [r for r in reg.replicas if r != 3][0] == 1}
    assert led == expected and len(led) > TOPICS * PER_TOPIC // 2  # its own third and broker 3's
    assert all(3 not in isr for *_rest, isr in _state(planned).values())


def test_no_plan_is_taken_while_the_last_apply_is_still_taking_partitions(
    managers: tuple[ReplicaManager, ReplicaManager]
) -> None:
    """The second batch lands while the first's slices still run: its diff must look again
    at the topics being taken, which the plan (made from the settled image) does not."""
    planned, unplanned = managers
    md = _metadata()
    first, second = _steps(md, dead=2)
    while planned.plans.make([(first.base, first.image), (second.base, second.image)]):
        pass

    async def run() -> None:
        for manager in (planned, unplanned):
            manager.apply(md)
            await _settled(manager)
            manager.apply(replace(first.image, revision=6))
            manager.apply(replace(second.image, revision=7))  # before any slice ran
            await _settled(manager)

    asyncio.run(run())
    assert planned.plans.taken == 1
    assert _state(planned) == _state(unplanned)


def test_both_batches_read_at_once_are_applied_from_their_plan(
    managers: tuple[ReplicaManager, ReplicaManager]
) -> None:
    """The poll that follows a death often reads both of its batches: the broker applies the
    image after both, from the image before either."""
    planned, unplanned = managers
    md = _metadata()
    ahead = FenceAhead()
    ahead.prepare(md, lambda _topic: False, keep_records=False)
    pairs = apply_plan.fencing_pairs(ahead.steps)
    assert len(pairs) == 9  # for each of three brokers: each batch, and both
    while planned.plans.make(pairs):
        pass
    second = next(s for s in ahead.steps if s.node_id == 3 and not s.first)

    async def run() -> None:
        for manager in (planned, unplanned):
            manager.apply(md)
            await _settled(manager)
            manager.apply(replace(second.image, revision=7))
            assert manager._taking is not None and manager._taking.leaders_at is not None
            await _settled(manager)

    asyncio.run(run())
    assert planned.plans.taken == 1
    assert _state(planned) == _state(unplanned)
    assert all(3 not in isr for *_rest, isr in _state(planned).values())


def test_a_plan_is_not_taken_for_other_images_and_plans_follow_the_steps(tmp_path: Path) -> None:
    md = _metadata()
    first, second = _steps(md, dead=2)
    plans = apply_plan.ApplyPlans(1)
    while plans.make([(first.base, first.image)]):
        pass
    assert plans.find(md, replace(first.image, revision=6)) is not None
    # the same registrations in other objects (an image decoded, not the one made ahead)
    copied = replace(first.image, partitions={tid: tuple(list(regs)) for tid, regs in first.image.partitions.items()})
    assert plans.find(md, copied) is None
    assert plans.find(first.image, replace(second.image, revision=7)) is None  # not planned
    assert plans.find(None, first.image) is None
    other, _ = _steps(md, dead=3)
    assert not plans.make([(other.base, other.image)])  # the only one missing: made now
    assert len(plans) == 1 and plans.find(md, other.image) is not None
    assert plans.find(md, first.image) is None  # dropped with its step


def test_a_change_of_a_topic_as_a_whole_gets_no_usable_plan() -> None:
    md = _metadata()
    grown = TopicInfo("t0", md.topics["t0"].topic_id, PER_TOPIC + 1)
    regs = md.partitions[grown.topic_id] + (PartitionRegistration((1, 2, 3), (1, 2, 3), 1, 0, 0),)
    bigger = replace(md, topics={**md.topics, "t0": grown}, partitions={**md.partitions, grown.topic_id: regs})
    plan = apply_plan.make_plan(md, bigger, 1)
    assert not plan.usable
    plans = apply_plan.ApplyPlans(1)
    plans.make([(md, bigger)])
    assert plans.find(md, bigger) is None
