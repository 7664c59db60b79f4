"""The elections a fencing needs, computed ahead (``controller.fence_plans``): a fencing
with plans commits exactly what it commits without, whatever changed since the plans were
made; a plan made stale by a change is never used; and keeping plans up to date costs
work in proportion to what changed."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from controller.document import ClusterMetadata
from controller.fence_plans import FencePlans, PlanKind
from controller.placement import PlacementBroker, ReplicaPlacer
from controller.records import TopicInfo
from controller.registrations import NO_LEADER, BrokerRegistration, Endpoint, PartitionRegistration
from controller.replication_control import drop_fenced_from_isrs, fence_broker


def never_unclean(_topic: TopicInfo) -> bool:
    return False


def always_unclean(_topic: TopicInfo) -> bool:
    return True


def _cluster(topics: int = 6, per_topic: int = 20, brokers: int = 4) -> ClusterMetadata:
    placer = ReplicaPlacer(7)
    infos, partitions = {}, {}
    for t in range(topics):
        info = TopicInfo(f"t{t}", uuid.UUID(int=100 + t), per_topic)
        infos[info.name] = info
        placed = placer.place([PlacementBroker(b) for b in range(1, brokers + 1)], per_topic, 3)
        partitions[info.topic_id] = tuple(PartitionRegistration(r, r, r[0], 0, 0) for r in placed)
    registered = {n: BrokerRegistration(n, uuid.UUID(int=n), 1, (Endpoint("PLAINTEXT", "h", 9000 + n),),
                                     fenced=False)
                  for n in range(1, brokers + 1)}
    return ClusterMetadata("c", brokers=registered, topics=infos, partitions=partitions)


def _death(md: ClusterMetadata, broker: int, plans: FencePlans | None,
           unclean=never_unclean) -> tuple[ClusterMetadata, ClusterMetadata]:
    """Both batches of a fencing: the leaderships, then the ISR places."""
    first = fence_broker(md, broker, unclean, isr_places=False, plans=plans)
    return first, drop_fenced_from_isrs(first, unclean, plans)


def _used(plans: FencePlans, md: ClusterMetadata, broker: int) -> int:
    """How many of the partitions the fencing of ``broker`` touches have a usable entry."""
    lead = plans.planned(PlanKind.LEAD, broker, md)
    isr = plans.planned(PlanKind.ISR, broker, md)
    out = 0
    for topic, index, current in md.iter_partitions():
        entry = (lead if current.leader == broker else isr).get((topic.topic_id, index))
        out += entry is not None and entry[0] is current
    return out


@pytest.mark.parametrize("broker", [1, 2, 3, 4])
def test_a_fencing_with_plans_commits_what_it_commits_without(broker: int) -> None:
    md = _cluster()
    plans = FencePlans()
    assert plans.prepare(md) > 0 and plans.complete
    touched = sum(1 for _, _, p in md.iter_partitions() if broker in p.isr)
    assert _used(plans, md, broker) == touched  # every election came from the plans
    assert _death(md, broker, plans) == _death(md, broker, None)


def test_a_partition_changed_since_the_plans_is_elected_again_not_taken_from_them() -> None:
    md = _cluster()
    plans = FencePlans()
    plans.prepare(md)
    topic = md.topics["t2"]
    regs = list(md.partitions[topic.topic_id])
    # broker 1's leaderships in t2 now have a shrunk ISR: the plan's election (next replica)
    # would now pick a broker that left the ISR
    changed = 0
    for i, reg in enumerate(regs):
        if reg.leader == 1:
            regs[i] = replace(reg, isr=(1, reg.replicas[2]), partition_epoch=reg.partition_epoch + 1)
            changed += 1
    assert changed
    later = replace(md, partitions={**md.partitions, topic.topic_id: tuple(regs)})
    with_plans, without = _death(later, 1, plans), _death(later, 1, None)
    assert with_plans == without
    for i, reg in enumerate(with_plans[0].partitions[topic.topic_id]):
        if regs[i].leader == 1:
            assert reg.leader == regs[i].replicas[2]  # from the ISR of now, not of the plan


def test_plans_made_when_other_brokers_could_lead_are_not_used() -> None:
    md = _cluster()
    plans = FencePlans()
    plans.prepare(md)
    # broker 2 is fenced meanwhile (and the plans not prepared again): fencing 1 must not
    # hand a leadership to 2
    md2 = replace(md, brokers={**md.brokers, 2: replace(md.brokers[2], fenced=True)})
    assert plans.planned(PlanKind.LEAD, 1, md2) == {}
    first, second = _death(md2, 1, plans)
    assert (first, second) == _death(md2, 1, None)
    moved = [(t.topic_id, i) for t, i, p in md2.iter_partitions() if p.leader == 1]
    assert moved
    assert all(first.partitions[t][i].leader not in (1, 2) for t, i in moved)


def test_an_election_that_needs_the_unclean_policy_is_never_planned() -> None:
    md = _cluster(topics=1, per_topic=4, brokers=3)
    topic = md.topics["t0"]
    # partition 0 has broker 1 alone in its ISR: fencing 1 leaves it offline, or unclean
    regs = list(md.partitions[topic.topic_id])
    regs[0] = PartitionRegistration(regs[0].replicas, (1,), 1, 3, 3)
    md = replace(md, partitions={topic.topic_id: tuple(regs)})
    md = replace(md, topics={"t0": topic})
    plans = FencePlans()
    plans.prepare(md)
    assert (topic.topic_id, 0) not in plans.planned(PlanKind.LEAD, 1, md)
    for unclean in (never_unclean, always_unclean):
        assert _death(md, 1, plans, unclean) == _death(md, 1, None, unclean)
    assert _death(md, 1, plans, always_unclean)[0].partitions[topic.topic_id][0].leader != NO_LEADER
    assert _death(md, 1, plans, never_unclean)[0].partitions[topic.topic_id][0].leader == NO_LEADER


def test_keeping_plans_up_to_date_costs_in_proportion_to_what_changed() -> None:
    md = _cluster(topics=10, per_topic=50)
    plans = FencePlans()
    assert plans.prepare(md) == 10 * 50 * 3  # an election per ISR member of every partition
    assert plans.prepare(replace(md, revision=md.revision + 1)) == 0  # nothing changed
    topic = md.topics["t4"]
    regs = list(md.partitions[topic.topic_id])
    regs[7] = replace(regs[7], isr=regs[7].isr[:2], partition_epoch=1)  # one ISR shrink
    later = replace(md, partitions={**md.partitions, topic.topic_id: tuple(regs)})
    assert plans.prepare(later) == 2  # its two ISR members' elections
    assert _death(later, regs[7].leader, plans) == _death(later, regs[7].leader, None)
    # a deleted topic's entries go
    gone = replace(later, topics={n: t for n, t in later.topics.items() if n != "t4"},
                   partitions={k: v for k, v in later.partitions.items() if k != topic.topic_id})
    before = plans.entries()
    plans.prepare(gone)
    assert plans.entries() == before - (2 + 49 * 3)


def test_a_bounded_prepare_finishes_over_several_calls_and_is_right_at_every_step() -> None:
    md = _cluster(topics=8, per_topic=10)
    plans = FencePlans(max_elections_per_prepare=50)
    calls = 0
    while True:
        calls += 1
        plans.prepare(md)
        assert _death(md, 3, plans) == _death(md, 3, None)  # partial plans are still right
        if plans.complete:
            break
        assert calls < 20
    assert calls > 3
    assert _used(plans, md, 3) == sum(1 for _, _, p in md.iter_partitions() if 3 in p.isr)
