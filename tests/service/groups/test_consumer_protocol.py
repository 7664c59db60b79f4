"""The consumer group protocol (KIP-848) in the coordinator, sans I/O: heartbeats, epochs,
reconciliation across members, static members, regexes, persistence and replay, the
error codes, and classic groups beside consumer groups."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from common.errors import ErrorCode
from service.groups import GroupConfig, GroupCoordinator, JoinRequest
from service.groups.consumer import ConsumerHeartbeat, HeartbeatResult
from service.groups.consumer.records import decode, is_consumer_record
from service.groups.group import JoinResult
from service.groups.records import partition_for
from tests.service.groups.test_coordinator import FakeTimer, MemoryLog

E = ErrorCode
SESSION = 45_000


@dataclass
class FakeTopics:
    topics: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    version: int = 1

    def add(self, name: str, partitions: int) -> uuid.UUID:
        old = self.topics.get(name)
        topic_id = old[0] if old else uuid.uuid4()
        self.topics[name] = (topic_id, partitions)
        self.version += 1
        return topic_id

    def delete(self, name: str) -> None:
        del self.topics[name]
        self.version += 1

    def by_name(self, name: str) -> tuple[uuid.UUID, int] | None:
        return self.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> tuple[str, int] | None:
        return next(((n, p) for n, (i, p) in self.topics.items() if i == topic_id), None)

    def names(self) -> list[str]:
        return list(self.topics)


def make(log_: MemoryLog, timer: FakeTimer, topics: FakeTopics, **cfg: object) -> GroupCoordinator:
    config = GroupConfig(initial_rebalance_delay_ms=0, consumer_session_timeout_ms=SESSION,
                         consumer_heartbeat_interval_ms=1000, **cfg)  # type: ignore[arg-type]
    c = GroupCoordinator(log_, timer, config, topics)
    c.load()
    return c


@pytest.fixture
def coord(log_: MemoryLog, timer: FakeTimer, topics: FakeTopics) -> GroupCoordinator:
    return make(log_, timer, topics)


class Member:
    """A client that does what a KIP-848 consumer does: owns exactly what it was given."""

    def __init__(self, coord: GroupCoordinator, member_id: str, group: str = "g", *,
                 topics: tuple[str, ...] | None = ("orders",), regex: str | None = None,
                 instance: str | None = None, assignor: str | None = None) -> None:
        self.coord, self.member_id, self.group = coord, member_id, group
        self.topics, self.regex, self.instance, self.assignor = topics, regex, instance, assignor
        self.epoch = 0
        self.owned: dict[uuid.UUID, tuple[int, ...]] = {}
        self.assigned: dict[uuid.UUID, tuple[int, ...]] = {}
        self.last: HeartbeatResult | None = None

    def beat(self, *, full: bool = False, epoch: int | None = None, revoke: bool = True) -> HeartbeatResult:
        joining = self.epoch == 0
        if revoke:  # what it was told to give back is gone before it speaks again
            self.owned = dict(self.assigned)
        req = ConsumerHeartbeat(
            self.group, self.member_id, self.epoch if epoch is None else epoch,
            instance_id=self.instance, rebalance_timeout_ms=30_000 if joining or full else -1,
            subscribed_topic_names=self.topics if joining or full else None,
            subscribed_topic_regex=self.regex if joining or full else None,
            server_assignor=self.assignor if joining else None,
            owned=dict(self.owned), client_id="c", client_host="/127.0.0.1")
        r = self.coord.consumer_group_heartbeat(req)
        self.last = r
        if r.error == E.none:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.assigned = {t: tuple(p) for t, p in r.assignment.items() if p}
            if revoke:
                self.owned = dict(self.assigned)
            else:  # a slow member: takes what is new, gives nothing back yet
                for t, p in self.assigned.items():
                    self.owned[t] = tuple(sorted(set(self.owned.get(t, ())) | set(p)))
        return r

    def leave(self, epoch: int = -1) -> HeartbeatResult:
        return self.coord.consumer_group_heartbeat(ConsumerHeartbeat(
            self.group, self.member_id, epoch, instance_id=self.instance))

    def partitions(self) -> set[int]:
        return {p for ps in self.owned.values() for p in ps}


def settle(*members: Member, rounds: int = 10) -> None:
    for _ in range(rounds):
        for m in members:
            m.beat()


def owners(members: list[Member]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for m in members:
        for p in m.partitions():
            out.setdefault(p, []).append(m.member_id)
    return out


# --------------------------------------------------------------------------- joining and balance


def test_first_member_gets_every_partition_and_the_group_becomes_stable(coord: GroupCoordinator) -> None:
    a = Member(coord, "a")
    r = a.beat()
    assert r.error == E.none and r.member_epoch == 1 and r.heartbeat_interval_ms == 1000
    assert a.partitions() == set(range(6))
    d = coord.consumer_group_describe("g")
    assert (d.state, d.group_epoch, d.assignment_epoch, d.assignor) == ("Stable", 1, 1, "uniform")
    assert [m.member_id for m in d.members] == ["a"]


def test_a_partition_moves_only_after_its_owner_revoked_it(coord: GroupCoordinator) -> None:
    a, b = Member(coord, "a"), Member(coord, "b")
    a.beat()
    b.beat()
    assert b.partitions() == set()  # all six still held by a: b waits (unreleased)
    assert coord.consumer_group_describe("g").state == "Reconciling"
    a.beat(revoke=False)  # a is told to give three back but has not yet
    assert len(a.partitions()) == 6
    b.beat()
    assert b.partitions() == set()
    a.beat()  # now a has revoked
    assert len(a.partitions()) == 3
    b.beat()
    assert len(b.partitions()) == 3 and not (a.partitions() & b.partitions())
    settle(a, b)
    assert coord.consumer_group_describe("g").state == "Stable"
    assert a.epoch == b.epoch == 2


def test_three_members_split_evenly_and_a_leaver_hands_over_without_overlap(coord: GroupCoordinator) -> None:
    ms = [Member(coord, n) for n in "abc"]
    for _ in range(6):
        for m in ms:
            m.beat()
            assert all(len(v) == 1 for v in owners(ms).values())
    assert sorted(len(m.partitions()) for m in ms) == [2, 2, 2]
    before = {m.member_id: m.partitions() for m in ms}
    assert ms[2].leave().error == E.none
    settle(ms[0], ms[1])
    assert sorted(len(m.partitions()) for m in ms[:2]) == [3, 3]
    # sticky: each survivor kept what it had
    assert before["a"] <= ms[0].partitions() and before["b"] <= ms[1].partitions()


def test_range_assignor_when_a_member_asks_for_it(coord: GroupCoordinator) -> None:
    a = Member(coord, "a", assignor="range")
    b = Member(coord, "b", assignor="range")
    a.beat()
    b.beat()
    settle(a, b)
    assert a.partitions() == {0, 1, 2} and b.partitions() == {3, 4, 5}
    assert coord.consumer_group_describe("g").assignor == "range"


def test_new_partitions_trigger_a_new_target_assignment(coord: GroupCoordinator,
                                                        topics: FakeTopics) -> None:
    a, b = Member(coord, "a"), Member(coord, "b")
    settle(a, b)
    epoch = coord.consumer_group_describe("g").group_epoch
    topics.add("orders", 8)
    settle(a, b)
    assert a.partitions() | b.partitions() == set(range(8))
    assert coord.consumer_group_describe("g").group_epoch == epoch + 1


def test_regex_subscription_picks_up_topics_created_later(coord: GroupCoordinator,
                                                          topics: FakeTopics) -> None:
    a = Member(coord, "a", topics=None, regex="ord.*")
    a.beat()
    assert a.partitions() == set(range(6))
    new_id = topics.add("ordinals", 2)
    topics.add("other", 3)
    a.beat()
    assert a.owned[new_id] == (0, 1)
    assert set(coord.consumer_group_describe("g").members[0].subscribed_topic_regex or "") == set("ord.*")


def test_invalid_regex_is_invalid_regular_expression(coord: GroupCoordinator) -> None:
    assert Member(coord, "a", topics=None, regex="ord(").beat().error == E.invalid_regular_expression


# --------------------------------------------------------------------------- errors


def hb(coord: GroupCoordinator, **kw: object) -> HeartbeatResult:
    base: dict[str, object] = {"group_id": "g", "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 1000,
                                   "subscribed_topic_names": ("orders",), "owned": {}}
    base.update(kw)
    return coord.consumer_group_heartbeat(ConsumerHeartbeat(**base))  # type: ignore[arg-type]


@pytest.mark.parametrize("kw", [
    {"member_id": ""},
    {"group_id": ""},
    {"instance_id": ""},
    {"rack_id": ""},
    {"rebalance_timeout_ms": -1},
    {"owned": None},
    {"owned": {uuid.uuid4(): (1,)}},
    {"subscribed_topic_names": None},
    {"member_epoch": -3},
    {"member_epoch": -2},
])
def test_malformed_heartbeats_are_invalid_request(coord: GroupCoordinator, kw: dict[str, object]) -> None:
    assert hb(coord, **kw).error == E.invalid_request


def test_unknown_assignor_is_unsupported_assignor(coord: GroupCoordinator) -> None:
    assert hb(coord, server_assignor="sticky").error == E.unsupported_assignor


def test_epochs_and_members_the_coordinator_does_not_know(coord: GroupCoordinator) -> None:
    a = Member(coord, "a")
    a.beat()
    assert hb(coord, member_id="x", member_epoch=1).error == E.unknown_member_id
    assert hb(coord, group_id="nope", member_epoch=1).error == E.group_id_not_found
    assert a.beat(epoch=a.epoch + 1).error == E.fenced_member_epoch
    b = Member(coord, "b")
    b.beat()
    settle(a, b)
    assert a.epoch == 2
    assert hb(coord, member_id="a", member_epoch=0).error == E.fenced_member_epoch


def test_group_max_size(log_: MemoryLog, timer: FakeTimer, topics: FakeTopics) -> None:
    coord = make(log_, timer, topics, consumer_max_size=1)
    assert Member(coord, "a").beat().error == E.none
    assert Member(coord, "b").beat().error == E.group_max_size_reached


# --------------------------------------------------------------------------- static members, sessions


def test_static_member_rejoins_with_its_partitions_and_a_twin_is_unreleased(coord: GroupCoordinator) -> None:
    a = Member(coord, "a1", instance="i-a")
    b = Member(coord, "b1", instance="i-b")
    settle(a, b)
    held = a.partitions()
    assert Member(coord, "a2", instance="i-a").beat().error == E.unreleased_instance_id
    assert a.leave(epoch=-2).member_epoch == -2
    again = Member(coord, "a2", instance="i-a")
    assert again.beat().error == E.none
    assert again.partitions() == held
    assert a.beat(epoch=a.epoch).error == E.fenced_instance_id


def test_silent_member_is_fenced_after_the_session(coord: GroupCoordinator, timer: FakeTimer) -> None:
    a, b = Member(coord, "a"), Member(coord, "b")
    settle(a, b)
    for _ in range(5):
        timer.advance(SESSION // 5)
        a.beat()
    settle(a)
    assert a.partitions() == set(range(6))
    assert [m.member_id for m in coord.consumer_group_describe("g").members] == ["a"]
    assert b.beat().error == E.unknown_member_id


def test_member_that_does_not_revoke_is_fenced_after_its_rebalance_timeout(coord: GroupCoordinator,
                                                                          timer: FakeTimer) -> None:
    a, b = Member(coord, "a"), Member(coord, "b")
    a.beat()
    b.beat()
    a.beat(revoke=False)
    for _ in range(4):
        timer.advance(10_000)
        a.beat(revoke=False)
        b.beat()
    assert a.beat().error == E.unknown_member_id  # fenced at 30 s
    settle(b)
    assert b.partitions() == set(range(6))


# --------------------------------------------------------------------------- persistence


def test_restart_rebuilds_the_group_and_members_keep_their_epochs(
        log_: MemoryLog, timer: FakeTimer, topics: FakeTopics) -> None:
    coord = make(log_, timer, topics)
    a, b = Member(coord, "a"), Member(coord, "b")
    settle(a, b)
    commit = coord.commit_offsets("g", a.epoch, "a", None, {("orders", 0): (42, -1, "")}, lambda t: True)
    assert commit == {("orders", 0): E.none}
    before = coord.consumer_group_describe("g")
    assert all(is_consumer_record(k) or k[:2] in (b"\0\1", b"\0\2") for _, k, _ in log_.records)
    for _, k, v in log_.records:
        if is_consumer_record(k):
            decode(k, v)  # every record written reads back
    coord.shutdown()
    again = make(log_, timer, topics)
    after = again.consumer_group_describe("g")
    assert after == before
    a.coord = b.coord = again
    assert a.beat().error == E.none and a.epoch == before.members[0].member_epoch
    assert again.fetch_offsets("g", [("orders", 0)])[1][("orders", 0)].offset == 42  # type: ignore[union-attr]
    timer.advance(SESSION + 1)  # nobody heartbeats: both fenced, as Kafka does after a load
    assert again.consumer_group_describe("g").state == "Empty"


# --------------------------------------------------------------------------- offsets and classic groups


def test_offset_commit_checks_the_member_epoch(coord: GroupCoordinator) -> None:
    a = Member(coord, "a")
    a.beat()
    tp = {("orders", 1): (5, -1, "")}
    ok = lambda t: True
    assert coord.commit_offsets("g", a.epoch, "a", None, tp, ok) == {("orders", 1): E.none}
    assert coord.commit_offsets("g", a.epoch + 1, "a", None, tp, ok) == {("orders", 1): E.stale_member_epoch}
    assert coord.commit_offsets("g", a.epoch, "zz", None, tp, ok) == {("orders", 1): E.unknown_member_id}
    assert coord.commit_offsets("g", a.epoch, "a", None, tp, ok, api_version=8) == {
        ("orders", 1): E.unsupported_version}
    assert coord.fetch_offsets("g", None, "a", a.epoch + 1)[0] == E.stale_member_epoch
    assert coord.fetch_offsets("g", None, "a", a.epoch)[0] == E.none


class TxnMemoryLog(MemoryLog):
    """A MemoryLog that also takes TxnOffsetCommit's transactional batches."""

    def append_transactional(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
                             producer_id: int, producer_epoch: int) -> None:
        self.append(partition, records)

    def open_transactions(self) -> dict[tuple[int, int], list[tuple[bytes, bytes | None]]]:
        return {}


