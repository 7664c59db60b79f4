"""Which remote segments ListOffsets by timestamp reads (issue 32, item 6): found by
bisection over the manifest's max timestamps, which need not grow with offsets, never
by walking every segment; none wholly below the log start offset."""

from __future__ import annotations

import random
import time

from remote_tier.manifest import PartitionManifest
from tests.remote_tier.test_manifest import TOPIC_ID, manifest, seg


def _brute(m: PartitionManifest, timestamp: int, start: int) -> list[int]:
    return [s.base_offset for s in m.segments if s.max_timestamp >= timestamp and s.last_offset >= start]


def test_the_segments_for_a_timestamp_are_those_holding_a_later_record_in_offset_order() -> None:
    rng = random.Random(32)
    # max timestamps mostly growing, with a producer's clock ahead now and then
    stamps = [1000 * i + (rng.randint(0, 40_000) if rng.random() < 0.1 else 0) for i in range(300)]
    m = manifest(*(seg(10 * i, 10 * i + 9, max_ts=ts) for i, ts in enumerate(stamps)), log_start=0)
    for start in (0, 5, 1_234, 2_990, 3_000):
        for timestamp in (-1, 0, *range(1, 340_000, 997), max(stamps), max(stamps) + 1):
            got = [s.base_offset for s in m.segments_for_timestamp(timestamp, start)]
            assert got == _brute(m, timestamp, start), (timestamp, start)
    assert m.segment_for_timestamp(max(stamps) + 1) is None


def test_a_segment_below_the_start_with_a_later_timestamp_is_skipped() -> None:
    # DeleteRecords moved the start to 25 before the manifest dropped the segment at 0
    m = manifest(seg(0, 9, max_ts=900), seg(10, 19, max_ts=100), seg(20, 29, max_ts=200),
                 seg(30, 39, max_ts=300))
    assert [s.base_offset for s in m.segments_for_timestamp(150, 25)] == [20, 30]
    assert [s.base_offset for s in m.segments_for_timestamp(150, 0)] == [0, 20, 30]


def test_a_lookup_in_a_manifest_of_many_segments_does_not_walk_them() -> None:
    """20,000 segments (20 TB of 1 GiB segments): 2,000 lookups of recent timestamps.
    A walk over the segments takes seconds; bisection takes milliseconds."""
    segments = tuple(seg(10 * i, 10 * i + 9, max_ts=1000 * i) for i in range(20_000))
    m = PartitionManifest("orders", TOPIC_ID, 3, 1, 0, segments)
    started = time.perf_counter()
    for i in range(2_000):
        found = m.segment_for_timestamp(1000 * (19_000 + i % 1000) - 1)
        assert found is not None and found.base_offset == 10 * (19_000 + i % 1000)
    assert time.perf_counter() - started < 0.5
