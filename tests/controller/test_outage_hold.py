"""The hold through a bucket outage every broker sees (ADR 0031), on a fake clock.

Three controllers over one store (filesystem and moto's S3), each through its own
:class:`FlakyObjectStore` that a test turns off; every broker registered and unfenced.
A broker's reports are what its lifecycle sends: :meth:`ClusterController.hold_answer`
with the token of the previous answer.
"""

from __future__ import annotations

import contextlib

import pytest

from controller import BrokerConfig, ClusterController, ControllerLease, LeaseEvent, LeaseTimings
from controller.errors import NotControllerError
from tests.controller.cluster_helpers import (
    TIMINGS,
    FakeClock,
    join,
    make_cluster_controller,
    tick_until_active,
)
from tests.controller.conftest import MakeStore
from tests.controller.test_elections import isr_change
from tests.remote_tier.flaky import FlakyObjectStore

HOLD_MS = 60_000
HOLD = {"controller.bucket.outage.hold.ms": str(HOLD_MS)}
REPORT_MS = TIMINGS.lease_ms * 3 // 8  # how long a report counts, and a grant lasts
TAKEOVER_MS = TIMINGS.lease_ms + TIMINGS.clock_skew_ms


class _Cluster:
    """Controllers 1-3 (1 active), each broker joined; ``down[n]``: n's store fails."""

    def __init__(self, make_store: MakeStore, clock: FakeClock) -> None:
        self.clock = clock
        self.down = {n: False for n in (1, 2, 3)}
        self.nodes = {n: make_cluster_controller(self._store(make_store, n), clock, n, overrides=HOLD)
                      for n in (1, 2, 3)}
        assert tick_until_active(clock, list(self.nodes.values())) is self.nodes[1]
        for n in (1, 2, 3):
            join(self.nodes[1], n)
        self.tokens = dict.fromkeys((1, 2, 3), 0)

    def _store(self, make_store: MakeStore, n: int) -> FlakyObjectStore:
        return FlakyObjectStore(make_store(), fail_key=lambda _op, _key: self.down[n])

    @property
    def a(self) -> ClusterController:
        return self.nodes[1]

    def report(self, n: int) -> bool:
        """Broker ``n`` asks the controller (node 1) as its lifecycle does: whether it holds."""
        registration = self.a.metadata.brokers[n]
        hold, self.tokens[n], grant_ms = self.a.hold_answer(n, registration.broker_epoch,
                                                            self.a.metadata.revision, self.tokens[n])
        assert grant_ms == REPORT_MS
        return hold

    def step(self, ms: float = TIMINGS.poll_ms, reporting: tuple[int, ...] = (2, 3)) -> None:
        """``ms`` pass; every node ticks; the brokers of ``reporting`` heartbeat node 1, and
        report when they cannot read the lease."""
        self.clock.advance(ms)
        for node in self.nodes.values():
            node.tick()
        for n in reporting:
            if self.nodes[n].outage_report():
                self.report(n)
            registration = self.a.metadata.brokers[n]
            with contextlib.suppress(NotControllerError):
                self.a.heartbeat_without_change(n, registration.broker_epoch, self.a.metadata.revision)

    def outage(self) -> None:
        """The bucket answers nobody, until node 1 holds (its lease ran out, all reported)."""
        self.down.update({1: True, 2: True, 3: True})
        for _ in range(40):
            self.step()
            if self.a.holding:
                return
        raise AssertionError("node 1 never held")


