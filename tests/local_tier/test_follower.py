"""A follower's log: batches appended as the leader wrote them, truncation, a fresh start
after the bucket's part, and the tail of a segment cut for an upload."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.errors import CorruptRecordError, OffsetOutOfRangeError
from common.record.batch import decode_all, iter_batches, read_batch_header
from local_tier.log import Log
from local_tier.split import copy_segment_tail
from tests.local_tier.batches import make_batch, small_config


@pytest.fixture()
def logs(tmp_path: Path) -> Iterator[list[Log]]:
    made: list[Log] = []
    yield made
    for log in made:
        log.close()


def _log(tmp_path: Path, logs: list[Log], name: str, **config: object) -> Log:
    log = Log(tmp_path / name, "t", 0, small_config(**config), needs_recovery=False)
    logs.append(log)
    return log


def _leader_bytes(leader: Log, start: int = 0) -> bytes:
    """Every whole batch from ``start`` to the log end (a read stops at a segment's end)."""
    out = b""
    offset = start
    while offset < leader.log_end_offset:
        info = leader.read(offset, 1 << 20, max_offset=leader.log_end_offset)
        chunk = b"".join(r.read_bytes() for r in info.regions)
        if not chunk:
            break
        out += chunk
        *_, (_, last) = iter_batches(chunk)
        offset = last.next_offset
    return out


def test_a_follower_stores_the_leaders_batches_with_their_offsets_and_epochs(
    tmp_path: Path, logs: list[Log]
) -> None:
    leader = _log(tmp_path, logs, "leader", segment_bytes=600)
    for epoch in (0, 0, 3, 3, 3, 7):
        leader.append_as_leader(make_batch(4), epoch)
    follower = _log(tmp_path, logs, "follower", segment_bytes=600)
    data = _leader_bytes(leader)
    follower.append_as_follower(data[: len(data) - 10])  # a torn last batch is left for later
    assert follower.log_end_offset == 20
    follower.append_as_follower(_leader_bytes(leader, 20))
    assert follower.log_end_offset == leader.log_end_offset == 24
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries == [
        (0, 0), (3, 8), (7, 20)]
    assert _leader_bytes(follower) == _leader_bytes(leader)  # byte for byte, across rolls
    assert len(follower.segments) > 1
    assert [r.offset for r in decode_all(_leader_bytes(follower))] == list(range(24))


def test_a_follower_refuses_batches_it_has_and_a_corrupt_batch(tmp_path: Path, logs: list[Log]) -> None:
    leader = _log(tmp_path, logs, "leader")
    for _ in range(3):
        leader.append_as_leader(make_batch(2), 0)
    follower = _log(tmp_path, logs, "follower")
    bad = bytearray(_leader_bytes(leader))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(bytes(bad))
    assert follower.log_end_offset == 0
    follower.append_as_follower(_leader_bytes(leader)[: len(bad) // 3 * 2])  # offsets 0-3
    assert follower.log_end_offset == 4
    with pytest.raises(OffsetOutOfRangeError):  # starts at 2, before the log end: overlaps
        follower.append_as_follower(_leader_bytes(leader, 2))
    assert follower.log_end_offset == 4


def test_truncation_removes_a_diverging_suffix_and_the_epochs_that_started_in_it(
    tmp_path: Path, logs: list[Log]
) -> None:
    log = _log(tmp_path, logs, "l", segment_bytes=400)
    for epoch in (1, 1, 2, 2, 2, 4):
        log.append_as_leader(make_batch(3), epoch)
    log.update_high_watermark(log.log_end_offset)
    assert log.truncate_to(7)  # inside the batch [6, 8]: it goes whole
    assert log.log_end_offset == 6 and log.high_watermark == 6
    assert log.leader_epoch_cache.entries == [(1, 0)]  # epoch 2 started in the cut part
    assert [r.offset for r in decode_all(_leader_bytes(log))] == list(range(6))
    assert not log.truncate_to(100)
    log.append_as_leader(make_batch(2), 5)  # appends continue at the cut
    assert log.log_end_offset == 8 and log.leader_epoch_cache.latest_epoch == 5


def test_a_new_replica_starts_empty_after_the_part_in_the_bucket(
    tmp_path: Path, logs: list[Log]
) -> None:
    leader = _log(tmp_path, logs, "leader")
    for _ in range(10):
        leader.append_as_leader(make_batch(5), 2)
    follower = _log(tmp_path, logs, "follower")
    follower.append_as_leader(make_batch(1), 0)  # anything it had goes
    follower.truncate_fully_and_start_at(30)
    assert (follower.log_start_offset, follower.log_end_offset, follower.high_watermark) == (30, 30, 30)
    assert follower.leader_epoch_cache.entries == []
    follower.append_as_follower(_leader_bytes(leader, 30))
    assert follower.log_end_offset == 50
    assert follower.leader_epoch_cache.entries == [(2, 30)]
    assert [p.name for p in sorted((tmp_path / "follower").glob("*.log"))] == [
        "00000000000000000030.log"]


def test_the_tail_of_a_segment_is_copied_from_a_batch_boundary(tmp_path: Path, logs: list[Log]) -> None:
    log = _log(tmp_path, logs, "l")
    for _ in range(8):
        log.append_as_leader(make_batch(5), 1)
    segment = log.segments[0]
    tail = copy_segment_tail(segment, 15, tmp_path / "scratch", log.config)
    data = tail.log_path.read_bytes()
    assert read_batch_header(data).base_offset == 15
    assert [r.offset for r in decode_all(data)] == list(range(15, 40))
    assert tail.offset_index.path.exists() and tail.base_offset == 15
    assert len(list(iter_batches(data))) == 5
    with pytest.raises(ValueError):
        copy_segment_tail(segment, 17, tmp_path / "scratch2", log.config)  # not a batch start


def test_a_follower_copies_the_batches_the_leaders_cleaner_compacted(
    tmp_path: Path, logs: list[Log]
) -> None:
    """A compacted batch keeps its offset range with fewer records in it (Kafka's format):
    the follower takes it as it is (framing and CRC checked, as Kafka's follower does)."""
    from tests.local_tier.cleaning_helpers import (
        Clock,
        compact_config,
        make_cleaner,
        read_log,
        write,
    )

    leader = Log(tmp_path / "leader", "t", 0, compact_config(), needs_recovery=False)
    logs.append(leader)
    for round_ in range(6):
        write(leader, [(b"k%d" % (i % 3), b"v%d-%d" % (round_, i)) for i in range(6)])
    leader.roll()
    make_cleaner(leader, Clock()).clean_filthiest()
    compacted = [h for h in read_log(leader).batches if h.records_count < h.last_offset_delta + 1]
    assert compacted, "the cleaner left every batch whole"
    follower = _log(tmp_path, logs, "follower")
    follower.append_as_follower(_leader_bytes(leader))
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.log_end_offset == leader.log_end_offset
    assert [(r.offset, r.key, r.value) for r in read_log(follower).records] == [
        (r.offset, r.key, r.value) for r in read_log(leader).records]
