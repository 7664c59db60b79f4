"""The group coordinator's state machine, sans I/O: a fake clock and an in-memory log."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from common.errors import ErrorCode, KafkaStorageError
from service.groups import GroupConfig, GroupCoordinator, GroupState, JoinRequest, SyncRequest
from service.groups.group import JoinResult, SyncResult
from service.groups.records import (
    GroupMetadataKey,
    OffsetKey,
    decode_group_value,
    decode_key,
    partition_for,
)

E = ErrorCode
SESSION = 10_000
REBALANCE = 30_000


# --------------------------------------------------------------------------- fakes


class FakeTimer:
    def __init__(self) -> None:
        self.now = 1_000_000
        self._queue: list[tuple[int, int, _Handle]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self.now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> _Handle:
        handle = _Handle(callback)
        heapq.heappush(self._queue, (self.now + delay_ms, next(self._seq), handle))
        return handle

    def advance(self, ms: int) -> None:
        end = self.now + ms
        while self._queue and self._queue[0][0] <= end:
            due, _, handle = heapq.heappop(self._queue)
            self.now = max(self.now, due)
            if not handle.cancelled:
                handle.callback()
        self.now = end


@dataclass
class _Handle:
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class MemoryLog:
    partitions: int = 4
    records: list[tuple[int, bytes, bytes | None]] = field(default_factory=list)
    fail: bool = False

    def ensure(self) -> int:
        return self.partitions

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        if self.fail:
            raise KafkaStorageError("disk on fire")
        self.records += [(partition, k, v) for k, v in records]

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        for _, k, v in self.records:
            yield k, v


@pytest.fixture
def timer() -> FakeTimer:
    return FakeTimer()


@pytest.fixture
def offsets_log() -> MemoryLog:
    return MemoryLog()


@pytest.fixture
def coord(timer: FakeTimer, offsets_log: MemoryLog) -> GroupCoordinator:
    c = GroupCoordinator(offsets_log, timer, GroupConfig(initial_rebalance_delay_ms=100,
                                                         offsets_retention_ms=60_000,
                                                         offsets_retention_check_interval_ms=1000))
    c.load()
    return c


class Answers:
    """Collects the callbacks' answers."""

    def __init__(self) -> None:
        self.items: list[JoinResult | SyncResult] = []

    def __call__(self, result: JoinResult | SyncResult) -> None:
        self.items.append(result)

    @property
    def last(self) -> JoinResult | SyncResult:
        assert self.items, "no answer yet"
        return self.items[-1]


def join(coord: GroupCoordinator, member_id: str = "", *, group: str = "g", instance: str | None = None,
         protocols: tuple[tuple[str, bytes], ...] = (("range", b"sub"),), protocol_type: str = "consumer",
         known_member_id: bool = True, rebalance_timeout: int = REBALANCE) -> Answers:
    answers = Answers()
    coord.join_group(JoinRequest(group, member_id, instance, "client", "/127.0.0.1", SESSION,
                                 rebalance_timeout, protocol_type, protocols,
                                 require_known_member_id=known_member_id), answers)
    return answers


def join_new(coord: GroupCoordinator, timer: FakeTimer, **kw: object) -> Answers:
    """A first join: MEMBER_ID_REQUIRED, then the join again with that id."""
    first = join(coord, **kw)  # type: ignore[arg-type]
    result = first.last
    assert isinstance(result, JoinResult) and result.error == E.member_id_required
    return join(coord, result.member_id, **kw)  # type: ignore[arg-type]


def sync(coord: GroupCoordinator, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
         *, group: str = "g", instance: str | None = None) -> Answers:
    answers = Answers()
    coord.sync_group(SyncRequest(group, generation, member_id, instance, "consumer", None,
                                 assignments or {}), answers)
    return answers