def test_txn_offset_commit_checks_the_member_epoch_and_stays_unstable_until_the_commit(
    timer: FakeTimer, topics: FakeTopics
) -> None:
    coord = make(TxnMemoryLog(), timer, topics)
    a = Member(coord, "a")
    a.beat()
    tp = {("orders", 1): (5, -1, "")}
    commit = lambda epoch, member, instance=None: coord.txn_commit_offsets(
        "g", 9, 0, epoch, member, instance, tp)
    # Kafka's validateTransactionalOffsetCommit: a stale epoch is ILLEGAL_GENERATION there
    assert commit(a.epoch + 1, "a") == {("orders", 1): E.illegal_generation}
    assert commit(a.epoch, "zz") == {("orders", 1): E.unknown_member_id}
    assert commit(a.epoch, "") == {("orders", 1): E.unknown_member_id}
    assert commit(-1, "", "i-1") == {("orders", 1): E.unknown_member_id}
    assert commit(-1, "") == {("orders", 1): E.none}  # no group metadata given: not checked
    assert commit(a.epoch, "a") == {("orders", 1): E.none}
    assert coord.unstable_offsets("g", [("orders", 1), ("orders", 2)]) == {("orders", 1)}
    assert coord.fetch_offsets("g", [("orders", 1)])[1][("orders", 1)] is None
    coord.txn_offsets.on_markers(9, 0, True, [partition_for("g", 4)])
    assert coord.unstable_offsets("g", [("orders", 1)]) == set()
    assert coord.fetch_offsets("g", [("orders", 1)])[1][("orders", 1)].offset == 5  # type: ignore[union-attr]


