"""OutageHold, an inter-broker API of Strata's own (ADR 0031): a broker that cannot read
the controller lease tells the controller so, and learns whether it holds the cluster as
it is through the bucket outage.

API key :data:`OUTAGE_HOLD` (:mod:`service.cluster.own_apis`: the frame, JSON bodies, only
a principal allowed CLUSTER_ACTION). The request is ``{"broker", "broker_epoch",
"revision", "token"}``: the sender, its registration's epoch, the metadata revision it has
loaded and the token of the controller's last answer to it (0: none). The answer is
``{"hold": bool, "token": int, "grant_ms": int}`` (how long from its request the broker
may lead on a "hold"), or an error (NOT_CONTROLLER on a broker with no
controller role). Codec functions are pure; :func:`serve` answers on the event loop and
never blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from common.errors import ErrorCode
from service.cluster.own_apis import (
    RpcFormatError,
    answer_frame,
    error_answer,
    error_of,
    int_field,
    load_object,
    open_request,
)

if TYPE_CHECKING:
    from service.network.server import Connection
    from service.security.authorizer import Authorizer

__all__ = ["OUTAGE_HOLD", "HoldRequest", "RpcFormatError", "decode_answer", "decode_request", "encode_answer",
           "encode_request", "serve"]

OUTAGE_HOLD = 32002


@dataclass(frozen=True, slots=True)
class HoldRequest:
    broker: int
    broker_epoch: int
    revision: int
    token: int


def encode_request(request: HoldRequest) -> bytes:
    return orjson.dumps({"broker": request.broker, "broker_epoch": request.broker_epoch,
                         "revision": request.revision, "token": request.token})


def decode_request(body: bytes | memoryview) -> HoldRequest:
    what = "an OutageHold request"
    doc = load_object(body, what)
    return HoldRequest(*(int_field(doc, name, what) for name in ("broker", "broker_epoch", "revision", "token")))


def encode_answer(hold: bool, token: int, grant_ms: int) -> bytes:
    return orjson.dumps({"hold": hold, "token": token, "grant_ms": grant_ms})


def decode_answer(raw: bytes | memoryview) -> tuple[bool, int, int]:
    """``(hold, token, grant_ms)``; raises the error an error answer names,
    ``RpcFormatError`` for anything else this broker does not write."""
    what = "an OutageHold answer"
    doc = load_object(raw, what)
    if "error" in doc:
        raise error_of(doc)
    hold = doc.get("hold")
    if not isinstance(hold, bool):
        raise RpcFormatError(f"{what}: hold is not a boolean")
    return hold, int_field(doc, "token", what), int_field(doc, "grant_ms", what)


async def serve(broker: Any, frame: bytes | memoryview, conn: Connection | None,
                authorizer: Authorizer | None) -> bytes:
    """Answer one OutageHold request frame (without its size prefix)."""
    _, correlation_id, body, refused = open_request(frame, conn, authorizer, "outage hold requests")
    if refused is not None:
        return refused
    try:
        request = decode_request(body)
    except RpcFormatError as err:
        return error_answer(correlation_id, ErrorCode.invalid_request, str(err))
    cluster = getattr(broker, "cluster", None)
    controller = None if cluster is None else cluster.controller
    if controller is None:
        return error_answer(correlation_id, ErrorCode.not_controller,
                            f"broker {broker.node_id} has no controller role")
    return answer_frame(correlation_id, encode_answer(*controller.hold_answer(
        request.broker, request.broker_epoch, request.revision, request.token)))
