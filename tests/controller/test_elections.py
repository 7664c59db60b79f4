"""Elections, ISR changes (AlterPartition) and reassignments: the pure partition change
rules, then through an active ClusterController."""

from __future__ import annotations

import pytest

from common.errors import InvalidRequestError, UnknownTopicIdError
from controller import (
    NO_LEADER,
    BrokerState,
    ClusterController,
    Election,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidReplicaAssignmentError,
    InvalidUpdateVersionError,
    LeaderRecoveryState,
    NewLeaderElectedError,
    NoReassignmentInProgressError,
    NotControllerError,
    PartitionRegistration,
    PartitionStateChange,
    PreferredLeaderNotAvailableError,
    StaleBrokerEpochError,
)
from controller.partition_change import change_partition
from tests.controller.cluster_helpers import (
    register,
)

P = PartitionRegistration


def alive(*nodes: int):  # type: ignore[no-untyped-def]
    return lambda r: r in nodes


# -- the pure rules ------------------------------------------------------------------------------


def test_a_lost_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order() -> None:
    current = P(replicas=(1, 2, 3), isr=(1, 3, 2), leader=1, leader_epoch=4, partition_epoch=9)
    changed = change_partition(current, alive(2, 3), target_isr=[3, 2])
    assert changed == P((1, 2, 3), (3, 2), leader=2, leader_epoch=5, partition_epoch=10)


def test_the_new_leader_is_never_outside_the_isr_without_unclean_election() -> None:
    current = P(replicas=(1, 2, 3), isr=(1,), leader=1, leader_epoch=2, partition_epoch=3)
    offline = change_partition(current, alive(2, 3), target_isr=[])
    assert offline == P((1, 2, 3), (1,), leader=NO_LEADER, leader_epoch=3, partition_epoch=4)
    unclean = change_partition(current, alive(2, 3), election=Election.UNCLEAN, target_isr=[])
    assert unclean is not None
    assert (unclean.leader, unclean.isr, unclean.leader_recovery_state) == (
        2,
        (2,),
        LeaderRecoveryState.RECOVERING,
    )


def test_an_isr_shrink_keeping_the_leader_bumps_only_the_partition_epoch() -> None:
    current = P(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=2, partition_epoch=3)
    changed = change_partition(current, alive(1, 2, 3), target_isr=[1, 2])
    assert changed == P((1, 2, 3), (1, 2), leader=1, leader_epoch=2, partition_epoch=4)
    assert change_partition(current, alive(1, 2, 3), target_isr=[1, 2, 3]) is None


def test_preferred_election_moves_leadership_back_to_the_first_replica() -> None:
    current = P(replicas=(1, 2), isr=(2, 1), leader=2, leader_epoch=6, partition_epoch=8)
    assert change_partition(current, alive(1, 2)) is None  # ONLINE keeps a valid leader
    changed = change_partition(current, alive(1, 2), election=Election.PREFERRED)
    assert changed is not None and (changed.leader, changed.leader_epoch) == (1, 7)


def test_a_reassignment_completes_once_the_target_replicas_are_in_the_isr() -> None:
    moving = P(
        replicas=(3, 1),
        isr=(1,),
        leader=1,
        leader_epoch=1,
        partition_epoch=1,
        adding_replicas=(3,),
        removing_replicas=(1,),
    )
    assert change_partition(moving, alive(1, 3), target_isr=[1]) is None
    done = change_partition(moving, alive(1, 3), target_isr=[1, 3])
    assert done == P(replicas=(3,), isr=(3,), leader=3, leader_epoch=2, partition_epoch=2)


@pytest.mark.parametrize(
    "bad",
    [
        {"replicas": ()},
        {"replicas": (1, 1)},
        {"isr": (4,)},
        {"leader": 3, "isr": (1, 2)},
        {"adding_replicas": (1,), "removing_replicas": (1,)},
    ],
)
def test_a_registration_that_breaks_an_invariant_cannot_be_built(bad: dict) -> None:  # type: ignore[type-arg]
    fields = {"replicas": (1, 2, 3), "isr": (1, 2), "leader": 1, **bad}
    with pytest.raises(ValueError, match="invalid partition registration"):
        P(**fields)


# -- through the controller ----------------------------------------------------------------------


@pytest.fixture
def ctl(ctl3: ClusterController) -> ClusterController:
    return ctl3


def isr_change(
    ctl: ClusterController, topic: str, isr: tuple[int, ...], **override: object
) -> PartitionStateChange:
    info = ctl.topic(topic)
    assert info is not None
    p = ctl.partitions(topic)[0]
    fields = {
        "topic_id": info.topic_id,
        "partition": 0,
        "leader_epoch": p.leader_epoch,
        "new_isr": tuple(BrokerState(b, ctl.metadata.brokers[b].broker_epoch) for b in isr),
        "partition_epoch": p.partition_epoch,
        **override,
    }
    return PartitionStateChange(**fields)  # type: ignore[arg-type]


