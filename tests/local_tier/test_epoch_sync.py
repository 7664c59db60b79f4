"""The leader-epoch checkpoint is written and fsynced on the flush thread, not where the
append runs (the broker's event loop), and nothing counts the records of an epoch durable
before its checkpoint is (ADR 0030).

A partition's first append at a new epoch (after every election, on the leader and on each
follower) wrote the checkpoint and fsynced it and its directory on the loop, about 0.8 ms
per partition here, during which no other client was served: a produce to 300 new
partitions in one request held the loop for 0.2-0.3 s. Now the flush thread does it, in
order with the segments' fsyncs. Until it has, no flush raises the recovery point past the
epoch's first offset, so a crash in between recovers those batches, and the recovery
rebuilds their epochs from the batches themselves, as Kafka's does.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from local_tier.dir_failure import LogDirFailure
from local_tier.epoch import LEADER_EPOCH_CHECKPOINT
from local_tier.log import Log
from local_tier.manager import CLEAN_SHUTDOWN_FILE, LogManager
from tests.local_tier.batches import make_batch, small_config

_real_fsync = os.fsync


class HeldScheduler:
    """A flush thread that runs its jobs only when the test says so."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[[], Any], Future[Any]]] = []

    def submit(self, job: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self.jobs.append((job, future))
        return future

    def run(self) -> None:
        jobs, self.jobs = self.jobs, []
        for job, future in jobs:
            future.set_result(job())


def _log(path: Path, scheduler: Any, **kw: Any) -> Log:
    return Log(path, "t", 0, small_config(), needs_recovery=False, scheduler=scheduler, **kw)


def _close(log: Log, held: HeldScheduler) -> None:
    log.close()
    held.run()  # its files close on the flush thread


def _file_work(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """(thread name, call, file name) of every fsync and rename from now on."""
    seen: list[tuple[str, str, str]] = []
    real_replace = os.replace

    def fsync(fd: int) -> None:
        seen.append((threading.current_thread().name, "fsync", Path(os.readlink(f"/proc/self/fd/{fd}")).name))
        _real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        seen.append((threading.current_thread().name, "replace", Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return seen


def test_a_new_epoch_is_written_and_fsynced_on_the_flush_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager(tmp_path / "logs")
    manager.load(lambda _topic: small_config())
    try:
        log = manager.get_or_create_log("t", 0, small_config())
        work = _file_work(monkeypatch)
        caller = threading.current_thread().name
        log.append_as_leader(make_batch(), 7)
        log.wait_for_flushes()
        assert (log.dir / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n1\n7 0\n"
        ours = (LEADER_EPOCH_CHECKPOINT, LEADER_EPOCH_CHECKPOINT + ".tmp", "t-0")
        epoch_work = [(thread, call) for thread, call, name in work if name in ours]
        assert {call for _, call in epoch_work} == {"fsync", "replace"}  # the file, its rename, the directory
        assert [thread for thread, _ in epoch_work if thread == caller] == []
        log.append_as_leader(make_batch(), 7)  # the same epoch: nothing written again
        log.wait_for_flushes()
        assert [n for _, call, n in work if call == "replace"].count(LEADER_EPOCH_CHECKPOINT) == 1
    finally:
        manager.shutdown()


def test_no_flush_counts_an_epoch_durable_before_its_checkpoint(tmp_path: Path) -> None:
    held = HeldScheduler()
    log = _log(tmp_path / "t-0", held)
    log.append_as_leader(make_batch(), 0)  # offsets 0-2 at epoch 0
    held.run()
    assert log.flush() and log.recovery_point == 3
    log.append_as_leader(make_batch(), 1)  # offsets 3-5 at epoch 1: its checkpoint is queued
    assert (log.dir / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n1\n0 0\n"
    assert log.flush()  # the records' own fsync, done right here
    assert log.recovery_point == 3  # but the epoch that starts at 3 is not in the file yet
    done = log.schedule_flush()  # queued after the checkpoint: counts once that is written
    held.run()
    assert (log.dir / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n0 0\n1 3\n"
    assert done.result() and log.recovery_point == 6
    _close(log, held)


def test_a_crash_before_the_checkpoint_recovers_the_epoch_from_the_batches(tmp_path: Path) -> None:
    held = HeldScheduler()
    log = _log(tmp_path / "t-0", held)
    log.append_as_leader(make_batch(), 0)
    held.run()
    log.append_as_leader(make_batch(), 4)  # epoch 4 from offset 3; its checkpoint is never written
    log.append_as_leader(make_batch(), 4)
    log.flush()
    recovery_point = log.recovery_point
    assert recovery_point == 3
    _close(log, held)  # the crash: a closed log's queued checkpoint write is dropped
    assert (log.dir / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n1\n0 0\n"
    restarted = Log(log.dir, "t", 0, small_config(), needs_recovery=True,
                    recovery_point=recovery_point)
    try:
        assert restarted.log_end_offset == 9
        assert restarted.leader_epoch_cache.entries == [(0, 0), (4, 3)]
        assert (log.dir / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n0 0\n4 3\n"
        assert restarted.leader_epoch_cache.end_offset_for(0) == (0, 3)  # what a follower asks
        assert restarted.recovery_point == 9
    finally:
        restarted.close()


def test_a_clean_restart_rebuilds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = HeldScheduler()
    log = _log(tmp_path / "t-0", held)
    log.append_as_leader(make_batch(), 3)
    held.run()
    assert log.flush()
    _close(log, held)
    written = (log.dir / LEADER_EPOCH_CHECKPOINT).stat().st_mtime_ns
    work = _file_work(monkeypatch)
    restarted = Log(log.dir, "t", 0, small_config(), needs_recovery=True, recovery_point=0)
    try:  # every batch recovered, every epoch already in the file: nothing written
        assert restarted.leader_epoch_cache.entries == [(3, 0)]
        assert (log.dir / LEADER_EPOCH_CHECKPOINT).stat().st_mtime_ns == written
        assert [n for _, _, n in work if n == LEADER_EPOCH_CHECKPOINT] == []
    finally:
        restarted.close()


def _checkpoint_write_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> tuple[HeldScheduler, LogDirFailure, Log]:
    """A log whose first append (epoch 5, offsets 0-2) queued its checkpoint, then that
    write's fsync failing with ``code`` (every fsync fails until the test restores it)."""
    held = HeldScheduler()
    failure = LogDirFailure(tmp_path)
    log = _log(tmp_path / "t-0", held, failure=failure)
    log.append_as_leader(make_batch(), 5)

    def failing(_fd: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", failing)
    held.run()
    return held, failure, log


def test_a_failed_checkpoint_write_takes_the_directory_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held, failure, log = _checkpoint_write_failing(tmp_path, monkeypatch, errno.EIO)
    assert failure.offline and "leader-epoch checkpoint" in (failure.reason or "")
    monkeypatch.setattr(os, "fsync", _real_fsync)
    assert not log.flush()
    assert log.recovery_point == 0
    _close(log, held)


def test_a_full_disk_writes_the_checkpoint_again_at_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held, failure, log = _checkpoint_write_failing(tmp_path, monkeypatch, errno.ENOSPC)
    monkeypatch.setattr(os, "fsync", _real_fsync)
    assert not failure.offline  # a full disk is not a failing one
    assert not (log.dir / LEADER_EPOCH_CHECKPOINT).exists()
    assert log.flush() and log.recovery_point == 0  # epoch 5 from 0 is not on disk
    log.append_as_leader(make_batch(), 5)  # queues the checkpoint again
    held.run()
    assert (log.dir / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n1\n5 0\n"
    assert log.flush() and log.recovery_point == 6
    _close(log, held)


def test_the_leaders_epoch_from_its_election_reaches_the_file_with_the_first_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leadership assigns its epoch in memory only (10,000 partitions: no fsync per
    partition at the election); the first append queues it for the flush thread."""
    held = HeldScheduler()
    log = _log(tmp_path / "t-0", held)
    log.leader_epoch_cache.assign(9, log.log_end_offset, persist=False)
    work = _file_work(monkeypatch)
    log.append_as_leader(make_batch(), 9)
    assert work == [] and not (log.dir / LEADER_EPOCH_CHECKPOINT).exists()
    held.run()
    assert [(call, name) for _, call, name in work] == [
        ("fsync", LEADER_EPOCH_CHECKPOINT + ".tmp"), ("replace", LEADER_EPOCH_CHECKPOINT), ("fsync", "t-0")]
    assert (log.dir / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n1\n9 0\n"
    _close(log, held)


def test_a_closed_logs_queued_checkpoint_is_not_written(tmp_path: Path) -> None:
    """A deleted topic made again under its name has a new directory at the same path: the
    old log's queued write must not land in it."""
    held = HeldScheduler()
    log = _log(tmp_path / "t-0", held)
    log.append_as_leader(make_batch(), 8)
    log.close()
    held.run()
    assert not (log.dir / LEADER_EPOCH_CHECKPOINT).exists()


def _enospc(_fd: int) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("space_again", [True, False])
def test_a_clean_shutdown_writes_a_checkpoint_the_full_disk_held_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, space_again: bool
) -> None:
    """The write failed on a full disk and the partition got no append since: the shutdown
    writes it (then the marker), or, if it fails again, leaves no clean-shutdown marker, so
    the next start recovers the batches and their epoch."""
    manager = LogManager(tmp_path / "logs")
    manager.load(lambda _topic: small_config())
    log = manager.get_or_create_log("t", 0, small_config())
    log.append_as_leader(make_batch(), 0)
    log.wait_for_flushes()
    monkeypatch.setattr(os, "fsync", _enospc)
    log.append_as_leader(make_batch(), 1)  # epoch 1 from offset 3
    log.wait_for_flushes()
    assert (log.dir / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n1\n0 0\n"
    if space_again:
        monkeypatch.setattr(os, "fsync", _real_fsync)
    manager.shutdown()
    monkeypatch.setattr(os, "fsync", _real_fsync)
    marker = (tmp_path / "logs" / CLEAN_SHUTDOWN_FILE).exists()
    if space_again:
        assert marker and (log.dir / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n0 0\n1 3\n"
        return
    assert not marker
    again = LogManager(tmp_path / "logs")
    again.load(lambda _topic: small_config())
    try:
        assert again.get_log("t", 0).leader_epoch_cache.entries == [(0, 0), (1, 3)]
    finally:
        again.shutdown()


def test_a_rebuild_that_cannot_be_written_keeps_the_recovery_point_below_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldScheduler()
    log = _log(tmp_path / "t-0", held)
    log.append_as_leader(make_batch(), 0)
    held.run()
    log.append_as_leader(make_batch(), 4)  # epoch 4 from 3; its write is dropped below
    log.flush()
    _close(log, held)
    import local_tier.epoch as epoch_module

    def full(*_args: Any, **_kw: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(epoch_module, "write_checkpoint", full)
        restarted = Log(log.dir, "t", 0, small_config(), needs_recovery=True, recovery_point=3, scheduler=held)
    assert restarted.leader_epoch_cache.entries == [(0, 0), (4, 3)]  # in memory
    assert restarted.recovery_point <= 3
    assert restarted.flush() and restarted.recovery_point == 3  # not past the unwritten epoch
    restarted.append_as_follower(make_batch(base_offset=6))  # a follower's append writes it
    held.run()
    assert (log.dir / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n0 0\n4 3\n"
    assert restarted.flush() and restarted.recovery_point == restarted.log_end_offset
    _close(restarted, held)


def test_the_batches_overrule_a_stale_newer_epoch_in_the_file(tmp_path: Path) -> None:
    """A follower's file said epoch 5 from 3; a truncation cut it from memory only, the
    leader's records at epoch 4 followed, and the process died before their checkpoint was
    written. The recovery believes the batches."""
    held = HeldScheduler()
    log = _log(tmp_path / "t-0", held)
    log.append_as_leader(make_batch(), 3)  # 0-2 at epoch 3
    held.run()
    assert log.flush()
    _close(log, held)
    (log.dir / LEADER_EPOCH_CHECKPOINT).write_text("0\n2\n3 0\n5 3\n")  # the stale entry
    held = HeldScheduler()
    log = _log(tmp_path / "t-0", held)
    log.leader_epoch_cache.truncate_from_end(3)
    log.append_as_leader(make_batch(), 4)  # 3-5 at epoch 4; its write never runs
    log.append_as_leader(make_batch(), 4)
    _close(log, held)
    restarted = Log(log.dir, "t", 0, small_config(), needs_recovery=True, recovery_point=3)
    try:
        assert restarted.leader_epoch_cache.entries == [(3, 0), (4, 3)]
        assert restarted.leader_epoch_cache.end_offset_for(4) == (4, 9)
        assert restarted.leader_epoch_cache.end_offset_for(3) == (3, 3)
        assert (log.dir / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n3 0\n4 3\n"
    finally:
        restarted.close()
