"""Hand-built consumer group requests (JoinGroup v5, SyncGroup v3, Heartbeat v3,
LeaveGroup v3, OffsetCommit v7, OffsetFetch v5) for the error-path tests.

Built on :mod:`tests.e2e.rawkafka` (non-flexible versions, header v1); shares
no code with the broker. A :class:`GroupMember` is one member driven step by
step, so a test can put a group into exactly the state it needs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from tests.e2e.rawkafka import Connection, Reader, array, bytes_field, string

API_OFFSET_COMMIT = 8
API_OFFSET_FETCH = 9
API_JOIN_GROUP = 11
API_HEARTBEAT = 12
API_LEAVE_GROUP = 13
API_SYNC_GROUP = 14

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
ILLEGAL_GENERATION = 22
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82


def consumer_subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    return struct.pack(">h", 0) + array([string(t) for t in topics]) + struct.pack(">i", -1)


def consumer_assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], user data (null)."""
    parts = array([struct.pack(">i", p) for p in partitions])
    return struct.pack(">h", 0) + array([string(topic) + parts]) + struct.pack(">i", -1)


@dataclass
class JoinResponse:
    error_code: int
    generation_id: int
    protocol_name: str | None
    leader: str | None
    member_id: str | None
    members: list[tuple[str, str | None, bytes]]


def join_group(conn: Connection, group: str, member_id: str = "", *, instance_id: str | None = None,
               topic: str = "t", session_timeout_ms: int = 10_000,
               rebalance_timeout_ms: int = 10_000) -> JoinResponse:
    body = (string(group) + struct.pack(">ii", session_timeout_ms, rebalance_timeout_ms)
            + string(member_id) + string(instance_id) + string("consumer")
            + array([string("range") + bytes_field(consumer_subscription(topic))]))
    r = Reader(conn.call(API_JOIN_GROUP, 5, body))
    r.int32()  # correlation id
    r.int32()  # throttle
    error, generation = r.int16(), r.int32()
    protocol, leader, member = r.string(), r.string(), r.string()
    members = [(r.string() or "", r.string(), r.bytes_() or b"") for _ in range(r.int32())]
    return JoinResponse(error, generation, protocol, leader, member, members)


def sync_group(conn: Connection, group: str, generation: int, member_id: str,
               assignments: dict[str, bytes], instance_id: str | None = None) -> tuple[int, bytes]:
    body = (string(group) + struct.pack(">i", generation) + string(member_id) + string(instance_id)
            + array([string(m) + bytes_field(a) for m, a in assignments.items()]))
    r = Reader(conn.call(API_SYNC_GROUP, 3, body))
    r.int32()
    r.int32()
    return r.int16(), r.bytes_() or b""


def heartbeat(conn: Connection, group: str, generation: int, member_id: str,
              instance_id: str | None = None) -> int:
    body = string(group) + struct.pack(">i", generation) + string(member_id) + string(instance_id)
    r = Reader(conn.call(API_HEARTBEAT, 3, body))
    r.int32()
    r.int32()
    return r.int16()


def leave_group(conn: Connection, group: str, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
    body = string(group) + array([string(m) + string(i) for m, i in members])
    r = Reader(conn.call(API_LEAVE_GROUP, 3, body))
    r.int32()
    r.int32()
    error = r.int16()
    codes = []
    for _ in range(r.int32()):
        r.string()
        r.string()
        codes.append(r.int16())
    return error, codes


def offset_commit(conn: Connection, group: str, generation: int, member_id: str,
                  offsets: dict[tuple[str, int], int], instance_id: str | None = None) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[bytes]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            struct.pack(">iqi", partition, offset, -1) + string(None))
    body = (string(group) + struct.pack(">i", generation) + string(member_id) + string(instance_id)
            + array([string(t) + array(parts) for t, parts in by_topic.items()]))
    r = Reader(conn.call(API_OFFSET_COMMIT, 7, body))
    r.int32()
    r.int32()
    return r.partition_codes()


def offset_fetch(conn: Connection, group: str, partitions: dict[str, list[int]]) -> tuple[int, dict[tuple[str, int], int]]:
    """OffsetFetch v5: (group error, {(topic, partition): committed offset})."""
    body = string(group) + array([string(t) + array([struct.pack(">i", p) for p in ps])
                                  for t, ps in partitions.items()])
    r = Reader(conn.call(API_OFFSET_FETCH, 5, body))
    r.int32()
    r.int32()
    out = {}
    for _ in range(r.int32()):
        topic = r.string() or ""
        for _ in range(r.int32()):
            partition, offset = r.int32(), r.int64()
            r.int32()  # leader epoch
            r.string()  # metadata
            r.int16()  # error
            out[(topic, partition)] = offset
    return r.int16(), out


@dataclass
class GroupMember:
    """One raw member: joins (handling MEMBER_ID_REQUIRED), syncs, heartbeats, commits."""

    bootstrap: str
    group: str
    topic: str
    instance_id: str | None = None
    member_id: str = ""
    generation: int = -1
    conn: Connection = field(init=False)

    def __post_init__(self) -> None:
        self.conn = Connection.to(self.bootstrap, timeout=30.0)

    def join(self) -> JoinResponse:
        resp = join_group(self.conn, self.group, self.member_id, instance_id=self.instance_id,
                          topic=self.topic)
        if resp.error_code == MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id or ""
            resp = join_group(self.conn, self.group, self.member_id, instance_id=self.instance_id,
                              topic=self.topic)
        if resp.error_code == NONE:
            self.member_id = resp.member_id or ""
            self.generation = resp.generation_id
        return resp

    def sync(self, assignments: dict[str, bytes] | None = None) -> tuple[int, bytes]:
        return sync_group(self.conn, self.group, self.generation, self.member_id,
                          assignments or {}, self.instance_id)

    def heartbeat(self, generation: int | None = None) -> int:
        return heartbeat(self.conn, self.group, self.generation if generation is None else generation,
                         self.member_id, self.instance_id)

    def commit(self, offsets: dict[tuple[str, int], int], generation: int | None = None) -> dict[tuple[str, int], int]:
        return offset_commit(self.conn, self.group,
                             self.generation if generation is None else generation,
                             self.member_id, offsets, self.instance_id)

    def close(self) -> None:
        self.conn.close()
