"""Zigzag varints as Kafka's record format (v2) uses them; private to :mod:`common.record.batch`."""

from __future__ import annotations

__all__ = ["read_varint", "write_varint"]


def write_varint(value: int, out: bytearray) -> None:
    """Append ``value`` as a zigzag-encoded varint (varlong range)."""
    zigzag = (value << 1) ^ (value >> 63)
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def read_varint(
    buf: bytes | bytearray | memoryview, pos: int, end: int | None = None, max_bytes: int = 10
) -> tuple[int, int]:
    """Decode the zigzag varint at ``pos`` ending by ``end`` (default: the buffer's end).

    Returns ``(value, next_pos)``. Raises IndexError on a truncated varint and
    ValueError on one longer than ``max_bytes`` (10: varlong; 5: varint); the
    caller translates both.
    """
    stop = len(buf) if end is None else end
    result = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= stop:
            raise IndexError("varint runs past the end")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise ValueError("varint is too long")
