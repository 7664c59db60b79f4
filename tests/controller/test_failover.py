"""Failover without waiting a lease out (issue #31): a dead controller's lease taken over
once its listener refuses connections, a controller cut off from the brokers standing
down instead of fencing them, and its successor fencing it in its first write."""

from __future__ import annotations

import json

import pytest

from common.config.broker import BrokerConfig
from controller import ClusterController
from controller.lease import LEASE_KEY, ControllerLease, LeaseEvent
from controller.liveness import REPROBE_DELAYS_MS, REPROBES, quorum_lost
from remote_tier import ObjectStore
from tests.controller.cluster_helpers import (
    TIMINGS,
    FakeClock,
    heartbeat_all,
    join,
    make_cluster_controller,
    tick_until_active,
)
from tests.controller.conftest import MakeStore


def lease_of(store: ObjectStore) -> dict:  # type: ignore[type-arg]
    return json.loads(store.get(LEASE_KEY))


def _three_joined(make_store: MakeStore, clock: FakeClock) -> list[ClusterController]:
    """Controllers 1, 2, 3 on one bucket, 1 active, every broker registered and unfenced."""
    controllers = [make_cluster_controller(make_store(), clock, n) for n in (1, 2, 3)]
    assert tick_until_active(clock, controllers) is controllers[0]
    for n in (1, 2, 3):
        join(controllers[0], n)
    return controllers


