"""Sans-I/O Kafka protocol layer: frames in, typed requests out; responses to bytes.

Request and response bodies are kio entities (generated from Kafka's own JSON
message schemas), so every version's layout, flexible encoding (compact arrays,
tagged fields) and header version come from the schema, not from hand-written
tables. The one exception is the Fetch response, which :mod:`fetch.response`
writes by hand so that record data can be sent with ``sendfile``.

Requests are decoded by :mod:`common.protocol.reader`, which bounds every length
by the bytes that remain and skips unknown tagged fields; kio's native decoder
is never given bytes from the wire (a forged array length makes it abort the
process).

Nothing here does I/O or imports asyncio.
"""

from __future__ import annotations

import datetime
import io
import struct
import sys
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields, replace
from functools import cache
from typing import Any, NamedTuple

from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from common.protocol.fields import uvarint as _uvarint
from common.protocol.reader import request_reader

__all__ = [
    "FrameError",
    "RequestHeader",
    "SplicedResponse",
    "build",
    "encode_entity",
    "decode_request",
    "encode_response",
    "error_response",
    "load_schemas",
    "peek_api",
    "response_module",
]

_I16_I16_I32 = struct.Struct(">hhi")
_I32 = struct.Struct(">i")


class FrameError(Exception):
    """The bytes are not a request we can answer; the connection is closed."""


class RequestHeader(NamedTuple):  # one per request (a tuple: cheap to build)
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    flexible: bool


