"""The client side of Kafka's protocol, for one broker talking to another: requests
to bytes, response frames to kio entities, error codes to exceptions.

The server side (:mod:`common.protocol.codec`) decodes requests and encodes
responses; this is the mirror image, with the same kio schemas, so a request a
broker sends is exactly what a Kafka client would send. Sans I/O.
"""

from __future__ import annotations

import io
import struct
import sys
import types
from collections import deque
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from common.errors import ErrorCode, KafkaError

__all__ = [
    "ResponseError",
    "decode_response",
    "encode_request",
    "error_for",
    "raise_for",
    "request_module",
]

_I32 = struct.Struct(">i")


class ResponseError(Exception):
    """A response frame that cannot be decoded (the connection is then closed)."""


@cache
def request_module(api_key: int, version: int) -> types.ModuleType:
    """The kio module holding the request entity of ``api_key`` v``version`` and its parts."""
    return sys.modules[load_request_schema(api_key, version).__module__]


@cache
def _request_writer(api_key: int, version: int) -> tuple[Callable[..., Any], Any, Callable[..., Any]]:
    schema = load_request_schema(api_key, version)
    header = schema.__header_schema__
    return entity_writer(header), header, entity_writer(schema)


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, body: Any
) -> bytes:
    """A size-prefixed request frame: size, header (v1 or v2 as the schema says), body."""
    write_header, header_cls, write_body = _request_writer(api_key, version)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    write_header(
        buf,
        header_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    write_body(buf, body)
    data = buf.getbuffer()
    _I32.pack_into(data, 0, len(data) - 4)
    return buf.getvalue()


@cache
def _response_reader(api_key: int, version: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    schema = load_response_schema(api_key, version)
    return entity_reader(schema.__header_schema__), entity_reader(schema)


def decode_response(api_key: int, version: int, payload: bytes | memoryview) -> Any:
    """The body of a response frame (without its size prefix) to ``api_key`` v``version``."""
    read_header, read_body = _response_reader(api_key, version)
    try:
        _, header_size = read_header(payload, 0)
        body, body_size = read_body(payload, header_size)
    except (SerialError, ValueError, TypeError, IndexError, struct.error, UnicodeDecodeError) as exc:
        raise ResponseError(f"malformed response (api {api_key} v{version}): {exc}") from exc
    if header_size + body_size > len(payload):
        raise ResponseError(f"malformed response (api {api_key} v{version}): truncated")
    return body


@cache
def _error_class(code: int) -> type[KafkaError]:
    """The KafkaError subclass for ``code`` closest to KafkaError (breadth first), searched
    across every module that defined one (local_tier, controller, groups)."""
    pending: deque[type[KafkaError]] = deque([KafkaError])
    while pending:
        for sub in pending.popleft().__subclasses__():
            if getattr(sub, "code", None) == code:
                return sub
            pending.append(sub)
    return KafkaError


def error_for(code: int | ErrorCode, message: str | None = None) -> KafkaError | None:
    """The exception a response's error code stands for (None for NONE); a code with no
    class of its own is a ``KafkaError`` carrying that code."""
    value = int(code)
    if value == 0:
        return None
    cls = _error_class(value)
    error = cls(message or ErrorCode(value).name.upper())
    if cls is KafkaError:
        error.code = ErrorCode(value)
    return error


def raise_for(code: int | ErrorCode, message: str | None = None) -> None:
    """Raise :func:`error_for` of ``code`` unless it is NONE."""
    error = error_for(code, message)
    if error is not None:
        raise error
