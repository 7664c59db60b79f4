from __future__ import annotations

from pathlib import Path

import pytest

from local_tier.checkpoint import CheckpointError, read_offset_checkpoint, write_offset_checkpoint
from local_tier.epoch import LeaderEpochCache


def test_checkpoint_round_trip_in_kafka_text_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path, lambda: 100)
    cache.assign(0, 0)
    cache.assign(3, 40)
    cache.assign(3, 50)  # same epoch: keeps its first start offset
    assert path.read_text() == "0\n2\n0 0\n3 40\n"
    reloaded = LeaderEpochCache(path, lambda: 100)
    assert reloaded.entries == [(0, 0), (3, 40)]
    assert reloaded.latest_epoch == 3
    assert not list(tmp_path.glob("*.tmp"))


def test_end_offset_for_follows_kafka(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "c", lambda: 100)
    assert cache.end_offset_for(0) == (-1, -1)
    cache.assign(2, 10)
    cache.assign(5, 40)
    assert cache.end_offset_for(5) == (5, 100)
    assert cache.end_offset_for(3) == (2, 40)
    assert cache.end_offset_for(1) == (1, 10)
    assert cache.end_offset_for(6) == (-1, -1)


def test_older_epochs_are_ignored_and_truncation_works(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "c", lambda: 100)
    cache.assign(1, 0)
    cache.assign(2, 10)
    cache.assign(3, 20)
    cache.assign(0, 30)
    assert cache.latest_epoch == 3
    cache.truncate_from_end(20)
    assert cache.entries == [(1, 0), (2, 10)]
    cache.truncate_from_start(15)
    assert cache.entries == [(2, 15)]
    assert LeaderEpochCache(tmp_path / "c", lambda: 0).entries == [(2, 15)]


def test_offset_checkpoints_round_trip_topics_with_dashes(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    offsets = {("my-topic.v1", 3): 42, ("a", 0): 7}
    write_offset_checkpoint(path, offsets)
    assert path.read_text() == "0\n2\na 0 7\nmy-topic.v1 3 42\n"
    assert read_offset_checkpoint(path) == offsets
    path.write_text("0\n3\na 0 7\n")
    with pytest.raises(CheckpointError):
        read_offset_checkpoint(path)


def test_a_restart_of_an_idle_leader_writes_no_checkpoint(tmp_path: Path) -> None:
    """The load drops the epoch that starts at the log end; leading again at that epoch finds
    the file saying so already: no write, no fsync (two per partition used to make 10,000
    partitions take a minute to start)."""
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCache(path, lambda: 0).assign(4, 0)  # a leader at epoch 4 of an empty log
    written = path.stat().st_mtime_ns, path.stat().st_ino
    restarted = LeaderEpochCache(path, lambda: 0)
    restarted.truncate_from_end(0)  # what Log's load does
    assert restarted.entries == []
    restarted.assign(4, 0)  # leader again at the same epoch
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == written
    restarted.assign(5, 0)  # a new epoch is written
    assert path.read_text() == "0\n1\n5 0\n"
    restarted.truncate_from_end(0)
    assert LeaderEpochCache(path, lambda: 0).entries == [(5, 0)]  # memory only; the load drops it
