"""Broker registration, heartbeats and fencing on an active ClusterController (fake clock)."""

from __future__ import annotations

import uuid

import pytest

from common.errors import ErrorCode
from controller import (
    NO_LEADER,
    BrokerIdNotRegisteredError,
    ClusterController,
    DuplicateBrokerRegistrationError,
    InconsistentClusterIdError,
    PartitionRegistration,
    RegistrationRequest,
    StaleBrokerEpochError,
)
from controller.registrations import Endpoint
from tests.controller.cluster_helpers import (
    SESSION_MS,
    TIMINGS,
    FakeClock,
    heartbeat_all,
    join,
    make_cluster_controller,
    register,
    tick_until_active,
)
from tests.controller.conftest import MakeStore


@pytest.fixture
def ctl(active: ClusterController) -> ClusterController:
    return active


def wait_sessions_out(ctl: ClusterController, clock: FakeClock, *alive: int) -> None:
    """Let ``broker.session.timeout.ms`` pass while only ``alive`` heartbeat, ticking."""
    for _ in range(int(SESSION_MS / TIMINGS.renew_ms) + 2):
        clock.advance(TIMINGS.renew_ms)
        heartbeat_all(ctl, *alive)
        ctl.tick()


def partition(ctl: ClusterController, topic: str, index: int = 0) -> PartitionRegistration:
    return ctl.partitions(topic)[index]


def test_a_new_broker_is_fenced_until_it_has_loaded_its_own_registration(
    ctl: ClusterController,
) -> None:
    registration = register(ctl, 2, rack="r1")
    assert registration.fenced and registration.broker_epoch == ctl.snapshot.revision
    assert registration.endpoint("PLAINTEXT") == Endpoint("PLAINTEXT", "127.0.0.1", 9092)
    behind = ctl.broker_heartbeat(2, registration.broker_epoch, registration.broker_epoch - 1)
    assert (behind.is_fenced, behind.is_caught_up, behind.should_shut_down) == (True, False, False)
    assert ctl.metadata.brokers[2].fenced
    caught_up = ctl.broker_heartbeat(2, registration.broker_epoch, registration.broker_epoch)
    assert (caught_up.is_fenced, caught_up.is_caught_up) == (False, True)
    assert not ctl.metadata.brokers[2].fenced and ctl.metadata.brokers[2].rack == "r1"


def test_a_second_broker_with_the_node_id_of_a_live_one_is_refused_with_a_clear_message(
    ctl: ClusterController, clock: FakeClock
) -> None:
    first = join(ctl, 2)
    with pytest.raises(
        DuplicateBrokerRegistrationError, match="node.id 2 is held by a live broker"
    ) as info:
        register(ctl, 2)
    assert info.value.code == ErrorCode.duplicate_broker_registration
    assert "Give this broker another --node-id" in str(info.value)
    assert ctl.metadata.brokers[2] == first
    wait_sessions_out(ctl, clock)  # the first one died: its session runs out
    assert ctl.metadata.brokers[2].fenced
    second = register(ctl, 2)
    assert second.incarnation_id != first.incarnation_id
    assert second.broker_epoch > first.broker_epoch


def test_the_same_incarnation_registering_again_amends_its_endpoints_and_keeps_its_epoch(
    ctl: ClusterController,
) -> None:
    incarnation = uuid.uuid4()
    first = register(ctl, 2, incarnation=incarnation)
    moved = ctl.register_broker(
        RegistrationRequest(2, ctl.cluster_id, incarnation, (Endpoint("PLAINTEXT", "h2", 9999),))
    )
    assert moved.broker_epoch == first.broker_epoch
    assert moved.endpoint() == Endpoint("PLAINTEXT", "h2", 9999)


def test_a_silent_broker_is_fenced_its_leaderships_move_within_the_isr_and_come_back(
    ctl: ClusterController, clock: FakeClock
) -> None:
    for node in (1, 2, 3):
        join(ctl, node)
    ctl.create_topic("replicated", assignments={0: [2, 1, 3], 1: [1, 2, 3]})
    ctl.create_topic("single", assignments={0: [2]})
    before = partition(ctl, "replicated")
    wait_sessions_out(ctl, clock, 1, 3)

    assert ctl.metadata.brokers[2].fenced
    assert not ctl.metadata.brokers[1].fenced and not ctl.metadata.brokers[3].fenced
    assert ctl.live_brokers() == [1, 3]
    moved = partition(ctl, "replicated")
    assert (moved.leader, moved.isr) == (1, (1, 3))
    assert (moved.leader_epoch, moved.partition_epoch) == (
        before.leader_epoch + 1,
        before.partition_epoch + 1,
    )
    follower_dropped = partition(ctl, "replicated", 1)
    assert (follower_dropped.leader, follower_dropped.isr, follower_dropped.leader_epoch) == (
        1,
        (1, 3),
        0,
    )
    offline = partition(ctl, "single")
    assert (offline.leader, offline.isr, offline.leader_epoch) == (NO_LEADER, (2,), 1)

    heartbeat_all(ctl, 2)  # it comes back (same incarnation, caught up): unfenced
    assert not ctl.metadata.brokers[2].fenced
    back = partition(ctl, "single")
    assert (back.leader, back.isr, back.leader_epoch) == (2, (2,), 2)
    assert partition(ctl, "replicated").leader == 1  # no automatic preferred election


