"""ListOffsets v0, decoded and encoded by hand (kio has no schema for it: Kafka 4 removed it).

Sarama-based tools (Burrow, among others) still send v0 by default. Its request
asks, per partition, for up to ``max_num_offsets`` offsets at or before a
timestamp; the response carries them as ``old_style_offsets`` (Kafka's
``ListOffsetsRequest.json`` up to 3.x)::

    request  (header v1): replica_id int32, [topic string, [partition int32,
                          timestamp int64, max_num_offsets int32]]
    response (header v0): [topic string, [partition int32, error_code int16,
                          [offset int64]]]

Every length and count is checked against the bytes left before anything is
allocated; a request that does not parse is a :class:`~common.protocol.codec.FrameError`
(the connection is closed, as for any malformed frame). Pure functions; sans I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from common.protocol.codec import FrameError, RequestHeader

__all__ = [
    "ListOffsetsV0Partition",
    "ListOffsetsV0Request",
    "ListOffsetsV0Topic",
    "decode_request",
    "encode_response",
]

_HEAD = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">iqi")
_PARTITION_HEAD = struct.Struct(">ihi")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class ListOffsetsV0Partition:
    partition_index: int
    timestamp: int
    max_num_offsets: int


@dataclass(frozen=True, slots=True)
class ListOffsetsV0Topic:
    name: str
    partitions: tuple[ListOffsetsV0Partition, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsV0Request:
    replica_id: int
    topics: tuple[ListOffsetsV0Topic, ...]


class _Reader:
    def __init__(self, frame: bytes | memoryview) -> None:
        self._buf = memoryview(frame)
        self.pos = 0

    def _need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > len(self._buf):
            raise FrameError(f"malformed ListOffsets v0 request: {what} runs past the frame")

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[int, ...]:
        self._need(fmt.size, what)
        values = fmt.unpack_from(self._buf, self.pos)
        self.pos += fmt.size
        return values

    def string(self, what: str, nullable: bool = False) -> str | None:
        (length,) = self.unpack(_I16, what)
        if length == -1 and nullable:
            return None
        self._need(length, what)
        raw = bytes(self._buf[self.pos : self.pos + length])
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def count(self, element_size: int, what: str) -> int:
        """An array length, bounded by what the remaining bytes can hold."""
        (n,) = self.unpack(_I32, what)
        if n < 0 or n * element_size > len(self._buf) - self.pos:
            raise FrameError(f"malformed ListOffsets v0 request: {n} {what} cannot fit")
        return n


def decode_request(frame: bytes | memoryview) -> tuple[RequestHeader, ListOffsetsV0Request]:
    """Header (v1) and body of a ListOffsets v0 frame (without its size prefix)."""
    r = _Reader(frame)
    api_key, version, correlation_id = r.unpack(_HEAD, "the header")
    if (api_key, version) != (2, 0):
        raise FrameError(f"not a ListOffsets v0 request (api {api_key} v{version})")
    client_id = r.string("the client id", nullable=True)
    (replica_id,) = r.unpack(_I32, "replica_id")
    topics = []
    for _ in range(r.count(2 + 4, "topics")):
        name = r.string("a topic name")
        partitions = tuple(
            ListOffsetsV0Partition(*r.unpack(_PARTITION, "a partition"))
            for _ in range(r.count(_PARTITION.size, "partitions"))
        )
        topics.append(ListOffsetsV0Topic(name or "", partitions))
    header = RequestHeader(api_key, version, correlation_id, client_id, False)
    return header, ListOffsetsV0Request(replica_id, tuple(topics))


def encode_response(
    correlation_id: int, topics: Sequence[tuple[str, Sequence[tuple[int, int, Sequence[int]]]]]
) -> bytes:
    """The size-prefixed response: per topic, ``(partition, error code, offsets)``."""
    out = bytearray(_I32.pack(0))
    out += _I32.pack(correlation_id)
    out += _I32.pack(len(topics))
    for name, partitions in topics:
        raw = name.encode()
        out += _I16.pack(len(raw)) + raw
        out += _I32.pack(len(partitions))
        for partition, error_code, offsets in partitions:
            out += _PARTITION_HEAD.pack(partition, error_code, len(offsets))
            for offset in offsets:
                out += _I64.pack(offset)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
