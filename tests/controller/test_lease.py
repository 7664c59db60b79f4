"""The controller lease on a real store (filesystem and moto's S3), timed by a fake clock.

Every "machine" has its own store client; they share one fake monotonic clock,
so "at most one holder at a time" can be checked at every instant.
"""

from __future__ import annotations

import json
import random

import pytest

from controller import ControllerLease, LeaseEvent, LeaseRecord, LeaseTimings
from controller.lease import LEASE_KEY, NO_HOLDER
from tests.controller.cluster_helpers import FakeClock
from tests.controller.conftest import MakeStore
from tests.remote_tier.flaky import FlakyObjectStore

TIMINGS = LeaseTimings(lease_ms=10_000, renew_ms=2_000, safety_margin_ms=2_000, clock_skew_ms=1_000)
TAKEOVER_MS = TIMINGS.lease_ms + TIMINGS.clock_skew_ms


def lease(make_store: MakeStore, clock: FakeClock, node_id: int, **kw: object) -> ControllerLease:
    store = kw.pop("store", None) or make_store()
    return ControllerLease(store, node_id, f"incarnation-{node_id}", TIMINGS, monotonic=clock, **kw)  # type: ignore[arg-type]


def stored(make_store: MakeStore) -> LeaseRecord:
    return LeaseRecord.decode(make_store().get(LEASE_KEY))


def test_first_candidate_takes_an_empty_lease_at_epoch_one_and_the_rest_wait(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b = lease(make_store, clock, 1), lease(make_store, clock, 2)
    assert a.step() is LeaseEvent.ACQUIRED
    assert b.step() is LeaseEvent.NONE
    assert a.holds() and not b.holds()
    record = stored(make_store)
    assert (record.holder, record.epoch, record.lease_ms) == (1, 1, TIMINGS.lease_ms)
    assert b.observed is not None and b.observed.holder == 1


def test_a_renewing_holder_is_never_taken_over(make_store: MakeStore, clock: FakeClock) -> None:
    a, b = lease(make_store, clock, 1), lease(make_store, clock, 2)
    a.step()
    for _ in range(12):  # 12 renewals span 24 s, more than two leases
        clock.advance(TIMINGS.renew_ms)
        assert a.step() is LeaseEvent.RENEWED
        assert b.step() is LeaseEvent.NONE
    assert a.holds() and not b.holds()
    assert stored(make_store).renewals == 12 and stored(make_store).epoch == 1


def test_takeover_waits_a_lease_plus_skew_from_the_first_sighting_on_the_candidates_clock(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b = lease(make_store, clock, 1), lease(make_store, clock, 2)
    a.step()  # then a pauses: it never renews again
    b.step()  # first sighting of a's etag
    clock.advance(TAKEOVER_MS - 1)
    assert b.step() is LeaseEvent.NONE
    assert not a.holds()  # a deposed itself long before: lease - margin after its renewal
    clock.advance(TIMINGS.poll_ms)  # the next read finds the same etag, a lease + skew later
    assert b.step() is LeaseEvent.ACQUIRED
    record = stored(make_store)
    assert (record.holder, record.epoch) == (2, 2)


def test_a_holder_is_deposed_at_lease_minus_margin_without_any_request(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a = lease(make_store, clock, 1)
    a.step()
    clock.advance(TIMINGS.valid_for_ms - 1)
    assert a.holds() and a.remaining_ms() == pytest.approx(1)
    clock.advance(1)
    assert not a.holds()
    assert a.step() is LeaseEvent.LOST
    assert a.epoch == 0


def test_a_holder_whose_clock_runs_slow_loses_its_next_renewal_to_the_takeover(
    make_store: MakeStore, clock: FakeClock
) -> None:
    """The timing assumption broken (a's clock stood still, as in a pause the clock did
    not count): a still believes it holds, but its renewal's If-Match fails."""
    slow = FakeClock(clock.now)
    a, b = lease(make_store, slow, 1), lease(make_store, clock, 2)
    a.step()
    b.step()
    clock.advance(TAKEOVER_MS)
    assert b.step() is LeaseEvent.ACQUIRED
    slow.advance(TIMINGS.renew_ms)
    assert a.holds()  # wrongly, by its own clock
    assert a.step() is LeaseEvent.LOST
    assert not a.holds() and a.observed is not None and a.observed.holder == 2
    assert stored(make_store).holder == 2


def test_an_unavailable_store_deposes_the_holder_when_its_deadline_passes(
    make_store: MakeStore, clock: FakeClock
) -> None:
    flaky = FlakyObjectStore(make_store())
    a = lease(make_store, clock, 1, store=flaky)
    a.step()
    flaky.fail_key = lambda op, key: True
    for _ in range(3):
        clock.advance(TIMINGS.renew_ms)
        assert a.step() is LeaseEvent.NONE  # failed renewal, still within its deadline
    clock.advance(TIMINGS.valid_for_ms - 3 * TIMINGS.renew_ms)
    assert a.step() is LeaseEvent.LOST
    flaky.fail_key = None
    assert a.step() is LeaseEvent.ACQUIRED  # its own lease: taken back at once, new epoch
    assert stored(make_store).epoch == 2


def test_a_renewal_whose_answer_was_lost_is_recognised_as_its_own(
    make_store: MakeStore, clock: FakeClock
) -> None:
    flaky = FlakyObjectStore(make_store())
    a = lease(make_store, clock, 1, store=flaky)
    a.step()
    flaky.succeed_then_fail = lambda op, key: op.startswith("put")
    clock.advance(TIMINGS.renew_ms)
    assert a.step() is LeaseEvent.NONE  # the PUT happened; its answer was lost
    flaky.succeed_then_fail = None
    assert stored(make_store).renewals == 1
    clock.advance(TIMINGS.poll_ms)
    assert a.step() is LeaseEvent.NONE  # If-Match fails: it re-reads and adopts its renewal
    assert a.step() is LeaseEvent.RENEWED
    assert a.holds() and stored(make_store).renewals == 2 and stored(make_store).epoch == 1


def test_a_released_lease_is_taken_at_once_at_a_higher_epoch(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a, b = lease(make_store, clock, 1), lease(make_store, clock, 2)
    a.step()
    a.release()
    assert not a.holds()
    assert stored(make_store).holder == NO_HOLDER
    assert b.step() is LeaseEvent.ACQUIRED
    assert stored(make_store).epoch == 2


def test_a_new_incarnation_of_the_holder_waits_like_any_other_node(
    make_store: MakeStore, clock: FakeClock
) -> None:
    old = lease(make_store, clock, 1)
    old.step()
    restarted = ControllerLease(make_store(), 1, "incarnation-2nd", TIMINGS, monotonic=clock)
    assert restarted.step() is LeaseEvent.NONE
    clock.advance(TAKEOVER_MS)
    assert restarted.step() is LeaseEvent.ACQUIRED
    assert stored(make_store).epoch == 2


def test_acquisition_epoch_is_above_the_metadata_controller_epoch(
    make_store: MakeStore, clock: FakeClock
) -> None:
    a = lease(make_store, clock, 1)
    assert a.step(min_epoch=41) is LeaseEvent.ACQUIRED
    assert a.epoch == 42


def test_an_unreadable_lease_object_is_taken_over_after_a_full_lease(
    make_store: MakeStore, clock: FakeClock
) -> None:
    make_store().put(LEASE_KEY, b"{not json")
    b = lease(make_store, clock, 2)
    assert b.step() is LeaseEvent.NONE
    clock.advance(TAKEOVER_MS)
    assert b.step() is LeaseEvent.ACQUIRED
    assert stored(make_store).holder == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"renew_ms": 8_000}, "must be below controller.lease.ms"),
        ({"lease_ms": 0}, "must be positive"),
        ({"clock_skew_ms": -1}, ">= 0"),
    ],
)
def test_inconsistent_timings_are_refused(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LeaseTimings(**kwargs)


def test_lease_object_holds_node_epoch_duration_and_renewal_count(
    make_store: MakeStore, clock: FakeClock
) -> None:
    lease(make_store, clock, 7).step()
    document = json.loads(make_store().get(LEASE_KEY))
    assert document["version"] == 1
    assert {k: document[k] for k in ("holder", "epoch", "lease_ms", "renewals")} == {
        "holder": 7,
        "epoch": 1,
        "lease_ms": 10_000,
        "renewals": 0,
    }
    assert document["incarnation_id"] == "incarnation-7"


@pytest.mark.parametrize("seed", range(3))
def test_random_schedules_of_three_nodes_never_have_two_holders(
    make_fs_store: MakeStore, clock: FakeClock, seed: int
) -> None:
    """Nodes step at random, pause at random (skip steps) and the clock jumps at random:
    at every instant at most one node holds, and epochs only grow."""
    rng = random.Random(seed)
    nodes = [lease(make_fs_store, clock, n) for n in (1, 2, 3)]
    epochs: list[int] = []
    holders_seen: set[int] = set()
    for _ in range(250):
        clock.advance(rng.choice([0, 100, 500, 1_000, 2_500, 6_000]))
        node = rng.choice(nodes)
        if rng.random() < 0.7:  # the others are "paused" this round
            if node.step() is LeaseEvent.ACQUIRED:
                epochs.append(node.epoch)
        holding = [n for n in nodes if n.holds()]
        assert len(holding) <= 1
        holders_seen.update(n.epoch for n in holding)
    assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs)
    assert len(epochs) > 1  # the schedule did move the lease around