def test_a_controller_whose_lease_runs_out_in_an_outage_all_brokers_report_holds_and_writes_nothing(
    make_store: MakeStore, clock: FakeClock
) -> None:
    cluster = _Cluster(make_store, clock)
    a = cluster.a
    revision = a.metadata.revision
    cluster.outage()
    assert not a.is_active and a.controller_id == 1
    assert 0 < a.lease_remaining_ms() <= REPORT_MS  # its broker leads on
    registration = a.metadata.brokers[2]
    reply = a.heartbeat_without_change(2, registration.broker_epoch, revision)
    assert reply is not None and not reply.is_fenced
    assert cluster.report(2)  # the broker is told: it may lead without reading the metadata
    with pytest.raises(NotControllerError):
        a.create_topic("during-the-outage", 1)
    for _ in range(40):  # 20 s: it holds for as long as every broker reports
        cluster.step()
        assert a.holding
    for _ in range(int(REPORT_MS // TIMINGS.poll_ms) + 1):  # broker 3 falls silent
        cluster.step(reporting=(2,))
    assert not a.holding and a.lease_remaining_ms() == 0
    assert not cluster.report(2)
    with pytest.raises(NotControllerError):
        a.heartbeat_without_change(2, registration.broker_epoch, revision)
    assert a.metadata.revision == revision


def test_the_hold_ends_before_a_broker_that_reads_the_bucket_again_can_take_the_lease(
    make_store: MakeStore, clock: FakeClock
) -> None:
    cluster = _Cluster(make_store, clock)
    a, b = cluster.a, cluster.nodes[2]
    cluster.outage()
    cluster.down[2] = False  # broker 2 reaches the bucket again; brokers 1 and 3 do not
    back_at = clock.now
    last_yes = ended = None
    while not b.is_active:
        assert clock.now - back_at < TAKEOVER_MS + 4 * TIMINGS.poll_ms, "broker 2 never took over"
        cluster.step(100)
        if a.holding:
            assert cluster.report(3)
            last_yes = clock.now
        elif ended is None:
            ended = clock.now
        assert not (a.holding and b.is_active)
    assert last_yes is not None and ended is not None
    # every grant (broker 3's last, relied on until it ends) ran out a quarter lease before
    assert clock.now - (last_yes + REPORT_MS) >= TIMINGS.lease_ms // 4
    assert b.epoch == 2


def test_no_hold_while_a_metadata_write_of_the_controller_may_have_landed_unseen(
    make_store: MakeStore, clock: FakeClock
) -> None:
    cluster = _Cluster(make_store, clock)
    a = cluster.a
    cluster.down.update({1: True, 2: True, 3: True})
    with pytest.raises(Exception):  # noqa: B017, PT011 - the store's error, whichever it is
        a.create_topic("in-doubt", 1)
    for _ in range(40):
        cluster.step()
        assert not a.holding
    cluster.down[1] = False  # the bucket answers node 1 again: the log tells, the lease is its
    for _ in range(10):
        cluster.step()
    assert a.is_active and a.topic("in-doubt") is None


def test_an_isr_change_in_doubt_as_the_outage_begins_still_lets_the_controller_hold(
    make_store: MakeStore, clock: FakeClock
) -> None:
    """A leader's ISR change changes who leads on nothing; the leader counts its proposal."""
    cluster = _Cluster(make_store, clock)
    a = cluster.a
    a.create_topic("t", assignments={0: [1, 2, 3]})
    cluster.down.update({1: True, 2: True, 3: True})
    with pytest.raises(Exception):  # noqa: B017, PT011 - the store's error, whichever it is
        a.alter_partition(1, a.metadata.brokers[1].broker_epoch, [isr_change(a, "t", (1, 2))])
    assert a._committer.in_doubt is False
    for _ in range(20):
        cluster.step()
    assert a.holding


def test_a_controller_that_reads_the_bucket_again_first_acts_once_every_grant_ran_out(
    make_store: MakeStore, clock: FakeClock
) -> None:
    cluster = _Cluster(make_store, clock)
    a = cluster.a
    cluster.outage()
    assert cluster.report(2)
    granted_at = clock.now
    cluster.down[1] = False
    waited = False
    while not a.is_active:
        cluster.step(50)
        assert clock.now - granted_at < REPORT_MS + 2 * TIMINGS.poll_ms
        if a._lease.holds() and not a.is_active:  # meanwhile its broker leads on its lease
            waited = True
            assert a.lease_remaining_ms() > 0 and a.answers_heartbeats and a.controller_id == 1
            with pytest.raises(NotControllerError):
                a.create_topic("too-soon", 1)
    assert waited and clock.now - granted_at >= REPORT_MS  # its lease retaken at once, acting only then
    assert a.epoch == 2 and not a.holding
    a.create_topic("after-the-outage", 1)


def _lease(make_store: MakeStore, clock: FakeClock, node_id: int, **timings: int) -> ControllerLease:
    return ControllerLease(make_store(), node_id, f"incarnation-{node_id}", LeaseTimings(**timings),
                           monotonic=clock)


@pytest.mark.parametrize("eligible", [True, False])
def test_a_candidate_not_registered_and_unfenced_waits_out_the_longest_hold_too(
    make_store: MakeStore, clock: FakeClock, eligible: bool
) -> None:
    a = _lease(make_store, clock, 1, outage_hold_max_ms=HOLD_MS)
    b = _lease(make_store, clock, 2, outage_hold_max_ms=HOLD_MS)
    assert a.step() is LeaseEvent.ACQUIRED  # then a falls silent
    first = clock.now
    soon = None
    while b.step(eligible=eligible) is not LeaseEvent.ACQUIRED:
        clock.advance(TIMINGS.poll_ms)
        if soon is None and b.waited_out_soon():
            soon = clock.now
    waited = clock.now - first
    assert soon is not None and soon - first >= TAKEOVER_MS - TIMINGS.poll_ms
    if eligible:
        assert waited < TAKEOVER_MS + 2 * TIMINGS.poll_ms
    else:  # the longest hold and its grant more
        longest = HOLD_MS + REPORT_MS + TAKEOVER_MS
        assert longest <= waited < longest + 2 * TIMINGS.poll_ms


def _flaky_lease(make_store: MakeStore, clock: FakeClock, down: list[bool]) -> ControllerLease:
    return ControllerLease(FlakyObjectStore(make_store(), fail_key=lambda _op, _key: down[0]), 2, "incarnation-2",
                           LeaseTimings(), monotonic=clock)


def test_two_failed_reads_of_the_lease_in_a_row_restart_a_takeovers_wait(
    make_store: MakeStore, clock: FakeClock
) -> None:
    down = [False]
    a, b = _lease(make_store, clock, 1), _flaky_lease(make_store, clock, down)
    a.step()  # then a falls silent
    b.step()  # first sighting
    clock.advance(TAKEOVER_MS - 2 * TIMINGS.poll_ms)
    down[0] = True
    assert b.step() is LeaseEvent.NONE and not b.read_failing  # one failure: nothing yet
    clock.advance(TIMINGS.poll_ms)
    assert b.step() is LeaseEvent.NONE and b.read_failing  # the second in a row
    clock.advance(TIMINGS.poll_ms)
    down[0] = False
    assert b.step() is LeaseEvent.NONE and not b.read_failing  # a new sighting: waits anew
    again = clock.now
    while b.step() is not LeaseEvent.ACQUIRED:
        clock.advance(TIMINGS.poll_ms)
    assert clock.now - again >= TAKEOVER_MS


def test_one_failed_read_alone_does_not_delay_a_takeover(make_store: MakeStore, clock: FakeClock) -> None:
    down = [False]
    a, b = _lease(make_store, clock, 1), _flaky_lease(make_store, clock, down)
    a.step()
    b.step()
    first = clock.now
    clock.advance(TIMINGS.poll_ms)
    down[0] = True
    b.step()  # a store answering 500 once
    down[0] = False
    while b.step() is not LeaseEvent.ACQUIRED:
        clock.advance(TIMINGS.poll_ms)
    assert clock.now - first < TAKEOVER_MS + 2 * TIMINGS.poll_ms


def _sighted(make_store: MakeStore, clock: FakeClock) -> tuple[FlakyObjectStore, ControllerLease]:
    """Node 1 takes the lease and falls silent; node 2, over a store a test makes slow or
    failing, has just seen it."""
    _lease(make_store, clock, 1).step()
    store = FlakyObjectStore(make_store())
    b = ControllerLease(store, 2, "incarnation-2", LeaseTimings(), monotonic=clock)
    b.step()
    return store, b


def test_a_read_in_flight_too_long_counts_as_failing_and_its_answer_starts_a_new_wait(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store, b = _sighted(make_store, clock)
    clock.advance(TAKEOVER_MS)
    seen: list[bool] = []

    def slow(_op: str, _key: str) -> bool:
        clock.advance(TIMINGS.lease_ms // 4 + 1)  # the read hangs past the threshold...
        seen.append(b.read_failing)  # ... and is failing meanwhile
        return False

    store.fail_key = slow
    assert b.step() is LeaseEvent.NONE  # the same etag, a whole lease later: yet not taken
    assert seen and all(seen) and not b.read_failing


def test_a_lease_that_ran_out_while_renewals_failed_lapsed_unanswered_and_not_one_left_unrenewed(
    make_store: MakeStore, clock: FakeClock
) -> None:
    down = [False]
    a = ControllerLease(FlakyObjectStore(make_store(), fail_key=lambda _op, _key: down[0]), 1, "incarnation-1",
                        LeaseTimings(), monotonic=clock)
    assert a.step() is LeaseEvent.ACQUIRED
    deadline = clock.now + TIMINGS.valid_for_ms
    down[0] = True
    while a.step() is not LeaseEvent.LOST:
        assert a.lapsed_at is None or clock.now >= deadline
        clock.advance(100)
    assert a.lapsed_at == deadline
    down[0] = False
    a.step()  # it reads the lease again: retaken at once (its own), no longer lapsed
    assert a.lapsed_at is None and a.holds()
    clock.advance(TIMINGS.lease_ms)  # no renewal even tried (a stuck thread): not unanswered
    assert not a.holds() and a.lapsed_at is None


def test_a_controller_does_not_act_while_a_grant_it_answered_may_be_relied_on(
    make_store: MakeStore, clock: FakeClock
) -> None:
    """Its lease may hold again without a new acquisition: a renewal that hung past the
    deadline (the hold began meanwhile) and then landed."""
    cluster = _Cluster(make_store, clock)
    a = cluster.a
    a._hold.promise_until(clock.now + REPORT_MS)
    assert a._lease.holds() and not a.is_active
    with pytest.raises(NotControllerError):
        a.create_topic("too-soon", 1)
    clock.advance(REPORT_MS)
    assert a.is_active
    a.create_topic("in-time", 1)


def test_a_controller_restarted_during_a_hold_acts_only_once_its_predecessors_grants_ran_out(
    make_store: MakeStore, clock: FakeClock
) -> None:
    cluster = _Cluster(make_store, clock)
    cluster.outage()
    assert cluster.report(2)  # the old process answered "hold", then it is killed
    killed_at = clock.now
    config = BrokerConfig({"node.id": "1", **HOLD})
    restarted = ClusterController(make_store(), config, monotonic=clock, placement_seed=7,
                                  previous_incarnation_id=cluster.a.incarnation_id)
    restarted.tick()  # it takes back its previous incarnation's lease at once ...
    assert restarted._lease.holds() and not restarted.is_active
    while not restarted.is_active:
        clock.advance(100)
        restarted.tick()
    assert clock.now - killed_at >= REPORT_MS  # ... and acts once every grant has run out


def test_a_read_in_flight_too_long_that_fails_counts_at_once_and_restarts_the_wait(
    make_store: MakeStore, clock: FakeClock
) -> None:
    store, b = _sighted(make_store, clock)
    clock.advance(TAKEOVER_MS - TIMINGS.poll_ms)

    def hangs_then_fails(_op: str, _key: str) -> bool:
        clock.advance(TIMINGS.lease_ms // 4 + 1)
        return True

    store.fail_key = hangs_then_fails
    assert b.step() is LeaseEvent.NONE and b.read_failing and not b.waited_out_soon()
    store.fail_key = None
    clock.advance(TIMINGS.poll_ms)
    again = clock.now
    while b.step() is not LeaseEvent.ACQUIRED:
        clock.advance(TIMINGS.poll_ms)
    assert clock.now - again >= TAKEOVER_MS
