"""A coordinator's load reads its partition's segment files off the loop, never the Log
(issue 32, item 5): what :func:`service.groups.loading.take_snapshot` fixes on the owner
thread is all a worker thread reads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common.errors import CorruptRecordError
from common.record.batch import BATCH_OVERHEAD
from local_tier.log import Log
from service.groups.loading import PartitionSnapshot, take_snapshot
from tests.local_tier.batches import make_batch, small_config
from tests.local_tier.test_ownership import _on_thread


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    made = Log(tmp_path / "__consumer_offsets-0", "__consumer_offsets", 0,
               small_config(segment_bytes=4096), needs_recovery=False)
    yield made
    made.close()


def _read(snapshot: PartitionSnapshot) -> Any:
    return _on_thread(lambda: [(r.offset, r.value) for _, records in snapshot.batches() for r in records])


def test_a_snapshot_reads_what_the_log_held_when_taken_even_after_the_log_moved_on_and_closed(log: Log) -> None:
    for _ in range(4):
        log.append_as_leader(make_batch(3), 0)
        log.roll()
    log.append_as_leader(make_batch(3), 0)  # the active segment's bytes too
    snapshot = take_snapshot(log, "__consumer_offsets-0")
    assert len(snapshot.segments) == 5
    log.append_as_leader(make_batch(3), 0)  # after the snapshot: not in it
    log.roll()
    log.close()  # the segments' files closed (a topic delete, a shutdown): the snapshot's own stay open
    try:
        read = _read(snapshot)
    finally:
        snapshot.close()
    assert not isinstance(read, BaseException), read
    assert [offset for offset, _ in read] == list(range(15))
    assert {value for _, value in read} == {b"A" * 10, b"B" * 10, b"C" * 10}


def test_a_damaged_byte_fails_the_read_instead_of_becoming_a_record(log: Log) -> None:
    log.append_as_leader(make_batch(3), 0)
    log.roll()
    log.append_as_leader(make_batch(3), 0)
    first = log.read_view().segments[0].log_path
    data = bytearray(first.read_bytes())
    value_at = data.index(b"A" * 10, BATCH_OVERHEAD)
    data[value_at] = ord("Z")  # framing intact: only the CRC tells
    first.write_bytes(bytes(data))
    snapshot = take_snapshot(log, "__consumer_offsets-0")
    try:
        read = _read(snapshot)
    finally:
        snapshot.close()
    assert isinstance(read, CorruptRecordError), read
    assert "CRC mismatch" in str(read)


def test_no_log_is_an_empty_partition() -> None:
    snapshot = take_snapshot(None, "__consumer_offsets-3")
    assert list(snapshot.batches()) == []