def epoch_of(ctl: ClusterController, node: int) -> int:
    return ctl.metadata.brokers[node].broker_epoch


def test_alter_partition_from_the_leader_changes_the_isr_and_answers_the_new_state(
    ctl: ClusterController,
) -> None:
    ctl.create_topic("t", assignments={0: [1, 2, 3]})
    [result] = ctl.alter_partition(1, epoch_of(ctl, 1), [isr_change(ctl, "t", (1, 2))])
    assert result.error is None and result.registration is not None
    assert (result.registration.isr, result.registration.partition_epoch) == ((1, 2), 1)
    assert ctl.partitions("t")[0] == result.registration
    [grown] = ctl.alter_partition(1, epoch_of(ctl, 1), [isr_change(ctl, "t", (1, 2, 3))])
    assert grown.registration is not None and grown.registration.isr == (1, 2, 3)


def test_alter_partition_applies_a_request_of_many_changes_in_one_image_and_in_order(
    ctl: ClusterController, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker back at 10,000 partitions has its leaders send thousands of ISR expansions
    at once; the controller built a new image per change (0.8 s of its commit lock). One
    image per request now, and a change that follows another of the same partition in the
    request sees it."""
    from controller.document import ClusterMetadata

    ctl.create_topic("t", assignments={i: [1, 2, 3] for i in range(40)})
    info = ctl.topic("t")
    assert info is not None

    def change(partition: int, isr: tuple[int, ...], partition_epoch: int) -> PartitionStateChange:
        return PartitionStateChange(info.topic_id, partition, 0, tuple(
            BrokerState(b, ctl.metadata.brokers[b].broker_epoch) for b in isr), partition_epoch)

    images: list[int] = []
    real = ClusterMetadata.with_partitions

    def counted(md: ClusterMetadata, changes):  # type: ignore[no-untyped-def]
        images.append(len(changes))
        return real(md, changes)

    monkeypatch.setattr(ClusterMetadata, "with_partitions", counted)
    requests = [change(i, (1, 2), 0) for i in range(40)]
    requests += [change(7, (1,), 1), change(7, (1, 3), 2)]  # partition 7 twice more, in order
    results = ctl.alter_partition(1, epoch_of(ctl, 1), requests)
    assert all(r.error is None for r in results), [r.error for r in results if r.error]
    assert images == [40]  # one image for the request (40 partitions changed)
    regs = ctl.partitions("t")
    assert [r.isr for r in regs] == [(1, 3) if i == 7 else (1, 2) for i in range(40)]
    assert regs[7].partition_epoch == 3 and regs[8].partition_epoch == 1
    stale = ctl.alter_partition(1, epoch_of(ctl, 1), [change(8, (1,), 0)])
    assert isinstance(stale[0].error, InvalidUpdateVersionError)


def test_alter_partition_refusals_carry_kafkas_error_codes(ctl: ClusterController) -> None:
    ctl.create_topic("t", assignments={0: [1, 2, 3]})
    ctl.alter_partition(1, epoch_of(ctl, 1), [isr_change(ctl, "t", (1, 2))])  # partition epoch 1
    info = ctl.topic("t")
    assert info is not None
    cases = [
        (isr_change(ctl, "t", (1,), partition_epoch=0), InvalidUpdateVersionError),
        (isr_change(ctl, "t", (1,), leader_epoch=-1), FencedLeaderEpochError),
        (isr_change(ctl, "t", (1,), leader_epoch=5), NotControllerError),
        (isr_change(ctl, "t", (2, 3)), InvalidRequestError),  # the ISR must hold the leader
        (isr_change(ctl, "t", (1, 1)), InvalidRequestError),
        (isr_change(ctl, "t", (1,), topic_id=info.topic_id.__class__(int=7)), UnknownTopicIdError),
        (
            isr_change(ctl, "t", (1, 2), new_isr=(BrokerState(1), BrokerState(2, 12345))),
            IneligibleReplicaError,
        ),
    ]
    results = ctl.alter_partition(1, epoch_of(ctl, 1), [change for change, _ in cases])
    for result, (_, error) in zip(results, cases, strict=True):
        assert isinstance(result.error, error), (result, error)
    assert ctl.partitions("t")[0].isr == (1, 2)  # nothing applied
    [not_leader] = ctl.alter_partition(2, epoch_of(ctl, 2), [isr_change(ctl, "t", (1,))])
    assert isinstance(not_leader.error, InvalidRequestError)
    with pytest.raises(StaleBrokerEpochError):
        ctl.alter_partition(1, epoch_of(ctl, 1) - 1, [isr_change(ctl, "t", (1,))])


def test_a_fenced_replica_may_not_rejoin_the_isr(ctl: ClusterController) -> None:
    register(ctl, 4)  # registered, fenced
    ctl.create_topic("t", assignments={0: [1, 4]})
    [result] = ctl.alter_partition(
        1,
        epoch_of(ctl, 1),
        [isr_change(ctl, "t", (1, 4), new_isr=(BrokerState(1), BrokerState(4)))],
    )
    assert isinstance(result.error, IneligibleReplicaError) and "4 (fenced)" in str(result.error)


def test_a_partition_moves_to_another_broker_through_reassignment(ctl: ClusterController) -> None:
    ctl.create_topic("t", assignments={0: [1]})
    assert ctl.alter_partition_reassignments([("t", 0, [3])]) == [None]
    moving = ctl.partitions("t")[0]
    assert (moving.replicas, moving.adding_replicas, moving.removing_replicas) == (
        (3, 1),
        (3,),
        (1,),
    )
    assert (moving.leader, moving.isr) == (1, (1,))
    [listed] = ctl.list_partition_reassignments()
    assert (listed.topic, listed.replicas, listed.adding_replicas) == ("t", (3, 1), (3,))
    # the new replica caught up: the leader adds it to the ISR, which completes the move
    [result] = ctl.alter_partition(1, epoch_of(ctl, 1), [isr_change(ctl, "t", (1, 3))])
    assert isinstance(result.error, NewLeaderElectedError)
    done = ctl.partitions("t")[0]
    assert (done.replicas, done.isr, done.leader, done.leader_epoch) == ((3,), (3,), 3, 1)
    assert not done.is_reassigning and ctl.list_partition_reassignments() == []


def test_a_reassignment_can_be_cancelled_and_bad_ones_are_refused(ctl: ClusterController) -> None:
    ctl.create_topic("t", assignments={0: [1, 2]})
    errors = ctl.alter_partition_reassignments(
        [("t", 0, [2, 3]), ("t", 0, [9]), ("t", 0, [3, 3]), ("nope", 0, [1])]
    )
    assert errors[0] is None
    assert isinstance(errors[1], InvalidReplicaAssignmentError) and "no such broker" in str(
        errors[1]
    )
    assert isinstance(errors[2], InvalidReplicaAssignmentError) and "more than once" in str(
        errors[2]
    )
    assert errors[3] is not None and errors[3].code.name == "unknown_topic_or_partition"
    assert ctl.alter_partition_reassignments([("t", 0, None)]) == [None]
    reverted = ctl.partitions("t")[0]
    # the original replicas come back in the in-flight order, as in Kafka's revert
    assert (reverted.replicas, reverted.isr, reverted.is_reassigning) == ((2, 1), (1, 2), False)
    [again] = ctl.alter_partition_reassignments([("t", 0, None)])
    assert isinstance(again, NoReassignmentInProgressError)


def test_elect_leaders_preferred_and_unclean(ctl: ClusterController) -> None:
    ctl.create_topic("t", assignments={0: [1, 2]})
    ctl.alter_partition(1, epoch_of(ctl, 1), [isr_change(ctl, "t", (1,))])
    results = ctl.elect_leaders(Election.PREFERRED, [("t", 0)])
    assert isinstance(results[("t", 0)], ElectionNotNeededError)
    ctl.unregister_broker(1)  # partition offline, ISR [1], broker 2 out of sync
    offline = ctl.partitions("t")[0]
    assert (offline.leader, offline.isr) == (NO_LEADER, (1,))
    assert isinstance(
        ctl.elect_leaders(Election.PREFERRED, [("t", 0)])[("t", 0)],
        PreferredLeaderNotAvailableError,
    )
    assert ctl.elect_leaders(Election.UNCLEAN, [("t", 0)]) == {("t", 0): None}
    recovered = ctl.partitions("t")[0]
    assert (recovered.leader, recovered.isr, recovered.leader_recovery_state) == (
        2,
        (2,),
        LeaderRecoveryState.RECOVERING,
    )
    ctl.create_topic("u", assignments={0: [3]})
    ctl.unregister_broker(3)
    assert isinstance(
        ctl.elect_leaders(Election.UNCLEAN, [("u", 0)])[("u", 0)], EligibleLeadersNotAvailableError
    )


def test_unclean_election_enabled_on_the_topic_keeps_a_partition_online(
    ctl: ClusterController,
) -> None:
    ctl.create_topic(
        "t", configs={"unclean.leader.election.enable": "true"}, assignments={0: [1, 2]}
    )
    ctl.alter_partition(1, epoch_of(ctl, 1), [isr_change(ctl, "t", (1,))])
    ctl.unregister_broker(1)
    p = ctl.partitions("t")[0]
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), LeaderRecoveryState.RECOVERING)
