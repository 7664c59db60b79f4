"""ListOffsets by timestamp in a remote segment (issue 32, item 6): the uploaded
``.timeindex`` and ``.index`` narrow the lookup to about one index interval, read with
a few small ranged GETs, and the answer is exactly the first record at or after the
start offset whose timestamp is at or after the target, with its batch's leader epoch.

The segments are real: written by ``local_tier.Log`` (so the indexes are the ones a
broker uploads), then served from memory by a source that counts every GET.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.errors import KafkaStorageError
from common.record.batch import build_batch, decode_batch, iter_batches
from fetch.remote_reader import RemoteReader
from local_tier.config import LogConfig
from local_tier.log import Log

T0 = 1_700_000_000_000
BATCHES = 1000
PER_BATCH = 20
INTERVAL = 1024


@dataclass(frozen=True)
class _Seg:
    base_offset: int
    key: str


class _Source:
    """A segment's three objects in memory; counts GETs and bytes of each."""

    def __init__(self, data: bytes, index: bytes, timeindex: bytes) -> None:
        self.data, self.index, self.timeindex = data, index, timeindex
        self.log_gets: list[tuple[int, int]] = []
        self.index_gets = 0
        self._lock = threading.Lock()

    def cache_key(self, segment: _Seg) -> str:
        return segment.key

    def get_range(self, segment: _Seg, start: int, end: int) -> bytes:
        with self._lock:
            self.log_gets.append((start, end))
        return self.data[start:end]

    def get_offset_index(self, segment: _Seg) -> bytes:
        self.index_gets += 1
        return self.index

    def get_time_index(self, segment: _Seg) -> bytes:
        self.index_gets += 1
        return self.timeindex

    @property
    def log_bytes(self) -> int:
        return sum(min(end, len(self.data)) - start for start, end in self.log_gets)


Stamps = Callable[[int, int], int]


def _steady(batch: int, record: int) -> int:
    return T0 + 20 * batch + record


def _skewed(batch: int, record: int) -> int:
    """Steady, but batch 100 holds a record from batch 600's future (the maximum so far
    then stands still for 500 batches: no time-index entry), and batches 700-749 all
    carry one timestamp."""
    if batch == 100 and record == 0:
        return _steady(600, 0)
    if 700 <= batch < 750:
        return _steady(700, 0)
    return _steady(batch, record)


def _epoch(batch: int) -> int:
    return 0 if batch < 300 else 3 if batch < 800 else 7


def _segment(directory: Path, stamps: Stamps) -> _Source:
    """One sealed segment of BATCHES batches (about 1.7 MB), indexed every INTERVAL bytes."""
    config = LogConfig(index_interval_bytes=INTERVAL, segment_bytes=64 * 1024 * 1024)
    log = Log(directory, "t", 0, config, needs_recovery=False)
    try:
        for b in range(BATCHES):
            records = [(b"k%d" % r, b"v" * 60, (), stamps(b, r)) for r in range(PER_BATCH)]
            log.append_as_leader(build_batch(records), leader_epoch=_epoch(b))
        log.roll()
        log.flush()
    finally:
        log.close()
    name = directory / "00000000000000000000"
    return _Source(*(name.with_suffix(s).read_bytes() for s in (".log", ".index", ".timeindex")))


