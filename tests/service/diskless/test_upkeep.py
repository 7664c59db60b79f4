"""The timed work of diskless topics and the index waits: one failing partition does not stop the others, a lower retention.ms reaches an idle partition, a wake that comes before its poll."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import service.diskless.upkeep as upkeep
from common.record.batch import validate_batches
from service.diskless import rpc
from tests.service.diskless.broker_harness import batch, diskless_topic, run

QUICK = {"diskless.commit.deadline.ms": "100", "diskless.orphan.grace.ms": "400"}


async def _produce(node, info, p, values, ts=1_700_000_000_000):  # noqa: ANN001, ANN202
    records = batch(values, ts)
    return await node.produce(info, p, records, validate_batches(records, max_message_bytes=1 << 20), False)


def test_one_failing_partition_does_not_stop_the_merge_of_the_others(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real = upkeep.merge
    broken: list[int] = []

    def flaky(rsm, topic, topic_id, partition, *rest):  # noqa: ANN001, ANN002, ANN202
        if partition == broken[0]:
            raise OSError("the bucket refused a GET of this partition's object")
        return real(rsm, topic, topic_id, partition, *rest)

    monkeypatch.setattr(upkeep, "merge", flaky)

    async def body(broker):  # noqa: ANN001, ANN202
        node = broker.diskless
        info = await diskless_topic(broker, "d", partitions=2)
        for p in range(2):
            await _produce(node, info, p, [b"v%d" % p])
        await asyncio.sleep(0.3)
        broken.append(node.sequencer.led()[0][1])  # the first partition of every pass fails
        try:
            await upkeep.merge_due(node, broker, force=True)
        except Exception as exc:  # noqa: BLE001
            print("merge_due raised", repr(exc))
        other = 1 - broken[0]
        loaded = node.manifests.load(info.topic_id, other)
        return loaded[0].next_offset if loaded is not None else 0

    assert run(tmp_path, body, **QUICK) == 1, "the healthy partition was never merged"


def test_a_lower_retention_ms_applies_to_an_idle_partition(tmp_path: Path) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        node = broker.diskless
        info = await diskless_topic(broker, "r", retention_ms="3600000")
        await _produce(node, info, 0, [b"a", b"b"], ts=int(time.time() * 1000))
        await asyncio.sleep(0.3)
        assert await upkeep.merge_due(node, broker, force=True) == 1  # merged; due in an hour
        await broker.alter_topic_configs("r", [("retention.ms", 0, "1")], False)
        await asyncio.sleep(0.2)
        assert broker.log_config("r").retention_ms == 1
        for _ in range(3):
            await upkeep.merge_due(node, broker)
        return node.manifests.load(info.topic_id, 0)[0].segments

    segments = run(tmp_path, body, **QUICK)
    assert segments == (), "retention.ms lowered to 1 ms, yet the idle partition keeps its segment"


def test_a_wake_that_arrives_before_its_poll_is_not_lost(tmp_path: Path) -> None:
    async def body(broker):  # noqa: ANN001, ANN202
        node = broker.diskless
        info = await diskless_topic(broker, "d")
        node.waits.wake("poll-x")  # the wake (sent on the commit connection) overtakes the poll (index connection)
        start = time.monotonic()
        await node.index_here([rpc.IndexRead(info.topic_id, 0, 0, 1 << 20)], 2000, "poll-x")
        return time.monotonic() - start

    elapsed = run(tmp_path, body)
    assert elapsed < 1.0, f"the poll was already woken, yet it waited {elapsed:.2f}s"
