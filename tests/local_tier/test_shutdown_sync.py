"""A clean shutdown makes every log durable with one syncfs of the data dir's filesystem
(local_tier/shutdown.py), not an fsync per file; without syncfs, or when it fails, it falls
back to flushing each log, or writes no clean-shutdown marker so the next start recovers."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from local_tier import shutdown
from local_tier.manager import CLEAN_SHUTDOWN_FILE, LogManager
from tests.local_tier.batches import make_batch, small_config

PARTITIONS = 20
RECORDS = 3  # per make_batch()


def _populated(tmp_path: Path) -> LogManager:
    manager = LogManager(tmp_path)
    manager.load(lambda _topic: small_config())
    for partition in range(PARTITIONS):
        log = manager.get_or_create_log("t", partition, small_config())
        for _ in range(3):
            log.append_as_leader(make_batch(), 0)
        log.wait_for_flushes()  # the epoch checkpoint's fsync, queued by the first append (ADR 0030)
    return manager


def _counting_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    return calls


def _recovery_points(tmp_path: Path) -> dict[str, int]:
    lines = (tmp_path / "recovery-point-offset-checkpoint").read_text().splitlines()[2:]
    return {f"{t}-{p}": int(o) for t, p, o in (line.split() for line in lines)}


def test_one_syncfs_makes_every_log_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = _populated(tmp_path)
    synced: list[int] = []
    real = shutdown._SYNCFS
    assert real is not None, "this Linux has syncfs"
    monkeypatch.setattr(shutdown, "_SYNCFS", lambda fd: (synced.append(fd), real(fd))[1])
    fsyncs = _counting_fsyncs(monkeypatch)
    manager.shutdown()
    assert len(synced) == 1
    assert len(fsyncs) < PARTITIONS  # the checkpoints' and the directory's, not one per file
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert _recovery_points(tmp_path) == {f"t-{p}": 3 * RECORDS for p in range(PARTITIONS)}
    assert all(any(d.glob("*.snapshot")) for d in tmp_path.glob("t-*"))  # producer snapshots


def test_without_syncfs_every_log_is_flushed_on_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = _populated(tmp_path)
    monkeypatch.setattr(shutdown, "_SYNCFS", None)
    fsyncs = _counting_fsyncs(monkeypatch)
    manager.shutdown()
    assert len(fsyncs) >= PARTITIONS
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert _recovery_points(tmp_path) == {f"t-{p}": 3 * RECORDS for p in range(PARTITIONS)}


def test_a_failed_syncfs_leaves_no_clean_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = _populated(tmp_path)

    def failing(_fd: int) -> int:
        import ctypes
        ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(shutdown, "_SYNCFS", failing)
    manager.shutdown()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # the next start recovers
    reloaded = LogManager(tmp_path)
    reloaded.load(lambda _topic: small_config())
    log = reloaded.get_log("t", 0)
    assert log is not None and log.log_end_offset == 3 * RECORDS
    reloaded.shutdown()
