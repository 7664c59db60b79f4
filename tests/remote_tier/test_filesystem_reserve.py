"""The filesystem store's full-disk reserve, on a real tmpfs that fills up."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from remote_tier import FileSystemObjectStore, ObjectStoreUnavailable
from tests.tmpfs_fixtures import fill

Mount = Callable[[int], Path]
_MIB = 1024 * 1024
_RESERVE = ".strata-reserve"


def test_a_small_write_on_a_full_disk_gets_the_reserve_and_it_comes_back(
    small_tmpfs: Mount,
) -> None:
    disk = small_tmpfs(4 * _MIB)
    store = FileSystemObjectStore(disk / "bucket")
    assert (disk / "bucket" / _RESERVE).stat().st_size == _MIB
    store.put("cluster/metadata.json", b"v1" * 1000)
    fill(disk / "filler")

    store.put_if_absent("cluster/other.json", b"x" * 100_000)  # the reserve pays for it
    assert store.get("cluster/other.json") == b"x" * 100_000
    left = (disk / "bucket" / _RESERVE).stat().st_size  # shrunk by what the write took, no more
    assert _MIB - 100_000 - 3 * 4096 <= left < _MIB - 100_000
    assert [o.key for o in store.list("")] == ["cluster/metadata.json", "cluster/other.json"]
    assert store.restore_reserve() is False  # still full
    assert (disk / "bucket" / _RESERVE).stat().st_size == left

    # Small writes go on taking from what is left (the metadata log adds an object per change).
    for n in range(20):
        store.put_if_absent(f"cluster/log-{n}", b"l" * 300)
    assert (disk / "bucket" / _RESERVE).stat().st_size == left - 20 * 4096  # a block each

    # A write larger than what is left fails as before, leaving no temp file.
    with pytest.raises(ObjectStoreUnavailable, match="disk is not full"):
        store.put("cluster/metadata.json", b"v2" * 500_000)
    assert store.get("cluster/metadata.json") == b"v1" * 1000
    assert sorted(p.name for p in (disk / "bucket" / "cluster").iterdir()) == [
        *(f"log-{n}" for n in sorted(range(20), key=str)),
        "metadata.json",
        "other.json",
    ]

    (disk / "filler").unlink()
    store.delete("cluster/other.json")  # any mutation takes the reserve back first
    assert (disk / "bucket" / _RESERVE).stat().st_size == _MIB


def test_uploads_never_take_the_reserve(small_tmpfs: Mount, tmp_path: Path) -> None:
    disk = small_tmpfs(4 * _MIB)
    store = FileSystemObjectStore(disk / "bucket")
    segment = tmp_path / "00000000000000000000.log"  # on the ordinary disk
    segment.write_bytes(b"s" * 10_000)
    fill(disk / "filler")
    with pytest.raises(ObjectStoreUnavailable):
        store.put_file("topics/t/0/00000000000000000000.log", segment)
    with pytest.raises(ObjectStoreUnavailable):  # too large for the reserve
        store.put("big", b"b" * (2 * _MIB))
    assert (disk / "bucket" / _RESERVE).stat().st_size == _MIB
