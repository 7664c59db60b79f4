"""Reconciliation (Kafka's CurrentAssignmentBuilder): each state's way out, and, driven by
hypothesis through the coordinator, the protocol's promise: no partition is ever owned
by two members at once, and once every member has heartbeated enough the group is
Stable with every partition owned once and balanced."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import ErrorCode
from service.groups.consumer.reconcile import (
    ConsumerMember,
    FencedMemberEpoch,
    MemberState,
    reconcile,
)
from tests.service.groups.test_consumer_protocol import FakeTopics, Member, make, owners
from tests.service.groups.test_coordinator import FakeTimer, MemoryLog

T = uuid.UUID(int=7)


def free(_t: uuid.UUID, _p: int) -> int:
    return -1


def held_by_other(t: uuid.UUID, p: int) -> int:
    return 3 if p in (4, 5) else -1


def member(**kw: object) -> ConsumerMember:
    base: dict[str, object] = {"member_id": "m", "member_epoch": 2, "previous_member_epoch": 1,
                                   "assigned": {T: (0, 1, 2, 3)}}
    base.update(kw)
    return ConsumerMember(**base)  # type: ignore[arg-type]


def test_stable_member_at_the_target_epoch_stays() -> None:
    m = member()
    assert reconcile(m, 2, {T: (0, 1)}, free, {T: (0, 1, 2, 3)}) is m


def test_partitions_to_give_back_are_asked_for_first_and_the_epoch_waits() -> None:
    m = reconcile(member(), 3, {T: (0, 1)}, free, {T: (0, 1, 2, 3)})
    assert m.state == MemberState.UNREVOKED_PARTITIONS
    assert (m.member_epoch, m.assigned, m.pending_revocation) == (2, {T: (0, 1)}, {T: (2, 3)})
    assert reconcile(m, 3, {T: (0, 1)}, free, {T: (0, 1, 2)}) is m  # still holds 2
    done = reconcile(m, 3, {T: (0, 1)}, free, {T: (0, 1)})
    assert (done.state, done.member_epoch, done.previous_member_epoch) == (MemberState.STABLE, 3, 2)
    assert done.pending_revocation == {}


def test_owned_unknown_counts_as_still_holding() -> None:
    m = reconcile(member(), 3, {T: (0,)}, free, {T: (0, 1, 2, 3)})
    assert reconcile(m, 3, {T: (0,)}, free, None) is m


def test_partitions_another_member_holds_are_held_back_until_released() -> None:
    m = reconcile(member(), 3, {T: (0, 1, 2, 3, 4, 5)}, held_by_other, {T: (0, 1, 2, 3)})
    assert (m.state, m.member_epoch, m.assigned) == (MemberState.UNRELEASED_PARTITIONS, 3, {T: (0, 1, 2, 3)})
    m2 = reconcile(m, 3, {T: (0, 1, 2, 3, 4, 5)}, free, {T: (0, 1, 2, 3)})
    assert (m2.state, m2.assigned) == (MemberState.STABLE, {T: (0, 1, 2, 3, 4, 5)})


def test_revocation_comes_before_new_partitions() -> None:
    m = reconcile(member(), 3, {T: (0, 1, 6)}, free, {T: (0, 1, 2, 3)})
    assert m.state == MemberState.UNREVOKED_PARTITIONS and m.assigned == {T: (0, 1)}
    m = reconcile(m, 3, {T: (0, 1, 6)}, free, {T: (0, 1)})
    assert (m.state, m.assigned, m.member_epoch) == (MemberState.STABLE, {T: (0, 1, 6)}, 3)


def test_unknown_state_with_partitions_is_fenced() -> None:
    with pytest.raises(FencedMemberEpoch) as err:
        reconcile(member(state=MemberState.UNKNOWN), 3, {}, free, {T: (0,)})
    assert err.value.code == ErrorCode.fenced_member_epoch
    m = reconcile(member(state=MemberState.UNKNOWN, assigned={}), 3, {T: (1,)}, free, {})
    assert (m.state, m.member_epoch, m.assigned) == (MemberState.STABLE, 3, {T: (1,)})


# --------------------------------------------------------------------------- the group-wide promise

ops = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.integers(0, 5)),
        st.tuples(st.just("beat"), st.integers(0, 5)),
        st.tuples(st.just("slow"), st.integers(0, 5)),  # heartbeats but does not revoke yet
        st.tuples(st.just("leave"), st.integers(0, 5)),
        st.tuples(st.just("grow"), st.integers(1, 4)),
    ),
    min_size=1, max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_no_partition_is_ever_owned_twice_and_the_group_settles(steps: list[tuple[str, int]]) -> None:
    topics = FakeTopics()
    topics.add("orders", 5)
    coord = make(MemoryLog(), FakeTimer(), topics)
    live: dict[int, Member] = {}
    size = 5
    for op, arg in steps:
        if op == "join" and arg not in live:
            live[arg] = Member(coord, f"m{arg}")
            assert live[arg].beat().error == ErrorCode.none
        elif op in ("beat", "slow") and arg in live:
            assert live[arg].beat(revoke=op == "beat").error == ErrorCode.none
        elif op == "leave" and arg in live:
            assert live.pop(arg).leave().error == ErrorCode.none
        elif op == "grow":
            size += arg
            topics.add("orders", size)
        held = owners(list(live.values()))
        assert all(len(v) == 1 for v in held.values()), held  # never two owners
    for _ in range(8):
        for m in live.values():
            m.beat()
    if live:
        held = owners(list(live.values()))
        assert sorted(held) == list(range(size)) and all(len(v) == 1 for v in held.values())
        shares = [len(m.partitions()) for m in live.values()]
        assert max(shares) - min(shares) <= 1
        assert coord.consumer_group_describe("g").state == "Stable"