def test_the_next_incarnation_of_a_crashed_holder_takes_its_lease_back_at_once(
    make_store: MakeStore, clock: FakeClock
) -> None:
    """ADR 0009's restart rule: the data dir names the previous incarnation; nobody renews
    that lease any more, so it is taken now, at a higher epoch, not a lease later."""
    old = lease(make_store, clock, 1)
    assert old.step() is LeaseEvent.ACQUIRED  # then it is killed: no release
    other = lease(make_store, clock, 2)
    assert other.step() is LeaseEvent.NONE  # a plain candidate waits a lease out
    restarted = ControllerLease(make_store(), 1, "incarnation-1-bis", TIMINGS, monotonic=clock,
                                previous_incarnation_id="incarnation-1")
    assert restarted.step() is LeaseEvent.ACQUIRED  # no time has passed
    record = stored(make_store)
    assert (record.holder, record.epoch, record.incarnation_id) == (1, 2, "incarnation-1-bis")
    clock.advance(TIMINGS.renew_ms)
    assert old.step() is LeaseEvent.LOST  # were the old one still alive, its renewal fails


def test_a_previous_incarnation_that_no_longer_holds_the_lease_gives_no_shortcut(
    make_store: MakeStore, clock: FakeClock
) -> None:
    holder = lease(make_store, clock, 2)
    holder.step()
    restarted = ControllerLease(make_store(), 1, "incarnation-1-bis", TIMINGS, monotonic=clock,
                                previous_incarnation_id="incarnation-1")
    assert restarted.step() is LeaseEvent.NONE
    twin = ControllerLease(make_store(), 2, "another-process", TIMINGS, monotonic=clock,
                           previous_incarnation_id="not-the-holder")
    assert twin.step() is LeaseEvent.NONE  # same node id, another data dir: it waits
    assert stored(make_store).holder == 2 and stored(make_store).epoch == 1
