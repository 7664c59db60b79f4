"""OutageHold on the wire (ADR 0031): the codec, and what a broker answers to bad input or
without a controller role."""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from common.errors import ErrorCode, KafkaError
from service.cluster import hold_rpc


def _frame(body: bytes, correlation_id: int = 7) -> bytes:
    client = b"strata-broker-2"
    return struct.pack(">hhih", hold_rpc.OUTAGE_HOLD, 0, correlation_id, len(client)) + client + body


def _answer(broker: Any, body: bytes) -> dict[str, Any]:
    raw = asyncio.run(hold_rpc.serve(broker, _frame(body), None, None))
    size, correlation_id = struct.unpack_from(">ii", raw)
    assert size == len(raw) - 4 and correlation_id == 7
    return dict(orjson.loads(raw[8:]))


class _Controller:
    def __init__(self) -> None:
        self.asked: list[tuple[int, int, int, int]] = []

    def hold_answer(self, broker_id: int, broker_epoch: int, revision: int, token: int) -> tuple[bool, int, int]:
        self.asked.append((broker_id, broker_epoch, revision, token))
        return True, token + 1, 1875


def test_a_request_reaches_the_controller_and_its_answer_comes_back() -> None:
    controller = _Controller()
    broker = SimpleNamespace(node_id=1, cluster=SimpleNamespace(controller=controller))
    request = hold_rpc.HoldRequest(broker=2, broker_epoch=40, revision=57, token=123456789012)
    assert hold_rpc.decode_request(hold_rpc.encode_request(request)) == request
    answer = _answer(broker, hold_rpc.encode_request(request))
    assert hold_rpc.decode_answer(orjson.dumps(answer)) == (True, 123456789013, 1875)
    assert controller.asked == [(2, 40, 57, 123456789012)]


@pytest.mark.parametrize("body", [b"", b"[1]", b'{"broker": 2}', b'{"broker": 2, "broker_epoch": 1, '
                                  b'"revision": "9", "token": 0}', b"\xff" * 64])
def test_a_malformed_request_is_answered_invalid_request_and_reaches_no_controller(body: bytes) -> None:
    controller = _Controller()
    broker = SimpleNamespace(node_id=1, cluster=SimpleNamespace(controller=controller))
    answer = _answer(broker, body)
    assert answer["error"] == ErrorCode.invalid_request and controller.asked == []


def test_a_broker_without_a_controller_role_answers_not_controller() -> None:
    answer = _answer(SimpleNamespace(node_id=1, cluster=None),
                     hold_rpc.encode_request(hold_rpc.HoldRequest(2, 1, 1, 0)))
    with pytest.raises(KafkaError) as raised:
        hold_rpc.decode_answer(orjson.dumps(answer))
    assert raised.value.code == ErrorCode.not_controller


@pytest.mark.parametrize("raw", [b"{}", b'{"hold": 1, "token": 2, "grant_ms": 3}', b'{"hold": true, "token": 2}',
                                 b"nope"])
def test_an_answer_this_broker_does_not_write_is_a_format_error(raw: bytes) -> None:
    with pytest.raises(hold_rpc.RpcFormatError):
        hold_rpc.decode_answer(raw)