def stable_pair(coord: GroupCoordinator, timer: FakeTimer) -> tuple[JoinResult, JoinResult]:
    a = join_new(coord, timer)
    b = join_new(coord, timer)
    timer.advance(200)  # b arrived during the initial delay: it is extended once
    ra, rb = a.last, b.last
    assert isinstance(ra, JoinResult) and isinstance(rb, JoinResult)
    assert ra.error == rb.error == E.none and ra.generation_id == rb.generation_id == 1
    leader, follower = (ra, rb) if ra.leader_id == ra.member_id else (rb, ra)
    waiting = sync(coord, follower.member_id, 1)
    assert waiting.items == []
    done = sync(coord, leader.member_id, 1, {leader.member_id: b"L", follower.member_id: b"F"})
    assert done.last == SyncResult(E.none, "consumer", "range", b"L")
    assert waiting.last == SyncResult(E.none, "consumer", "range", b"F")
    return leader, follower


def state(coord: GroupCoordinator, group: str = "g") -> GroupState:
    g = coord.group(group)
    assert g is not None
    return g.state


# --------------------------------------------------------------------------- joining


def test_first_join_without_member_id_is_member_id_required(coord: GroupCoordinator,
                                                           timer: FakeTimer) -> None:
    first = join(coord)
    assert isinstance(first.last, JoinResult)
    assert first.last.error == E.member_id_required and first.last.member_id.startswith("client-")
    second = join(coord, first.last.member_id)
    assert second.items == []  # the initial rebalance delay
    timer.advance(100)
    result = second.last
    assert isinstance(result, JoinResult)
    assert (result.error, result.generation_id, result.leader_id) == (E.none, 1, result.member_id)
    assert result.protocol_name == "range"
    assert [m[0] for m in result.members] == [result.member_id]
    assert state(coord) == GroupState.COMPLETING_REBALANCE


def test_old_join_versions_get_a_member_id_at_once(coord: GroupCoordinator, timer: FakeTimer) -> None:
    answers = join(coord, known_member_id=False)
    timer.advance(100)
    assert isinstance(answers.last, JoinResult) and answers.last.error == E.none


def test_initial_delay_extends_while_members_keep_arriving(coord: GroupCoordinator,
                                                           timer: FakeTimer) -> None:
    a = join_new(coord, timer)
    timer.advance(90)
    b = join_new(coord, timer)
    timer.advance(90)  # a's first delay has passed, but b arrived meanwhile
    assert a.items == [] and b.items == []
    timer.advance(100)
    assert isinstance(a.last, JoinResult) and isinstance(b.last, JoinResult)
    assert a.last.generation_id == b.last.generation_id == 1
    assert len(coord.group("g").members) == 2  # type: ignore[union-attr]


def test_sync_hands_out_the_leaders_assignment_and_persists_it(coord: GroupCoordinator, timer: FakeTimer,
                                                               offsets_log: MemoryLog) -> None:
    leader, follower = stable_pair(coord, timer)
    assert state(coord) == GroupState.STABLE
    stored = [(p, decode_key(k), v) for p, k, v in offsets_log.records]
    groups = [(p, v) for p, k, v in stored if k == GroupMetadataKey("g")]
    assert groups and groups[-1][0] == partition_for("g", offsets_log.partitions)
    value = decode_group_value(groups[-1][1])  # type: ignore[arg-type]
    assert value.generation == 1 and value.protocol == "range" and value.leader == leader.member_id
    assert {m.member_id: m.assignment for m in value.members} == {leader.member_id: b"L",
                                                                  follower.member_id: b"F"}
    # A late sync in Stable gets the stored assignment at once.
    assert sync(coord, follower.member_id, 1).last == SyncResult(E.none, "consumer", "range", b"F")