def peek_api(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame (without its size prefix)."""
    if len(frame) < 8:
        raise FrameError(f"request of {len(frame)} bytes is shorter than a request header")
    return _I16_I16_I32.unpack_from(frame, 0)


@cache
def _request_reader(api_key: int, version: int) -> tuple[Callable[..., Any], Callable[..., Any], bool]:
    schema = load_request_schema(api_key, version)
    header_schema = schema.__header_schema__
    return request_reader(header_schema), request_reader(schema), bool(schema.__flexible__)


def decode_request(frame: bytes | memoryview) -> tuple[RequestHeader, Any]:
    """Decode header and body of a request whose api key and version are supported."""
    api_key, version, _ = peek_api(frame)
    read_header, read_body, flexible = _request_reader(api_key, version)
    try:
        header, header_end = read_header(frame, 0)
        body, _ = read_body(frame, header_end)
    except ValueError as exc:  # MalformedRequest, and nothing else is expected
        raise FrameError(f"malformed request (api {api_key} v{version}): {exc}") from exc
    # Trailing bytes are ignored, as Kafka does: librdkafka 2.x sends a few after
    # Metadata v12 (fields of newer versions).
    return (
        RequestHeader(api_key, version, header.correlation_id, header.client_id, flexible),
        body,
    )


@cache
def response_module(api_key: int, version: int) -> types.ModuleType:
    """The kio module holding the response entity and its nested entities."""
    return sys.modules[load_response_schema(api_key, version).__module__]


@cache
def _response_writer(api_key: int, version: int) -> tuple[Callable[..., Any], bool]:
    schema = load_response_schema(api_key, version)
    # ApiVersions answers with header v0 even in flexible versions (KIP-511).
    header_flexible = schema.__header_schema__.__module__.endswith(".v1.header")
    return entity_writer(schema), header_flexible


def load_schemas(api_key: int, version: int, request: bool = True) -> None:
    """Import and compile what a request of ``api_key`` v``version`` needs (its request reader
    when ``request``, its response writer and module): done once a process, the first time
    takes milliseconds to tens of milliseconds (kio's generated modules are imported and their
    dataclasses built), so the broker runs it on a worker thread before the request reaches the
    event loop. Versions kio has no schema for are left to their hand-written codecs."""
    for load in (_request_reader, _response_writer, response_module)[0 if request else 1:]:
        try:
            load(api_key, version)
        except UnknownEntity:
            pass


def encode_response(header: RequestHeader, body: Any) -> bytes:
    """Size-prefixed response frame: size, correlation id, [tagged fields], body."""
    write, header_flexible = _response_writer(header.api_key, header.api_version)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    buf.write(_I32.pack(header.correlation_id))
    if header_flexible:
        buf.write(b"\0")  # empty tagged fields
    write(buf, body)
    data = buf.getbuffer()
    _I32.pack_into(data, 0, len(data) - 4)
    return buf.getvalue()


@cache
def _entity_writer(entity_type: type) -> Callable[..., Any]:
    return entity_writer(entity_type)


def encode_entity(entity: Any) -> bytes:
    """The bytes of one entity of a response (a topic of a Metadata answer...), as they
    appear inside the response: for callers that keep them and splice them in later."""
    buf = io.BytesIO()
    _entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


@dataclass(frozen=True, slots=True)
class SplicedResponse:
    """A response whose last array field is given as entities already encoded
    (:func:`encode_entity`): ``body`` has that array empty, and ``suffix`` is how many
    bytes of ``body``'s encoding follow the array (the fields after it, tagged fields).
    A large answer made of parts that rarely change (the topics of a Metadata answer at
    10,000 partitions) costs a join of cached bytes instead of encoding every field."""

    body: Any
    items: tuple[bytes, ...]
    flexible: bool
    suffix: int
    throttle_time: datetime.timedelta = datetime.timedelta(0)

    def encode(self, header: RequestHeader) -> bytes:
        body = self.body if not self.throttle_time else replace(self.body, throttle_time=self.throttle_time)
        frame = encode_response(header, body)
        empty = 1 if self.flexible else 4  # the empty array's length: varint 1 (n + 1), or int32 0
        cut = len(frame) - self.suffix
        count = _uvarint(len(self.items) + 1) if self.flexible else _I32.pack(len(self.items))
        out = b"".join((frame[: cut - empty], count, *self.items, frame[cut:]))
        return _I32.pack(len(out) - 4) + out[4:]


# ---------------------------------------------------------------------------
# Building response entities across versions


def _ms_to_timedelta(value: Any) -> Any:
    return datetime.timedelta(milliseconds=value) if isinstance(value, int) else value


def _ms_to_datetime(value: Any) -> Any:
    if isinstance(value, int):
        if value < 0:
            return None
        return datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)
    return value


_CONVERT: Mapping[str, Callable[[Any], Any]] = {
    "timedelta_i32": _ms_to_timedelta,
    "timedelta_i64": _ms_to_timedelta,
    "datetime_i64": _ms_to_datetime,
    "error_code": lambda v: ErrorCode(v) if isinstance(v, int) else v,
}


@cache
def _field_plan(cls: type) -> tuple[tuple[str, str | None, bool, bool, bool], ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for f in fields(cls):
        required = f.default is MISSING and f.default_factory is MISSING
        hint = hints.get(f.name)
        is_tuple = typing.get_origin(hint) is tuple
        nullable = type(None) in typing.get_args(hint)
        plan.append((f.name, f.metadata.get("kafka_type"), required, is_tuple, nullable))
    return tuple(plan)


def build(cls: type, **values: Any) -> Any:
    """Make a kio entity of any version from plain values.

    Values for fields this version lacks are dropped; missing required tuples
    default to ``()``, missing required nullable fields (strings, arrays, structs
    that the schema lets be null, such as CreateTopics v5+'s ``configs``) to
    ``None``; milliseconds become ``timedelta``/``datetime`` where the schema says
    so (``-1`` timestamps become null).
    """
    kwargs: dict[str, Any] = {}
    for name, kafka_type, required, is_tuple, nullable in _field_plan(cls):
        if name in values:
            value = values[name]
            convert = _CONVERT.get(kafka_type or "")
            kwargs[name] = convert(value) if convert is not None else value
        elif required and is_tuple:
            kwargs[name] = ()
        elif required and (nullable or kafka_type == "datetime_i64"):
            kwargs[name] = None
    return cls(**kwargs)


_INT_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint16", "uint32", "timedelta_i32", "timedelta_i64"})


def error_response(api_key: int, version: int, code: int, message: str | None = None) -> Any:
    """A response of ``api_key`` at ``version`` that only says ``code`` (Kafka's
    ``AbstractRequest.getErrorResponse`` for a request refused whole, such as an
    authorization failure): the top-level ``error_code`` (and ``error_message``), ids and
    epochs -1, everything else empty. APIs with per-item errors only must answer in
    their handler instead."""
    return _empty_entity(load_response_schema(api_key, version), code, message)


def _empty_entity(cls: type, code: int, message: str | None) -> Any:
    values: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if f.default is not MISSING or f.default_factory is not MISSING:
            continue
        kind = f.metadata.get("kafka_type")
        hint = hints.get(f.name)
        nullable = type(None) in typing.get_args(hint)
        if f.name == "error_code":
            values[f.name] = code
        elif f.name == "error_message":
            values[f.name] = message
        elif typing.get_origin(hint) is tuple:
            values[f.name] = ()
        elif nullable:
            values[f.name] = None
        elif _is_entity(hint):
            values[f.name] = _empty_entity(hint, code, message)
        elif kind in _INT_TYPES:
            values[f.name] = -1 if f.name.endswith(("_id", "epoch")) or "generation" in f.name else 0
        elif kind == "bool":
            values[f.name] = False
        elif kind == "bytes":
            values[f.name] = b""
        elif kind == "uuid":
            values[f.name] = uuid.UUID(int=0)
        elif kind == "float64":
            values[f.name] = 0.0
        else:
            values[f.name] = ""
    return build(cls, **values)


def _is_entity(hint: Any) -> bool:
    return isinstance(hint, type) and hasattr(hint, "__dataclass_fields__")


_ONE_MS = datetime.timedelta(milliseconds=1)


def timedelta_to_ms(value: datetime.timedelta | int) -> int:
    if isinstance(value, datetime.timedelta):  # exact: total_seconds() * 1000 loses a millisecond (64.076 s)
        return value // _ONE_MS
    return int(value)
