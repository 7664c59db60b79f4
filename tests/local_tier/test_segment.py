from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.record.batch import decode_all, read_batch_header, stamp_batch
from local_tier.index import CorruptIndexError
from local_tier.segment import LogSegment
from tests.local_tier.batches import make_batch, small_config


def _append(segment: LogSegment, count: int, *, timestamp: int, value_size: int = 10) -> bytes:
    """Append one batch of ``count`` records at the segment's next offset."""
    buf = bytearray(make_batch(count, timestamp=timestamp, value_size=value_size))
    base = segment.next_offset
    stamp_batch(buf, 0, base_offset=base, leader_epoch=0)
    last = base + count - 1
    segment.append(last, timestamp + count - 1, last, buf, now_ms=timestamp)
    return bytes(buf)


@pytest.fixture()
def segment(tmp_path: Path) -> Iterator[LogSegment]:
    seg = LogSegment.open(tmp_path, 0, small_config(), create=True)
    for i in range(10):
        _append(seg, 5, timestamp=1_000 * (i + 1))
    yield seg
    seg.close()


def test_files_are_named_by_base_offset(tmp_path: Path) -> None:
    LogSegment.open(tmp_path, 42, small_config(), create=True).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000042.index",
        "00000000000000000042.log",
        "00000000000000000042.timeindex",
    ]


def test_append_tracks_offsets_timestamps_and_sparse_index(segment: LogSegment) -> None:
    assert segment.next_offset == 50
    assert segment.max_timestamp == 10_004
    assert segment.offset_of_max_timestamp == 49
    assert segment.size == os.path.getsize(segment.log_path)
    assert 0 < segment.offset_index.entries < 10  # sparse: not every batch
    segment.offset_index.sanity_check(segment.size)
    assert segment.created_ms == 1_000


def test_read_starts_at_the_batch_containing_the_offset(segment: LogSegment) -> None:
    region = segment.read(23, max_bytes=10_000)
    assert region is not None
    records = decode_all(region.read_bytes())
    assert records[0].offset == 20  # the batch 20..24 holds offset 23
    assert records[-1].offset == 49
    assert region.first_offset == 20


def test_read_respects_max_bytes_with_whole_batches(segment: LogSegment) -> None:
    batch_size = read_batch_header(os.pread(segment.file.fileno(), 61, 0)).size
    region = segment.read(0, max_bytes=batch_size * 3 + 10)
    assert region is not None
    assert region.length == batch_size * 3


def test_first_batch_larger_than_max_bytes_is_returned_whole(tmp_path: Path) -> None:
    seg = LogSegment.open(tmp_path, 0, small_config(), create=True)
    big = _append(seg, 3, timestamp=1, value_size=5_000)
    _append(seg, 1, timestamp=2)
    region = seg.read(0, max_bytes=100)
    assert region is not None and region.length == len(big)
    region = seg.read(0, max_bytes=100, min_one_message=False)
    assert region is not None and region.length == 0
    seg.close()


def test_read_stops_before_max_offset_and_past_the_end(segment: LogSegment) -> None:
    region = segment.read(0, max_bytes=10**6, max_offset=12)
    assert region is not None
    assert [r.offset for r in decode_all(region.read_bytes())][-1] == 14  # batches 0, 5, 10
    assert segment.read(50, max_bytes=1000) is None


def test_find_offset_by_timestamp_is_precise_per_record(segment: LogSegment) -> None:
    assert segment.find_offset_by_timestamp(0) == (0, 1_000)
    assert segment.find_offset_by_timestamp(3_002) == (12, 3_002)
    assert segment.find_offset_by_timestamp(3_005) == (15, 4_000)
    assert segment.find_offset_by_timestamp(3_002, start_offset=14) == (14, 3_004)
    assert segment.find_offset_by_timestamp(99_999) is None


def test_reopen_derives_next_offset_and_max_timestamp(segment: LogSegment, tmp_path: Path) -> None:
    segment.flush()
    segment.close()
    reopened = LogSegment.open(tmp_path, 0, small_config())
    reopened.sanity_check()
    assert reopened.next_offset == 50
    assert reopened.max_timestamp == 10_004
    assert reopened.size == segment.size
    reopened.close()


