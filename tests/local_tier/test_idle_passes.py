"""Issue 33: the log manager's periodic passes over an idle directory read no log and write
no file; they look again at exactly the logs that changed, and a write that failed is
tried again. Counted (reads of a log's offsets, files replaced), not timed."""

from __future__ import annotations

import errno
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import local_tier.manager as manager_module
from local_tier.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
)
from local_tier.log import Log
from local_tier.manager import LogManager
from tests.local_tier.batches import make_batch, small_config

PARTITIONS = 40
FILES = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT)


@pytest.fixture()
def manager(tmp_path: Path) -> Iterator[LogManager]:
    made = LogManager(tmp_path)
    made.load(lambda _topic: small_config())
    yield made
    made.shutdown()


@pytest.fixture()
def offset_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each checkpointed offset of any log is read."""
    reads: Counter[str] = Counter()
    for name in ("recovery_point", "log_start_offset", "high_watermark"):
        real = getattr(Log, name)

        def counted(log: Log, name: str = name, real: property = real) -> int:
            reads[name] += 1
            return real.fget(log)  # type: ignore[misc]

        monkeypatch.setattr(Log, name, property(counted))
    return reads


def _idle_logs(manager: LogManager) -> list[Log]:
    logs = [manager.get_or_create_log(f"t{p % 4}", p, small_config()) for p in range(PARTITIONS)]
    for log in logs[:10]:
        log.append_as_leader(make_batch(3), 0)
        log.update_high_watermark(log.log_end_offset)
        log.flush()
    assert manager.checkpoint().result()
    return logs


def _inodes(manager: LogManager) -> dict[str, int]:
    return {name: (manager.log_dir / name).stat().st_ino for name in FILES}


def test_checkpoints_of_an_idle_directory_read_no_log_and_replace_no_file(
    manager: LogManager, offset_reads: Counter[str]
) -> None:
    _idle_logs(manager)
    before = _inodes(manager)
    offset_reads.clear()
    for _ in range(3):
        assert manager.checkpoint_high_watermarks().result()
        assert manager.checkpoint().result()
    assert offset_reads == Counter()
    assert _inodes(manager) == before  # a write replaces the file (a rename): none happened
    assert manager.wait_for_checkpoints()


def test_a_pass_reads_only_the_logs_that_changed_and_writes_their_new_offsets(
    manager: LogManager, offset_reads: Counter[str]
) -> None:
    logs = _idle_logs(manager)
    before = _inodes(manager)
    offset_reads.clear()
    moved = logs[25]
    moved.append_as_leader(make_batch(4), 0)
    moved.update_high_watermark(moved.log_end_offset)
    assert manager.checkpoint_high_watermarks().result()
    assert offset_reads == Counter(high_watermark=1)
    hws = read_offset_checkpoint(manager.log_dir / REPLICATION_OFFSET_CHECKPOINT)
    assert hws[(moved.topic, moved.partition)] == 4
    assert len(hws) == PARTITIONS and hws[("t0", 0)] == 3  # the file holds every log still
    after = _inodes(manager)
    assert after[REPLICATION_OFFSET_CHECKPOINT] != before[REPLICATION_OFFSET_CHECKPOINT]
    assert after[RECOVERY_POINT_CHECKPOINT] == before[RECOVERY_POINT_CHECKPOINT]


def test_a_recovery_point_moved_by_a_flush_in_flight_reaches_a_later_checkpoint(
    manager: LogManager,
) -> None:
    """The flush thread moves the recovery point after the pass that saw the flush scheduled:
    the log stays due until its flush is done."""
    log = _idle_logs(manager)[30]
    release = threading.Event()
    manager._executor.submit(release.wait)  # the flush thread is busy: the flush waits
    try:
        log.append_as_leader(make_batch(5), 0)
        log.schedule_flush()
        assert log.recovery_point == 0
        manager.checkpoint()
    finally:
        release.set()
    log.wait_for_flushes()
    assert log.recovery_point == 5
    assert manager.checkpoint().result()
    points = read_offset_checkpoint(manager.log_dir / RECOVERY_POINT_CHECKPOINT)
    assert points[(log.topic, log.partition)] == 5


def test_a_checkpoint_that_could_not_be_written_is_written_by_the_next_pass(
    manager: LogManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = _idle_logs(manager)
    logs[3].update_high_watermark(0)
    real = manager_module.write_offset_checkpoint
    failures = [OSError(errno.ENOSPC, "No space left on device")]

    def full_once(path: Path, offsets: dict[tuple[str, int], int]) -> None:
        if failures:
            raise failures.pop()
        real(path, offsets)

    monkeypatch.setattr(manager_module, "write_offset_checkpoint", full_once)
    assert manager.checkpoint_high_watermarks().result() is False
    assert read_offset_checkpoint(manager.log_dir / REPLICATION_OFFSET_CHECKPOINT)[("t3", 3)] == 3
    assert manager.checkpoint_high_watermarks().result()  # nothing changed since, but it is due
    assert read_offset_checkpoint(manager.log_dir / REPLICATION_OFFSET_CHECKPOINT)[("t3", 3)] == 0


def test_a_deleted_log_leaves_the_checkpoints_and_a_new_one_enters_them(manager: LogManager) -> None:
    _idle_logs(manager)
    manager.delete_log("t1", 5)
    manager.get_or_create_log("fresh", 0, small_config())
    assert manager.checkpoint().result()
    for name in FILES:
        keys = set(read_offset_checkpoint(manager.log_dir / name))
        assert ("t1", 5) not in keys and ("fresh", 0) in keys and len(keys) == PARTITIONS


def test_the_cleaners_look_only_at_compacted_logs_and_follow_config_changes(manager: LogManager) -> None:
    _idle_logs(manager)
    assert manager.compacted_logs() == {}
    compacted = manager.get_or_create_log("compacted", 0, small_config(cleanup_policy="compact"))
    assert manager.compacted_logs() == {("compacted", 0): compacted}
    manager.update_config("t2", small_config(cleanup_policy="compact,delete"))
    assert sorted(manager.compacted_logs()) == [("compacted", 0)] + [("t2", p) for p in range(2, PARTITIONS, 4)]
    manager.update_config("compacted", small_config())
    manager.delete_logs("t2")
    assert manager.compacted_logs() == {}
    assert sorted(manager.hosted_topics()) == ["compacted", "t0", "t1", "t3"]


def test_a_deleted_partition_leaves_what_the_cleaner_remembers_of_it(manager: LogManager) -> None:
    """A topic deleted and created again under its name (or a replica moved away and back)
    starts clean: the cleaner had kept the old log's "cleaned up to" offset and its
    uncleanable mark, so the new log's records below that offset were never compacted and
    an uncleanable old log kept the new one from being cleaned until a restart."""
    from local_tier.cleaning.manager import CleanerConfig, LogCleaner

    manager.get_or_create_log("c", 0, small_config(cleanup_policy="compact"))
    manager.get_or_create_log("c", 1, small_config(cleanup_policy="compact"))
    cleaner = LogCleaner(manager.log_dir, manager.all_logs, owner=None, config=CleanerConfig())  # type: ignore[arg-type]
    manager.cleaner = cleaner
    cleaner._checkpoints[("c", 0)] = cleaner._checkpoints[("c", 1)] = 40
    cleaner._uncleanable |= {("c", 0), ("c", 1)}
    manager.delete_log("c", 0)
    assert ("c", 0) not in cleaner._checkpoints and ("c", 0) not in cleaner._uncleanable
    assert cleaner._checkpoints[("c", 1)] == 40 and ("c", 1) in cleaner._uncleanable  # the other stays
    manager.cleaner = None
