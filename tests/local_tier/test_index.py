from __future__ import annotations

import struct
from pathlib import Path

import pytest

from local_tier.index import CorruptIndexError, OffsetIndex, TimeIndex


def test_offset_index_lookup_finds_largest_entry_not_above_target(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 1024)
    for offset, position in [(104, 300), (110, 900), (120, 1500)]:
        index.append(offset, position)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(103) == (100, 0)
    assert index.lookup(104) == (104, 300)
    assert index.lookup(115) == (110, 900)
    assert index.lookup(10**9) == (120, 1500)
    index.close()


def test_offset_index_file_is_kafka_format_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, 1024)
    index.append(104, 300)
    index.append(110, 900)
    index.flush()
    index.close()
    assert path.read_bytes() == struct.pack(">iiii", 4, 300, 10, 900)
    reloaded = OffsetIndex(path, 100, 1024)
    assert reloaded.entries == 2
    assert reloaded.last_entry == (110, 900)
    reloaded.sanity_check(log_size=1000)
    reloaded.close()


def test_offset_index_rejects_non_increasing_offsets_and_fills_up(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 0, 16)
    index.append(5, 10)
    with pytest.raises(ValueError):
        index.append(5, 20)
    index.append(6, 20)
    assert index.is_full()
    with pytest.raises(ValueError):
        index.append(7, 30)
    index.close()


def test_offset_index_truncate_to_drops_entries_at_or_above(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 1024)
    for offset in (10, 20, 30):
        index.append(offset, offset * 10)
    index.truncate_to(20)
    assert index.last_entry == (10, 100)
    assert path.stat().st_size == 8
    index.close()


def test_sanity_check_catches_bad_size_order_and_positions(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(struct.pack(">iiii", 10, 100, 5, 200))
    index = OffsetIndex(path, 0, 1024)
    with pytest.raises(CorruptIndexError, match="monotonic"):
        index.sanity_check()
    index.close()
    path.write_bytes(struct.pack(">ii", 10, 100) + b"\x00\x01")
    index = OffsetIndex(path, 0, 1024)
    with pytest.raises(CorruptIndexError, match="multiple"):
        index.sanity_check()
    index.close()
    path.write_bytes(struct.pack(">ii", 10, 100))
    index = OffsetIndex(path, 0, 1024)
    with pytest.raises(CorruptIndexError, match="beyond"):
        index.sanity_check(log_size=50)
    index.close()


def test_time_index_lookup_and_maybe_append(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.timeindex"
    index = TimeIndex(path, 50, 1200)
    index.maybe_append(1_000, 55)
    index.maybe_append(1_000, 57)  # not a larger timestamp: skipped
    index.maybe_append(2_000, 60)
    assert index.entries == 2
    assert index.lookup(999) == (-1, 50)
    assert index.lookup(1_500) == (1_000, 55)
    assert index.lookup(5_000) == (2_000, 60)
    index.close()
    assert path.read_bytes() == struct.pack(">qiqi", 1_000, 5, 2_000, 10)
    reloaded = TimeIndex(path, 50, 1200)
    reloaded.truncate_to(60)
    assert reloaded.last_entry == (1_000, 55)
    reloaded.sanity_check()
    reloaded.close()


def test_rename_and_delete(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "0.timeindex", 0, 1200)
    index.maybe_append(1, 0)
    index.rename(tmp_path / "0.timeindex.deleted")
    index.maybe_append(2, 1)  # the descriptor survives the rename
    assert (tmp_path / "0.timeindex.deleted").stat().st_size == 24
    index.delete()
    assert list(tmp_path.iterdir()) == []
