from __future__ import annotations

import gc
import logging
import os
import weakref
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import pytest

from common.errors import OffsetOutOfRangeError
from common.record.batch import decode_all, read_batch_header
from local_tier.config import LogConfig
from local_tier.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from tests.local_tier.batches import make_batch, small_config

BATCH = len(make_batch(5))


@pytest.fixture()
def open_logs() -> Iterator[list[Log]]:
    logs: list[Log] = []
    yield logs
    for log in logs:
        log.close()


class MakeLog(Protocol):
    def __call__(
        self,
        config: LogConfig | None = None,
        *,
        needs_recovery: bool = False,
        recovery_point: int = 0,
        scheduler: Executor | None = None,
    ) -> Log: ...


@pytest.fixture()
def new_log(tmp_path: Path, open_logs: list[Log]) -> MakeLog:
    def make(
        config: LogConfig | None = None,
        *,
        needs_recovery: bool = False,
        recovery_point: int = 0,
        scheduler: Executor | None = None,
    ) -> Log:
        log = Log(
            tmp_path / "t-0",
            "t",
            0,
            config or small_config(),
            needs_recovery=needs_recovery,
            recovery_point=recovery_point,
            scheduler=scheduler,
        )
        open_logs.append(log)
        return log

    return make


def _fill(log: Log, batches: int, *, epoch: int = 0, start_ts: int = 1_000) -> None:
    for i in range(batches):
        log.append_as_leader(make_batch(5, timestamp=start_ts + 1_000 * i), epoch, now_ms=start_ts)
    log.update_high_watermark(log.log_end_offset)


def _offsets(log: Log, start: int, max_bytes: int = 10**6) -> list[int]:
    info = log.read(start, max_bytes)
    return [r.offset for region in info.regions for r in decode_all(region.read_bytes())]


def test_append_assigns_offsets_and_stamps_the_epoch(new_log: MakeLog) -> None:
    log = new_log()
    first = log.append_as_leader(make_batch(3) + make_batch(2), leader_epoch=4, now_ms=1)
    second = log.append_as_leader(make_batch(1), leader_epoch=4, now_ms=1)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 4, 5)
    assert (second.first_offset, second.last_offset) == (5, 5)
    assert first.log_append_time_ms == -1
    assert log.log_end_offset == 6
    assert log.high_watermark == 0  # appends do not move it
    region = log.read(0, 10**6, max_offset=6).regions[0]
    assert read_batch_header(region.read_bytes()).partition_leader_epoch == 4
    assert log.leader_epoch_cache.entries == [(4, 0)]


