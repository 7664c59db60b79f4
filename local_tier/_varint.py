"""Zigzag varints as Kafka's record format (v2) uses them; private to :mod:`local_tier.records`."""

from __future__ import annotations

__all__ = ["read_varint", "write_varint"]


def write_varint(value: int, out: bytearray) -> None:
    """Append ``value`` as a zigzag-encoded varint (varlong range)."""
    zigzag = (value << 1) ^ (value >> 63)
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode the zigzag varint at ``pos``; returns ``(value, next_pos)``.

    Raises IndexError on a truncated buffer and ValueError on a varint longer than
    10 bytes; the caller translates both.
    """
    result = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint is too long")
