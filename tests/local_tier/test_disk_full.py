"""A full disk (a real tmpfs) never leaves a torn batch, a torn index entry or a temp file.

Every write the local tier makes on a full filesystem either completes or is
undone: the log is cut back to its size before the append, index entries are
written only after the log bytes, checkpoints keep their previous content. Once
space is freed, appends continue at the next offset without a restart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from common.errors import KafkaStorageError
from common.record.batch import decode_all
from local_tier.checkpoint import write_checkpoint
from local_tier.epoch import LEADER_EPOCH_CHECKPOINT
from local_tier.index import TimeIndex
from local_tier.log import Log
from local_tier.manager import CLEAN_SHUTDOWN_FILE, LogManager
from tests.local_tier.batches import make_batch, small_config
from tests.tmpfs_fixtures import fill

Mount = Callable[[int], Path]
_MIB = 1024 * 1024


def _offsets(log: Log) -> list[int]:
    log.update_high_watermark(log.log_end_offset)
    info = log.read(log.log_start_offset, 64 * _MIB)
    return [r.offset for region in info.regions for r in decode_all(region.read_bytes())]


def _big_batch() -> bytes:
    return make_batch(4, value_size=64 * 1024)  # larger than the page a full tmpfs may have left


def test_append_on_a_full_disk_is_rolled_back_and_resumes_once_space_is_freed(
    small_tmpfs: Mount,
) -> None:
    disk = small_tmpfs(2 * _MIB)
    log = Log(disk / "t-0", "t", 0, small_config(), needs_recovery=False)
    for _ in range(3):
        log.append_as_leader(make_batch(5), 0)
    segment = log.active_segment
    size, entries, time_entries = segment.size, segment.offset_index.entries, segment.time_index.entries
    fill(disk / "filler")

    for _ in range(3):  # repeated failures change nothing either
        with pytest.raises(KafkaStorageError, match="No space left on device"):
            log.append_as_leader(_big_batch(), 0)
    assert log.log_end_offset == 15
    assert os.path.getsize(segment.log_path) == segment.size == size
    assert (segment.offset_index.entries, segment.time_index.entries) == (entries, time_entries)
    assert os.path.getsize(segment.offset_index.path) == entries * 8
    assert _offsets(log) == list(range(15))  # reads keep working

    (disk / "filler").unlink()
    info = log.append_as_leader(_big_batch(), 0)
    assert (info.first_offset, info.last_offset) == (15, 18)
    log.append_as_leader(make_batch(5), 0)
    log.close()

    reopened = Log(disk / "t-0", "t", 0, small_config(), needs_recovery=True)
    try:
        assert reopened.log_end_offset == 24
        assert _offsets(reopened) == list(range(24))
        assert reopened.active_segment.size == os.path.getsize(segment.log_path)
    finally:
        reopened.close()


def test_first_append_on_a_full_disk_leaves_no_epoch_checkpoint_or_temp_file(
    small_tmpfs: Mount,
) -> None:
    disk = small_tmpfs(1 * _MIB)
    log = Log(disk / "t-0", "t", 0, small_config(), needs_recovery=False)
    fill(disk / "filler")
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(_big_batch(), 3)
    assert log.log_end_offset == 0
    assert log.active_segment.size == 0
    assert not [p.name for p in (disk / "t-0").iterdir() if p.name.endswith(".tmp")]

    (disk / "filler").unlink()
    log.append_as_leader(make_batch(5), 3)
    assert log.leader_epoch_cache.entries == [(3, 0)]
    assert (disk / "t-0" / LEADER_EPOCH_CHECKPOINT).read_text().split() == ["0", "1", "3", "0"]
    log.close()


def test_a_short_index_write_is_undone(small_tmpfs: Mount) -> None:
    """341 time-index entries end 4 bytes before a page boundary: the next entry is a short write."""
    disk = small_tmpfs(1 * _MIB)
    index = TimeIndex(disk / "00000000000000000000.timeindex", 0, 1 * _MIB)
    for i in range(341):
        index.maybe_append(1_000 + i, i)
    fill(disk / "filler")
    with pytest.raises(OSError):
        index.maybe_append(5_000, 400)
    assert index.entries == 341
    assert os.path.getsize(index.path) == 341 * 12
    (disk / "filler").unlink()
    index.maybe_append(5_000, 400)
    index.close()
    reloaded = TimeIndex(index.path, 0, 1 * _MIB)
    reloaded.sanity_check()
    assert reloaded.last_entry == (5_000, 400)
    reloaded.close()


def test_a_checkpoint_that_does_not_fit_keeps_the_old_one_and_no_temp_file(
    small_tmpfs: Mount,
) -> None:
    disk = small_tmpfs(1 * _MIB)
    path = disk / "recovery-point-offset-checkpoint"
    write_checkpoint(path, [("t", 0, 5)])
    before = path.read_text()
    fill(disk / "filler")
    with pytest.raises(OSError):
        write_checkpoint(path, [("t", p, 5) for p in range(2_000)])  # needs a fresh page
    assert path.read_text() == before
    assert sorted(p.name for p in disk.iterdir()) == ["filler", path.name]


def test_log_manager_survives_a_full_disk_and_recovers_after_shutdown(
    small_tmpfs: Mount,
) -> None:
    disk = small_tmpfs(2 * _MIB)
    manager = LogManager(disk / "logs")
    manager.load(lambda _topic: small_config())
    logs = [manager.get_or_create_log("t", p, small_config()) for p in range(3)]
    for log in logs:
        log.append_as_leader(make_batch(5), 0)
    fill(disk / "filler")
    manager.checkpoint()  # a checkpoint that does not fit is skipped, not raised
    with pytest.raises(KafkaStorageError):
        logs[0].append_as_leader(_big_batch(), 0)
    manager.shutdown()
    # The checkpoints could not be written: no clean-shutdown marker, so the next
    # start validates the logs instead of trusting stale checkpoints.
    assert not (disk / "logs" / CLEAN_SHUTDOWN_FILE).exists()
    assert not [p for p in (disk / "logs").iterdir() if p.name.endswith(".tmp")]

    (disk / "filler").unlink()
    again = LogManager(disk / "logs")
    again.load(lambda _topic: small_config())
    try:
        for p in (0, 2):
            log = again.get_log("t", p)
            assert log is not None and _offsets(log) == list(range(5))
    finally:
        again.shutdown()


def test_a_cleaning_pass_that_finds_the_disk_full_is_tried_again_once_space_returns(
    small_tmpfs: Mount,
) -> None:
    """Issue #36: one ENOSPC used to leave the log uncleanable until a restart, so a
    compacted topic grew without bound. Now the pass is retried after a back-off."""
    from tests.local_tier.cleaning_helpers import (
        Clock,
        compact_config,
        make_cleaner,
        read_log,
        write,
    )

    disk = small_tmpfs(2 * _MIB)
    log = Log(disk / "t-0", "t", 0, compact_config(segment_bytes=64 * 1024), needs_recovery=False)
    try:
        for i in range(300):
            write(log, [(b"k%d" % ((i * 5 + j) % 10), b"v%d-" % i + bytes(300)) for j in range(5)])
        log.roll()
        filler = disk / "filler"
        fill(filler)
        cleaner = make_cleaner(log, Clock(), backoff_ms=300)
        assert not cleaner.clean_filthiest()
        progress = cleaner.progress("t", 0)
        assert progress is not None and progress.state == "retrying", progress
        assert "No space left on device" in (progress.error or "")
        assert not cleaner.clean_filthiest()  # within the back-off: not tried again at once
        filler.unlink()
        time.sleep(0.4)
        assert cleaner.clean_filthiest()
        records = read_log(log).records
        assert sorted(r.key for r in records) == sorted(b"k%d" % j for j in range(10))
        assert all(r.value.startswith(b"v299-") or r.value.startswith(b"v298-") for r in records)
        assert cleaner.progress("t", 0).state == "idle"
    finally:
        log.close()