def test_a_dead_holders_lease_is_taken_at_once_and_the_holder_fenced_in_the_first_write(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b, c = _three_joined(make_store, clock)
    b.tick()
    # a is killed; b's connection to it drops, and a's listener refuses connections
    probed: list[int] = []
    b.probe_gone = lambda node: probed.append(node) or node == 1
    b.peer_unreachable(1)
    b.tick()
    assert probed == [1]
    assert b.is_active and b.epoch == a.epoch + 1  # no lease wait: the clock did not move
    assert b.metadata.brokers[1].fenced  # fenced in the claim itself
    assert all(1 not in p.isr and p.leader != 1 for _, _, p in b.metadata.iter_partitions())


def test_a_live_holder_is_not_taken_over_on_a_dropped_connection(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b = (make_cluster_controller(make_store(), clock, n) for n in (1, 2))
    assert tick_until_active(clock, [a, b]) is a
    b.tick()
    b.probe_gone = lambda node: False  # it still accepts connections
    b.peer_unreachable(1)
    b.tick()
    assert not b.is_active and a.is_active
    assert lease_of(make_store())["holder"] == 1


def test_a_takeover_on_evidence_fails_when_the_holder_renewed_after_the_read(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store = make_store()
    holder = ControllerLease(store, 1, "inc-1", TIMINGS, monotonic=clock)
    assert holder.step() is LeaseEvent.ACQUIRED
    candidate = ControllerLease(make_store(), 2, "inc-2", TIMINGS, monotonic=clock)

    def probe_renewing_meanwhile(node: int) -> bool:
        clock.advance(TIMINGS.renew_ms)
        assert holder.step() is LeaseEvent.RENEWED  # alive after all: it renewed
        return True

    assert candidate.take_over_if_gone(probe_renewing_meanwhile) is LeaseEvent.NONE
    assert not candidate.holds() and holder.holds()
    assert lease_of(store)["holder"] == 1


def test_quorum_is_lost_only_when_no_majority_was_heard() -> None:
    ages = {2: 100.0, 3: 5_000.0, 4: 5_000.0, 5: None}
    assert not quorum_lost(1, [1, 2], ages.get, 1_500)  # two brokers: never
    assert quorum_lost(1, [1, 3, 4], ages.get, 1_500)  # heard from nobody
    assert not quorum_lost(1, [1, 2, 3], ages.get, 1_500)  # itself and 2: a majority
    assert quorum_lost(1, [1, 2, 3, 4], ages.get, 1_500)  # 2 of 4 is no majority
    assert quorum_lost(1, [1, 2, 3, 4, 5], ages.get, 1_500)


def test_a_controller_cut_off_from_the_brokers_stands_down_instead_of_fencing_them(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b, c = _three_joined(make_store, clock)
    a.create_topic("orders", 3, replication_factor=3)
    stopped: list[bool] = []
    a.before_stand_down = lambda: stopped.append(True)
    # a hears nobody from here on (b and c cannot reach it)
    clock.advance(1_000)
    a.tick()
    assert a.is_active
    clock.advance(1_000)  # 2 s without a heartbeat from 2 or 3: past controller.quorum.timeout.ms
    a.tick()
    assert not a.is_active and stopped == [True]
    assert not any(a.metadata.brokers[n].fenced for n in (2, 3))  # it fenced nobody
    assert lease_of(make_store()) | {"holder": -1, "released_by": 1} == lease_of(make_store())
    # it leaves the lease to the others for a session, and b takes it at its next poll
    clock.advance(TIMINGS.poll_ms)
    a.tick()
    assert not a.is_active
    b.tick()
    assert b.is_active
    assert b.metadata.brokers[1].fenced and not b.metadata.brokers[2].fenced
    assert all(p.leader != 1 and 1 not in p.isr for _, _, p in b.metadata.iter_partitions())


def test_a_controller_that_stood_down_and_was_not_replaced_takes_back_over(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b, c = _three_joined(make_store, clock)
    clock.advance(2_000)
    a.tick()
    assert not a.is_active  # stood down: 2 and 3 are silent
    # 2 and 3 are in fact dead: nobody takes the lease, so a takes it back after a session
    clock.advance(9_000)
    a.tick()
    a.tick()
    assert a.is_active
    for _ in range(20):  # a session and more, renewing as it goes
        clock.advance(500)
        a.tick()
        assert a.is_active  # no second stand-down: its peers are gone, not it
    assert a.metadata.brokers[2].fenced and a.metadata.brokers[3].fenced


def test_heartbeats_from_a_majority_keep_the_controller_active(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b, c = _three_joined(make_store, clock)
    for _ in range(10):
        clock.advance(500)
        heartbeat_all(a, 2)  # 3 is gone, 2 still heartbeats
        a.tick()
        assert a.is_active


def test_a_broker_still_listening_a_moment_after_its_connection_dropped_is_probed_again(
    make_store: MakeStore, clock: FakeClock
) -> None:
    """A killed process's kernel closes its descriptors in order: a broker that loaded
    10,000 logs before it listened still accepted connections for most of a second after
    its heartbeat connection dropped, and was fenced only by its session (10 s)."""
    a, _, _ = _three_joined(make_store, clock)
    answers = iter([False, False, True])  # listening, listening, then refused
    probed: list[float] = []
    a.probe_gone = lambda node: probed.append(clock.now) or next(answers)
    a.connection_lost(3)
    a.tick()
    assert not a.metadata.brokers[3].fenced
    for delay in REPROBE_DELAYS_MS[:2]:
        clock.advance(delay - 1)
        a.tick()  # not yet due
        clock.advance(1)
        a.tick()
    assert a.metadata.brokers[3].fenced and len(probed) == 3
    assert probed[-1] - probed[0] == sum(REPROBE_DELAYS_MS[:2])  # no session timeout waited


def test_a_broker_that_keeps_listening_is_left_to_its_session(make_store: MakeStore, clock: FakeClock) -> None:
    a, _, _ = _three_joined(make_store, clock)
    probed: list[int] = []
    a.probe_gone = lambda node: probed.append(node) and False
    a.connection_lost(2)
    for _ in range(REPROBES + 3):
        a.tick()
        clock.advance(max(REPROBE_DELAYS_MS))
        heartbeat_all(a, 2)
    assert len(probed) == REPROBES + 1 and not a.metadata.brokers[2].fenced


def test_late_heartbeats_from_brokers_whose_fetches_arrive_are_slowness_not_a_cut_off(
    make_store: MakeStore, clock: FakeClock
) -> None:
    """Three brokers creating 30,000 partitions on two cores heartbeated 1.5-2 s apart: the
    controller stood down (fencing its own broker) though nothing was cut off. A follower
    fetch from a broker counts as hearing from it, as KRaft's check-quorum counts fetches;
    a broker cut off (nothing of its arrives) does not."""
    a, _, _ = _three_joined(make_store, clock)
    a.create_topic("orders", 3, replication_factor=3)
    fetched_at = {2: clock.now, 3: clock.now}
    a.peer_request_age_ms = lambda node: None if node not in fetched_at else clock.now - fetched_at[node]
    stopped: list[bool] = []
    a.before_stand_down = lambda: stopped.append(True)
    for _ in range(8):  # 4 s without a heartbeat from 2 or 3, their fetches arriving
        clock.advance(500)
        fetched_at.update({2: clock.now, 3: clock.now})
        a.tick()
        assert a.is_active and not stopped
    clock.advance(2_000)  # then nothing at all from either
    a.tick()
    assert not a.is_active and stopped == [True]
    assert not any(a.metadata.brokers[n].fenced for n in (2, 3))


def test_one_broker_heard_through_its_fetches_is_a_majority_with_the_controller(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, _, _ = _three_joined(make_store, clock)
    a.peer_request_age_ms = lambda node: 100.0 if node == 2 else None
    clock.advance(2_000)
    a.tick()
    assert a.is_active


def test_the_lease_is_renewed_while_the_tick_thread_is_held_up(make_store: MakeStore) -> None:
    """The tick thread writes (fencing 30,000 partitions took 0.9 s) and waits for the commit
    lock behind creates; the lease has a thread of its own and does not run out meanwhile."""
    import threading
    import time

    a = ClusterController(make_store(), BrokerConfig({
        "node.id": "1", "controller.lease.ms": "600", "controller.lease.renew.ms": "100",
        "controller.lease.safety.margin.ms": "200", "controller.lease.poll.ms": "50",
    }))
    held = threading.Event()
    release = threading.Event()
    original = a._maybe_rebalance_leaders

    def stuck() -> None:
        held.set()
        release.wait(5)
        original()

    a._maybe_rebalance_leaders = stuck  # type: ignore[method-assign]
    a.start()
    try:
        assert held.wait(5) and a.is_active
        time.sleep(1.5)  # 2.5 leases with the tick thread stuck
        assert a.is_active and a.lease_remaining_ms() > 0
    finally:
        release.set()
        a.close()


def test_a_new_controller_drops_the_isr_places_its_predecessor_left(
    make_store: MakeStore, clock: FakeClock
) -> None:
    """A fencing is two batches (leaderships, then ISR places); a controller that dies
    between them leaves a fenced broker in ISRs, and its successor takes it out at once."""
    a, b, _ = _three_joined(make_store, clock)
    a.create_topic("orders", 6, replication_factor=3)
    a._drop_fenced_from_isrs = lambda: None  # type: ignore[method-assign]  # dies before the second
    a.probe_gone = lambda node: node == 3
    a.connection_lost(3)
    a.tick()
    parts = [p for _, _, p in a.metadata.iter_partitions()]
    assert a.metadata.brokers[3].fenced and all(p.leader != 3 for p in parts)
    assert any(3 in p.isr for p in parts)  # the ISR places are left
    b.tick()
    b.probe_gone = lambda node: node in (1, 3)
    b.peer_unreachable(1)
    b.tick()
    assert b.is_active
    assert all(3 not in p.isr and 1 not in p.isr for _, _, p in b.metadata.iter_partitions())


def test_a_tick_thread_stuck_for_a_session_lets_the_lease_lapse(
    make_store: MakeStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The renewal thread must not keep a controller whose tick thread never returns (a store
    call hung): it would hold the lease and fence nobody. Past a session it lets it lapse,
    saying so once: it used to look (and log) every millisecond until the lease ran out."""
    import logging
    import threading
    import time

    caplog.set_level(logging.WARNING, logger="controller.cluster_controller")

    a = ClusterController(make_store(), BrokerConfig({
        "node.id": "1", "controller.lease.ms": "600", "controller.lease.renew.ms": "100",
        "controller.lease.safety.margin.ms": "200", "controller.lease.poll.ms": "50",
        "broker.session.timeout.ms": "700", "broker.heartbeat.interval.ms": "100",
    }))
    held, release = threading.Event(), threading.Event()
    a._maybe_rebalance_leaders = lambda: held.set() or release.wait(10)  # type: ignore[method-assign]
    a.start()
    try:
        assert held.wait(5)
        time.sleep(0.4)
        assert a.lease_remaining_ms() > 0  # within a session: renewed
        deadline = time.monotonic() + 5
        while a.lease_remaining_ms() > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a.lease_remaining_ms() == 0  # stuck past a session: lapsed
        time.sleep(0.2)
        said = [r for r in caplog.records if "has not finished a step" in r.getMessage()]
        assert len(said) == 1, f"{len(said)} warnings for one stuck spell"
    finally:
        release.set()
        a.close()


def _kill(a: ClusterController, node: int) -> tuple:  # type: ignore[type-arg]
    """``node`` dies (its listener refuses connections); the image both batches of its fencing
    should give, computed without plans, and the image the controller ``a`` has after them."""
    from controller.replication_control import drop_fenced_from_isrs, fence_broker

    expected = drop_fenced_from_isrs(fence_broker(a.metadata, node, lambda _t: False, isr_places=False),
                                     lambda _t: False)
    a.probe_gone = lambda n: n == node
    a.peer_unreachable(node)
    a.tick()
    return expected, a.metadata


def test_a_death_in_a_quiet_cluster_is_fenced_with_the_elections_planned_ahead(
    make_store: MakeStore, clock: FakeClock
) -> None:
    """The controller plans each broker's fencing once the metadata has been still for a
    while, never right after a change; the fencing then commits what it would have computed
    (issue 33: the elections of a death, at 10,000 partitions, were computed in its path)."""
    from controller.cluster_controller import PLANS_QUIET_MS
    from controller.fence_plans import PlanKind

    a, _, _ = _three_joined(make_store, clock)
    a.create_topic("orders", 12, replication_factor=3)
    a.create_topic("events", 9, replication_factor=3)
    a.tick()
    assert a._plans.entries() == 0  # just changed: not yet
    for _ in range(PLANS_QUIET_MS // TIMINGS.poll_ms + 1):
        clock.advance(TIMINGS.poll_ms)
        heartbeat_all(a, 1, 2, 3)
        a.tick()
    before = a.metadata
    led = sum(1 for _, _, p in before.iter_partitions() if p.leader == 2)
    assert led and len(a._plans.planned(PlanKind.LEAD, 2, before)) == led
    expected, after = _kill(a, 2)
    assert after.brokers[2].fenced
    assert after.partitions == expected.partitions  # both batches, as computed without plans
    assert all(p.leader != 2 and 2 not in p.isr for _, _, p in after.iter_partitions())


def test_a_death_in_a_quiet_cluster_writes_the_batches_made_ahead_and_brokers_take_them_as_made(
    make_store: MakeStore, clock: FakeClock
) -> None:
    """Once the metadata has been still, the controller makes both batches of each other
    broker's fencing ahead, and a broker's view makes them too; a death then commits the
    batches made (their lines written as made) and the view takes the images it made
    instead of decoding and replaying 2 batches. Both end where a replay ends (issue 33)."""
    from controller.cluster_controller import PLANS_QUIET_MS
    from controller.metadata_view import MetadataView

    store = make_store()
    controllers = [make_cluster_controller(store, clock, n) for n in (1, 2, 3)]
    a = tick_until_active(clock, controllers)
    assert a is controllers[0]
    for n in (1, 2, 3):
        join(a, n)
    a._deactivate("stood down for a moment")  # what it makes from now on is what it writes
    a.tick()
    assert a.is_active
    a.create_topic("orders", 12, replication_factor=3)
    a.create_topic("events", 9, replication_factor=3)
    view = MetadataView(store)
    view.refresh()
    assert not view.prepare_ahead(3, quiet_s=60)  # just installed: not yet
    while view.prepare_ahead(3, quiet_s=0):
        pass
    assert view.ahead.ready and view.ahead.prepared_for is view.snapshot().metadata
    for _ in range(PLANS_QUIET_MS // TIMINGS.poll_ms + 6):
        clock.advance(TIMINGS.poll_ms)
        heartbeat_all(a, 1, 2, 3)
        a.tick()
    before = a.metadata
    assert a._ahead.complete and a._ahead.prepared_for is before
    expected, after = _kill(a, 2)
    assert after.revision == before.revision + 2 and after.partitions == expected.partitions
    assert a._ahead.taken == 4  # each batch's image, then its lines
    assert view.refresh()
    assert view.ahead.taken == 2 and view.snapshot().metadata == after


def test_a_broker_replays_a_batch_that_is_not_the_one_it_made_ahead(
    make_store: MakeStore, clock: FakeClock
) -> None:
    """A view whose fencings were made from an image the controller no longer holds (a topic
    created since) replays the batches it reads: nothing it made is taken."""
    from controller.metadata_view import MetadataView

    store = make_store()
    controllers = [make_cluster_controller(store, clock, n) for n in (1, 2, 3)]
    a = tick_until_active(clock, controllers)
    for n in (1, 2, 3):
        join(a, n)
    a.create_topic("orders", 12, replication_factor=3)
    view = MetadataView(store)
    view.refresh()
    while view.prepare_ahead(3, quiet_s=0):
        pass
    a.create_topic("late", 4, replication_factor=3)  # the view has not read it
    a.probe_gone = lambda node: node == 2
    a.peer_unreachable(2)
    a.tick()
    assert view.refresh()
    assert view.ahead.taken == 0 and view.snapshot().metadata == a.metadata
    assert all(p.leader != 2 and 2 not in p.isr for _, _, p in view.snapshot().metadata.iter_partitions())
