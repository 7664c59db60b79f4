"""Kafka 4's online migration between the classic and consumer group protocols, sans I/O:
a live classic group upgraded by a consumer-protocol member, classic members inside the
consumer group (JoinGroup, SyncGroup, Heartbeat, OffsetCommit, LeaveGroup), the downgrade
when the last consumer-protocol member leaves, the policy, and the records across a restart."""

from __future__ import annotations

import struct

from service.groups import GroupCoordinator, JoinRequest, SyncRequest
from service.groups.consumer.embedded import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from service.groups.consumer.records import (
    ClassicMemberMetadata,
    MemberRecord,
    MemberValue,
    decode,
    encode,
)
from service.groups.group import JoinResult, SyncResult
from tests.service.groups.test_consumer_protocol import E, FakeTopics, Member, make
from tests.service.groups.test_coordinator import FakeTimer, MemoryLog

PARTITIONS = 6


def subscription(topics: tuple[str, ...], owned: dict[str, set[int]] | None = None) -> bytes:
    """A ConsumerProtocolSubscription v1 (topics, no user data, owned partitions)."""
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)
    owned = owned or {}
    out += struct.pack(">i", len(owned))
    for t, parts in owned.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in sorted(parts))
    return out


class Classic:
    """An eager classic consumer (librdkafka's range): gives everything up before it rejoins."""

    def __init__(self, coord: GroupCoordinator, timer: FakeTimer, name: str, group: str = "g") -> None:
        self.coord, self.timer, self.name, self.group = coord, timer, name, group
        self.member_id, self.generation = "", -1
        self.owned: set[int] = set()
        self.joined: JoinResult | None = None

    def send_join(self) -> list[JoinResult]:
        self.owned = set()  # eager: revoked before rejoining
        answers: list[JoinResult] = []
        req = JoinRequest(self.group, self.member_id, None, self.name, "/127.0.0.1", 10_000, 30_000, "consumer",
                          (("range", subscription(("orders",))),))
        self.coord.join_group(req, answers.append)
        if answers and answers[-1].error == E.member_id_required:
            self.member_id = answers[-1].member_id
            answers.clear()
            self.coord.join_group(JoinRequest(**{**_fields(req), "member_id": self.member_id}), answers.append)
        return answers

    def took(self, result: JoinResult) -> None:
        assert result.error == E.none, result
        self.joined, self.member_id, self.generation = result, result.member_id, result.generation_id

    def sync(self, assignments: dict[str, bytes] | None = None) -> SyncResult:
        out: list[SyncResult] = []
        self.coord.sync_group(SyncRequest(self.group, self.generation, self.member_id, None, "consumer", "range",
                                          assignments or {}), out.append)
        assert out and out[-1].error == E.none, out
        named, _ = decode_assignment(out[-1].assignment)
        self.owned = {p for t, ps in named if t == "orders" for p in ps}
        return out[-1]

    def rejoin(self) -> None:
        """Into a consumer group: answered at once, then the assignment from SyncGroup."""
        answers = self.send_join()
        assert answers, "a JoinGroup to a consumer group is answered at once"
        self.took(answers[-1])
        self.sync()

    def heartbeat(self) -> E:
        return self.coord.heartbeat(self.group, self.generation, self.member_id, None)


def classic_group(coord: GroupCoordinator, timer: FakeTimer, *clients: Classic) -> None:
    """A classic rebalance of ``clients``: the leader splits the partitions in ranges."""
    pending = {c.name: c.send_join() for c in clients}
    timer.advance(10)
    for c in clients:
        c.took(pending[c.name][-1])
    leader = next(c for c in clients if c.joined and c.joined.leader_id == c.member_id)
    members = [m for m, _, _ in leader.joined.members]  # type: ignore[union-attr]
    share = PARTITIONS // len(members)
    plan = {m: encode_assignment([("orders", range(i * share, (i + 1) * share))], 1) for i, m in enumerate(members)}
    leader.sync(plan)
    for c in clients:
        if c is not leader:
            c.sync()


def _fields(req: JoinRequest) -> dict[str, object]:
    return {name: getattr(req, name) for name in req.__dataclass_fields__}


def no_partition_twice(*owners: set[int]) -> bool:
    held = [p for o in owners for p in o]
    return len(held) == len(set(held))


def upgraded(log_: MemoryLog, timer: FakeTimer, topics: FakeTopics, **cfg: object
             ) -> tuple[GroupCoordinator, Classic, Classic, Member]:
    """Classic a and b own 3 partitions each; consumer-protocol member x joins and upgrades."""
    coord = make(log_, timer, topics, **cfg)
    a, b = Classic(coord, timer, "a"), Classic(coord, timer, "b")
    classic_group(coord, timer, a, b)
    assert sorted(a.owned | b.owned) == list(range(PARTITIONS)) and len(a.owned) == 3
    x = Member(coord, "x")
    assert x.beat().error == E.none
    return coord, a, b, x


