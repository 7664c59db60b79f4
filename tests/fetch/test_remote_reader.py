"""Tiered reads through the chunk cache: whole batches, budgets, read-ahead, one GET per chunk."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.errors import OffsetOutOfRangeError
from common.record.batch import build_batch, decode_all
from fetch.remote_reader import ChunkCache, RemoteReader
from local_tier.config import LogConfig
from local_tier.log import Log


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
