"""A bounds-checked reader of Kafka request frames, compiled from kio's schemas.

kio's native decoder trusts the wire: an array length of 2^31 makes it reserve
that many elements before reading one (the process aborts trying to allocate
~189 GB), and an unknown tagged field raises ``KeyError``. This reader builds the
same kio entities from the same schemas, but

* every length (legacy and compact arrays, strings, bytes, records, tagged-field
  sizes and counts) is checked against the bytes remaining before anything is
  read or allocated, as Kafka's generated ``read`` methods do; a violation is a
  :class:`MalformedRequest`, never a large allocation;
* unknown tagged fields are skipped (KIP-482: a receiver ignores tags it does
  not know), so newer clients can add fields;
* null in a field the schema says is not nullable is a :class:`MalformedRequest`
  (Kafka: "non-nullable field ... was serialized as null"), so handlers never
  meet ``None`` where the schema promises a value;
* strings that are not valid UTF-8 are decoded with replacement characters, as
  Java's ``new String(bytes, UTF_8)`` in Kafka's broker does;
* ``records`` fields come back as read-only ``memoryview`` slices of the frame
  (no copy; the frame lives until the handler is done).

Readers are compiled once per entity class into closures ``read(buf, pos, end)
-> (value, next_pos)``; ``end`` bounds every read (a tagged field is read
within its declared size). Pure functions of their input: thread-safe.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable
from dataclasses import MISSING, Field, fields
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

__all__ = ["MalformedRequest", "read_entity", "request_reader"]

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


def _short(what: str, need: int, pos: int, end: int) -> MalformedRequest:
    return MalformedRequest(f"{what} at byte {pos} needs {need} bytes, {max(end - pos, 0)} remain")


def _fixed(st: struct.Struct, what: str) -> Reader:
    size = st.size
    unpack = st.unpack_from

    def read(buf: Buffer, pos: int, end: int) -> tuple[Any, int]:
        if end - pos < size:
            raise _short(what, size, pos, end)
        return unpack(buf, pos)[0], pos + size

    return read


_read_i8 = _fixed(_I8, "int8")
_read_i16 = _fixed(_I16, "int16")
_read_i32 = _fixed(_I32, "int32")
_read_i64 = _fixed(_I64, "int64")


def read_uvarint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's ``readUnsignedVarint``)."""
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise _short("varint", 1, pos, end)
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
        raise _short("boolean", 1, pos, end)
    return buf[pos] != 0, pos + 1


def _read_uuid(buf: Buffer, pos: int, end: int) -> tuple[uuid.UUID | None, int]:
    if end - pos < 16:
        raise _short("uuid", 16, pos, end)
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
            raise _short("length", size, pos, end)
        return unpack(buf, pos)[0], pos + size

    return read_legacy


def _string_value(buf: Buffer, pos: int, stop: int) -> str:
    return str(buf[pos:stop], "utf-8", "replace")


def _bytes_value(buf: Buffer, pos: int, stop: int) -> bytes:
    return bytes(buf[pos:stop])


def _records_value(buf: Buffer, pos: int, stop: int) -> memoryview:
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    return view[pos:stop].toreadonly()


_SIZED_VALUES: dict[str, Callable[[Buffer, int, int], Any]] = {
    "string": _string_value,
    "bytes": _bytes_value,
    "records": _records_value,
}


def _sized(kind: str, flexible: bool, nullable: bool) -> Reader:
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
            raise _short(kind, n, pos, end)
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


def _primitive(kafka_type: str, flexible: bool, nullable: bool) -> Reader:
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
            return _sized(kafka_type, flexible, nullable)
        case "error_code":
            return _error_code
        case "timedelta_i32":
            return _timedelta(_read_i32)
        case "timedelta_i64":
            return _timedelta(_read_i64)
        case "datetime_i64":
            return _datetime(nullable)
    raise NotImplementedError(f"no reader for Kafka type {kafka_type!r}")


def _array(item: Reader, flexible: bool, nullable: bool, name: str) -> Reader:
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


def _nullable_entity(read_entity: Reader) -> Reader:
    """KIP-893 nullable struct: an int8 marker, negative for null."""

    def read(buf: Buffer, pos: int, end: int) -> tuple[Any, int]:
        marker, pos = _read_i8(buf, pos, end)
        if marker < 0:
            return None, pos
        return read_entity(buf, pos, end)

    return read


def _field_reader(f: Field[Any], flexible: bool, is_header: bool, tagged: bool) -> Reader:
    # RequestHeader.client_id is a legacy string even in flexible header versions.
    if is_header and f.name == "client_id":
        return _sized("string", False, True)
    nullable = is_optional(f)
    shape = classify_field(f)
    if isinstance(shape, EntityTupleField):
        return _array(entity_reader(shape.type_), flexible, nullable, f.name)
    if isinstance(shape, EntityField):
        read = entity_reader(shape.type_)
        return _nullable_entity(read) if nullable and not tagged else read
    item = _primitive(get_schema_field_type(f), flexible, False if isinstance(shape, PrimitiveTupleField) else nullable)
    if isinstance(shape, PrimitiveTupleField):
        return _array(item, flexible, nullable, f.name)
    return item


# Fixed-size primitives: struct code and the converter applied to the raw value.
_FIXED: dict[str, tuple[str, str | None]] = {
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
_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "_bool": lambda byte: byte != 0,
    "_uuid": _convert_uuid,
    "_td": _ms_timedelta,
    "_err": _to_error_code,
}


