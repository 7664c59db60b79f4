"""The consumer-group records of ``__consumer_offsets``, byte for byte Kafka 4.1's.

Kafka's ``CoordinatorRecordSerde``: a key is an int16 *record type* followed by
the key message at version 0 (never flexible: int16-length strings); a value is
an int16 value version followed by the value message, and every value of a
KIP-848 record is flexible (compact strings and arrays, unsigned-varint
lengths plus one, a tagged-field section after each struct). The types
(``group-coordinator/src/main/resources/common/message/ConsumerGroup*.json``):

====  =====================================  ========================================
type  key (after the type)                   value v0
====  =====================================  ========================================
3     ConsumerGroupMetadata: group           epoch int32; tag 0: metadata_hash int64
4     ConsumerGroupPartitionMetadata: group  topics (read and ignored: 4.1 replaced it)
5     ConsumerGroupMemberMetadata: group,    instance_id?, rack_id?, client_id,
      member                                 client_host, subscribed_topic_names[],
                                             subscribed_topic_regex?, rebalance_timeout,
                                             server_assignor?; tag 0: classic member
                                             metadata (session timeout, protocols)
6     ConsumerGroupTargetAssignmentMetadata  assignment_epoch int32
7     ConsumerGroupTargetAssignmentMember:   topic_partitions[topic_id uuid,
      group, member                          partitions int32[]]
8     ConsumerGroupCurrentMemberAssignment:  member_epoch, previous_member_epoch,
      group, member                          state int8, assigned_partitions[],
                                             partitions_pending_revocation[]
16    ConsumerGroupRegularExpression:        topics string[], version int64,
      group, regex                           timestamp int64
====  =====================================  ========================================

A null value is a tombstone. Tagged fields this codec does not know are skipped
on read, as Kafka's protocol says. Pure functions, no I/O; see
``docs/adr/0015-consumer-group-protocol.md``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "CONSUMER_RECORD_TYPES",
    "Assignment",
    "ClassicMemberMetadata",
    "ConsumerRecord",
    "CurrentAssignmentRecord",
    "GroupEpochRecord",
    "MemberRecord",
    "PartitionMetadataRecord",
    "RegexRecord",
    "TargetEpochRecord",
    "TargetMemberRecord",
    "decode",
    "encode",
    "is_consumer_record",
]

#: topic id → partitions (sorted tuple), the shape of every assignment here.
Assignment = Mapping[uuid.UUID, tuple[int, ...]]

GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA = 3, 4, 5
TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT, REGULAR_EXPRESSION = 6, 7, 8, 16
CONSUMER_RECORD_TYPES = frozenset(
    {GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER,
     CURRENT_ASSIGNMENT, REGULAR_EXPRESSION}
)

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_MAX_COUNT = 1 << 20  # no array in a group record comes near this; bounds garbage


class RecordFormatError(ValueError):
    """Bytes that are not a consumer-group record this codec knows."""


# ----------------------------------------------------------------------------- records
# ``value is None`` on any record means a tombstone.


@dataclass(frozen=True, slots=True)
class GroupEpochRecord:
    group: str
    epoch: int | None  # None: tombstone
    metadata_hash: int = 0


@dataclass(frozen=True, slots=True)
class PartitionMetadataRecord:
    group: str
    present: bool  # the value is ignored (Kafka 4.1 replaced it by the metadata hash)


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat) inside a
    consumer group (Kafka 4's online migration): its session timeout and the
    ``(name, metadata)`` protocols of its last JoinGroup, in its order of preference."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class MemberValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None  # tag 0; None: a consumer-protocol member


@dataclass(frozen=True, slots=True)
class MemberRecord:
    group: str
    member: str
    value: MemberValue | None


@dataclass(frozen=True, slots=True)
class TargetEpochRecord:
    group: str
    assignment_epoch: int | None


@dataclass(frozen=True, slots=True)
class TargetMemberRecord:
    group: str
    member: str
    partitions: Assignment | None


@dataclass(frozen=True, slots=True)
class CurrentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


@dataclass(frozen=True, slots=True)
class CurrentAssignmentRecord:
    group: str
    member: str
    value: CurrentValue | None


@dataclass(frozen=True, slots=True)
class RegexRecord:
    group: str
    regex: str
    topics: tuple[str, ...] | None  # None: tombstone
    version: int = 0
    timestamp: int = 0


ConsumerRecord = (
    GroupEpochRecord | PartitionMetadataRecord | MemberRecord | TargetEpochRecord
    | TargetMemberRecord | CurrentAssignmentRecord | RegexRecord
)


# ----------------------------------------------------------------------------- writing


class _Out:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def fixed(self, st: struct.Struct, value: int) -> _Out:
        self.buf += st.pack(value)
        return self

    def varint(self, value: int) -> _Out:
        while value >= 0x80:
            self.buf.append((value & 0x7F) | 0x80)
            value >>= 7
        self.buf.append(value)
        return self

    def key_string(self, value: str) -> _Out:
        raw = value.encode("utf-8")
        if len(raw) > 0x7FFF:
            raise RecordFormatError(f"key string of {len(raw)} bytes does not fit an int16 length")
        self.buf += _I16.pack(len(raw)) + raw
        return self

    def string(self, value: str | None) -> _Out:
        if value is None:
            return self.varint(0)
        raw = value.encode("utf-8")
        self.varint(len(raw) + 1)
        self.buf += raw
        return self

    def strings(self, values: tuple[str, ...]) -> _Out:
        self.varint(len(values) + 1)
        for v in values:
            self.string(v)
        return self

    def assignment(self, value: Assignment) -> _Out:
        self.varint(len(value) + 1)
        for topic_id in sorted(value):
            parts = sorted(value[topic_id])
            self.buf += topic_id.bytes
            self.varint(len(parts) + 1)
            for p in parts:
                self.buf += _I32.pack(p)
            self.varint(0)  # tagged fields of the struct
        return self

    def no_tags(self) -> bytes:
        self.varint(0)
        return bytes(self.buf)


def _key(record_type: int, *parts: str) -> bytes:
    out = _Out().fixed(_I16, record_type)
    for part in parts:
        out.key_string(part)
    return bytes(out.buf)


def encode(record: ConsumerRecord) -> tuple[bytes, bytes | None]:
    """``(key, value)`` as Kafka writes them; value None for a tombstone."""
    v0 = _Out().fixed(_I16, 0)
    if isinstance(record, GroupEpochRecord):
        key = _key(GROUP_METADATA, record.group)
        if record.epoch is None:
            return key, None
        v0.fixed(_I32, record.epoch)
        if record.metadata_hash:
            hash_bytes = _I64.pack(record.metadata_hash)
            v0.varint(1).varint(0).varint(len(hash_bytes))
            v0.buf += hash_bytes
            return key, bytes(v0.buf)
        return key, v0.no_tags()
    if isinstance(record, PartitionMetadataRecord):
        key = _key(PARTITION_METADATA, record.group)
        return key, (v0.varint(1).no_tags() if record.present else None)
    if isinstance(record, MemberRecord):
        key = _key(MEMBER_METADATA, record.group, record.member)
        m = record.value
        if m is None:
            return key, None
        v0.string(m.instance_id).string(m.rack_id).string(m.client_id).string(m.client_host)
        v0.strings(m.subscribed_topic_names).string(m.subscribed_topic_regex)
        v0.fixed(_I32, m.rebalance_timeout_ms).string(m.server_assignor)
        if m.classic is None:
            return key, v0.no_tags()
        # a tagged nullable struct: its size counts a leading 1 (present), as Kafka writes it
        classic = _Out().fixed(_I32, m.classic.session_timeout_ms).varint(len(m.classic.protocols) + 1)
        for name, metadata in m.classic.protocols:
            classic.string(name).varint(len(metadata) + 1)
            classic.buf += metadata
            classic.varint(0)
        payload = classic.no_tags()
        v0.varint(1).varint(0).varint(len(payload) + 1).varint(1)
        v0.buf += payload
        return key, bytes(v0.buf)
    if isinstance(record, TargetEpochRecord):
        key = _key(TARGET_METADATA, record.group)
        if record.assignment_epoch is None:
            return key, None
        return key, v0.fixed(_I32, record.assignment_epoch).no_tags()
    if isinstance(record, TargetMemberRecord):
        key = _key(TARGET_MEMBER, record.group, record.member)
        if record.partitions is None:
            return key, None
        return key, v0.assignment(record.partitions).no_tags()
    if isinstance(record, CurrentAssignmentRecord):
        key = _key(CURRENT_ASSIGNMENT, record.group, record.member)
        c = record.value
        if c is None:
            return key, None
        v0.fixed(_I32, c.member_epoch).fixed(_I32, c.previous_member_epoch).fixed(_I8, c.state)
        v0.assignment(c.assigned).assignment(c.pending_revocation)
        return key, v0.no_tags()
    key = _key(REGULAR_EXPRESSION, record.group, record.regex)
    if record.topics is None:
        return key, None
    v0.strings(record.topics).fixed(_I64, record.version).fixed(_I64, record.timestamp)
    return key, v0.no_tags()


# ----------------------------------------------------------------------------- reading


class _In:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("record ends early")

    def fixed(self, st: struct.Struct) -> int:
        self._need(st.size)
        (value,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return int(value)

    def varint(self) -> int:
        value = shift = 0
        while True:
            self._need(1)
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("varint longer than 5 bytes")

    def raw(self, n: int) -> bytes:
        self._need(n)
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def key_string(self) -> str:
        n = self.fixed(_I16)
        return self.raw(n).decode("utf-8")

    def string(self) -> str | None:
        n = self.varint()
        return None if n == 0 else self.raw(n - 1).decode("utf-8")

    def required_string(self) -> str:
        value = self.string()
        if value is None:
            raise RecordFormatError("null where a string is required")
        return value

    def count(self) -> int:
        n = self.varint() - 1
        if n > _MAX_COUNT:
            raise RecordFormatError(f"array of {n} elements")
        return max(n, 0)

    def strings(self) -> tuple[str, ...]:
        return tuple(self.required_string() for _ in range(self.count()))

    def assignment(self) -> dict[uuid.UUID, tuple[int, ...]]:
        out: dict[uuid.UUID, tuple[int, ...]] = {}
        for _ in range(self.count()):
            topic_id = uuid.UUID(bytes=self.raw(16))
            out[topic_id] = tuple(sorted(self.fixed(_I32) for _ in range(self.count())))
            self.tags()
        return out

    def tags(self) -> dict[int, bytes]:
        found = {}
        for _ in range(self.varint()):
            tag = self.varint()
            found[tag] = self.raw(self.varint())
        return found


def _classic_metadata(raw: bytes) -> ClassicMemberMetadata | None:
    """Tag 0 of a member record: a 1 (present) then the struct; a 0 is a null struct."""
    r = _In(raw)
    if r.varint() == 0:
        return None
    session = r.fixed(_I32)
    protocols = []
    for _ in range(r.count()):
        name = r.required_string()
        size = r.varint() - 1
        if size < 0:
            raise RecordFormatError("null protocol metadata")
        protocols.append((name, r.raw(size)))
        r.tags()
    r.tags()
    return ClassicMemberMetadata(session, tuple(protocols))


def is_consumer_record(key: bytes) -> bool:
    """Whether ``key`` is one of this module's record types (see the table above)."""
    return len(key) >= 2 and _I16.unpack_from(key)[0] in CONSUMER_RECORD_TYPES


