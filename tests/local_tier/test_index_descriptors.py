"""Index descriptors are opened on write and bounded (issue 33): an idle partition holds its
active segment's ``.log`` only, and the event loop's open index descriptors never pass
OPEN_INDEXES.limit, least recently written closed first; an fsync opens the file for itself."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from local_tier import index as index_module
from local_tier.descriptors import DescriptorTable
from local_tier.index import OffsetIndex, TimeIndex
from tests.local_tier.descriptor_helpers import bound_of_two


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def bounded(monkeypatch: pytest.MonkeyPatch) -> DescriptorTable:
    return bound_of_two(monkeypatch, index_module, "OPEN_INDEXES")


def test_an_index_holds_no_descriptor_until_written(tmp_path: Path, bounded: DescriptorTable) -> None:
    before = _open_fds()
    indexes = [OffsetIndex(tmp_path / f"{n:020d}.index", n, 1024) for n in range(50)]
    assert _open_fds() == before  # read at open, then closed
    indexes[0].append(5, 100)
    assert _open_fds() == before + 1 and len(bounded) == 1
    for i in indexes:
        i.close()


def test_the_open_descriptors_stay_under_the_bound_and_reopen_on_write(
    tmp_path: Path, bounded: DescriptorTable,
) -> None:
    before = _open_fds()
    a, b, c = (OffsetIndex(tmp_path / f"{n:020d}.index", n * 100, 1024) for n in range(3))
    a.append(1, 0)
    b.append(101, 0)
    c.append(201, 0)  # the third: a, least recently written, is closed
    assert _open_fds() == before + 2 and bounded.closed_for_room == 1
    a.append(2, 4096)  # reopened (b closed now), the entry appended after the first
    assert _open_fds() == before + 2 and bounded.closed_for_room == 2
    assert (tmp_path / f"{0:020d}.index").read_bytes() == bytes.fromhex("00000001 00000000 00000002 00001000")
    reread = OffsetIndex(tmp_path / f"{0:020d}.index", 0, 1024)
    assert reread.entries == 2 and reread.last_entry == (2, 4096)
    a.truncate_entries(1)  # a write like any other
    assert os.path.getsize(tmp_path / f"{0:020d}.index") == 8
    for i in (a, b, c, reread):
        i.close()
    assert _open_fds() == before and len(bounded) == 0


def test_indexes_written_on_another_thread_are_not_counted_nor_closed_by_the_loop(
    tmp_path: Path, bounded: DescriptorTable,
) -> None:
    """A cleaner's new segment is written on its thread: the loop never closes its descriptor."""
    cleaned = TimeIndex(tmp_path / "cleaned.timeindex", 0, 1024)
    thread = threading.Thread(target=lambda: cleaned.maybe_append(1000, 3))
    thread.start()
    thread.join()
    for n in range(3):  # the loop writes past its bound
        OffsetIndex(tmp_path / f"{n:020d}.index", n, 1024).append(n + 1, 0)
    assert cleaned._fd >= 0 and len(bounded) == 2
    cleaned.maybe_append(2000, 4)
    assert cleaned.entries == 2


def test_an_fsync_opens_the_file_itself_follows_a_rename_and_skips_a_deleted_file(
    tmp_path: Path, bounded: DescriptorTable, monkeypatch: pytest.MonkeyPatch,
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    idx = OffsetIndex(tmp_path / "a.index", 0, 1024)
    idx.append(1, 0)
    idx.release_descriptor()  # as the bound would
    idx.flush()
    idx.rename(tmp_path / "a.index.deleted")
    idx.flush()
    assert synced == [str(tmp_path / "a.index"), str(tmp_path / "a.index.deleted")]
    (tmp_path / "a.index.deleted").unlink()
    idx.flush()  # gone: nothing to make durable
    assert len(synced) == 2