def test_a_consumer_member_upgrades_a_live_classic_group_and_classic_members_hand_over(
        log_: MemoryLog, timer: FakeTimer, topics: FakeTopics) -> None:
    coord, a, b, x = upgraded(log_, timer, topics)
    assert coord.is_consumer_group("g")
    described = coord.consumer_group_describe("g")
    assert described.error == E.none and len(described.members) == 3
    assert x.partitions() == set()  # every partition still held by a classic member
    a_gen = a.generation
    assert a.heartbeat() == E.rebalance_in_progress  # its target changed: rejoin
    a.rejoin()
    assert a.generation > a_gen and len(a.owned) == 2
    assert b.heartbeat() == E.rebalance_in_progress
    b.rejoin()
    x.beat()
    assert no_partition_twice(a.owned, b.owned, x.partitions())
    assert a.owned | b.owned | x.partitions() == set(range(PARTITIONS)) and len(x.partitions()) == 2
    assert (a.heartbeat(), b.heartbeat()) == (E.none, E.none)
    # a classic member commits with its generation: the member epoch
    tp = ("orders", min(a.owned))
    assert coord.commit_offsets("g", a.generation, a.member_id, None, {tp: (5, -1, "")}, lambda t: True, 7) == {
        tp: E.none}
    assert coord.commit_offsets("g", a.generation - 1, a.member_id, None, {tp: (6, -1, "")}, lambda t: True, 7) == {
        tp: E.illegal_generation}
    # the group, classic members included, comes back from the log
    again = make(log_, timer, topics)
    assert again.is_consumer_group("g") and len(again.consumer_group_describe("g").members) == 3
    assert again.heartbeat("g", a.generation, a.member_id, None) == E.none
    assert again.fetch_offsets("g", [tp])[1][tp].offset == 5  # type: ignore[union-attr]


def test_the_last_consumer_member_leaving_downgrades_to_a_classic_group(
        log_: MemoryLog, timer: FakeTimer, topics: FakeTopics) -> None:
    coord, a, b, x = upgraded(log_, timer, topics)
    a.rejoin()
    b.rejoin()
    x.beat()
    assert x.leave().error == E.none
    assert not coord.is_consumer_group("g")
    assert coord.group("g").state.value == "PreparingRebalance"  # type: ignore[union-attr]
    assert {t for _, _, _, t in coord.list_groups_by_type()} == {"classic"}
    assert a.heartbeat() in (E.rebalance_in_progress, E.illegal_generation)  # either way: rejoin
    classic_group(coord, timer, a, b)
    assert sorted(a.owned | b.owned) == list(range(PARTITIONS)) and no_partition_twice(a.owned, b.owned)
    assert make(log_, timer, topics).group("g").generation_id == a.generation  # type: ignore[union-attr]


def test_a_classic_member_leaving_a_mixed_group_hands_its_partitions_over(
        log_: MemoryLog, timer: FakeTimer, topics: FakeTopics) -> None:
    coord, a, b, x = upgraded(log_, timer, topics)
    a.rejoin()
    b.rejoin()
    assert coord.leave_group("g", [(a.member_id, None)]) == (E.none, [E.none])
    for _ in range(3):
        x.beat()
        if b.heartbeat() == E.rebalance_in_progress:
            b.rejoin()
    assert coord.is_consumer_group("g")  # a consumer-protocol member is left: no downgrade
    assert b.owned | x.partitions() == set(range(PARTITIONS)) and no_partition_twice(b.owned, x.partitions())
    assert a.heartbeat() == E.unknown_member_id


def test_the_policy_keeps_kafkas_errors_when_migration_is_off(
        log_: MemoryLog, timer: FakeTimer, topics: FakeTopics) -> None:
    coord = make(log_, timer, topics, consumer_migration_policy="disabled")
    a = Classic(coord, timer, "a", group="old")
    classic_group(coord, timer, a)
    assert Member(coord, "x", group="old").beat().error == E.group_id_not_found
    m = Member(coord, "m", group="modern")
    m.beat()
    c = Classic(coord, timer, "c", group="modern")
    assert c.send_join()[-1].error == E.inconsistent_group_protocol
    # upgrade only: no way back while classic members are left
    coord, _, _, x = upgraded(MemoryLog(), timer, topics, consumer_migration_policy="upgrade")
    x.leave()
    assert coord.is_consumer_group("g")


def test_classic_member_metadata_is_kafkas_tagged_struct() -> None:
    classic = ClassicMemberMetadata(45_000, (("range", b"\x00\x01"), ("roundrobin", b"")))
    record = MemberRecord("g", "m", MemberValue(None, None, "c", "h", (), None, 30_000, None, classic))
    _, value = encode(record)
    assert value is not None
    tail = (b"\x01\x00"  # one tagged field: tag 0
            + bytes([1 + 4 + 1 + (1 + 5) + (1 + 2) + 1 + (1 + 10) + 1 + 1 + 1])  # its size, the 1 counted
            + b"\x01"  # present
            + struct.pack(">i", 45_000) + b"\x03" + b"\x06range" + b"\x03\x00\x01" + b"\x00"
            + b"\x0broundrobin" + b"\x01" + b"\x00" + b"\x00")
    assert value.endswith(tail)
    assert decode(*encode(record)) == record


def test_embedded_subscription_and_assignment_read_every_version() -> None:
    sub = decode_subscription(subscription(("a", "b"), {"a": {2, 1}}))
    assert (sub.version, sub.topics, sub.owned) == (1, ("a", "b"), (("a", (1, 2)),))
    assert decode_subscription(struct.pack(">hi", 0, 0) + struct.pack(">i", -1)).owned == ()
    assert decode_assignment(encode_assignment([("a", [3, 1])], 3)) == ((("a", (1, 3)),), None)
    for bad in (b"", b"\x00\x01\x7f\xff\xff\xff", struct.pack(">hi", 0, 1) + b"\x00\x09ab"):
        try:
            decode_subscription(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} decoded")
