"""Segment ``.log`` descriptors are opened on use and bounded (issue 33): the loop's open
``.log`` files never pass OPEN_SEGMENTS.limit, least recently used let go of first; a region
in flight keeps its file open until it is dropped; an fsync of a let-go segment opens the
file itself; a closed segment is never opened again."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import pytest

from common.record.batch import build_batch
from local_tier import segment as segment_module
from local_tier.config import LogConfig
from local_tier.descriptors import DescriptorTable
from local_tier.log import Log
from local_tier.segment import LogSegment
from tests.local_tier.descriptor_helpers import bound_of_two


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _logs_open(directory: Path) -> set[str]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)) and ".log" in target:
            found.add(target)
    return found


@pytest.fixture
def bounded(monkeypatch: pytest.MonkeyPatch) -> DescriptorTable:
    return bound_of_two(monkeypatch, segment_module, "OPEN_SEGMENTS")


def _append(segment: LogSegment, offset: int, value: bytes) -> None:
    batch = build_batch([(None, value, [], 1000 + offset)], base_offset=offset)
    segment.append(offset, 1000 + offset, offset, batch)


def test_the_open_logs_stay_under_the_bound_and_reopen_on_use(tmp_path: Path, bounded: DescriptorTable) -> None:
    config = LogConfig()
    segments = [LogSegment.open(tmp_path, n * 100, config, create=True) for n in range(5)]
    assert len(_logs_open(tmp_path)) == 2 and bounded.closed_for_room == 3
    for n, segment in enumerate(segments):
        _append(segment, n * 100, b"value-%d" % n)
    assert len(_logs_open(tmp_path)) == 2 and len(bounded) == 2
    for n, segment in enumerate(segments):  # each read reopens its file; the bound holds
        region = segment.read(n * 100, 1 << 20)
        assert region is not None and region.first_offset == n * 100
        assert b"value-%d" % n in region.read_bytes()
        del region
        assert len(_logs_open(tmp_path)) <= 2
    assert segments[0].find_offset_by_timestamp(1000) == (0, 1000)
    for segment in segments:
        segment.close()
    assert _logs_open(tmp_path) == set() and len(bounded) == 0


def test_a_region_in_flight_keeps_its_file_until_dropped(tmp_path: Path, bounded: DescriptorTable) -> None:
    config = LogConfig()
    first = LogSegment.open(tmp_path, 0, config, create=True)
    _append(first, 0, b"held")
    region = first.read(0, 1 << 20)
    assert region is not None
    others = [LogSegment.open(tmp_path, n * 100, config, create=True) for n in range(1, 4)]
    assert first._file is None  # the bound let go of the segment's hold ...
    assert not region.file.closed and b"held" in region.read_bytes()  # ... not of the region's
    path = str(tmp_path / f"{0:020d}.log")
    assert path in _logs_open(tmp_path)
    del region
    gc.collect()
    assert path not in _logs_open(tmp_path)  # the last holder dropped it: closed
    for segment in [first, *others]:
        segment.close()


def test_a_let_go_segment_is_fsynced_by_path_and_a_closed_one_never_reopens(
    tmp_path: Path, bounded: DescriptorTable, monkeypatch: pytest.MonkeyPatch,
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    segment = LogSegment.open(tmp_path, 0, LogConfig(), create=True)
    _append(segment, 0, b"x")
    segment.release_descriptor()
    flusher = threading.Thread(target=segment.flush)  # the flush thread
    flusher.start()
    flusher.join()
    assert str(tmp_path / f"{0:020d}.log") in synced
    assert segment._file is None  # the flush thread opened its own: nothing left open
    segment.delete()  # renamed *.deleted: an fsync follows the new name
    synced.clear()
    segment.release_descriptor()
    segment.flush()
    assert str(tmp_path / f"{0:020d}.log.deleted") in synced
    segment.close()
    with pytest.raises(ValueError):
        segment.read_at(0, 10)
    assert _logs_open(tmp_path) == set()


def test_a_log_of_many_segments_reads_every_one_under_the_bound(tmp_path: Path, bounded: DescriptorTable) -> None:
    log = Log(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=200), recovery_point=0, needs_recovery=False)
    for n in range(30):
        log.append_as_leader(build_batch([(None, b"record-%02d" % n + b"." * 60, [], 1000 + n)]), 0)
    assert len(log.segments) > 8
    assert len(_logs_open(tmp_path)) <= 2
    for n in range(30):
        result = log.read(n, 1 << 20, max_offset=n + 1)
        data = b"".join(region.read_bytes() for region in result.regions)
        assert b"record-%02d" % n in data, n
    assert len(_logs_open(tmp_path)) <= 3  # the bound, plus the last region still held
    log.close()
    gc.collect()
    assert _logs_open(tmp_path) == set()
