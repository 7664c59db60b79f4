"""The record format of ``__consumer_offsets``, byte for byte Kafka's.

Every record has a key and a value, both starting with an int16 version.
Keys (never flexible):

* version 0/1 ``OffsetCommitKey``: group string, topic string, partition int32
  (Strata writes version 1);
* version 2 ``GroupMetadataKey``: group string.

Values (Strata writes the newest non-flexible versions):

* ``OffsetCommitValue`` v3: offset int64, leader_epoch int32, metadata string,
  commit_timestamp int64 (v0: offset, metadata, timestamp; v1: adds
  expire_timestamp; v2: drops it; all readable);
* ``GroupMetadataValue`` v3: protocol_type string, generation int32, protocol
  nullable string, leader nullable string, current_state_timestamp int64, then
  members: member_id, group_instance_id (nullable), client_id, client_host,
  rebalance_timeout int32, session_timeout int32, subscription bytes,
  assignment bytes (v0-v2 readable).

A null value is a tombstone: the offset, or the whole group, was deleted.
Pure functions, no I/O. See ``docs/adr/0003-consumer-offsets.md``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "OFFSETS_TOPIC",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberValue",
    "OffsetKey",
    "OffsetValue",
    "decode_group_value",
    "decode_key",
    "decode_offset_value",
    "encode_group_value",
    "encode_key",
    "encode_offset_value",
    "java_string_hash",
    "partition_for",
]

OFFSETS_TOPIC = "__consumer_offsets"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # only in value v1


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int  # -1: unknown (v0/v1)
    members: tuple[MemberValue, ...]


class RecordFormatError(ValueError):
    """Bytes that are not a key or value this codec knows."""


# ----------------------------------------------------------------------------- primitives


def _string(value: str | None, out: bytearray) -> None:
    if value is None:
        out += _I16.pack(-1)
        return
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise RecordFormatError(f"string of {len(raw)} bytes does not fit an int16 length")
    out += _I16.pack(len(raw))
    out += raw


def _bytes(value: bytes, out: bytearray) -> None:
    out += _I32.pack(len(value))
    out += value


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, st: struct.Struct) -> int:
        if self.pos + st.size > len(self.data):
            raise RecordFormatError("record ends early")
        (value,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return int(value)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def nullable_string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise RecordFormatError("string runs past the end of the record")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8")

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise RecordFormatError("null where a string is required")
        return value

    def bytes_(self) -> bytes:
        n = self.i32()
        if n < 0:
            return b""
        if self.pos + n > len(self.data):
            raise RecordFormatError("bytes run past the end of the record")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(raw)


# ----------------------------------------------------------------------------- keys


def encode_key(key: OffsetKey | GroupMetadataKey) -> bytes:
    out = bytearray()
    if isinstance(key, OffsetKey):
        out += _I16.pack(1)
        _string(key.group, out)
        _string(key.topic, out)
        out += _I32.pack(key.partition)
    else:
        out += _I16.pack(2)
        _string(key.group, out)
    return bytes(out)


def decode_key(data: bytes) -> OffsetKey | GroupMetadataKey:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.i32())
    if version == 2:
        return GroupMetadataKey(r.string())
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


# ----------------------------------------------------------------------------- values


def encode_offset_value(value: OffsetValue) -> bytes:
    out = bytearray(_I16.pack(3))
    out += _I64.pack(value.offset)
    out += _I32.pack(value.leader_epoch)
    _string(value.metadata, out)
    out += _I64.pack(value.commit_timestamp)
    return bytes(out)


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.i16()
    if version == 0:
        offset, metadata = r.i64(), r.string()
        return OffsetValue(offset, -1, metadata, r.i64())
    if version == 1:
        offset, metadata, commit = r.i64(), r.string(), r.i64()
        return OffsetValue(offset, -1, metadata, commit, r.i64())
    if version == 2:
        offset, metadata = r.i64(), r.string()
        return OffsetValue(offset, -1, metadata, r.i64())
    if version == 3:
        offset, epoch, metadata = r.i64(), r.i32(), r.string()
        return OffsetValue(offset, epoch, metadata, r.i64())
    raise RecordFormatError(f"unknown offset commit value version {version}")


def encode_group_value(value: GroupMetadataValue) -> bytes:
    out = bytearray(_I16.pack(3))
    _string(value.protocol_type, out)
    out += _I32.pack(value.generation)
    _string(value.protocol, out)
    _string(value.leader, out)
    out += _I64.pack(value.current_state_timestamp)
    out += _I32.pack(len(value.members))
    for m in value.members:
        _string(m.member_id, out)
        _string(m.group_instance_id, out)
        _string(m.client_id, out)
        _string(m.client_host, out)
        out += _I32.pack(m.rebalance_timeout)
        out += _I32.pack(m.session_timeout)
        _bytes(m.subscription, out)
        _bytes(m.assignment, out)
    return bytes(out)


def decode_group_value(data: bytes) -> GroupMetadataValue:
    r = _Reader(data)
    version = r.i16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unknown group metadata value version {version}")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_timestamp = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(
            MemberValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                r.bytes_(),
                r.bytes_(),
            )
        )
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, state_timestamp, tuple(members)
    )


# ----------------------------------------------------------------------------- partitioning


def java_string_hash(value: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    raw = value.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % partitions`` (abs of MIN_VALUE is 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
