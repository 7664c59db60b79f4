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
within its declared size). The readers of single fields are
:mod:`common.protocol.fields`. Pure functions of their input: thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import MISSING, Field, fields
from functools import cache
from typing import Any, cast

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

from common.protocol.fields import (
    CONVERTERS,
    FIXED,
    Buffer,
    MalformedRequest,
    Reader,
    array,
    nullable_entity,
    primitive,
    read_uvarint,
    short,
    sized,
)

__all__ = ["MalformedRequest", "entity_reader", "request_reader"]

def _field_reader(f: Field[Any], flexible: bool, is_header: bool, tagged: bool) -> Reader:
    # RequestHeader.client_id is a legacy string even in flexible header versions.
    if is_header and f.name == "client_id":
        return sized("string", False, True)
    nullable = is_optional(f)
    shape = classify_field(f)
    if isinstance(shape, EntityTupleField):
        return array(entity_reader(shape.type_), flexible, nullable, f.name)
    if isinstance(shape, EntityField):
        read = entity_reader(shape.type_)
        return nullable_entity(read) if nullable and not tagged else read
    item = primitive(get_schema_field_type(f), flexible, False if isinstance(shape, PrimitiveTupleField) else nullable)
    if isinstance(shape, PrimitiveTupleField):
        return array(item, flexible, nullable, f.name)
    return item


def _fixed_code(f: Field[Any], tagged: bool) -> tuple[str, str | None] | None:
    """(struct code, converter) when ``f`` is a fixed-size scalar read in line."""
    if tagged or classify_field(f).is_array or isinstance(classify_field(f), EntityField):
        return None
    return FIXED.get(get_schema_field_type(f))


@cache
def entity_reader(cls: type) -> Reader:
    """The reader of one kio entity class (request, header or nested struct).

    Generated as straight-line Python, like :mod:`dataclasses` generates
    ``__init__``: runs of fixed-size fields are read with one ``struct`` call
    after one bounds check, other fields through the readers above, and the
    entity is filled through its slots (a frozen dataclass's ``__init__``
    costs several times more). kio's native reader did all this in Rust; this
    one is about as fast as the native one was on Produce and within a few
    microseconds on the rest (tests/common/protocol/test_reader.py checks they
    agree on every advertised request).
    """
    flexible = _flexible(cls)
    is_header = cls.__name__ == "RequestHeader"
    name = cls.__qualname__
    ns: dict[str, Any] = {
        "new": object.__new__,
        "cls": cls,
        "short": short,
        "read_tagged": _tagged_reader(cls, is_header),
        **CONVERTERS,
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


def _flexible(cls: type) -> bool:
    return bool(cast(Any, cls).__flexible__)


def _tag_default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return get_tagged_field_default(f)


def _tagged_reader(cls: type, is_header: bool) -> Callable[[Buffer, int, int], tuple[dict[int, Any], int]]:
    """Reads a tagged-field section: known tags by their reader, unknown ones skipped."""
    known: dict[int, Reader] = {}
    if _flexible(cls):
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
                raise short(f"{name} tagged field {tag}", size, pos, end)
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


def request_reader(cls: type) -> Callable[[Buffer, int], tuple[Any, int]]:
    """``read(buf, pos) -> (entity, next_pos)`` for a request or header class."""
    read = entity_reader(cls)

    def read_request(buf: Buffer, pos: int) -> tuple[Any, int]:
        return read(buf, pos, len(buf))

    return read_request
