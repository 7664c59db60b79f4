"""An idempotent producer blocked on a diskless object (five requests in flight on its
connection, the most Kafka's clients send) makes the object close at
``diskless.batch.min.ms`` instead of ``diskless.batch.ms``; nobody else does."""

from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import Any

import pytest

from common.protocol.codec import RequestHeader
from common.record.batch import build_batch
from service.handlers.context import RequestContext
from service.handlers.produce import handle_produce
from service.handlers.produce_codec import ProducePartition, ProduceRequestData, ProduceTopic
from tests.service.diskless.broker_harness import diskless_topic, run

WINDOW = {"diskless.batch.ms": "3000", "diskless.batch.min.ms": "50"}


class _Connection:
    """What the handler reads of a client connection: the requests it has in flight."""

    def __init__(self, inflight: int) -> None:
        self.inflight = inflight


def _request(topic: str, *, idempotent: bool, seq: int = 0) -> ProduceRequestData:
    records = build_batch([(None, b"v" * 50, (), None)], producer_id=7 if idempotent else -1,
                          producer_epoch=0 if idempotent else -1, base_sequence=seq if idempotent else -1)
    return ProduceRequestData(None, -1, 30_000, (ProduceTopic(topic, (ProducePartition(0, memoryview(records)),)),))


async def _produce(broker: Any, request: ProduceRequestData, inflight: int) -> float:
    ctx = RequestContext(RequestHeader(0, 9, 1, "t", False), broker, _Connection(inflight))  # type: ignore[arg-type]
    start = time.monotonic()
    answer = handle_produce(ctx, request)
    if inspect.isawaitable(answer):
        answer = await answer
    assert isinstance(answer, bytes)
    return time.monotonic() - start


@pytest.mark.parametrize("inflight, idempotent, early", [
    (5, True, True),    # blocked: the object closes at diskless.batch.min.ms
    (4, True, False),   # may still send: the window is waited out
    (5, False, False),  # not idempotent: not capped at five, the window is waited out
])
def test_only_a_blocked_idempotent_producer_closes_its_object_early(
        tmp_path: Path, inflight: int, idempotent: bool, early: bool) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        await diskless_topic(broker, "d")
        elapsed = await _produce(broker, _request("d", idempotent=idempotent), inflight)
        sequence = broker.diskless.sequencer.get(broker.controller.topic("d").topic_id, 0)
        return elapsed, broker.diskless.writer.hurried, sequence.committed_end

    elapsed, hurried, end = run(tmp_path, body, **WINDOW)
    assert end == 1  # written and committed either way
    if early:
        assert elapsed < 1.5 and hurried == 1, f"answered after {elapsed:.2f}s, {hurried} objects hurried"
    else:
        assert elapsed >= 2.5 and hurried == 0, f"answered after {elapsed:.2f}s, {hurried} objects hurried"


def test_no_early_close_when_the_minimum_is_the_window(tmp_path: Path) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        await diskless_topic(broker, "d")
        return await _produce(broker, _request("d", idempotent=True), 5)

    elapsed = run(tmp_path, body, **{"diskless.batch.ms": "1500", "diskless.batch.min.ms": "1500"})
    assert elapsed >= 1.2, f"answered after {elapsed:.2f}s"
