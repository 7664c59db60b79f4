"""The log cleaner on a local log: latest value per key, tombstones, offsets, groups, lags."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.errors import InvalidRecordError
from common.record.batch import Compression, decode_all
from local_tier.checkpoint import read_checkpoint
from local_tier.cleaning.cleaner import CleanerIO, SourceSegment, group_segments_by_size
from local_tier.cleaning.manager import CLEANER_CHECKPOINT, CleanerConfig, LogCleaner, Throttler
from local_tier.log import Log
from tests.local_tier.cleaning_helpers import Clock, compact_config, make_cleaner, read_log, write

_dirs = itertools.count()

KEYS = [b"k%d" % i for i in range(12)]
record = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=0, max_size=40)))
batches = st.lists(
    st.tuples(st.lists(record, min_size=1, max_size=6), st.sampled_from([Compression.NONE, Compression.ZSTD])),
    min_size=1,
    max_size=60,
)


def _latest(history: list[tuple[int, bytes, bytes | None]]) -> dict[bytes, tuple[int, bytes | None]]:
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, key, value in history:
        latest[key] = (offset, value)
    return latest


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=batches, segment_bytes=st.sampled_from([1024, 1500, 4096]))
def test_a_cleaned_log_reads_as_the_latest_value_per_key(
    tmp_path: Path, data: list[tuple[list[tuple[bytes, bytes | None]], Compression]], segment_bytes: int
) -> None:
    """Property: random keys, values and tombstones over many segments; after a pass, a full
    read is the latest record per key (tombstones included, within delete.retention.ms), in
    offset order with gaps; after the horizon and one more pass, without the tombstones."""
    log = Log(tmp_path / f"{next(_dirs)}" / "t-0", "t", 0, compact_config(segment_bytes=segment_bytes),
              needs_recovery=False)
    try:
        history: list[tuple[int, bytes, bytes | None]] = []
        for records, codec in data:
            first = write(log, records, compression=codec)
            history += [(first + i, k, v) for i, (k, v) in enumerate(records)]
        log.roll()  # the whole log becomes cleanable
        clock = Clock()
        cleaner = make_cleaner(log, clock)
        cleaner.clean_filthiest()
        stored = read_log(log)
        latest = _latest(history)
        got = [(r.offset, r.key, r.value) for r in stored.records]
        assert got == sorted((o, k, v) for k, (o, v) in latest.items())
        offsets = [h.base_offset for h in stored.batches]
        assert offsets == sorted(set(offsets))
        assert log.log_end_offset == history[-1][0] + 1
        # one more key, past every tombstone's horizon: the tombstones go
        clock.now_ms += 1001
        first = write(log, [(b"fresh", b"x")])
        history.append((first, b"fresh", b"x"))
        log.roll()
        assert cleaner.clean_filthiest()
        got = [(r.offset, r.key, r.value) for r in read_log(log).records]
        assert got == sorted((o, k, v) for k, (o, v) in _latest(history).items() if v is not None)
    finally:
        log.close()


def test_small_segments_merge_up_to_segment_bytes_and_batches_keep_their_identity(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", "t", 0, compact_config(segment_bytes=1024), needs_recovery=False)
    for i in range(200):
        write(log, [(b"k%d" % (i % 5), b"v%d" % i)], producer=(9, 2, i))
    log.roll()
    before = len(log.segments)
    cleaner = make_cleaner(log, Clock())
    for _ in range(3):  # each pass merges what the previous one shrank
        cleaner.clean_filthiest()
        write(log, [(b"other", b"x")])
        log.roll()
    assert len(log.segments) < before / 4
    assert all(s.size <= 1024 for s in log.segments)
    stored = read_log(log)
    for header in stored.batches:
        if header.producer_id == 9:
            assert (header.producer_epoch, header.base_sequence) == (2, header.base_offset)
    # the log stays contiguous: each segment ends where the next begins
    for seg, nxt in zip(log.segments, log.segments[1:]):
        assert seg.next_offset == nxt.base_offset
    assert read_checkpoint(tmp_path / CLEANER_CHECKPOINT)[0][:2] == ["t", "0"]
    log.close()


def test_idempotent_producer_state_survives_cleaning_and_a_rebuild(tmp_path: Path) -> None:
    """A producer's last batch stays (empty if need be), so after a restart that rebuilds the
    producer state from the log, its retry is still answered with the original offsets."""
    log = Log(tmp_path / "t-0", "t", 0, compact_config(), needs_recovery=False)
    write(log, [(b"a", b"1"), (b"b", b"1")], producer=(5, 0, 0))
    last = write(log, [(b"a", b"2")], producer=(5, 0, 2))
    write(log, [(b"a", b"3")])  # a non-idempotent write makes the producer's record obsolete
    log.roll()
    make_cleaner(log, Clock()).clean_filthiest()
    headers = [h for h in read_log(log).batches if h.producer_id == 5]
    assert [(h.base_offset, h.records_count, h.base_sequence) for h in headers] == [(0, 1, 0), (2, 0, 2)]
    log.close()
    for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
        snapshot.unlink()  # the state must come back from the log itself
    log = Log(tmp_path / "t-0", "t", 0, compact_config(), needs_recovery=True)
    from common.record.batch import build_batch

    retry = build_batch([(b"a", b"2", (), 1000)], producer_id=5, producer_epoch=0, base_sequence=2)
    info = log.append_as_leader(retry, 0)
    assert (info.duplicate, info.first_offset) == (True, last)
    nxt = build_batch([(b"c", b"1", (), 1000)], producer_id=5, producer_epoch=0, base_sequence=3)
    assert not log.append_as_leader(nxt, 0).duplicate
    log.close()


def test_records_without_a_key_are_refused_by_produce_and_removed_by_the_cleaner(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", "t", 0, compact_config(), needs_recovery=False)
    with pytest.raises(InvalidRecordError) as refused:
        write(log, [(b"k", b"a"), (None, b"no key"), (b"k", b"b"), (None, b"none")])
    assert [i for i, _ in refused.value.record_errors] == [1, 3]  # type: ignore[attr-defined]
    assert log.log_end_offset == 0
    # written while the topic was cleanup.policy=delete, then altered to compact
    log.update_config(compact_config(cleanup_policy="delete"))
    write(log, [(None, b"lost"), (b"k", b"kept")])
    log.update_config(compact_config())
    log.roll()
    make_cleaner(log, Clock()).clean_filthiest()
    assert [(r.key, r.value) for r in read_log(log).records] == [(b"k", b"kept")]
    log.close()


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path) -> None:
    clock = Clock(10_000_000)
    log = Log(tmp_path / "t-0", "t", 0, compact_config(min_compaction_lag_ms=60_000), needs_recovery=False)
    for i in range(40):
        write(log, [(b"k", b"v%d" % i)], timestamp=clock.now_ms - 10_000)  # 10 s old: too young
    log.roll()
    cleaner = make_cleaner(log, clock)
    assert not cleaner.clean_filthiest()
    clock.now_ms += 60_000
    assert cleaner.clean_filthiest()
    assert [r.value for r in read_log(log).records] == [b"v39"]
    log.close()


def test_dirty_ratio_threshold_and_max_compaction_lag(tmp_path: Path) -> None:
    clock = Clock(10_000_000)
    config = compact_config(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000)
    log = Log(tmp_path / "t-0", "t", 0, config, needs_recovery=False)
    for i in range(30):
        write(log, [(b"k%d" % (i % 3), b"v%d" % i)], timestamp=clock.now_ms)
    log.roll()
    cleaner = make_cleaner(log, clock)
    assert cleaner.clean_filthiest()  # never cleaned: the ratio is 1.0
    for i in range(30):
        write(log, [(b"k%d" % (i % 3), b"w%d" % i)], timestamp=clock.now_ms)
    log.roll()
    assert not cleaner.clean_filthiest()  # below 0.99
    progress = cleaner.progress("t", 0)
    assert progress is not None and 0 < progress.dirty_ratio < 0.99
    clock.now_ms += 61_000  # the dirty records are now older than max.compaction.lag.ms
    assert cleaner.clean_filthiest()
    assert sorted(r.value for r in read_log(log).records) == [b"w27", b"w28", b"w29"]
    log.close()


def test_checkpoint_beyond_the_log_end_restarts_from_the_log_start(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", "t", 0, compact_config(), needs_recovery=False)
    for i in range(20):
        write(log, [(b"k", b"v%d" % i)])
    log.roll()
    (tmp_path / CLEANER_CHECKPOINT).write_text("0\n1\nt 0 999999\n")
    cleaner = make_cleaner(log, Clock())
    assert cleaner.checkpoint(("t", 0)) == 999999
    assert cleaner.clean_filthiest()
    assert [r.value for r in read_log(log).records] == [b"v19"]
    assert cleaner.checkpoint(("t", 0)) == 20
    log.close()


def test_groups_follow_kafkas_size_rule() -> None:
    segs = [SourceSegment(None, b, b + 10, size, 8) for b, size in ((0, 400), (10, 400), (20, 300), (30, 900))]  # type: ignore[arg-type]
    groups = group_segments_by_size(segs, 1024, 1024, 40)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20], [30]]
    assert [[s.base_offset for s in g] for g in group_segments_by_size(segs, 1024, 16, 40)] == [
        [0, 10], [20], [30]
    ]
    assert [[s.base_offset for s in g] for g in group_segments_by_size(segs, 1024, 8, 40)] == [
        [0], [10], [20], [30]
    ]


def test_throttler_holds_the_rate() -> None:
    now = [0.0]
    slept: list[float] = []
    throttle = Throttler(1000.0, clock=lambda: now[0], sleep=slept.append)
    now[0] = 0.5
    throttle(2000)  # 2000 bytes in 0.5 s at 1000 B/s: 1.5 s to wait
    assert slept == [pytest.approx(1.5)]
    throttle(100)  # while the budget is spent (until 2.0 s), a caller waits with the sleeper
    assert slept[1:] == [pytest.approx(1.5)]
    now[0] = 2.5
    throttle(300)  # the window from 2.0 s holds these 400 bytes: 0.4 s of budget in 0.5 s, no wait
    assert len(slept) == 2 and throttle.observed_bytes == 2400


def test_a_throttler_shared_by_threads_holds_their_sum_to_the_rate() -> None:
    """The local cleaner's threads and the remote cleaner share one Throttler: two callers
    together get ``rate``, not ``rate`` each (a lower bound on the time, so never flaky)."""
    rate, chunk, calls = 100_000.0, 1000, 50
    throttle = Throttler(rate, check_s=0.005)

    def cleaner() -> None:
        for _ in range(calls):
            time.sleep(0.001)  # the I/O itself
            throttle(chunk)

    started = time.monotonic()
    threads = [threading.Thread(target=cleaner) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    assert throttle.observed_bytes == 2 * calls * chunk
    # 100 KB at 100 KB/s: 1 s, less what the last window (a few ms of calls) holds unchecked
    assert elapsed >= 0.8 * throttle.observed_bytes / rate, elapsed


def test_a_cleaning_pass_is_held_to_the_io_rate(tmp_path: Path) -> None:
    """A whole pass reports every byte it reads and writes to the throttler, which makes it
    take at least bytes / rate (the throttler's sleeps are counted, not slept)."""
    log = Log(tmp_path / "t-0", "t", 0, compact_config(), needs_recovery=False)
    for i in range(300):
        write(log, [(b"key-%d" % (i % 10), b"v" * 40)])
    log.roll()
    slept = [0.0]
    started = time.monotonic()
    throttle = Throttler(20_000.0, clock=lambda: time.monotonic() + slept[0],
                         sleep=lambda s: slept.__setitem__(0, slept[0] + s), check_s=0.0)
    cleaner = make_cleaner(log, Clock(), throttler=throttle)
    try:
        assert cleaner.clean_filthiest()
    finally:
        log.close()
    elapsed = time.monotonic() - started + slept[0]
    progress = cleaner.progress("t", 0)
    assert progress is not None and progress.bytes_read > 10_000
    assert throttle.observed_bytes == progress.bytes_read + progress.bytes_written
    assert elapsed >= throttle.observed_bytes / throttle.rate
    assert throttle.throttled_s == pytest.approx(slept[0]) and slept[0] > 0.5


def test_io_breathes_the_interpreter_lock_back() -> None:
    io = CleanerIO(slice_s=0.0, rest_s=0.0)
    io.breathe()  # no error, no wait: the slice of 0 s has passed


def test_a_pass_that_empties_its_groups_leaves_no_segments_of_empty_batches(tmp_path: Path) -> None:
    """Issue #36: groups are made from the sizes before cleaning, so a pass that removed
    every record of 30 full segments left 30 segments of one empty batch each, and a
    consumer read them one tiny empty response at a time (librdkafka doubles its fetch
    size on each until MSG_SIZE_TOO_LARGE). The outputs now join while they fit one
    segment, and a read carries on past empty batches into the records after them."""
    log = Log(tmp_path / "t-0", "t", 0, compact_config(segment_bytes=2048), needs_recovery=False)
    try:
        for i in range(120):  # ~30 full segments, every key overwritten by the last round
            write(log, [(b"k%d" % (j % 4), b"v%d-" % i + bytes(100)) for j in range(4)])
        for j in range(4):
            write(log, [(b"k%d" % j, b"final")])
        log.roll()
        before = len(log.segments)
        cleaner = make_cleaner(log, Clock())
        assert cleaner.clean_filthiest()
        cleaned = log.segments[:-1]  # the active segment is never cleaned
        assert before > 30 and len(cleaned) <= 2, [s.base_offset for s in log.segments]
        assert [r.value for r in read_log(log).records] == [b"final"] * 4
        # one read from the log start reaches the records behind the empty batches
        info = log.read(log.log_start_offset, 1 << 20)
        values = [r.value for region in info.regions for r in decode_all(region.read_bytes())]
        assert values == [b"final"] * 4
    finally:
        log.close()


def test_reconfigure_changes_threads_rate_and_back_off_without_a_restart(tmp_path: Path) -> None:
    """Dynamic log.cleaner.* (Kafka's LogCleaner.reconfigure): added threads start at once, threads
    beyond the new count leave after their round, the I/O rate and back-off apply now."""
    cleaner = LogCleaner(tmp_path, dict, lambda fn: fn(), CleanerConfig(threads=1, backoff_ms=600_000))

    def running() -> list[int]:
        with cleaner._lock:
            return sorted(i for i, t in cleaner._threads.items() if t.is_alive())

    cleaner.start()
    try:
        cleaner.reconfigure(replace(cleaner.config, threads=3, backoff_ms=50, io_max_bytes_per_second=1e6))
        assert running() == [0, 1, 2] and cleaner.throttler.rate == 1e6
        cleaner.reconfigure(replace(cleaner.config, threads=1))
        deadline = time.monotonic() + 5
        while running() != [0]:
            assert time.monotonic() < deadline, running()
            time.sleep(0.01)
        cleaner.reconfigure(replace(cleaner.config, threads=2))
        assert running() == [0, 1]
    finally:
        cleaner.shutdown()
    assert not cleaner._threads