def test_a_heartbeat_with_a_stale_broker_epoch_is_refused(ctl: ClusterController) -> None:
    registration = join(ctl, 2)
    with pytest.raises(StaleBrokerEpochError, match="Expected broker epoch"):
        ctl.broker_heartbeat(2, registration.broker_epoch - 1, ctl.snapshot.revision)
    with pytest.raises(StaleBrokerEpochError, match="No broker registration"):
        ctl.broker_heartbeat(9, 1, ctl.snapshot.revision)


def test_controlled_shutdown_moves_leadership_before_the_broker_may_exit(
    ctl: ClusterController,
) -> None:
    for node in (1, 2):
        join(ctl, node)
    ctl.create_topic("t", assignments={0: [2, 1]})
    epoch = ctl.metadata.brokers[2].broker_epoch
    first = ctl.broker_heartbeat(2, epoch, ctl.snapshot.revision, want_shut_down=True)
    assert not first.should_shut_down  # it led a partition when it asked
    assert ctl.metadata.brokers[2].in_controlled_shutdown
    assert (partition(ctl, "t").leader, partition(ctl, "t").isr) == (1, (1,))
    second = ctl.broker_heartbeat(2, epoch, ctl.snapshot.revision, want_shut_down=True)
    assert second.should_shut_down and second.is_fenced
    assert ctl.metadata.brokers[2].fenced


def test_a_broker_of_another_cluster_is_refused(ctl: ClusterController) -> None:
    request = RegistrationRequest(
        2, "AAAAAAAAAAAAAAAAAAAAAA", uuid.uuid4(), (Endpoint("PLAINTEXT", "h", 9092),)
    )
    with pytest.raises(InconsistentClusterIdError):
        ctl.register_broker(request)


def test_a_new_controller_gives_every_broker_a_fresh_session(
    make_fs_store: MakeStore, clock: FakeClock
) -> None:
    a, b = (make_cluster_controller(make_fs_store(), clock, n) for n in (1, 2))
    tick_until_active(clock, [a, b])
    for node in (1, 2, 3):
        join(a, node)
    # a pauses; the takeover takes longer than a session timeout
    assert tick_until_active(clock, [b]) is b
    b.tick()
    assert not any(broker.fenced for broker in b.metadata.brokers.values())
    wait_sessions_out(b, clock, 2, 3)  # broker 1 (a's process) stays silent
    assert [n for n, broker in b.metadata.brokers.items() if broker.fenced] == [1]


def test_unregistering_a_broker_removes_it_and_its_leaderships(ctl: ClusterController) -> None:
    for node in (1, 2):
        join(ctl, node)
    ctl.create_topic("t", assignments={0: [2, 1]})
    ctl.unregister_broker(2)
    assert 2 not in ctl.metadata.brokers
    assert (partition(ctl, "t").leader, partition(ctl, "t").isr) == (1, (1,))
    with pytest.raises(BrokerIdNotRegisteredError):
        ctl.unregister_broker(2)


def test_topics_are_placed_on_unfenced_brokers_only(ctl: ClusterController) -> None:
    for node in (1, 2, 3):
        join(ctl, node)
    register(ctl, 4)  # registered, still fenced
    ctl.create_topic("t", 12, 2)
    used = {r for p in ctl.partitions("t") for r in p.replicas}
    assert used == {1, 2, 3}
    assert all(p.isr == p.replicas and p.leader == p.replicas[0] for p in ctl.partitions("t"))


def test_a_restart_of_the_same_broker_is_recognised_by_its_previous_broker_epoch(
    ctl: ClusterController,
) -> None:
    """PreviousBrokerEpoch (kept in the broker's data dir) replaces the live-looking
    registration at once; the same request without it is a duplicate."""
    for node in (1, 2):
        join(ctl, node)
    ctl.create_topic("t", assignments={0: [2]})
    before = ctl.metadata.brokers[2]
    listener = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    stranger = RegistrationRequest(2, ctl.cluster_id, uuid.uuid4(), listener)
    with pytest.raises(DuplicateBrokerRegistrationError):
        ctl.register_broker(stranger)
    wrong = RegistrationRequest(2, ctl.cluster_id, uuid.uuid4(), listener,
                                previous_broker_epoch=before.broker_epoch - 1)
    with pytest.raises(DuplicateBrokerRegistrationError):
        ctl.register_broker(wrong)
    restart = RegistrationRequest(2, ctl.cluster_id, uuid.uuid4(), listener,
                                  previous_broker_epoch=before.broker_epoch)
    registration = ctl.register_broker(restart)
    assert registration.broker_epoch > before.broker_epoch and registration.fenced
    assert registration.incarnation_id == restart.incarnation_id
    # the old incarnation's leadership went with it; the new one gets it back once unfenced
    assert partition(ctl, "t").leader == NO_LEADER
    ctl.broker_heartbeat(2, registration.broker_epoch, ctl.snapshot.revision)
    assert partition(ctl, "t").leader == 2
    assert partition(ctl, "t").leader_epoch > 0
