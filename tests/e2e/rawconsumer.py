"""Hand-built requests of the consumer group protocol (KIP-848) for the error-path tests:
ConsumerGroupHeartbeat v0/v1, ConsumerGroupDescribe v0, OffsetCommit v9.

All three are flexible versions: request header v2 (the v1 header plus an empty
tagged-field section), compact strings and arrays (unsigned varint length + 1),
a tagged-field section closing every struct; responses carry header v1
(correlation id and tagged fields). Built on :mod:`tests.e2e.rawkafka`'s
connection; shares no code with the broker.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from tests.e2e.rawkafka import Connection, string

API_OFFSET_COMMIT = 8
API_CONSUMER_GROUP_HEARTBEAT = 68
API_CONSUMER_GROUP_DESCRIBE = 69

NONE = 0
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
GROUP_ID_NOT_FOUND = 69
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_REGULAR_EXPRESSION = 128

_NO_TAGS = b"\x00"


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cstring(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode()
    return uvarint(len(raw) + 1) + raw


def carray(items: list[bytes] | None) -> bytes:
    if items is None:
        return b"\x00"
    return uvarint(len(items) + 1) + b"".join(items)


class _In:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def fixed(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(v)

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def cstring(self) -> str | None:
        n = self.uvarint()
        if n == 0:
            return None
        raw = self.data[self.pos:self.pos + n - 1]
        self.pos += n - 1
        return raw.decode()

    def count(self) -> int:
        return max(self.uvarint() - 1, 0)

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()

    def uuid(self) -> uuid.UUID:
        raw = self.data[self.pos:self.pos + 16]
        self.pos += 16
        return uuid.UUID(bytes=raw)


def call(conn: Connection, api_key: int, version: int, body: bytes) -> _In:
    """Send a flexible request (header v2), return a reader past the response header v1."""
    conn.correlation_id += 1
    header = struct.pack(">hhi", api_key, version, conn.correlation_id) + string("raw-kip848") + _NO_TAGS
    payload = header + body
    conn.send_raw(struct.pack(">i", len(payload)) + payload)
    frame = conn.read_frame()
    if frame is None:
        raise ConnectionError("broker closed the connection instead of answering")
    r = _In(frame)
    assert r.fixed(">i") == conn.correlation_id
    r.tags()
    return r


@dataclass
class HeartbeatResponse:
    error_code: int
    error_message: str | None
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: dict[uuid.UUID, list[int]] | None


def heartbeat(conn: Connection, group: str, member_id: str, epoch: int, *, version: int = 1,
              instance_id: str | None = None, rack_id: str | None = None, rebalance_timeout_ms: int = 30_000,
              topics: list[str] | None = None, regex: str | None = None, assignor: str | None = None,
              owned: dict[uuid.UUID, list[int]] | None = None) -> HeartbeatResponse:
    body = cstring(group) + cstring(member_id) + struct.pack(">i", epoch) + cstring(instance_id)
    body += cstring(rack_id) + struct.pack(">i", rebalance_timeout_ms)
    body += carray(None if topics is None else [cstring(t) for t in topics])
    if version >= 1:
        body += cstring(regex)
    body += cstring(assignor)
    body += carray(None if owned is None else [
        t.bytes + carray([struct.pack(">i", p) for p in ps]) + _NO_TAGS for t, ps in owned.items()])
    body += _NO_TAGS
    r = call(conn, API_CONSUMER_GROUP_HEARTBEAT, version, body)
    r.fixed(">i")  # throttle
    error, message, member, member_epoch = r.fixed(">h"), r.cstring(), r.cstring(), r.fixed(">i")
    interval = r.fixed(">i")
    assignment = None
    if r.data[r.pos] != 0xFF:  # nullable struct: -1 (int8) means null
        r.fixed(">b")
        assignment = {}
        for _ in range(r.count()):
            topic_id = r.uuid()
            assignment[topic_id] = [r.fixed(">i") for _ in range(r.count())]
            r.tags()
        r.tags()
    else:
        r.pos += 1
    return HeartbeatResponse(error, message, member, member_epoch, interval, assignment)


def describe(conn: Connection, groups: list[str]) -> list[tuple[str, int, str, int, list[str]]]:
    """ConsumerGroupDescribe v0: (group id, error, state, group epoch, member ids) per group."""
    return [d[:5] for d in _describe(conn, groups, False)]  # type: ignore[misc]


def authorized_operations(conn: Connection, group: str, include: bool) -> int:
    """ConsumerGroupDescribe v0's ``authorized_operations`` of one group (asked or not)."""
    return _describe(conn, [group], include)[0][5]


def _describe(conn: Connection, groups: list[str],
              include_ops: bool) -> list[tuple[str, int, str, int, list[str], int]]:
    body = carray([cstring(g) for g in groups]) + (b"\x01" if include_ops else b"\x00") + _NO_TAGS
    r = call(conn, API_CONSUMER_GROUP_DESCRIBE, 0, body)
    r.fixed(">i")
    out = []
    for _ in range(r.count()):
        error = r.fixed(">h")
        r.cstring()
        group, state = r.cstring() or "", r.cstring() or ""
        epoch = r.fixed(">i")
        r.fixed(">i")
        r.cstring()
        members = []
        for _ in range(r.count()):
            members.append(r.cstring() or "")
            r.cstring(), r.cstring()
            r.fixed(">i")
            r.cstring(), r.cstring()
            for _ in range(r.count()):
                r.cstring()
            r.cstring()
            for _ in range(2):  # assignment, target assignment
                for _ in range(r.count()):
                    r.uuid()
                    r.cstring()
                    for _ in range(r.count()):
                        r.fixed(">i")
                    r.tags()
                r.tags()
            r.tags()
        ops = r.fixed(">i")
        r.tags()
        out.append((group, error, state, epoch, members, ops))
    return out


def offset_commit_v9(conn: Connection, group: str, member_epoch: int, member_id: str,
                     offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[bytes]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            struct.pack(">iqi", partition, offset, -1) + cstring(None) + _NO_TAGS)
    body = cstring(group) + struct.pack(">i", member_epoch) + cstring(member_id) + cstring(None)
    body += carray([cstring(t) + carray(ps) + _NO_TAGS for t, ps in by_topic.items()]) + _NO_TAGS
    r = call(conn, API_OFFSET_COMMIT, 9, body)
    r.fixed(">i")
    out = {}
    for _ in range(r.count()):
        topic = r.cstring() or ""
        for _ in range(r.count()):
            partition, error = r.fixed(">i"), r.fixed(">h")
            r.tags()
            out[(topic, partition)] = error
        r.tags()
    return out