def test_log_append_time_topics_stamp_the_broker_time(new_log: MakeLog) -> None:
    log = new_log(small_config(message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(make_batch(3, timestamp=5), leader_epoch=0, now_ms=77_000)
    assert info.log_append_time_ms == 77_000
    log.update_high_watermark(3)
    assert {r.timestamp for r in decode_all(log.read(0, 10**6).regions[0].read_bytes())} == {77_000}


def test_high_watermark_limits_reads(new_log: MakeLog) -> None:
    log = new_log()
    _fill(log, 4)
    assert log.update_high_watermark(12) == 12
    assert _offsets(log, 0) == list(range(15))  # whole batches below the HW: 0-4, 5-9, 10-14
    assert log.read(15, 1000).regions == []
    assert log.update_high_watermark(10**9) == 20
    assert log.update_high_watermark(-5) == 0


def test_reads_outside_the_log_raise_offset_out_of_range(new_log: MakeLog) -> None:
    log = new_log()
    _fill(log, 2)
    with pytest.raises(OffsetOutOfRangeError, match=r"\[0, 10\]"):
        log.read(11, 1000)
    assert log.read(10, 1000).regions == []


def test_rolls_by_size(new_log: MakeLog) -> None:
    log = new_log(small_config(segment_bytes=BATCH * 3))
    _fill(log, 7)
    assert [s.base_offset for s in log.segments] == [0, 15, 30]
    # a read goes on into the next segments while its budget lasts (Kafka's reads one)
    assert _offsets(log, 12) == list(range(10, 35))
    assert _offsets(log, 15) == list(range(15, 35))


def test_rolls_by_time(new_log: MakeLog) -> None:
    log = new_log(small_config(segment_ms=1_000))
    log.append_as_leader(make_batch(), 0, now_ms=10_000)
    log.append_as_leader(make_batch(), 0, now_ms=11_000)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(), 0, now_ms=11_001)
    assert [s.base_offset for s in log.segments] == [0, 6]


def test_rolls_when_the_index_is_full(new_log: MakeLog) -> None:
    log = new_log(small_config(segment_index_bytes=16, index_interval_bytes=1))
    _fill(log, 6)
    assert len(log.segments) > 1
    assert all(s.offset_index.entries <= 2 for s in log.segments)


def test_roll_flush_runs_on_the_scheduler_and_advances_recovery_point(new_log: MakeLog) -> None:
    with ThreadPoolExecutor(max_workers=1) as executor:
        log = new_log(small_config(segment_bytes=BATCH * 2), scheduler=executor)
        _fill(log, 5)
        log.wait_for_flushes()
        assert log.recovery_point == log.active_segment.base_offset == 20


def test_flush_messages_fsyncs_and_moves_the_recovery_point(new_log: MakeLog) -> None:
    log = new_log(small_config(flush_messages=10))
    _fill(log, 1)
    assert log.recovery_point == 0
    _fill(log, 1)
    assert log.recovery_point == 10


def _crash_log(tmp_path: Path, tail: bytes, *, cut: int = 0) -> None:
    log = Log(tmp_path / "t-0", "t", 0, small_config(segment_bytes=BATCH * 3), needs_recovery=False)
    _fill(log, 5)
    active = log.active_segment.log_path
    log.close()
    if cut:
        os.truncate(active, active.stat().st_size - cut)
    with open(active, "ab") as f:
        f.write(tail)


def test_recovery_truncates_garbage_and_logs_it(
    new_log: MakeLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _crash_log(tmp_path, b"\xff" * 4096)
    with caplog.at_level(logging.WARNING, logger="strata.local_tier"):
        log = new_log(small_config(segment_bytes=BATCH * 3), needs_recovery=True, recovery_point=15)
    assert log.log_end_offset == 25
    assert log.high_watermark == 25
    assert log.recovery_point == 25
    assert "Recovery of t-0: truncated 4096 invalid bytes at position" in caplog.text
    assert "00000000000000000015.log" in caplog.text
    assert _offsets(log, 15) == list(range(15, 25))


def test_recovery_cuts_a_torn_batch_and_later_appends_continue(
    new_log: MakeLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _crash_log(tmp_path, b"", cut=3)
    log = new_log(small_config(segment_bytes=BATCH * 3), needs_recovery=True)
    assert log.log_end_offset == 20
    assert "truncated" in caplog.text
    assert "incomplete batch at position 156" in caplog.text
    log.append_as_leader(make_batch(5), 0)
    log.update_high_watermark(25)
    assert _offsets(log, 15) == list(range(15, 25))  # across the new segment (the torn one was full)
    assert _offsets(log, 20) == list(range(20, 25))


def test_epoch_cache_is_truncated_to_the_recovered_end(new_log: MakeLog, tmp_path: Path) -> None:
    log = new_log(needs_recovery=False)
    _fill(log, 2, epoch=1)
    _fill(log, 1, epoch=2)
    log.close()
    with open(log.active_segment.log_path, "r+b") as f:
        f.truncate(log.active_segment.size - 1)
    reopened = new_log(needs_recovery=True)
    assert reopened.log_end_offset == 10
    assert reopened.leader_epoch_cache.entries == [(1, 0)]


def test_corrupt_or_missing_index_is_rebuilt_without_recovery(
    new_log: MakeLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = new_log(small_config(segment_bytes=BATCH * 3))
    _fill(log, 7)
    log.close()
    first, second = log.segments[0], log.segments[1]
    entries = first.offset_index.entries
    first.offset_index.path.write_bytes(b"\x00" * 13)
    second.time_index.path.unlink()
    with caplog.at_level(logging.WARNING, logger="strata.local_tier"):
        reopened = new_log(small_config(segment_bytes=BATCH * 3), recovery_point=35)
    assert "rebuilding the indexes of 00000000000000000000.log" in caplog.text
    assert "rebuilding the indexes of 00000000000000000015.log" in caplog.text
    assert reopened.segments[0].offset_index.entries == entries
    reopened.segments[1].sanity_check()
    assert reopened.log_end_offset == 35


def test_retention_by_time_advances_log_start_offset(new_log: MakeLog) -> None:
    log = new_log(small_config(segment_bytes=BATCH * 2, retention_ms=10_000))
    _fill(log, 6, start_ts=1_000)  # segments [0..9] ts ≤ 2004, [10..19] ≤ 4004, [20..29] ≤ 6004
    assert log.delete_retention_segments(now_ms=14_500) == 2
    assert log.log_start_offset == 20
    assert [s.base_offset for s in log.segments] == [20]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(19, 1000)
    assert _offsets(log, 20)[0] == 20
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == (20, -1)


def test_retention_rolls_and_deletes_an_expired_active_segment(new_log: MakeLog) -> None:
    log = new_log(small_config(retention_ms=1_000))
    _fill(log, 2)
    assert log.delete_retention_segments(now_ms=10**6) == 1
    assert log.log_start_offset == log.log_end_offset == 10
    assert log.active_segment.size == 0


def test_retention_never_passes_the_high_watermark(new_log: MakeLog) -> None:
    log = new_log(small_config(segment_bytes=BATCH * 2, retention_ms=0))
    _fill(log, 4)
    log.update_high_watermark(15)
    assert log.delete_retention_segments(now_ms=10**9) == 1
    assert log.log_start_offset == 10


def test_retention_by_bytes_and_delayed_file_removal(new_log: MakeLog, tmp_path: Path) -> None:
    config = small_config(
        segment_bytes=BATCH * 2, retention_bytes=BATCH * 3, file_delete_delay_ms=5_000
    )
    log = new_log(config)
    _fill(log, 7)  # segments of 2, 2, 2, 1 batches
    assert log.delete_retention_segments(now_ms=100) == 2
    assert log.log_start_offset == 20
    assert log.size_in_bytes == BATCH * 3
    deleted = sorted(p.name for p in (tmp_path / "t-0").glob("*.deleted"))
    assert len(deleted) == 6
    log.delete_retention_segments(now_ms=5_100)
    assert not list((tmp_path / "t-0").glob("*.deleted"))


def test_delayed_file_removal_runs_on_the_scheduler_not_the_caller(
    new_log: MakeLog, tmp_path: Path
) -> None:
    config = small_config(
        segment_bytes=BATCH * 2, retention_bytes=BATCH * 3, file_delete_delay_ms=5_000
    )
    jobs: list[Any] = []

    class Deferred(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            jobs.append(fn)
            return super().submit(fn, *args, **kwargs)

    with Deferred(max_workers=1) as executor:
        log = new_log(config, scheduler=executor)
        _fill(log, 7)
        log.wait_for_flushes()
        assert log.delete_retention_segments(now_ms=100) == 2
        jobs.clear()
        log.delete_retention_segments(now_ms=5_100)
        assert len(jobs) == 1  # the unlinks, handed to the flush thread
        log.wait_for_flushes()
        assert not list((tmp_path / "t-0").glob("*.deleted"))


def test_offset_for_timestamp_across_segments(new_log: MakeLog) -> None:
    log = new_log(small_config(segment_bytes=BATCH * 2))
    _fill(log, 6, start_ts=1_000)
    assert log.fetch_offset_by_timestamp(0) == (0, 1_000)
    assert log.fetch_offset_by_timestamp(3_003) == (13, 3_003)
    assert log.fetch_offset_by_timestamp(3_005) == (15, 4_000)
    assert log.fetch_offset_by_timestamp(99_999) is None
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (29, 6_004)
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP) == (30, -1)
    log.update_high_watermark(10)
    assert log.fetch_offset_by_timestamp(3_003) is None  # not committed yet


def test_maybe_increment_log_start_offset(new_log: MakeLog) -> None:
    log = new_log()
    _fill(log, 2)
    assert log.maybe_increment_log_start_offset(7)
    assert not log.maybe_increment_log_start_offset(3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6, 100)
    assert _offsets(log, 7) == list(range(5, 10))  # whole batch containing 7
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(11)


def test_delete_removes_the_directory(new_log: MakeLog, tmp_path: Path) -> None:
    log = new_log()
    _fill(log, 1)
    log.delete()
    assert not (tmp_path / "t-0").exists()


def test_tiered_log_deletes_only_segments_already_in_the_bucket(new_log: MakeLog) -> None:
    from dataclasses import replace

    log = new_log(replace(small_config(segment_bytes=BATCH * 2), remote_storage_enable=True,
                          local_retention_bytes=0))
    _fill(log, 8)  # four sealed segments of two batches, plus the active one
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    # nothing uploaded yet: local retention must not delete anything
    assert log.delete_retention_segments(10**13, remote_boundary=None) == 0
    # the bucket holds the first two segments: only those may go
    assert log.delete_retention_segments(10**13, remote_boundary=bases[2]) == 2
    assert log.log_start_offset == bases[2]
    assert [s.base_offset for s in log.segments][0] == bases[2]


def test_tiered_log_applies_local_retention_ms_not_retention_ms(new_log: MakeLog) -> None:
    from dataclasses import replace

    config = replace(small_config(segment_bytes=BATCH * 2), remote_storage_enable=True,
                     retention_ms=-1, local_retention_ms=5_000)
    log = new_log(config)
    _fill(log, 6, start_ts=1_000)
    boundary = log.segments[-1].base_offset
    # segments' records are from t=1s..6s: at t=8s the first expire under local.retention.ms
    deleted = log.delete_retention_segments(8_000, remote_boundary=boundary)
    assert deleted >= 1
    assert log.log_start_offset > 0


def test_a_closed_log_is_freed_without_the_cyclic_collector(tmp_path: Path) -> None:
    """A broker freezes long-lived objects out of the collector (service/gc_policy.py): a
    deleted log in a reference cycle was then never freed (4 MB per 1,000 partitions created
    and deleted, stop 72). Closed and dropped, reference counting alone frees it."""
    with ThreadPoolExecutor(1) as flusher:
        log = Log(tmp_path / "t-0", "t", 0, small_config(), needs_recovery=False, scheduler=flusher)
        for epoch in range(3):  # each new epoch's checkpoint write goes through the flush thread
            log.append_as_leader(make_batch(5), epoch)
        log.close()
        flusher.submit(lambda: None).result()  # the close job and the epoch writes have run
        gone = weakref.ref(log)
        gc.collect()
        gc.freeze()
        try:
            del log
            assert gone() is None
        finally:
            gc.unfreeze()
