"""Field readers for :mod:`common.protocol.reader`: Kafka's primitive types, each bounded.

Every reader is ``read(buf, pos, end) -> (value, next_pos)`` and raises
:class:`MalformedRequest` instead of reading past ``end``: fixed-size ints,
booleans, uuids, varints (at most 5 bytes, as Kafka's ``readUnsignedVarint``),
strings, bytes and records (legacy int16/int32 or compact varint lengths, -1 for
null only where the schema allows it), and arrays, whose element count is
bounded by the bytes that remain (Kafka's bound: no element is smaller than one
byte). Pure functions: thread-safe.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

__all__ = ["CONVERTERS", "FIXED", "Buffer", "MalformedRequest", "Reader", "array", "nullable_entity",
           "primitive", "read_uvarint", "short", "sized", "uvarint"]

Buffer = bytes | bytearray | memoryview
Reader = Callable[[Buffer, int, int], tuple[Any, int]]


class MalformedRequest(ValueError):
    """The bytes do not follow the request's schema (the connection is closed)."""


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_F64 = struct.Struct(">d")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MAX_TIMEDELTA_MS = 86_399_999_999_999_999  # just under timedelta.max


def short(what: str, need: int, pos: int, end: int) -> MalformedRequest:
    return MalformedRequest(f"{what} at byte {pos} needs {need} bytes, {max(end - pos, 0)} remain")


def _fixed(st: struct.Struct, what: str) -> Reader:
    size = st.size
    unpack = st.unpack_from

    def read(buf: Buffer, pos: int, end: int) -> tuple[Any, int]:
        if end - pos < size:
            raise short(what, size, pos, end)
        return unpack(buf, pos)[0], pos + size

    return read


_read_i8 = _fixed(_I8, "int8")
_read_i16 = _fixed(_I16, "int16")
_read_i32 = _fixed(_I32, "int32")
_read_i64 = _fixed(_I64, "int64")


def uvarint(value: int) -> bytes:
    """``value`` as an unsigned varint (Kafka's ``writeUnsignedVarint``)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's ``readUnsignedVarint``)."""
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise short("varint", 1, pos, end)
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value > 0x7FFFFFFF:
                raise MalformedRequest(f"varint {value} at byte {pos} is out of range")
            return value, pos
        shift += 7
        if shift > 28:
            raise MalformedRequest(f"varint at byte {pos} is longer than 5 bytes")


def _read_bool(buf: Buffer, pos: int, end: int) -> tuple[bool, int]:
    if pos >= end:
        raise short("boolean", 1, pos, end)
    return buf[pos] != 0, pos + 1


def _read_uuid(buf: Buffer, pos: int, end: int) -> tuple[uuid.UUID | None, int]:
    if end - pos < 16:
        raise short("uuid", 16, pos, end)
    raw = bytes(buf[pos : pos + 16])
    # kio's convention: the zero uuid reads as None
    return (None if raw == bytes(16) else uuid.UUID(bytes=raw)), pos + 16


