"""What Strata's own inter-broker APIs share: the frame, JSON bodies, errors, who may send.

They ride the one listener brokers already talk on (ADR 0027, "On the wire"): an API key
of 32000 and up, version 0, never listed in ApiVersions (a client never sees them); a
Kafka request header v1 and a JSON body; the answer a Kafka response header v0 (the
correlation id) and a JSON body, ``{"error": code, "message": ...}`` when refused. Only a
principal allowed CLUSTER_ACTION may send them, as follower fetches. The senders use
:meth:`service.cluster.channel.BrokerChannel.request_raw`.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import orjson

from common.errors import ErrorCode, KafkaError
from common.protocol.codec import FrameError
from service.cluster.wire import error_for

if TYPE_CHECKING:
    from service.network.server import Connection
    from service.security.authorizer import Authorizer

__all__ = [
    "RpcFormatError",
    "answer_frame",
    "error_answer",
    "error_of",
    "int_field",
    "load_object",
    "open_request",
]

_HEAD = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_I32 = struct.Struct(">i")


class RpcFormatError(ValueError):
    """A body that is not what this broker writes."""


def load_object(body: bytes | memoryview, what: str) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise RpcFormatError(f"{what} is not JSON: {err}") from err
    if not isinstance(doc, dict):
        raise RpcFormatError(f"{what} is not a JSON object")
    return doc


def int_field(doc: dict[str, Any], name: str, what: str) -> int:
    value = doc.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise RpcFormatError(f"{what}: {name} is not an integer")
    return value


def error_of(doc: dict[str, Any]) -> KafkaError:
    """The error an ``{"error": code, "message": ...}`` answer names."""
    code = doc.get("error")
    message = doc.get("message")
    if not isinstance(code, int) or isinstance(code, bool) or code == 0:
        raise RpcFormatError(f"a malformed error answer: {doc!r}")
    return error_for(code, message if isinstance(message, str) else None) or KafkaError(str(code))


def answer_frame(correlation_id: int, body: bytes) -> bytes:
    return _I32.pack(4 + len(body)) + _I32.pack(correlation_id) + body


def error_answer(correlation_id: int, code: ErrorCode, message: str) -> bytes:
    return answer_frame(correlation_id, orjson.dumps({"error": int(code), "message": message}))


def open_request(frame: bytes | memoryview, conn: Connection | None, authorizer: Authorizer | None,
                 what: str) -> tuple[int, int, memoryview, bytes | None]:
    """A request frame (without its size prefix) as its API key, correlation id and body,
    and the answer refusing it when its sender may not send ``what`` (a plural: "diskless
    requests"), else None."""
    from service.security.acls import CLUSTER_NAME, AclOperation, ResourceType

    if len(frame) < _HEAD.size:
        raise FrameError(f"{what}: a frame shorter than its header")
    api_key, _, correlation_id, client_len = _HEAD.unpack_from(frame, 0)
    body = memoryview(frame)[_HEAD.size + max(0, client_len):]
    refused = None
    if conn is not None and authorizer is not None and not authorizer.authorize(
            conn.session.principal, conn.session.client_host, AclOperation.CLUSTER_ACTION,
            ResourceType.CLUSTER, CLUSTER_NAME):
        refused = error_answer(correlation_id, ErrorCode.cluster_authorization_failed,
                               f"{what} are for brokers (CLUSTER_ACTION)")
    return api_key, correlation_id, body, refused
