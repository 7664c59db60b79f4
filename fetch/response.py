"""Fetch response encoding (v4-v17) as a list of byte strings and file regions.

Record data is never copied into the response: each partition's records are
one or more :class:`local_tier.segment.FileRegion` that the connection sends
with ``sendfile``. Everything around them is encoded here by hand, following
Kafka's ``FetchResponse.json`` (non-flexible up to v11, flexible from v12; from v13 a
topic is named by its id, KIP-516; v14-v17 change nothing the response must carry).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence

from common.protocol.fields import uvarint as _uvarint
from fetch.planner import PartitionData
from local_tier.segment import FileRegion

__all__ = ["ResponsePart", "array_len", "encode_fetch_response", "frame_size", "nullable_string", "string"]

ResponsePart = bytes | memoryview | FileRegion

_I32 = struct.Struct(">i")
_I16_I32 = struct.Struct(">hi")
_I32_I16 = struct.Struct(">ih")
_PART_FIXED = struct.Struct(">ihqq")  # partition, error, high watermark, last stable offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")  # producer id, first offset
# one tagged field (count 1, tag 0, size 13): DivergingEpoch {epoch int32, end offset
# int64, no tagged fields}
_DIVERGING = struct.Struct(">BBBiqB")
_DIVERGING_SIZE = 13


def string(value: str, flexible: bool) -> bytes:
    """A Kafka STRING (int16 length) or COMPACT_STRING (uvarint length + 1)."""
    raw = value.encode()
    if flexible:
        return _uvarint(len(raw) + 1) + raw
    return struct.pack(">h", len(raw)) + raw


def nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\0" if flexible else b"\xff\xff"
    return string(value, flexible)


def array_len(n: int, flexible: bool) -> bytes:
    """An ARRAY's int32 length or a COMPACT_ARRAY's uvarint length + 1."""
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def encode_fetch_response(
    version: int,
    correlation_id: int,
    partitions: Sequence[PartitionData],
    *,
    throttle_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    read_committed: bool = False,
    topic_id: Callable[[str], uuid.UUID] | None = None,
) -> list[ResponsePart]:
    """The whole response frame (size prefix included) as parts to send in order;
    ``topic_id`` names each topic of a v13+ response."""
    if not 4 <= version <= 17:
        raise ValueError(f"Fetch v{version} is not supported")
    by_id = version >= 13
    if by_id and topic_id is None:
        raise ValueError(f"Fetch v{version} names topics by id: topic_id is required")
    flexible = version >= 12
    head = bytearray()
    head += _I32.pack(correlation_id)
    if flexible:
        head += b"\0"  # response header v1: tagged fields
    head += _I32.pack(throttle_ms)
    if version >= 7:
        head += _I16_I32.pack(error_code, session_id)

    topics: list[tuple[str, list[PartitionData]]] = []
    for p in partitions:
        if topics and topics[-1][0] == p.topic:
            topics[-1][1].append(p)
        else:
            topics.append((p.topic, [p]))

    parts: list[ResponsePart] = []
    buf = head
    buf += array_len(len(topics), flexible)
    for name, plist in topics:
        buf += topic_id(name).bytes if by_id else string(name, flexible)  # type: ignore[misc]
        buf += array_len(len(plist), flexible)
        for p in plist:
            buf += _PART_FIXED.pack(
                p.partition, int(p.error_code), p.high_watermark, p.last_stable_offset
            )
            if version >= 5:
                buf += _I64.pack(p.log_start_offset)
            # aborted transactions: null unless read_committed
            if read_committed:
                buf += array_len(len(p.aborted), flexible)
                for producer_id, first_offset in p.aborted:
                    buf += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        buf += b"\0"
            else:
                buf += b"\0" if flexible else _I32.pack(-1)
            if version >= 11:
                buf += _I32.pack(p.preferred_read_replica)
            size = sum(r.length if isinstance(r, FileRegion) else len(r) for r in p.regions)
            buf += _uvarint(size + 1) if flexible else _I32.pack(size)
            if size:
                parts.append(bytes(buf))
                parts.extend(p.regions)
                buf = bytearray()
            if flexible:  # partition tagged fields: DivergingEpoch is tag 0
                if p.diverging_epoch is None:
                    buf += b"\0"
                else:
                    buf += _DIVERGING.pack(1, 0, _DIVERGING_SIZE, *p.diverging_epoch, 0)
        if flexible:
            buf += b"\0"  # topic tagged fields
    if flexible:
        buf += b"\0"  # response tagged fields
    parts.append(bytes(buf))
    total = frame_size(parts)
    parts[0] = _I32.pack(total) + parts[0]  # type: ignore[operator]
    return parts


def frame_size(parts: Sequence[ResponsePart]) -> int:
    return sum(p.length if isinstance(p, FileRegion) else len(p) for p in parts)
