"""The consumer protocol embedded in the classic one: ``ConsumerProtocolSubscription`` and
``ConsumerProtocolAssignment`` (Kafka's ``ConsumerProtocol``), versions 0-3.

A classic consumer sends its subscription as the metadata of each protocol it
offers in JoinGroup, and gets its assignment from SyncGroup in the second format.
Neither is flexible (int16-length strings, int32 counts)::

    Subscription  version int16, topics [string], user_data bytes?,
                  v1+ owned_partitions [topic string, partitions [int32]],
                  v2+ generation_id int32, v3+ rack_id string?
    Assignment    version int16, assigned [topic string, partitions [int32]], user_data bytes?

A version above 3 is read as 3 (the fields a newer client adds come last, as
Kafka reads them). Every count and length is checked against the bytes left
before anything is allocated; bad bytes are a ``ValueError``. Pure functions.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Subscription", "decode_assignment", "decode_subscription", "encode_assignment"]

LATEST_VERSION = 3
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation_id: int = -1
    rack_id: str | None = None


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def fixed(self, st: struct.Struct) -> int:
        if self.pos + st.size > len(self.data):
            raise ValueError("embedded consumer protocol ends early")
        (value,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return int(value)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("embedded consumer protocol ends early")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(out)

    def string(self) -> str | None:
        n = self.fixed(_I16)
        return None if n < 0 else self.raw(n).decode("utf-8")

    def bytes_(self) -> bytes | None:
        n = self.fixed(_I32)
        return None if n < 0 else self.raw(n)

    def count(self, item_size: int) -> int:
        """An array's length, no more than the bytes left could hold."""
        n = self.fixed(_I32)
        if n < 0:
            return 0
        if n * item_size > len(self.data) - self.pos:
            raise ValueError(f"array of {n} elements in {len(self.data) - self.pos} bytes")
        return n

    def partitions(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        out = []
        for _ in range(self.count(6)):
            topic = self.string()
            if topic is None:
                raise ValueError("null topic name")
            out.append((topic, tuple(self.fixed(_I32) for _ in range(self.count(4)))))
        return tuple(out)


def decode_subscription(data: bytes) -> Subscription:
    r = _Reader(data)
    version = r.fixed(_I16)
    if version < 0:
        raise ValueError(f"subscription version {version}")
    topics = []
    for _ in range(r.count(2)):
        topic = r.string()
        if topic is None:
            raise ValueError("null topic name")
        topics.append(topic)
    user_data = r.bytes_()
    owned = r.partitions() if version >= 1 else ()
    generation = r.fixed(_I32) if version >= 2 else -1
    rack = r.string() if version >= 3 else None
    return Subscription(version, tuple(topics), user_data, owned, generation, rack)


def decode_assignment(data: bytes) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], bytes | None]:
    """``(assigned partitions, user data)``; empty bytes are an empty assignment."""
    if not data:
        return (), None
    r = _Reader(data)
    r.fixed(_I16)
    return r.partitions(), r.bytes_()


def encode_assignment(partitions: Sequence[tuple[str, Sequence[int]]], version: int) -> bytes:
    """The assignment at ``version`` (clamped to 0-3), without user data."""
    out = bytearray(_I16.pack(max(0, min(version, LATEST_VERSION))))
    out += _I32.pack(len(partitions))
    for topic, parts in partitions:
        raw = topic.encode("utf-8")
        out += _I16.pack(len(raw)) + raw + _I32.pack(len(parts))
        out += struct.pack(f">{len(parts)}i", *sorted(parts))
    out += _I32.pack(-1)
    return bytes(out)
