from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_tier.config import LogConfig
from local_tier.manager import CLEAN_SHUTDOWN_FILE, LogManager, parse_log_dir_name
from local_tier.segment import LogSegment
from tests.local_tier.batches import make_batch, small_config


def _config(_topic: str) -> LogConfig:
    return small_config(segment_bytes=len(make_batch()) * 2)


@pytest.fixture()
def managers() -> Iterator[list[LogManager]]:
    opened: list[LogManager] = []
    yield opened
    for manager in opened:
        manager.shutdown()


def _manager(tmp_path: Path, managers: list[LogManager]) -> LogManager:
    manager = LogManager(tmp_path)
    manager.load(_config)
    managers.append(manager)
    return manager


def _populate(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    manager.load(_config)
    for topic, partition in [("orders", 0), ("my-topic.v2", 11)]:
        log = manager.get_or_create_log(topic, partition, _config(topic))
        for _ in range(5):
            log.append_as_leader(make_batch(), 0)
        log.update_high_watermark(12)  # a leader whose followers hold up to 12
    manager.shutdown()


def test_parse_log_dir_name_splits_at_the_last_dash() -> None:
    assert parse_log_dir_name("my-topic.v2-11") == ("my-topic.v2", 11)
    assert parse_log_dir_name("orders") is None
    assert parse_log_dir_name("orders-x") is None


def test_clean_shutdown_skips_recovery_and_reloads_everything(
    tmp_path: Path, managers: list[LogManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    _populate(tmp_path)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == (
        "0\n2\nmy-topic.v2 11 15\norders 0 15\n"
    )

    def no_recovery(self: LogSegment, max_message_bytes: int) -> int:
        raise AssertionError("recovery must not run after a clean shutdown")

    monkeypatch.setattr(LogSegment, "recover", no_recovery)
    manager = _manager(tmp_path, managers)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert set(manager.all_logs()) == {("orders", 0), ("my-topic.v2", 11)}
    log = manager.get_log("my-topic.v2", 11)
    # the high watermark is the checkpointed one: a restarted replica exposes nothing more
    assert log is not None and (log.log_end_offset, log.high_watermark) == (15, 12)


def test_crash_recovers_only_from_the_recovery_point(
    tmp_path: Path,
    managers: list[LogManager],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _populate(tmp_path)
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    recovered: list[int] = []
    real_recover = LogSegment.recover

    def spy(self: LogSegment) -> int:
        recovered.append(self.base_offset)
        return real_recover(self)

    monkeypatch.setattr(LogSegment, "recover", spy)
    with caplog.at_level(logging.WARNING, logger="strata.local_tier"):
        _manager(tmp_path, managers)
    assert "no clean shutdown marker" in caplog.text
    assert sorted(recovered) == [12, 12]  # only the active segment, from recovery point 15


def test_leftover_delete_dirs_are_removed(tmp_path: Path, managers: list[LogManager]) -> None:
    (tmp_path / "gone-0.abc123-delete").mkdir()
    (tmp_path / "gone-0.abc123-delete" / "00000000000000000000.log").write_bytes(b"")
    _manager(tmp_path, managers)
    assert not (tmp_path / "gone-0.abc123-delete").exists()


def test_delete_logs_removes_the_topic(tmp_path: Path, managers: list[LogManager]) -> None:
    _populate(tmp_path)
    manager = _manager(tmp_path, managers)
    manager.delete_logs("orders")
    assert manager.wait_for_checkpoints()  # written on the flush thread
    assert manager.get_log("orders", 0) is None
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["my-topic.v2-11"]
    assert "orders" not in (tmp_path / "log-start-offset-checkpoint").read_text()


def test_retention_and_log_start_offset_checkpoint(
    tmp_path: Path, managers: list[LogManager]
) -> None:
    manager = _manager(tmp_path, managers)
    log = manager.get_or_create_log("t", 0, _config("t"))
    for _ in range(5):
        log.append_as_leader(make_batch(), 0)
    log.update_high_watermark(log.log_end_offset)
    manager.update_config("t", small_config(segment_bytes=10**6, retention_ms=0))
    assert manager.run_retention(now_ms=10**6) == 3
    assert manager.wait_for_checkpoints()
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 15\n"


def test_run_flush_honours_flush_ms(tmp_path: Path, managers: list[LogManager]) -> None:
    manager = _manager(tmp_path, managers)
    log = manager.get_or_create_log("t", 0, small_config(flush_ms=1_000))
    log.append_as_leader(make_batch(), 0)
    manager.run_flush(now_ms=log.last_flush_ms + 500)
    log.wait_for_flushes()
    assert log.recovery_point == 0
    manager.run_flush(now_ms=log.last_flush_ms + 1_000)
    log.wait_for_flushes()
    assert log.recovery_point == 3


def test_a_data_dir_without_high_watermarks_takes_the_log_ends(
    tmp_path: Path, managers: list[LogManager]
) -> None:
    """Written before high watermarks were checkpointed: every log's is its end, as then."""
    _populate(tmp_path)
    (tmp_path / "replication-offset-checkpoint").unlink()
    manager = _manager(tmp_path, managers)
    log = manager.get_log("orders", 0)
    assert log is not None and log.high_watermark == log.log_end_offset == 15
