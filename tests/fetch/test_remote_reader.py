"""Tiered reads through the chunk cache: whole batches, budgets, read-ahead, one GET per chunk."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.errors import OffsetOutOfRangeError
from common.record.batch import build_batch, decode_all
from fetch.remote_reader import ChunkCache, RemoteReader
from fetch.sending import carries_history
from local_tier.config import LogConfig
from local_tier.log import Log
from local_tier.segment import FileRegion
from remote_tier.filesystem import ObjectFile


@dataclass(frozen=True)
class _Seg:
    base_offset: int
    key: str


class _Source:
    def __init__(self, data: bytes, index: bytes) -> None:
        self.data = data
        self.index = index
        self.gets: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def cache_key(self, segment: _Seg) -> str:
        return segment.key

    def get_range(self, segment: _Seg, start: int, end: int) -> bytes:
        with self.lock:
            self.gets.append((start, end))
        return self.data[start:end]

    def get_offset_index(self, segment: _Seg) -> bytes:
        return self.index


@pytest.fixture
def segment(tmp_path: Path) -> tuple[_Seg, _Source]:
    log = Log(tmp_path / "t-0", "t", 0, LogConfig(index_interval_bytes=1024), needs_recovery=False)
    for b in range(50):
        recs = [(b"k", b"%04d-%03d" % (b, i) + b"x" * 90, (), 1_700_000_000_000 + b) for i in range(20)]
        log.append_as_leader(build_batch(recs), leader_epoch=0)
    seg = log.active_segment
    seg.flush()
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    index = (tmp_path / "t-0" / "00000000000000000000.index").read_bytes()
    log.close()
    assert len(index) > 8  # sparse entries exist
    return _Seg(0, "seg-0"), _Source(data, index)


def test_read_returns_whole_batches_from_the_one_holding_the_offset(segment) -> None:  # type: ignore[no-untyped-def]
    seg, source = segment
    reader = RemoteReader(source, threads=2, chunk_bytes=4096, cache_bytes=1 << 20)
    try:
        result = reader.read(seg, len(source.data), 505, 10_000, True)
        records = decode_all(result.records)
        assert records[0].offset == 500 and result.first_batch_offset == 500
        assert len(result.records) <= 10_000
        assert [r.offset for r in records] == list(range(500, 500 + len(records)))
        assert len(records) % 20 == 0
    finally:
        reader.close()


def test_first_batch_is_returned_whole_even_over_budget(segment) -> None:  # type: ignore[no-untyped-def]
    seg, source = segment
    reader = RemoteReader(source, threads=1, chunk_bytes=4096, cache_bytes=1 << 20)
    try:
        whole = reader.read(seg, len(source.data), 0, 10, True)
        assert [r.offset for r in decode_all(whole.records)] == list(range(20))
        assert reader.read(seg, len(source.data), 0, 10, False).records == b""
    finally:
        reader.close()


def test_reading_past_the_segment_is_out_of_range(segment) -> None:  # type: ignore[no-untyped-def]
    seg, source = segment
    reader = RemoteReader(source, threads=1, chunk_bytes=4096, cache_bytes=1 << 20)
    try:
        with pytest.raises(OffsetOutOfRangeError):
            reader.read(seg, len(source.data), 1000, 10_000, True)
    finally:
        reader.close()


def test_sequential_reader_hits_read_ahead_chunks(segment) -> None:  # type: ignore[no-untyped-def]
    seg, source = segment
    reader = RemoteReader(source, threads=2, chunk_bytes=8192, cache_bytes=1 << 20, read_ahead_chunks=2)
    try:
        offset = 0
        seen = []
        while offset < 1000:
            result = reader.submit(seg, len(source.data), offset, 8000, True).result()
            records = decode_all(result.records)
            seen.extend(r.offset for r in records)
            offset = records[-1].offset + 1
        assert seen == list(range(1000))
        chunks = {start for start, _ in source.gets}
        assert len(source.gets) == len(chunks)  # every chunk fetched exactly once
        assert reader.cache.hits > 0
    finally:
        reader.close()


def test_concurrent_misses_of_one_chunk_do_one_get() -> None:
    cache = ChunkCache(1 << 20)
    calls = []
    gate = threading.Event()

    def load() -> bytes:
        calls.append(1)
        gate.wait(5)
        return b"chunk"

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(cache.get, "k", load) for _ in range(8)]
        gate.set()
        assert {f.result() for f in futures} == {b"chunk"}
    assert len(calls) == 1


def test_cache_stays_within_its_byte_bound() -> None:
    cache = ChunkCache(10_000)
    for i in range(100):
        cache.get(i, lambda: b"x" * 1000)
    assert cache.size_bytes <= 10_000
    assert cache.get(99, lambda: b"never") == b"x" * 1000  # most recent is still there
    assert cache.get(0, lambda: b"reloaded") == b"reloaded"  # oldest was evicted


class _FileSource(_Source):
    """A bucket on the local file system: the ``.log`` object is a file it can open."""

    def __init__(self, data: bytes, index: bytes, path: Path) -> None:
        super().__init__(data, index)
        path.write_bytes(data)
        self.path = path

    def open_log(self, segment: _Seg) -> ObjectFile:
        return ObjectFile(os.open(self.path, os.O_RDONLY))


def test_file_store_reads_are_file_regions_cut_exactly_like_chunk_reads(segment, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """From a file:// bucket the reader hands out a region of the object's file for the
    history threads to ``sendfile`` (no GET, no copy in memory) holding exactly the
    batches a ranged-GET read gives, for every offset, budget and min_one_message."""
    seg, chunks = segment
    files = _FileSource(chunks.data, chunks.index, tmp_path / "object.log")
    by_gets = RemoteReader(chunks, threads=1, chunk_bytes=4096, cache_bytes=1 << 20)
    by_file = RemoteReader(files, threads=1, chunk_bytes=4096, cache_bytes=1 << 20)
    try:
        for offset in (0, 1, 19, 20, 505, 999):
            for budget in (10, 2_500, 10_000, 1 << 20):
                for min_one in (True, False):
                    want = by_gets.read(seg, len(chunks.data), offset, budget, min_one)
                    got = by_file.read(seg, len(files.data), offset, budget, min_one)
                    assert got.records == want.records and got.size == want.size
                    assert (got.first_batch_offset, got.next_offset) == (want.first_batch_offset, want.next_offset)
                    if want.size:
                        (region,) = got.parts
                        assert isinstance(region, FileRegion) and region.next_offset == want.next_offset
                        assert carries_history([region])  # bucket history: the history threads send it
        assert files.gets == [] and by_file.cache.size_bytes == 0  # nothing read into memory
        with pytest.raises(OffsetOutOfRangeError):
            by_file.read(seg, len(files.data), 1000, 10_000, True)
    finally:
        by_gets.close()
        by_file.close()