def _fixed_code(f: Field[Any], tagged: bool) -> tuple[str, str | None] | None:
    """(struct code, converter) when ``f`` is a fixed-size scalar read in line."""
    if tagged or classify_field(f).is_array or isinstance(classify_field(f), EntityField):
        return None
    return _FIXED.get(get_schema_field_type(f))


@cache
def entity_reader(cls: type) -> Reader:
    """The reader of one kio entity class (request, header or nested struct).

    Generated as straight-line Python, like :mod:`dataclasses` generates
    ``__init__``: runs of fixed-size fields are read with one ``struct`` call
    after one bounds check, other fields through the readers above, and the
    entity is filled through its slots (a frozen dataclass's ``__init__``
    costs several times more). kio's native reader did all this in Rust; this
    one is about as fast as the native one was on Produce and within a few
    microseconds on the rest (tests/service/test_request_reader.py checks they
    agree on every advertised request).
    """
    flexible = bool(cls.__flexible__)
    is_header = cls.__name__ == "RequestHeader"
    name = cls.__qualname__
    ns: dict[str, Any] = {
        "new": object.__new__,
        "cls": cls,
        "short": _short,
        "read_tagged": _tagged_reader(cls, is_header),
        **_CONVERTERS,
    }
    lines = ["def read(buf, pos, end):"]
    run: list[tuple[str, str, str | None]] = []  # (variable, struct code, converter)
    slots: list[tuple[str, str]] = []  # (field name, variable)

    def flush_run() -> None:
        if not run:
            return
        st = struct.Struct(">" + "".join(code for _, code, _ in run))
        key = f"S{len(ns)}"
        ns[key] = st.unpack_from
        names = ", ".join(v for v, _, _ in run)
        lines.append(f"    if end - pos < {st.size}:")
        lines.append(f"        raise short({name + ' fields'!r}, {st.size}, pos, end)")
        lines.append(f"    {names}, = {key}(buf, pos)")
        lines.append(f"    pos += {st.size}")
        for var, _, conv in run:
            if conv is not None:
                lines.append(f"    {var} = {conv}({var})")
        run.clear()

    tagged_fields: list[tuple[int, str, Any]] = []
    for index, f in enumerate(fields(cls)):
        var = f"v{index}"
        slots.append((f.name, var))
        tag = get_field_tag(f)
        if tag is not None:
            tagged_fields.append((int(tag), var, _tag_default(f)))
            continue
        fixed = None if (is_header and f.name == "client_id") else _fixed_code(f, False)
        if fixed is not None:
            run.append((var, *fixed))
            continue
        flush_run()
        key = f"R{index}"
        ns[key] = _field_reader(f, flexible, is_header, False)
        lines.append(f"    {var}, pos = {key}(buf, pos, end)")
    flush_run()
    if flexible:
        for _, var, default in tagged_fields:
            ns[f"D{var}"] = default
        lines.append("    if pos < end and buf[pos] == 0:")
        lines.append("        pos += 1")
        lines.append("        found = None")
        lines.append("    else:")
        lines.append("        found, pos = read_tagged(buf, pos, end)")
        for tag_id, var, _ in tagged_fields:
            lines.append(f"    {var} = found.get({tag_id}, D{var}) if found else D{var}")
    lines.append("    o = new(cls)")
    for field_name, var in slots:
        key = f"set_{var}"
        ns[key] = cls.__dict__[field_name].__set__
        lines.append(f"    {key}(o, {var})")
    lines.append("    return o, pos")
    exec("\n".join(lines), ns)  # noqa: S102 - source built above from the schema only
    return ns["read"]  # type: ignore[no-any-return]


def _tag_default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return get_tagged_field_default(f)


def _tagged_reader(cls: type, is_header: bool) -> Callable[[Buffer, int, int], tuple[dict[int, Any], int]]:
    """Reads a tagged-field section: known tags by their reader, unknown ones skipped."""
    known: dict[int, Reader] = {}
    if cls.__flexible__:
        for f in fields(cls):
            tag = get_field_tag(f)
            if tag is not None:
                known[int(tag)] = _field_reader(f, True, is_header, True)
    name = cls.__qualname__

    def read_tagged(buf: Buffer, pos: int, end: int) -> tuple[dict[int, Any], int]:
        count, pos = read_uvarint(buf, pos, end)
        if count > end - pos:  # each tagged field takes at least two bytes
            raise MalformedRequest(f"{name}: {count} tagged fields cannot fit in {end - pos} bytes")
        found: dict[int, Any] = {}
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos, end)
            size, pos = read_uvarint(buf, pos, end)
            if size > end - pos:
                raise _short(f"{name} tagged field {tag}", size, pos, end)
            stop = pos + size
            read_field = known.get(tag)
            if read_field is not None:
                value, after = read_field(buf, pos, stop)
                if after != stop:
                    raise MalformedRequest(
                        f"{name} tagged field {tag} declares {size} bytes, its value has {after - pos}"
                    )
                found[tag] = value
            pos = stop  # an unknown tag is skipped (KIP-482)
        return found, pos

    return read_tagged


def read_entity(cls: type, buf: Buffer, pos: int = 0) -> tuple[Any, int]:
    """Read one ``cls`` entity from ``buf`` at ``pos``; returns ``(entity, bytes used)``."""
    value, end = entity_reader(cls)(buf, pos, len(buf))
    return value, end - pos


def request_reader(cls: type) -> Callable[[Buffer, int], tuple[Any, int]]:
    """``read(buf, pos) -> (entity, next_pos)`` for a request or header class."""
    read = entity_reader(cls)

    def read_request(buf: Buffer, pos: int) -> tuple[Any, int]:
        return read(buf, pos, len(buf))

    return read_request