def _length_reader(flexible: bool, wide: bool) -> Callable[[Buffer, int, int], tuple[int, int]]:
    """Length of a string/bytes/array: compact (varint n+1, so -1 is null) or legacy int16/int32."""
    if flexible:

        def read_compact(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
            if pos < end and buf[pos] < 0x80:  # one-byte varint: the common case, in line
                return buf[pos] - 1, pos + 1
            n, pos = read_uvarint(buf, pos, end)
            return n - 1, pos

        return read_compact
    st = _I32 if wide else _I16
    size = st.size
    unpack = st.unpack_from

    def read_legacy(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
        if end - pos < size:
            raise short("length", size, pos, end)
        return unpack(buf, pos)[0], pos + size

    return read_legacy


def _string_value(buf: Buffer, pos: int, stop: int) -> str:
    return str(buf[pos:stop], "utf-8", "replace")


def _bytes_value(buf: Buffer, pos: int, stop: int) -> bytes:
    return bytes(buf[pos:stop])


def _records_value(buf: Buffer, pos: int, stop: int) -> memoryview:
    """A view of the frame, not a copy: writable when the frame is (the server's are, so a
    Produce's batches are stamped where they arrived)."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    return view[pos:stop]


_SIZED_VALUES: dict[str, Callable[[Buffer, int, int], Any]] = {
    "string": _string_value,
    "bytes": _bytes_value,
    "records": _records_value,
}


def sized(kind: str, flexible: bool, nullable: bool) -> Reader:
    """string / bytes / records, compact or legacy, nullable or not."""
    read_length = _length_reader(flexible, wide=kind != "string")

    value = _SIZED_VALUES[kind]

    def null_or_bad(n: int, start: int) -> tuple[None, int]:
        if n == -1 and nullable:
            return None, start
        if n == -1:
            raise MalformedRequest(f"non-nullable {kind} at byte {start} is null")
        raise MalformedRequest(f"{kind} at byte {start} has negative length {n}")

    def read(buf: Buffer, pos: int, end: int) -> tuple[Any, int]:
        n, pos = read_length(buf, pos, end)
        if n < 0:
            return null_or_bad(n, pos)
        stop = pos + n
        if stop > end:
            raise short(kind, n, pos, end)
        return value(buf, pos, stop), stop

    return read


def _ms_timedelta(ms: int) -> datetime.timedelta:
    if -_MAX_TIMEDELTA_MS <= ms <= _MAX_TIMEDELTA_MS:
        return datetime.timedelta(milliseconds=ms)
    # an int64 beyond what timedelta holds (~2.7 million years): as good as forever
    return datetime.timedelta.max if ms > 0 else datetime.timedelta.min


def _timedelta(read_int: Reader) -> Reader:
    def read(buf: Buffer, pos: int, end: int) -> tuple[datetime.timedelta, int]:
        ms, pos = read_int(buf, pos, end)
        return _ms_timedelta(ms), pos

    return read


def _datetime(nullable: bool) -> Reader:
    def read(buf: Buffer, pos: int, end: int) -> tuple[datetime.datetime | None, int]:
        ms, pos = _read_i64(buf, pos, end)
        if ms == -1 and nullable:
            return None, pos
        try:
            return _EPOCH + datetime.timedelta(milliseconds=ms), pos
        except OverflowError:
            raise MalformedRequest(f"timestamp {ms} at byte {pos - 8} is out of range") from None

    return read


def _to_error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        raise MalformedRequest(f"unknown error code {code}") from None


def _error_code(buf: Buffer, pos: int, end: int) -> tuple[ErrorCode, int]:
    code, pos = _read_i16(buf, pos, end)
    return _to_error_code(code), pos


def primitive(kafka_type: str, flexible: bool, nullable: bool) -> Reader:
    match kafka_type:
        case "int8":
            return _read_i8
        case "int16":
            return _read_i16
        case "int32":
            return _read_i32
        case "int64":
            return _read_i64
        case "uint8":
            return _fixed(_U8, "uint8")
        case "uint16":
            return _fixed(_U16, "uint16")
        case "uint32":
            return _fixed(_U32, "uint32")
        case "uint64":
            return _fixed(_U64, "uint64")
        case "float64":
            return _fixed(_F64, "float64")
        case "bool":
            return _read_bool
        case "uuid":
            return _read_uuid
        case "string" | "bytes" | "records":
            return sized(kafka_type, flexible, nullable)
        case "error_code":
            return _error_code
        case "timedelta_i32":
            return _timedelta(_read_i32)
        case "timedelta_i64":
            return _timedelta(_read_i64)
        case "datetime_i64":
            return _datetime(nullable)
    raise NotImplementedError(f"no reader for Kafka type {kafka_type!r}")


def array(item: Reader, flexible: bool, nullable: bool, name: str) -> Reader:
    read_length = _length_reader(flexible, wide=True)

    def read(buf: Buffer, pos: int, end: int) -> tuple[tuple[Any, ...] | None, int]:
        n, pos = read_length(buf, pos, end)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            if n == -1:
                raise MalformedRequest(f"non-nullable array {name!r} before byte {pos} is null")
            raise MalformedRequest(f"array {name!r} before byte {pos} has negative length {n}")
        # Kafka's bound: no element is smaller than one byte
        if n > end - pos:
            raise MalformedRequest(
                f"array {name!r} before byte {pos} claims {n} elements, only {end - pos} bytes remain"
            )
        items: list[Any] = []
        append = items.append
        for _ in range(n):
            value, pos = item(buf, pos, end)
            append(value)
        return tuple(items), pos

    return read


def nullable_entity(read_entity: Reader) -> Reader:
    """KIP-893 nullable struct: an int8 marker, negative for null."""

    def read(buf: Buffer, pos: int, end: int) -> tuple[Any, int]:
        marker, pos = _read_i8(buf, pos, end)
        if marker < 0:
            return None, pos
        return read_entity(buf, pos, end)

    return read


# Fixed-size primitives: struct code and the converter applied to the raw value.
FIXED: dict[str, tuple[str, str | None]] = {
    "int8": ("b", None),
    "int16": ("h", None),
    "int32": ("i", None),
    "int64": ("q", None),
    "uint8": ("B", None),
    "uint16": ("H", None),
    "uint32": ("I", None),
    "uint64": ("Q", None),
    "float64": ("d", None),
    "bool": ("B", "_bool"),
    "uuid": ("16s", "_uuid"),
    "timedelta_i32": ("i", "_td"),
    "timedelta_i64": ("q", "_td"),
    "error_code": ("h", "_err"),
}


def _convert_uuid(raw: bytes) -> uuid.UUID | None:
    return None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)


_ZERO_UUID = bytes(16)
CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "_bool": lambda byte: byte != 0,
    "_uuid": _convert_uuid,
    "_td": _ms_timedelta,
    "_err": _to_error_code,
}