def join(coord: GroupCoordinator, timer: FakeTimer, group: str) -> JoinResult:
    out: list[JoinResult] = []
    coord.join_group(JoinRequest(group, "", None, "c", "/h", 10_000, 10_000, "consumer",
                                 (("range", b"\0\0\0\0\0\0\0\0\0\0"),), require_known_member_id=False),
                     out.append)
    timer.advance(1)
    return out[-1]


def test_classic_and_consumer_groups_side_by_side(coord: GroupCoordinator, timer: FakeTimer) -> None:
    a = Member(coord, "a", group="modern")
    a.beat()
    join(coord, timer, "old")
    timer.advance(10)
    listed = {g: (t, s) for g, _, s, t in coord.list_groups_by_type()}
    assert listed["modern"] == ("consumer", "Stable")
    assert listed["old"][0] == "classic"
    assert [g for g, *_ in coord.list_groups_by_type(types=["consumer"])] == ["modern"]
    assert coord.describe_group("modern")[1].state == "Dead"
    assert coord.consumer_group_describe("old").error == E.group_id_not_found
    assert coord.delete_groups(["modern"]) == {"modern": E.non_empty_group}
    a.leave()
    assert coord.delete_groups(["modern"]) == {"modern": E.none}
    assert coord.consumer_group_describe("modern").error == E.group_id_not_found


