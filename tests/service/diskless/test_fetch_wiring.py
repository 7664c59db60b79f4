"""Fetch of diskless partitions through the real handler on an in-process broker: the
response's max_bytes, min_bytes 0, and a Fetch of classic and diskless partitions together."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path
from typing import Any

import pytest
from kio.schema.fetch.v12 import request as fr

import service.handlers.fetch as fetch_handler
from common.errors import ErrorCode
from common.protocol.codec import RequestHeader
from common.record.batch import validate_batches
from service.handlers.context import RequestContext
from tests.service.diskless.broker_harness import batch, diskless_topic, run

BASE = 1_700_000_000_000


def _request(parts: list[tuple[str, int, int]], *, max_wait_ms: int, min_bytes: int = 1,
             max_bytes: int = 50 << 20, partition_max_bytes: int = 1 << 20) -> Any:
    topics: dict[str, list[Any]] = {}
    for topic, p, offset in parts:
        topics.setdefault(topic, []).append(fr.FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=partition_max_bytes))
    return fr.FetchRequest(
        cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
        topics=tuple(fr.FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items()),
        forgotten_topics_data=(), rack_id="")


async def _fetch(broker: Any, request: Any, captured: list[Any]) -> float:
    ctx = RequestContext(RequestHeader(1, 12, 1, "t", True), broker, None)
    start = time.monotonic()
    await fetch_handler.handle_fetch(ctx, request)
    return time.monotonic() - start


async def _produce(broker: Any, info: Any, partition: int, values: list[bytes]) -> None:
    records = batch(values, BASE)
    await broker.diskless.produce(info, partition, records, validate_batches(records, max_message_bytes=8 << 20),
                                  False)


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    out: list[Any] = []
    real = fetch_handler.encode_fetch_response

    def spy(version: int, correlation_id: int, partitions: Any, **kw: Any) -> Any:
        out.append(list(partitions))
        return real(version, correlation_id, partitions, **kw)

    monkeypatch.setattr(fetch_handler, "encode_fetch_response", spy)
    return out


def test_a_mixed_fetch_answers_at_once_when_a_diskless_partition_has_records(
        tmp_path: Path, captured: list[Any]) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        info = await diskless_topic(broker, "d")
        await broker.create_topic("c", num_partitions=1)
        await _produce(broker, info, 0, [b"x" * 100] * 3)
        return await _fetch(broker, _request([("c", 0, 0), ("d", 0, 0)], max_wait_ms=3000), captured)

    elapsed = run(tmp_path, body)
    by_topic = {d.topic: d for d in captured[-1]}
    assert by_topic["d"].size > 0 and by_topic["d"].error_code == ErrorCode.none
    # a classic broker answers at once: min_bytes=1 is already satisfied by the diskless partition
    assert elapsed < 1.5, f"answered after {elapsed:.2f}s (the whole max_wait)"


def test_a_parked_mixed_fetch_wakes_when_a_diskless_partition_gets_records(
        tmp_path: Path, captured: list[Any]) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        info = await diskless_topic(broker, "d")
        await broker.create_topic("c", num_partitions=1)
        fetching = asyncio.ensure_future(_fetch(broker, _request([("c", 0, 0), ("d", 0, 0)], max_wait_ms=5000),
                                                captured))
        await asyncio.sleep(0.5)  # parked: nothing in either partition
        assert not fetching.done()
        produced = time.monotonic()
        await _produce(broker, info, 0, [b"y" * 100] * 2)
        await fetching
        return time.monotonic() - produced

    after_produce = run(tmp_path, body)
    by_topic = {d.topic: d for d in captured[-1]}
    assert by_topic["d"].error_code == ErrorCode.none and by_topic["d"].records == 2, by_topic["d"]
    assert by_topic["c"].size == 0
    # before, the classic long poll held the answer for the whole max_wait (5 s)
    assert after_produce < 2.0, f"answered {after_produce:.2f}s after the diskless commit"


def test_a_parked_mixed_fetch_wakes_when_a_classic_partition_gets_records(
        tmp_path: Path, captured: list[Any]) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        await diskless_topic(broker, "d")
        await broker.create_topic("c", num_partitions=1)
        fetching = asyncio.ensure_future(_fetch(broker, _request([("c", 0, 0), ("d", 0, 0)], max_wait_ms=5000),
                                                captured))
        await asyncio.sleep(0.5)
        assert not fetching.done()
        produced = time.monotonic()
        broker.append("c", 0, batch([b"z" * 50], BASE))  # moves the high watermark: wakes the parked fetch
        await fetching
        return time.monotonic() - produced

    after_produce = run(tmp_path, body)
    by_topic = {d.topic: d for d in captured[-1]}
    assert by_topic["c"].error_code == ErrorCode.none and by_topic["c"].size > 0, by_topic["c"]
    assert by_topic["d"].size == 0 and by_topic["d"].error_code == ErrorCode.none
    # the diskless sequencer's own long poll was woken too, not waited out
    assert after_produce < 2.0, f"answered {after_produce:.2f}s after the classic append"


def test_a_fetch_of_many_diskless_partitions_keeps_to_the_response_max_bytes(tmp_path: Path, captured: list[Any]) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        info = await diskless_topic(broker, "d", partitions=4)
        for p in range(4):
            await _produce(broker, info, p, [bytes([65 + p]) * 100_000])
        return await _fetch(broker, _request([("d", p, 0) for p in range(4)], max_wait_ms=0,
                                             max_bytes=150_000), captured)

    run(tmp_path, body)
    total = sum(d.size for d in captured[-1])
    # Kafka (and read_partitions for classic topics): at most max_bytes, unless the first batch alone is larger
    assert total <= 150_000 + 100_200, f"{total} bytes answered for max_bytes=150000"


def test_a_diskless_fetch_waits_for_its_min_bytes(tmp_path: Path, captured: list[Any]) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        info = await diskless_topic(broker, "d", partitions=2)
        await _produce(broker, info, 0, [b"a" * 100])  # there, but far below min_bytes
        fetching = asyncio.ensure_future(_fetch(
            broker, _request([("d", 0, 0), ("d", 1, 0)], max_wait_ms=5000, min_bytes=6000), captured))
        await asyncio.sleep(0.4)
        early = fetching.done()
        await _produce(broker, info, 1, [b"b" * 3000])  # 3,100 bytes: not yet
        await asyncio.sleep(0.4)
        middle = fetching.done()
        produced = time.monotonic()
        await _produce(broker, info, 0, [b"c" * 3000])  # past 6,000
        await fetching
        return early, middle, time.monotonic() - produced

    early, middle, after = run(tmp_path, body)
    assert not early and not middle, "answered before the partitions held min_bytes"
    assert after < 2.0, f"answered {after:.2f}s after min_bytes was reached"
    answered = captured[-1]
    assert sum(d.size for d in answered) >= 6000
    assert [d.records for d in answered] == [2, 1]


def test_a_diskless_fetch_with_min_bytes_0_answers_at_once(tmp_path: Path, captured: list[Any]) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        await diskless_topic(broker, "d")
        return await _fetch(broker, _request([("d", 0, 0)], max_wait_ms=2000, min_bytes=0), captured)

    elapsed = run(tmp_path, body)
    assert elapsed < 1.0, f"min_bytes=0 answered after {elapsed:.2f}s"


@pytest.mark.parametrize("mixed", [False, True])
def test_a_fetch_answers_once_min_bytes_of_diskless_records_arrived(
        tmp_path: Path, captured: list[Any], mixed: bool) -> None:
    """Diskless partitions only, or with a classic one too: the diskless partitions of a
    mixed Fetch are read again at each wake, with what the classic ones lack of min_bytes."""
    async def body(broker):  # noqa: ANN001, ANN202
        info = await diskless_topic(broker, "d")
        await broker.create_topic("c", num_partitions=1)
        parts = [("c", 0, 0), ("d", 0, 0)] if mixed else [("d", 0, 0)]
        fetching = asyncio.ensure_future(_fetch(broker, _request(parts, max_wait_ms=4000, min_bytes=3000),
                                                captured))
        await asyncio.sleep(0.3)
        await _produce(broker, info, 0, [b"a" * 100])  # far below min_bytes
        await asyncio.sleep(0.3)
        produced = time.monotonic()
        await _produce(broker, info, 0, [b"b" * 1000] * 5)  # now well above min_bytes
        await fetching
        return time.monotonic() - produced

    after = run(tmp_path, body)
    d = {p.topic: p for p in captured[-1]}["d"]
    assert after < 1.5, f"mixed={mixed}: answered {after:.2f}s after min_bytes arrived ({d.size} bytes of d)"
    assert d.size >= 3000 and d.records == 6, d