def _every_record(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, timestamp, leader epoch) of every record, in offset order."""
    out = []
    for pos, header in iter_batches(data):
        _, records = decode_batch(data, pos)
        out += [(r.offset, r.timestamp, header.partition_leader_epoch) for r in records]
    return out


def _oracle(records: list[tuple[int, int, int]], start: int) -> Callable[[int], tuple[int, int, int] | None]:
    """The answer for any timestamp: the first record at or after ``start`` where the
    running maximum of the timestamps reaches it."""
    later = [r for r in records if r[0] >= start]
    reached = list(itertools.accumulate((t for _, t, _ in later), max))

    def answer(timestamp: int) -> tuple[int, int, int] | None:
        i = bisect.bisect_left(reached, timestamp)
        return later[i] if i < len(later) else None

    return answer


def _expected(records: list[tuple[int, int, int]], timestamp: int, start: int) -> tuple[int, int, int] | None:
    return _oracle(records, start)(timestamp)


@pytest.fixture(params=[_steady, _skewed], ids=["steady", "skewed"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> _Source:
    return _segment(tmp_path / "t-0", request.param)


def _reader(source: _Source, **kw: int) -> RemoteReader:
    return RemoteReader(source, threads=1, chunk_bytes=1024 * 1024, cache_bytes=64 << 20, **kw)


def test_every_timestamp_finds_the_first_record_at_or_after_it_with_its_epoch(source: _Source) -> None:
    records = _every_record(source.data)
    stamps = sorted({t for _, t, _ in records})
    targets = [stamps[0] - 1, *stamps[::23], *(t + 1 for t in stamps[3::41]), stamps[-1], stamps[-1] + 1]
    reader = _reader(source)
    try:
        for start in (0, 6_007):  # 6007: DeleteRecords inside the segment
            expected = _oracle(records, start)
            for target in targets:
                found = reader.offset_for_timestamp(_Seg(0, "s"), len(source.data), target, start)
                assert (tuple(found) if found else None) == expected(target), (target, start)
    finally:
        reader.close()


@pytest.mark.parametrize("where", [0.0, 0.5, 0.99])
def test_a_lookup_costs_the_two_indexes_and_one_small_ranged_get(source: _Source, where: float) -> None:
    """The old reader walked every batch header from byte 0 through 1 MiB chunks: the
    whole segment for a late timestamp (1.7 MB here, 1 GiB in production)."""
    records = _every_record(source.data)
    target = records[int(where * (len(records) - 1))][1]
    reader = _reader(source)
    try:
        found = reader.offset_for_timestamp(_Seg(0, "s"), len(source.data), target)
    finally:
        reader.close()
    assert len(source.log_gets) == 1 and source.log_bytes <= 64 * 1024, source.log_gets
    assert source.index_gets == 2
    assert found is not None and found[:2] == _expected(records, target, 0)[:2]


def test_a_lookup_past_a_standing_maximum_starts_at_the_interval_of_the_answer(tmp_path: Path) -> None:
    """After batch 100's early record the maximum timestamp stands still for 500 batches:
    Kafka's reader would scan them all from the time entry before the target."""
    source = _segment(tmp_path / "t-0", _skewed)
    records = _every_record(source.data)
    target = _steady(600, 0) + 1
    reader = _reader(source)
    try:
        found = reader.offset_for_timestamp(_Seg(0, "s"), len(source.data), target, 0)
    finally:
        reader.close()
    assert tuple(found or ()) == _expected(records, target, 0)
    assert source.log_bytes <= 64 * 1024, source.log_gets


def test_an_index_that_does_not_match_the_log_is_not_trusted(tmp_path: Path) -> None:
    source = _segment(tmp_path / "t-0", _steady)
    records = _every_record(source.data)
    # every offset-index position shifted by one byte: no entry names its batch
    shifted = bytearray(source.index)
    for i in range(4, len(shifted), 8):
        shifted[i : i + 4] = (int.from_bytes(shifted[i : i + 4], "big") + 1).to_bytes(4, "big")
    source.index = bytes(shifted)
    reader = _reader(source)
    try:
        target = _steady(900, 3)
        found = reader.offset_for_timestamp(_Seg(0, "s"), len(source.data), target, 0)
        assert tuple(found or ()) == _expected(records, target, 0)
    finally:
        reader.close()
    # and a budget below what the scan from byte 0 needs is an error, never a long read
    small = _reader(source, max_scan_bytes=256 * 1024)
    try:
        with pytest.raises(KafkaStorageError, match="more than 262144 bytes"):
            small.offset_for_timestamp(_Seg(0, "s2"), len(source.data), target, 0)
    finally:
        small.close()
    assert source.log_bytes - len(source.data) <= 256 * 1024


def test_without_a_time_index_the_lookup_walks_from_the_start_offset(tmp_path: Path) -> None:
    source = _segment(tmp_path / "t-0", _skewed)
    records = _every_record(source.data)
    source.timeindex = b""
    reader = _reader(source)
    try:
        for target, start in ((_steady(650, 0), 0), (_steady(50, 0), 12_000)):
            found = reader.offset_for_timestamp(_Seg(0, "s"), len(source.data), target, start)
            assert tuple(found or ()) == _expected(records, target, start)
    finally:
        reader.close()