def test_empty_groups_convert_both_ways(coord: GroupCoordinator, log_: MemoryLog, timer: FakeTimer,
                                        topics: FakeTopics) -> None:
    coord.commit_offsets("g", -1, "", None, {("orders", 0): (7, -1, "")}, lambda t: True)
    a = Member(coord, "a")
    assert a.beat().error == E.none  # the (empty, offsets only) classic group became a consumer group
    a.leave()
    r = join(coord, timer, "g")  # and back
    assert r.error == E.none and not coord.is_consumer_group("g")
    again = make(log_, timer, topics)
    assert not again.is_consumer_group("g")
    assert again.fetch_offsets("g", [("orders", 0)])[1][("orders", 0)].offset == 7  # type: ignore[union-attr]


def test_offsets_expire_as_kafka_does_for_consumer_groups(log_: MemoryLog, timer: FakeTimer,
                                                          topics: FakeTopics) -> None:
    coord = make(log_, timer, topics, offsets_retention_ms=60_000)
    topics.add("old", 1)
    a = Member(coord, "a")
    a.beat()
    ok = lambda t: True
    coord.commit_offsets("g", a.epoch, "a", None, {("orders", 0): (1, -1, ""), ("old", 0): (2, -1, "")}, ok)
    assert coord.delete_offsets("g", [("orders", 0)])[1] == {("orders", 0): E.group_subscribed_to_topic}
    for _ in range(7):
        timer.advance(10_000)
        a.beat()
    coord.expire_offsets()  # (it also runs every minute here)
    # the topic nobody subscribes to is gone; "orders" stays while the group consumes it
    assert set(coord.fetch_offsets("g", None)[1]) == {("orders", 0)}
    a.leave()
    timer.advance(61_000)
    coord.expire_offsets()
    assert coord.fetch_offsets("g", None)[1] == {}  # empty for the retention: everything goes