def test_recover_truncates_garbage_and_rebuilds_indexes(
    segment: LogSegment, tmp_path: Path
) -> None:
    entries = segment.offset_index.entries
    valid_size = segment.size
    segment.close()
    with open(segment.log_path, "ab") as f:
        f.write(b"\x00garbage" * 100)
    seg = LogSegment.open(tmp_path, 0, small_config())
    assert seg.recover() == 800
    assert seg.size == valid_size == os.path.getsize(seg.log_path)
    assert seg.next_offset == 50
    assert seg.offset_index.entries == entries
    assert seg.recovery_error is not None
    seg.close()


def test_recover_cuts_a_torn_last_batch(segment: LogSegment, tmp_path: Path) -> None:
    size = segment.size
    segment.close()
    os.truncate(segment.log_path, size - 7)
    seg = LogSegment.open(tmp_path, 0, small_config())
    batch_size = read_batch_header(os.pread(seg.file.fileno(), 61, 0)).size
    assert seg.recover() == batch_size - 7
    assert seg.next_offset == 45
    seg.close()


def test_missing_index_fails_sanity_check(segment: LogSegment, tmp_path: Path) -> None:
    segment.close()
    segment.offset_index.path.unlink()
    seg = LogSegment.open(tmp_path, 0, small_config())
    with pytest.raises(CorruptIndexError, match="missing"):
        seg.sanity_check()
    assert seg.recover() == 0
    seg.sanity_check()
    assert seg.offset_index.entries > 0
    seg.close()


def test_delete_renames_files_and_regions_stay_readable(
    segment: LogSegment, tmp_path: Path
) -> None:
    region = segment.read(0, 1000)
    assert region is not None
    expected = region.read_bytes()
    segment.delete()
    assert all(p.name.endswith(".deleted") for p in tmp_path.iterdir())
    assert region.read_bytes() == expected
    segment.remove_files()
    assert list(tmp_path.iterdir()) == []


def test_a_consumer_at_the_tail_reads_on_from_where_its_last_read_ended(
    segment: LogSegment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetch at the offset where the previous one ended starts at that position: at the tail,
    one record per fetch scanned up to ``index.interval.bytes`` of headers from the index entry."""
    region = segment.read(0, max_bytes=100_000)
    assert region is not None and region.next_offset == 50
    assert segment.read(50, max_bytes=100_000) is None  # caught up: nothing yet

    def no_index(*_args: object) -> None:
        raise AssertionError("the read scanned from the index")

    monkeypatch.setattr(segment, "_scan_from_index", no_index)
    for i in range(3):  # a record arrives, the waiting fetch reads it, the next one waits
        sent = _append(segment, 1, timestamp=20_000 + i)
        region = segment.read(50 + i, max_bytes=100_000)
        assert region is not None and region.read_bytes() == sent and region.first_offset == 50 + i
        assert segment.read(51 + i, max_bytes=100_000) is None


def test_a_read_after_the_log_was_cut_and_written_again_finds_the_new_batches(segment: LogSegment) -> None:
    """A follower truncates to its leader's log and appends the leader's batches, of other sizes:
    where an earlier read ended is no longer where that offset starts."""
    first = segment.read(0, max_bytes=1)  # the batch 0..4 alone: ends where offset 5 starts
    assert first is not None and first.next_offset == 5
    assert segment.read(5, max_bytes=1) is not None  # and 10 starts where this one ends
    segment.truncate_to(0)
    kept = [_append(segment, 2, timestamp=50_000 + i, value_size=300) for i in range(6)]
    for offset, batch in ((5, kept[2]), (10, kept[5])):  # batches 4..5 and 10..11
        region = segment.read(offset, max_bytes=1)
        assert region is not None and region.read_bytes() == batch


def test_a_small_read_carries_the_bytes_it_scanned_and_a_large_one_the_file(segment: LogSegment) -> None:
    """A region within the chunk its batches were found in holds those bytes (sent from memory,
    not read from the file again); one larger than a chunk is read from the file when sent."""
    with open(segment.log_path, "rb") as f:
        whole = f.read()
    for start, max_bytes in ((0, 100_000), (23, 200), (45, 100_000)):
        region = segment.read(start, max_bytes=max_bytes)
        assert region is not None and region.data is not None
        assert region.data == whole[region.position:region.position + region.length]
        assert region.read_bytes() == region.data
    big = [_append(segment, 20, timestamp=30_000 + i, value_size=1_000) for i in range(2)]  # 20 KB each
    region = segment.read(50, max_bytes=1_000_000)
    assert region is not None and region.data is None and region.read_bytes() == b"".join(big)
    small = segment.read(0, max_bytes=100)
    assert small is not None and small.data is not None
    assert dataclasses.replace(small, data=None) == small  # the bytes held are not part of equality