def decode(key: bytes, value: bytes | None) -> ConsumerRecord:
    """The record of a ``(key, value)`` pair; raises :class:`RecordFormatError`."""
    k = _In(key)
    record_type = k.fixed(_I16)
    group = k.key_string()
    v: _In | None = None
    if value is not None:
        v = _In(value)
        version = v.fixed(_I16)
        if version != 0:
            raise RecordFormatError(f"unknown value version {version} of record type {record_type}")
    try:
        return _decode(record_type, group, k, v)
    except UnicodeDecodeError as exc:
        raise RecordFormatError(f"bad UTF-8 in record type {record_type}: {exc}") from None


def _decode(record_type: int, group: str, k: _In, v: _In | None) -> ConsumerRecord:
    if record_type == GROUP_METADATA:
        if v is None:
            return GroupEpochRecord(group, None)
        epoch = v.fixed(_I32)
        tags = v.tags()
        metadata_hash = _I64.unpack(tags[0])[0] if len(tags.get(0, b"")) == 8 else 0
        return GroupEpochRecord(group, epoch, metadata_hash)
    if record_type == PARTITION_METADATA:
        return PartitionMetadataRecord(group, v is not None)
    if record_type == TARGET_METADATA:
        return TargetEpochRecord(group, None if v is None else v.fixed(_I32))
    second = k.key_string()
    if record_type == MEMBER_METADATA:
        if v is None:
            return MemberRecord(group, second, None)
        instance, rack = v.string(), v.string()
        client_id, client_host = v.required_string(), v.required_string()
        topics, regex = v.strings(), v.string()
        timeout, assignor = v.fixed(_I32), v.string()
        classic = v.tags().get(0)
        return MemberRecord(group, second, MemberValue(
            instance, rack, client_id, client_host, topics, regex, timeout, assignor,
            _classic_metadata(classic) if classic else None))
    if record_type == TARGET_MEMBER:
        return TargetMemberRecord(group, second, None if v is None else v.assignment())
    if record_type == CURRENT_ASSIGNMENT:
        if v is None:
            return CurrentAssignmentRecord(group, second, None)
        epoch, previous, state = v.fixed(_I32), v.fixed(_I32), v.fixed(_I8)
        assigned, pending = v.assignment(), v.assignment()
        return CurrentAssignmentRecord(group, second, CurrentValue(epoch, previous, state, assigned, pending))
    if record_type == REGULAR_EXPRESSION:
        if v is None:
            return RegexRecord(group, second, None)
        topics = v.strings()
        return RegexRecord(group, second, topics, v.fixed(_I64), v.fixed(_I64))
    raise RecordFormatError(f"unknown consumer group record type {record_type}")