def test_protocol_is_the_most_preferred_one_every_member_supports(coord: GroupCoordinator,
                                                                  timer: FakeTimer) -> None:
    a = join_new(coord, timer, protocols=(("roundrobin", b""), ("range", b""), ("sticky", b"")))
    b = join_new(coord, timer, protocols=(("range", b""), ("roundrobin", b"")))
    c = join_new(coord, timer, protocols=(("roundrobin", b""), ("range", b"")))
    timer.advance(200)
    assert {r.last.protocol_name for r in (a, b, c)} == {"roundrobin"}  # type: ignore[union-attr]
    other = join(coord, protocols=(("sticky", b""),))
    assert other.last.error == E.inconsistent_group_protocol  # type: ignore[union-attr]
    wrong_type = join(coord, protocol_type="connect")
    assert wrong_type.last.error == E.inconsistent_group_protocol  # type: ignore[union-attr]


# --------------------------------------------------------------------------- sessions and leaving


def test_missed_heartbeats_remove_the_member_and_rebalance(coord: GroupCoordinator, timer: FakeTimer) -> None:
    leader, follower = stable_pair(coord, timer)
    for _ in range(4):  # only the leader keeps heartbeating
        timer.advance(SESSION // 3)
        assert coord.heartbeat("g", 1, leader.member_id, None) in (E.none, E.rebalance_in_progress)
    assert follower.member_id not in coord.group("g").members  # type: ignore[union-attr]
    assert state(coord) == GroupState.PREPARING_REBALANCE
    assert coord.heartbeat("g", 1, leader.member_id, None) == E.rebalance_in_progress
    rejoin = join(coord, leader.member_id)
    result = rejoin.last
    assert isinstance(result, JoinResult) and result.generation_id == 2
    assert [m[0] for m in result.members] == [leader.member_id]
    assert coord.heartbeat("g", 1, follower.member_id, None) == E.unknown_member_id


def test_member_that_does_not_rejoin_in_time_is_dropped(coord: GroupCoordinator, timer: FakeTimer) -> None:
    leader, follower = stable_pair(coord, timer)
    rejoin = join(coord, leader.member_id, protocols=(("range", b"changed"),))
    assert rejoin.items == [] and state(coord) == GroupState.PREPARING_REBALANCE
    for _ in range(REBALANCE // 5000):  # the follower heartbeats but never rejoins
        assert coord.heartbeat("g", 1, follower.member_id, None) == E.rebalance_in_progress
        timer.advance(5000)
    result = rejoin.last
    assert isinstance(result, JoinResult) and result.generation_id == 2
    assert list(coord.group("g").members) == [leader.member_id]  # type: ignore[union-attr]
    assert coord.heartbeat("g", 2, follower.member_id, None) == E.unknown_member_id


def test_leaving_rebalances_and_the_last_one_out_empties_the_group(coord: GroupCoordinator,
                                                                   timer: FakeTimer) -> None:
    leader, follower = stable_pair(coord, timer)
    assert coord.leave_group("g", [(leader.member_id, None)]) == (E.none, [E.none])
    assert state(coord) == GroupState.PREPARING_REBALANCE
    assert coord.group("g").leader_id == follower.member_id  # type: ignore[union-attr]
    assert coord.leave_group("g", [(follower.member_id, None), ("ghost", None)]) == (
        E.none, [E.none, E.unknown_member_id])
    assert state(coord) == GroupState.EMPTY
    assert coord.group("g").generation_id == 2  # type: ignore[union-attr]


def test_leave_during_rebalance_answers_the_parked_join(coord: GroupCoordinator, timer: FakeTimer) -> None:
    _, follower = stable_pair(coord, timer)
    parked = join(coord, follower.member_id, protocols=(("range", b"new"),))
    assert parked.items == []
    coord.leave_group("g", [(follower.member_id, None)])
    assert parked.last.error == E.unknown_member_id  # type: ignore[union-attr]


# --------------------------------------------------------------------------- static membership


def test_static_member_rejoin_in_stable_keeps_generation_and_fences_the_old_id(
        coord: GroupCoordinator, timer: FakeTimer) -> None:
    a = join(coord, instance="a")
    b = join(coord, instance="b")
    timer.advance(200)
    ra, rb = a.last, b.last
    assert isinstance(ra, JoinResult) and isinstance(rb, JoinResult)
    sync(coord, rb.member_id, 1, instance="b")
    sync(coord, ra.member_id, 1, {ra.member_id: b"A", rb.member_id: b"B"}, instance="a")
    assert state(coord) == GroupState.STABLE

    again = join(coord, instance="a")  # a restart: no member id, same instance id
    result = again.last
    assert isinstance(result, JoinResult) and result.error == E.none
    assert result.generation_id == 1 and result.member_id != ra.member_id
    assert result.leader_id == ra.member_id  # the old leader id: it syncs as a follower
    assert state(coord) == GroupState.STABLE
    assert sync(coord, result.member_id, 1, instance="a").last == SyncResult(E.none, "consumer", "range", b"A")
    assert coord.heartbeat("g", 1, ra.member_id, "a") == E.fenced_instance_id
    assert coord.heartbeat("g", 1, result.member_id, "a") == E.none
    assert coord.commit_offsets("g", 1, ra.member_id, "a", {("t", 0): (1, -1, None)},
                                lambda _t: True) == {("t", 0): E.fenced_instance_id}
    assert coord.leave_group("g", [(ra.member_id, "a")]) == (E.none, [E.fenced_instance_id])
    assert coord.leave_group("g", [("", "a")]) == (E.none, [E.none])  # by instance id alone
    assert state(coord) == GroupState.PREPARING_REBALANCE


# --------------------------------------------------------------------------- offsets


def test_commit_rules_follow_the_group_state(coord: GroupCoordinator, timer: FakeTimer) -> None:
    exists: Callable[[str], bool] = lambda topic: topic == "t"
    tp = ("t", 0)
    assert coord.commit_offsets("g", 3, "m", None, {tp: (1, -1, None)}, exists) == {
        tp: E.illegal_generation}  # no such group
    assert coord.commit_offsets("g", -1, "", None, {tp: (5, 2, "x"), ("nope", 0): (1, -1, None)},
                                exists) == {tp: E.none, ("nope", 0): E.unknown_topic_or_partition}
    join_new(coord, timer)
    timer.advance(100)
    member = coord.group("g").leader_id  # type: ignore[union-attr]
    assert member is not None
    assert coord.commit_offsets("g", 1, member, None, {tp: (6, -1, None)}, exists) == {
        tp: E.rebalance_in_progress}  # CompletingRebalance
    sync(coord, member, 1, {member: b""})
    assert coord.commit_offsets("g", 1, member, None, {tp: (7, -1, "m" * 5000)}, exists) == {
        tp: E.offset_metadata_too_large}
    assert coord.commit_offsets("g", 1, member, None, {tp: (7, -1, None)}, exists) == {tp: E.none}
    assert coord.commit_offsets("g", -1, "", None, {tp: (8, -1, None)}, exists) == {
        tp: E.unknown_member_id}
    error, found = coord.fetch_offsets("g", [tp, ("t", 1)])
    assert error == E.none and found[tp].offset == 7 and found[("t", 1)] is None  # type: ignore[union-attr]


def test_failed_append_leaves_offsets_unchanged(coord: GroupCoordinator, offsets_log: MemoryLog) -> None:
    tp = ("t", 0)
    coord.commit_offsets("g", -1, "", None, {tp: (1, -1, None)}, lambda _t: True)
    offsets_log.fail = True
    assert coord.commit_offsets("g", -1, "", None, {tp: (2, -1, None)}, lambda _t: True) == {
        tp: E.coordinator_not_available}
    assert coord.fetch_offsets("g", [tp])[1][tp].offset == 1  # type: ignore[union-attr]


def test_load_rebuilds_groups_and_offsets_from_the_log(coord: GroupCoordinator, timer: FakeTimer,
                                                       offsets_log: MemoryLog) -> None:
    leader, follower = stable_pair(coord, timer)
    coord.commit_offsets("g", 1, leader.member_id, None, {("t", 0): (11, 3, "meta")}, lambda _t: True)
    coord.commit_offsets("gone", -1, "", None, {("t", 0): (1, -1, None)}, lambda _t: True)
    assert coord.delete_groups(["gone"]) == {"gone": E.none}

    reloaded = GroupCoordinator(offsets_log, timer)
    reloaded.load()
    group = reloaded.group("g")
    assert group is not None and group.state == GroupState.STABLE and group.generation_id == 1
    assert group.leader_id == leader.member_id
    assert {m.member_id: m.assignment for m in group.members.values()} == {
        leader.member_id: b"L", follower.member_id: b"F"}
    committed = reloaded.fetch_offsets("g", [("t", 0)])[1][("t", 0)]
    assert committed is not None and (committed.offset, committed.leader_epoch, committed.metadata) == (11, 3, "meta")
    assert reloaded.group("gone") is None
    # The loaded members carry on heartbeating; silent ones expire.
    assert reloaded.heartbeat("g", 1, leader.member_id, None) == E.none


def test_offsets_of_an_empty_group_expire_after_the_retention(coord: GroupCoordinator, timer: FakeTimer,
                                                              offsets_log: MemoryLog) -> None:
    answers = join_new(coord, timer)
    timer.advance(100)
    member = answers.last
    assert isinstance(member, JoinResult)
    sync(coord, member.member_id, 1, {member.member_id: b""})
    coord.commit_offsets("g", 1, member.member_id, None, {("t", 0): (4, -1, None)}, lambda _t: True)
    coord.commit_offsets("solo", -1, "", None, {("t", 0): (4, -1, None)}, lambda _t: True)
    timer.advance(50_000)
    coord.leave_group("g", [(member.member_id, None)])  # empty from now on
    timer.advance(20_000)  # "solo" committed 70 s ago: expired; "g" empty for 20 s: kept
    assert coord.group("solo") is None
    assert coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)] is not None
    timer.advance(45_000)
    assert coord.group("g") is None
    tombstones = {decode_key(k) for _, k, v in offsets_log.records if v is None}
    assert {OffsetKey("g", "t", 0), GroupMetadataKey("g"), OffsetKey("solo", "t", 0)} <= tombstones


