"""Fetch planning over real logs: byte budgets, KIP-74, errors; and long-poll waits."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from common.errors import ErrorCode, UnknownTopicOrPartitionError
from common.record.batch import build_batch, decode_all
from fetch.planner import PartitionFetch, read_partitions, read_partitions_in_turns
from fetch.waiter import AppendWaiters
from local_tier.config import LogConfig
from local_tier.log import Log


class _Logs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs: dict[tuple[str, int], Log] = {}

    def add(self, topic: str, partition: int, batches: int, records_per_batch: int, value_size: int) -> Log:
        log = Log(self.root / f"{topic}-{partition}", topic, partition, LogConfig(), needs_recovery=False)
        for b in range(batches):
            recs = [
                (f"k{b}-{i}".encode(), bytes([65 + b % 26]) * value_size, (), 1_700_000_000_000 + b)
                for i in range(records_per_batch)
            ]
            log.append_as_leader(build_batch(recs), leader_epoch=0)
        log.update_high_watermark(log.log_end_offset)
        self.logs[(topic, partition)] = log
        return log

    def log_for(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Log:
        try:
            return self.logs[(topic, partition)]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"no {topic}-{partition}") from None


@pytest.fixture
def logs(tmp_path: Path):  # type: ignore[no-untyped-def]
    source = _Logs(tmp_path)
    yield source
    for log in source.logs.values():
        log.close()


def _records(data) -> list:  # type: ignore[no-untyped-def]
    return decode_all(b"".join(r.read_bytes() for r in data.regions))


def test_reads_every_partition_within_partition_limit(logs: _Logs) -> None:
    logs.add("t", 0, batches=10, records_per_batch=10, value_size=100)
    logs.add("t", 1, batches=10, records_per_batch=10, value_size=100)
    reqs = [PartitionFetch("t", 0, 0, 3000), PartitionFetch("t", 1, 50, 1 << 20)]
    data, total = read_partitions(logs, reqs, max_bytes=1 << 20)
    assert total == data[0].size + data[1].size
    first = _records(data[0])
    assert first[0].offset == 0 and 0 < len(first) < 100  # stopped by the 3000-byte partition limit
    assert data[0].size <= 3000
    second = _records(data[1])
    assert [r.offset for r in second] == list(range(50, 100))
    assert data[1].high_watermark == 100 and data[1].log_start_offset == 0


def test_response_limit_spans_partitions_and_first_batch_is_whole(logs: _Logs) -> None:
    logs.add("t", 0, batches=2, records_per_batch=50, value_size=200)  # batches of ~10 KB
    logs.add("t", 1, batches=2, records_per_batch=50, value_size=200)
    reqs = [PartitionFetch("t", 0, 0, 1 << 20), PartitionFetch("t", 1, 0, 1 << 20)]
    data, total = read_partitions(logs, reqs, max_bytes=100)  # smaller than one batch
    assert [r.offset for r in _records(data[0])] == list(range(50))  # KIP-74: first batch whole
    assert data[1].size == 0 and data[1].error_code == ErrorCode.none
    assert total == data[0].size


def test_errors_are_per_partition(logs: _Logs) -> None:
    logs.add("t", 0, batches=1, records_per_batch=5, value_size=10)
    reqs = [
        PartitionFetch("missing", 0, 0, 1000),
        PartitionFetch("t", 0, 99, 1000),
        PartitionFetch("t", 0, 5, 1000),
    ]
    data, total = read_partitions(logs, reqs, max_bytes=1 << 20)
    assert data[0].error_code == ErrorCode.unknown_topic_or_partition
    assert data[1].error_code == ErrorCode.offset_out_of_range
    assert data[2].error_code == ErrorCode.none and data[2].size == 0  # at the end: nothing yet
    assert total == 0


def test_reads_stop_at_the_high_watermark(logs: _Logs) -> None:
    log = logs.add("t", 0, batches=4, records_per_batch=5, value_size=10)
    log.append_as_leader(build_batch([(b"k", b"uncommitted", (), None)]), leader_epoch=0)
    data, _ = read_partitions(logs, [PartitionFetch("t", 0, 0, 1 << 20)], max_bytes=1 << 20)
    assert [r.offset for r in _records(data[0])] == list(range(20))
    assert data[0].high_watermark == 20


def test_waiter_wakes_on_notify_and_times_out_otherwise() -> None:
    async def scenario() -> tuple[bool, bool, int]:
        waiters = AppendWaiters()
        parked = asyncio.create_task(waiters.wait([("t", 0), ("t", 1)], 5.0))
        await asyncio.sleep(0)
        assert waiters.parked == 1
        waiters.notify("t", 1)
        woke = await parked
        timed_out = await waiters.wait([("t", 0)], 0.01)
        return woke, timed_out, waiters.parked

    woke, timed_out, parked = asyncio.run(scenario())
    assert woke is True and timed_out is False and parked == 0


def test_unrelated_append_does_not_wake() -> None:
    async def scenario() -> bool:
        waiters = AppendWaiters()
        parked = asyncio.create_task(waiters.wait([("t", 0)], 0.05))
        await asyncio.sleep(0)
        waiters.notify("t", 1)
        return await parked

    assert asyncio.run(scenario()) is False


@pytest.mark.parametrize("bad", [-1, 0])
def test_zero_or_negative_wait_returns_at_once(bad: int) -> None:
    assert asyncio.run(AppendWaiters().wait([("t", 0)], bad)) is False


def test_a_wide_fetch_is_read_in_turns_of_the_loop_with_one_budget(logs: _Logs) -> None:
    """200 partitions are read 64 per turn of the loop (a 600-partition first Fetch held the
    loop 43 ms in one go), and give exactly what one pass gives: the response's budget runs
    across the slices and only the first partition with data may exceed it (KIP-74)."""
    for p in range(200):
        logs.add("w", p, batches=2, records_per_batch=5, value_size=100 if p != 70 else 3000)
    reqs = [PartitionFetch("w", p, 0, 1 << 20) for p in range(200)]
    budget = 150_000  # runs out in the second slice
    whole, whole_total = read_partitions(logs, reqs, max_bytes=budget)

    async def in_turns() -> tuple[list, int, int]:  # type: ignore[type-arg]
        turns = 0
        stop = False

        async def count() -> None:
            nonlocal turns
            while not stop:
                turns += 1
                await asyncio.sleep(0)

        counter = asyncio.ensure_future(count())
        await asyncio.sleep(0)
        data, total = await read_partitions_in_turns(logs, reqs, max_bytes=budget)
        stop = True
        await counter
        return data, total, turns

    data, total, turns = asyncio.run(in_turns())
    assert turns >= 4  # the other task ran between the four slices
    assert total == whole_total and whole_total <= budget
    assert [(d.partition, d.size, d.error_code) for d in data] == [(d.partition, d.size, d.error_code) for d in whole]
    first_left_out = next(n for n, d in enumerate(data) if d.size == 0)
    assert 64 < first_left_out < 192  # the budget ran out after the first slice: it ran across them
