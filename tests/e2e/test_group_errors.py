"""Group coordinator error paths, driven with hand-built requests (tests/e2e/rawgroups.py).

Each test puts a group into the exact state it needs (raw members join, sync,
heartbeat and commit step by step) and checks Kafka's error code:
MEMBER_ID_REQUIRED, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
REBALANCE_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION, INVALID_GROUP_ID,
INVALID_SESSION_TIMEOUT and FENCED_INSTANCE_ID.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import BrokerFactory, BrokerProcess

from . import helpers
from . import rawgroups as rg
from .rawkafka import Connection

_ids = itertools.count()


@pytest.fixture(scope="module")
def group_broker(module_start_broker: BrokerFactory) -> BrokerProcess:
    return module_start_broker(sets={"group.initial.rebalance.delay.ms": "0",
                                     "offsets.topic.num.partitions": "4"})


@pytest.fixture(scope="module")
def topic(group_broker: BrokerProcess) -> str:
    name = helpers.topic_name("group-errors")
    helpers.create_topic(group_broker.bootstrap, name, partitions=2)
    return name


@pytest.fixture
def member(group_broker: BrokerProcess, topic: str) -> Iterator[rg.GroupMember]:
    """A member that is alone in a fresh group, joined and synced (Stable, generation 1)."""
    m = rg.GroupMember(group_broker.bootstrap, f"errors-{next(_ids)}", topic)
    assert m.join().error_code == rg.NONE
    error, _ = m.sync({m.member_id: rg.consumer_assignment(topic, [0, 1])})
    assert error == rg.NONE
    yield m
    m.close()


def test_first_join_without_member_id_gets_member_id_required(group_broker: BrokerProcess,
                                                              topic: str) -> None:
    with Connection.to(group_broker.bootstrap) as conn:
        first = rg.join_group(conn, "needs-id", topic=topic)
        assert first.error_code == rg.MEMBER_ID_REQUIRED
        assert first.member_id
        second = rg.join_group(conn, "needs-id", first.member_id, topic=topic)
    assert second.error_code == rg.NONE
    assert second.member_id == first.member_id
    assert second.leader == first.member_id
    assert second.generation_id == 1
    assert [m[0] for m in second.members] == [first.member_id]


def test_stale_generation_is_illegal_generation(member: rg.GroupMember) -> None:
    assert member.heartbeat() == rg.NONE
    assert member.heartbeat(generation=member.generation - 1) == rg.ILLEGAL_GENERATION
    tp = (member.topic, 0)
    assert member.commit({tp: 5}, generation=member.generation + 7) == {tp: rg.ILLEGAL_GENERATION}
    error, _ = rg.sync_group(member.conn, member.group, member.generation + 1, member.member_id, {})
    assert error == rg.ILLEGAL_GENERATION


def test_unknown_member_is_unknown_member_id(member: rg.GroupMember) -> None:
    conn = member.conn
    assert rg.heartbeat(conn, member.group, member.generation, "nobody") == rg.UNKNOWN_MEMBER_ID
    tp = (member.topic, 0)
    assert rg.offset_commit(conn, member.group, member.generation, "nobody", {tp: 1}) == {
        tp: rg.UNKNOWN_MEMBER_ID}
    assert rg.sync_group(conn, member.group, member.generation, "nobody", {})[0] == rg.UNKNOWN_MEMBER_ID
    assert rg.join_group(conn, member.group, "nobody", topic=member.topic).error_code == \
        rg.UNKNOWN_MEMBER_ID
    # A commit without a member id to a group that has members is refused too.
    assert rg.offset_commit(conn, member.group, -1, "", {tp: 1}) == {tp: rg.UNKNOWN_MEMBER_ID}
    # Leaving twice: the second time the member is unknown.
    assert rg.leave_group(conn, member.group, [(member.member_id, None)]) == (rg.NONE, [rg.NONE])
    assert rg.leave_group(conn, member.group, [(member.member_id, None)]) == (
        rg.NONE, [rg.UNKNOWN_MEMBER_ID])
    assert member.heartbeat() == rg.UNKNOWN_MEMBER_ID


def test_commit_while_rebalancing_is_rebalance_in_progress(group_broker: BrokerProcess,
                                                           member: rg.GroupMember) -> None:
    tp = (member.topic, 1)
    assert member.commit({tp: 3}) == {tp: rg.NONE}
    other = rg.GroupMember(group_broker.bootstrap, member.group, member.topic)
    with ThreadPoolExecutor(1) as pool:
        # The newcomer's join waits until the old member rejoins.
        joining = pool.submit(other.join)
        # PreparingRebalance: heartbeats say so; the current generation may still commit.
        while (code := member.heartbeat()) == rg.NONE:
            pass
        assert code == rg.REBALANCE_IN_PROGRESS
        assert member.commit({tp: 4}) == {tp: rg.NONE}
        old_generation = member.generation
        rejoined = member.join()
        assert rejoined.error_code == rg.NONE
        assert joining.result(timeout=30).error_code == rg.NONE
    assert member.generation == old_generation + 1
    # CompletingRebalance: joined the new generation, not synced yet.
    assert member.commit({tp: 5}) == {tp: rg.REBALANCE_IN_PROGRESS}
    assert member.commit({tp: 5}, generation=old_generation) == {tp: rg.ILLEGAL_GENERATION}
    leader = member if rejoined.leader == member.member_id else other
    assignments = {member.member_id: rg.consumer_assignment(member.topic, [0]),
                   other.member_id: rg.consumer_assignment(member.topic, [1])}
    with ThreadPoolExecutor(1) as pool:
        follower = other if leader is member else member
        waiting = pool.submit(follower.sync)
        assert leader.sync(assignments) == (rg.NONE, assignments[leader.member_id])
        assert waiting.result(timeout=30) == (rg.NONE, assignments[follower.member_id])
    assert other.commit({tp: 6}) == {tp: rg.NONE}
    error, committed = rg.offset_fetch(member.conn, member.group, {member.topic: [1]})
    assert (error, committed) == (rg.NONE, {tp: 6})
    other.close()


def test_commit_for_unknown_topic_is_unknown_topic_or_partition(group_broker: BrokerProcess,
                                                                topic: str) -> None:
    group = f"standalone-{next(_ids)}"
    with Connection.to(group_broker.bootstrap) as conn:
        result = rg.offset_commit(conn, group, -1, "", {("no-such-topic", 0): 7, (topic, 0): 8})
        assert result == {("no-such-topic", 0): rg.UNKNOWN_TOPIC_OR_PARTITION, (topic, 0): rg.NONE}
        error, committed = rg.offset_fetch(conn, group, {topic: [0, 1], "no-such-topic": [0]})
    assert error == rg.NONE
    assert committed == {(topic, 0): 8, (topic, 1): -1, ("no-such-topic", 0): -1}


@pytest.mark.parametrize("group", ["", "g" * 5000], ids=["empty", "5000-chars"])
def test_empty_or_absurdly_long_group_id_is_invalid_group_id(group_broker: BrokerProcess,
                                                            topic: str, group: str) -> None:
    with Connection.to(group_broker.bootstrap) as conn:
        assert rg.join_group(conn, group, topic=topic).error_code == rg.INVALID_GROUP_ID
        assert rg.heartbeat(conn, group, 1, "m") == rg.INVALID_GROUP_ID
        assert rg.sync_group(conn, group, 1, "m", {})[0] == rg.INVALID_GROUP_ID
        if group:  # Kafka accepts the empty group id for offset commits (old simple consumers)
            assert rg.offset_commit(conn, group, -1, "", {(topic, 0): 1}) == {
                (topic, 0): rg.INVALID_GROUP_ID}


def test_session_timeout_outside_broker_limits_is_refused(group_broker: BrokerProcess,
                                                          topic: str) -> None:
    with Connection.to(group_broker.bootstrap) as conn:
        resp = rg.join_group(conn, "short-session", topic=topic, session_timeout_ms=100)
    assert resp.error_code == rg.INVALID_SESSION_TIMEOUT


def test_static_member_rejoin_keeps_generation_and_duplicate_is_fenced(
        group_broker: BrokerProcess, topic: str) -> None:
    group = f"static-{next(_ids)}"
    first = rg.GroupMember(group_broker.bootstrap, group, topic, instance_id="instance-a")
    joined = first.join()
    assert joined.error_code == rg.NONE
    assignment = rg.consumer_assignment(topic, [0, 1])
    assert first.sync({first.member_id: assignment}) == (rg.NONE, assignment)

    # The same instance id comes back (a restart): no rebalance, same generation,
    # a new member id, and the assignment the old id had.
    second = rg.GroupMember(group_broker.bootstrap, group, topic, instance_id="instance-a")
    rejoined = second.join()
    assert rejoined.error_code == rg.NONE
    assert rejoined.generation_id == joined.generation_id
    assert rejoined.member_id != first.member_id
    assert second.sync() == (rg.NONE, assignment)
    assert second.heartbeat() == rg.NONE

    # The old holder of the instance id is fenced everywhere.
    assert first.heartbeat() == rg.FENCED_INSTANCE_ID
    tp = (topic, 0)
    assert first.commit({tp: 1}) == {tp: rg.FENCED_INSTANCE_ID}
    assert first.sync()[0] == rg.FENCED_INSTANCE_ID
    assert rg.leave_group(first.conn, group, [(first.member_id, "instance-a")]) == (
        rg.NONE, [rg.FENCED_INSTANCE_ID])
    assert second.commit({tp: 2}) == {tp: rg.NONE}
    assert second.heartbeat() == rg.NONE
    first.close()
    second.close()
