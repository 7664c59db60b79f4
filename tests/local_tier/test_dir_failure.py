"""A failed fsync takes the log directory offline; the loop never waits on the flush thread.

Faults are real errors raised by ``os.fsync`` and ``os.write`` (monkeypatched in this
process): EIO as a failing disk gives it. A failed fsync may have dropped the pages it
could not write, so nothing after it may count them durable: not a later fsync that
succeeds, not the recovery point, not a clean-shutdown marker (issue 32, item 1). The
flush thread does the fsyncs of flush.messages, the checkpoints and the closing of logs;
the caller (the broker's event loop) never waits for it (item 4).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from common.errors import ErrorCode, KafkaStorageError
from local_tier.manager import CLEAN_SHUTDOWN_FILE, LogManager
from local_tier.segment import LogSegment
from tests.local_tier.batches import make_batch, small_config

_real_fsync = os.fsync


def _eio(_fd: int) -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


@pytest.fixture()
def manager(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager(tmp_path / "logs")
    manager.load(lambda _topic: small_config())
    yield manager
    manager.shutdown()


def _wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within 5 s"
        time.sleep(0.01)


def _fsync_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the thread of every fsync from now on."""
    threads: list[str] = []

    def recording(fd: int) -> None:
        threads.append(threading.current_thread().name)
        _real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return threads


def test_a_failed_fsync_takes_the_dir_offline_and_a_later_good_fsync_moves_nothing(
    manager: LogManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = manager.get_or_create_log("t", 0, small_config())
    other = manager.get_or_create_log("t", 1, small_config())
    log.append_as_leader(make_batch(3), 0)
    monkeypatch.setattr(os, "fsync", _eio)
    log.schedule_flush()
    log.wait_for_flushes()
    assert log.recovery_point == 0
    monkeypatch.setattr(os, "fsync", _real_fsync)  # the disk "recovers": its pages may be gone
    log.schedule_flush()
    log.wait_for_flushes()
    assert log.recovery_point == 0
    assert manager.offline
    for target in (log, other):  # every log of the directory is offline
        with pytest.raises(KafkaStorageError) as refused:
            target.append_as_leader(make_batch(1), 0)
        assert refused.value.code == ErrorCode.kafka_storage_error == 56
    assert log.log_end_offset == 3


def test_a_shutdown_after_a_failed_flush_is_not_clean_and_the_next_start_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager(tmp_path / "logs")
    manager.load(lambda _topic: small_config())
    log = manager.get_or_create_log("t", 0, small_config())
    log.append_as_leader(make_batch(3), 0)
    log.append_as_leader(make_batch(3), 0)
    failures = iter([True])  # one failed fsync; every later one succeeds

    def fails_once(fd: int) -> None:
        if next(failures, False):
            _eio(fd)
        _real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fails_once)
    manager.shutdown()
    monkeypatch.setattr(os, "fsync", _real_fsync)
    assert not (tmp_path / "logs" / CLEAN_SHUTDOWN_FILE).exists()

    recovered: list[int] = []
    real_recover = LogSegment.recover

    def counting(self: LogSegment, *args: object, **kwargs: object) -> int:
        recovered.append(self.base_offset)
        return real_recover(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LogSegment, "recover", counting)
    again = LogManager(tmp_path / "logs")
    again.load(lambda _topic: small_config())
    try:
        assert recovered == [0]
        reopened = again.get_log("t", 0)
        assert reopened is not None and reopened.log_end_offset == 6
        assert not again.offline
    finally:
        again.shutdown()


def test_a_write_error_takes_the_dir_offline_but_a_full_disk_does_not(
    manager: LogManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = manager.get_or_create_log("t", 0, small_config())
    other = manager.get_or_create_log("t", 1, small_config())

    def failing_append(code: int) -> Callable[..., None]:
        def append(*_args: object, **_kwargs: object) -> None:
            raise OSError(code, os.strerror(code))
        return append

    monkeypatch.setattr(LogSegment, "append", failing_append(errno.ENOSPC))
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(make_batch(1), 0)
    monkeypatch.undo()
    other.append_as_leader(make_batch(1), 0)  # a full disk: undone, the directory stays online
    monkeypatch.setattr(LogSegment, "append", failing_append(errno.EIO))
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(make_batch(1), 0)
    monkeypatch.undo()
    with pytest.raises(KafkaStorageError):  # the directory is offline: every log of it
        other.append_as_leader(make_batch(1), 0)
    assert manager.offline


def test_truncate_and_close_never_wait_for_a_slow_fsync(
    manager: LogManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = manager.get_or_create_log("t", 0, small_config(segment_bytes=len(make_batch(3)) * 2))
    for _ in range(4):
        log.append_as_leader(make_batch(3), 0)  # two segments: 0 and 6
    log.wait_for_flushes()
    released = threading.Event()

    inline: list[str] = []

    def slow(fd: int) -> None:  # a disk that takes 2 s to write back the flush thread's pages
        if threading.current_thread().name.startswith("strata-log-flush"):
            released.wait(10)
        else:
            inline.append(os.readlink(f"/proc/self/fd/{fd}"))
        _real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow)
    log.schedule_flush()  # the flush thread now sits in a 2 s fsync
    timer = threading.Timer(2.0, released.set)
    timer.start()
    try:
        started = time.monotonic()
        log.truncate_to(3)
        truncating = time.monotonic() - started
        other = manager.get_or_create_log("u", 0, small_config())
        started = time.monotonic()
        manager.delete_log("u", 0)  # closes the log
        closing = time.monotonic() - started
        assert other.closed
    finally:
        released.set()
        timer.cancel()
    assert truncating < 0.5 and closing < 0.5, (truncating, closing)
    assert inline == []  # nor did it fsync anything itself (the producer snapshot: off the loop)
    log.wait_for_flushes()
    assert log.log_end_offset == 3
    # the flush queued before the cut covered offsets up to 12 that are gone now
    assert log.recovery_point <= 3
    assert [p.name for p in log.dir.glob("*.deleted")] == []


def test_checkpoints_are_written_on_the_flush_thread(
    manager: LogManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = manager.get_or_create_log("t", 0, small_config())
    log.append_as_leader(make_batch(3), 0)
    log.update_high_watermark(3)
    threads = _fsync_threads(monkeypatch)
    manager.checkpoint()
    manager.checkpoint_high_watermarks()
    written = manager.log_dir / "replication-offset-checkpoint"
    _wait_until(lambda: written.exists() and written.read_text() == "0\n1\nt 0 3\n")
    assert threads and threading.current_thread().name not in threads
    assert manager.wait_for_checkpoints()


def test_flush_messages_fsyncs_on_the_flush_thread_and_the_append_can_wait_for_it(
    manager: LogManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = manager.get_or_create_log("t", 0, small_config(flush_messages=1))
    log.leader_epoch_cache.assign(0, 0)  # (a new leader epoch is checkpointed on the loop, once)
    threads = _fsync_threads(monkeypatch)
    info = log.append_as_leader(make_batch(3), 0)
    _wait_until(lambda: log.recovery_point == 3)
    assert threads and threading.current_thread().name not in threads
    flush = log.pending_flush(info.last_offset + 1)
    assert flush is not None and flush.result(5) is True

    monkeypatch.setattr(os, "fsync", _eio)
    info = log.append_as_leader(make_batch(3), 0)
    flush = log.pending_flush(info.last_offset + 1)
    assert flush is not None and flush.result(5) is False  # its Produce: KAFKA_STORAGE_ERROR
    assert log.recovery_point == 3
