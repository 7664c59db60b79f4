"""A read of a diskless partition whose takeover is in progress on its sequencer waits for
the takeover (bounded by ``TAKEOVER_READ_WAIT_S``) instead of answering
NOT_LEADER_OR_FOLLOWER at once: right after a create, a client's ListOffsets (librdkafka's
``get_watermark_offsets`` does not retry it) used to fail while the new partition's manifest
and commits were read from the bucket."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from common.errors import NotLeaderOrFollowerError
from service.diskless import node as diskless_node
from service.diskless.offsets import list_offset
from service.diskless.rpc import IndexAnswer, IndexRead
from tests.service.diskless.broker_harness import diskless_topic, run


def _slow_takeovers(broker: Any, seconds: float) -> None:
    """The next takeover's first bucket read (the partition's manifest) takes ``seconds`` more."""
    load = broker.diskless.manifests.load
    slow = [seconds]

    def slow_load(*args: Any) -> Any:
        if slow:
            time.sleep(slow.pop())
        return load(*args)

    broker.diskless.manifests.load = slow_load


async def _created_and_listed(broker: Any, name: str) -> tuple[Any, float]:
    info = await broker.create_topic(name, num_partitions=1, configs={"diskless.enable": "true"})
    assert (info.topic_id, 0) in broker.diskless._loading  # the read lands inside the takeover
    started = time.monotonic()
    try:
        answer: Any = await list_offset(broker.diskless, info, 0, -1)
    except NotLeaderOrFollowerError as exc:
        answer = exc
    return answer, time.monotonic() - started


def test_a_list_offsets_during_a_new_partitions_takeover_is_answered_once_it_is_sequenced(tmp_path: Path) -> None:
    async def body(broker: Any) -> tuple[Any, float]:
        _slow_takeovers(broker, 0.8)
        return await _created_and_listed(broker, "fresh")

    answer, took = run(tmp_path, body)
    assert answer == (-1, 0, -1)  # the latest offset of an empty partition, no error
    assert took >= 0.5


def test_a_takeover_longer_than_the_reads_wait_still_answers_not_leader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(diskless_node, "TAKEOVER_READ_WAIT_S", 0.3)

    async def body(broker: Any) -> tuple[Any, float]:
        _slow_takeovers(broker, 1.5)
        result = await _created_and_listed(broker, "slow")
        await asyncio.sleep(1.5)  # the takeover ends before the broker stops
        return result

    answer, took = run(tmp_path, body)
    assert isinstance(answer, NotLeaderOrFollowerError)  # retriable, as before: the client asks again
    assert 0.25 <= took < 1.45  # before the takeover's end


def test_a_read_of_partitions_some_sequenced_is_answered_at_once(tmp_path: Path) -> None:
    """One partition being taken over does not hold back the answers of the others."""

    async def body(broker: Any) -> tuple[Any, float]:
        ready = await diskless_topic(broker, "ready")
        _slow_takeovers(broker, 1.5)
        fresh = await broker.create_topic("fresh", num_partitions=1, configs={"diskless.enable": "true"})
        started = time.monotonic()
        answers = await broker.diskless.index_here(
            [IndexRead(ready.topic_id, 0, 0, 1 << 20), IndexRead(fresh.topic_id, 0, 0, 1 << 20)], 0)
        took = time.monotonic() - started
        await asyncio.sleep(1.5)  # the takeover ends before the broker stops
        return answers, took

    (ready_answer, fresh_answer), took = run(tmp_path, body)
    assert isinstance(ready_answer, IndexAnswer) and isinstance(fresh_answer, NotLeaderOrFollowerError)
    assert took < 0.5