def test_delete_groups_and_offsets(coord: GroupCoordinator, timer: FakeTimer) -> None:
    leader, _ = stable_pair(coord, timer)
    coord.commit_offsets("g", 1, leader.member_id, None,
                         {("t", 0): (1, -1, None), ("other", 0): (2, -1, None)}, lambda _t: True)
    assert coord.delete_groups(["g", "nope"]) == {"g": E.non_empty_group, "nope": E.group_id_not_found}
    # Members subscribe to topic "t" (see parse of the subscription): its offsets stay.
    coord.group("g").members[leader.member_id].protocols = [  # type: ignore[union-attr]
        ("range", b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff")]
    for m in coord.group("g").members.values():  # type: ignore[union-attr]
        m.protocols = [("range", b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff")]
    error, results = coord.delete_offsets("g", [("t", 0), ("other", 0)])
    assert error == E.none
    assert results == {("t", 0): E.group_subscribed_to_topic, ("other", 0): E.none}
    assert set(coord.fetch_offsets("g", None)[1]) == {("t", 0)}


@pytest.mark.parametrize("group", ["", "x" * 1025])
def test_invalid_group_ids(coord: GroupCoordinator, group: str) -> None:
    assert join(coord, group=group).last.error == E.invalid_group_id  # type: ignore[union-attr]
    assert coord.heartbeat(group, 1, "m", None) == E.invalid_group_id
    commit = coord.commit_offsets(group, -1, "", None, {("t", 0): (1, -1, None)}, lambda _t: True)
    assert commit == {("t", 0): E.none if group == "" else E.invalid_group_id}
