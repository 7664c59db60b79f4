"""The cleaner and crashes, transactions and concurrent appends.

Crashes are taken as copies of the partition directory at the cleaner's named
points (``.cleaned`` written, ``.swap`` renamed, segments half renamed): each
copy is opened as after ``kill -9`` and must read as a whole log, and a new pass
must complete.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from common.record.batch import build_batch
from common.record.control import build_marker_batch
from local_tier.cleaning.manager import CleanerConfig, LogCleaner
from local_tier.log import Log
from local_tier.producer_state import AppendOrigin
from tests.local_tier.cleaning_helpers import Clock, compact_config, make_cleaner, read_log, write

POINTS = ("mapped", "cleaned", "swapping", "swapping-half", "swapped")


def _fill(log: Log) -> dict[bytes, bytes]:
    model: dict[bytes, bytes] = {}
    for i in range(120):
        key, value = b"k%d" % (i % 7), b"v%d" % i
        write(log, [(key, value)])
        model[key] = value
    log.roll()
    return model


def _latest(log: Log) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    for r in read_log(log).records:
        assert r.key is not None
        out[r.key] = r.value
    return out


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_any_point_of_a_clean_leaves_a_whole_log(tmp_path: Path, point: str) -> None:
    live = tmp_path / "live" / "t-0"
    log = Log(live, "t", 0, compact_config(), needs_recovery=False)
    model = _fill(log)
    before = [(r.offset, r.key, r.value) for r in read_log(log).records]
    crashed = tmp_path / "crashed" / "t-0"
    taken: list[str] = []

    def pause(at: str) -> None:
        wanted = point.removesuffix("-half")
        if at == wanted and not taken:
            taken.append(at)
            shutil.copytree(live, crashed)
            if point == "swapping-half":  # one replaced segment renamed .deleted, the others not
                first = min(p for p in crashed.glob("*.log") if p.stem.isdigit())
                for f in crashed.glob(first.stem + ".*"):
                    if f.suffix in (".log", ".index", ".timeindex", ".txnindex"):
                        f.rename(f.with_name(f.name + ".deleted"))

    cleaner = LogCleaner(tmp_path / "live", lambda: {("t", 0): log}, lambda fn: fn(), CleanerConfig(),
                         clock_ms=Clock())
    cleaner._pause = pause  # type: ignore[method-assign]
    assert cleaner.clean_filthiest()
    assert taken == [point.removesuffix("-half")]
    log.close()
    # the copy is the directory as a kill -9 at that point leaves it
    recovered = Log(crashed, "t", 0, compact_config(), needs_recovery=True)
    try:
        assert not list(crashed.glob("*.cleaned")) and not list(crashed.glob("*.swap"))
        got = [(r.offset, r.key, r.value) for r in read_log(recovered).records]
        assert {k: v for _, k, v in got} == model
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(offsets) and set(got) <= set(before)
        for seg, nxt in zip(recovered.segments, recovered.segments[1:]):
            assert seg.next_offset == nxt.base_offset
        assert make_cleaner(recovered, Clock()).clean_filthiest() or len(got) == len(model)
        assert len(read_log(recovered).records) == len(model)
    finally:
        recovered.close()


def test_appends_go_on_while_a_pass_runs_and_reads_in_flight_stay_valid(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", "t", 0, compact_config(file_delete_delay_ms=60_000), needs_recovery=False)
    _fill(log)
    region = log.read(0, 1 << 20).regions[0]  # a fetch in flight over a segment about to go
    old = region.read_bytes()
    appended: list[int] = []

    def owner(fn):  # type: ignore[no-untyped-def]
        appended.append(write(log, [(b"during", b"x")]))  # the owner thread appends between calls
        return fn()

    cleaner = LogCleaner(tmp_path, lambda: {("t", 0): log}, owner, CleanerConfig(), clock_ms=Clock())
    assert cleaner.clean_filthiest()
    assert region.read_bytes() == old  # the replaced segment is still open (file.delete.delay.ms)
    # the appends made meanwhile are all there: the active segment is never cleaned
    assert [r.offset for r in read_log(log).records if r.key == b"during"] == appended
    log.close()


def _txn(log: Log, pid: int, records: list[tuple[bytes, bytes]], *, commit: bool, seq: int = 0) -> None:
    batch = build_batch([(k, v, (), 1000) for k, v in records], producer_id=pid, producer_epoch=0,
                        base_sequence=seq, is_transactional=True)
    log.append_as_leader(batch, 0)
    marker = build_marker_batch(producer_id=pid, producer_epoch=0, coordinator_epoch=0, committed=commit)
    log.append_as_leader(marker, 0, origin=AppendOrigin.COORDINATOR)
    log.update_high_watermark(log.log_end_offset)


def test_transactions_clean_to_the_committed_latest_per_key(tmp_path: Path) -> None:
    """Aborted data goes; read_committed keeps reading the committed latest value per key;
    markers go only once their transaction's data is gone and delete.retention.ms has passed."""
    log = Log(tmp_path / "t-0", "t", 0, compact_config(delete_retention_ms=500), needs_recovery=False)
    write(log, [(b"a", b"plain-a"), (b"b", b"plain-b")])
    _txn(log, 1, [(b"a", b"committed-a"), (b"c", b"committed-c")], commit=True)
    _txn(log, 2, [(b"a", b"aborted-a"), (b"b", b"aborted-b"), (b"d", b"aborted-d")], commit=False)
    _txn(log, 3, [(b"c", b"committed-c2")], commit=True)
    _txn(log, 2, [(b"e", b"aborted-e")], commit=False, seq=3)
    write(log, [(b"f", b"plain-f")])
    log.roll()
    want = {b"a": b"committed-a", b"b": b"plain-b", b"c": b"committed-c2", b"f": b"plain-f"}
    committed_before = {r.key: r.value for r in read_log(log, read_committed=True).records}
    assert committed_before == want
    clock = Clock()
    cleaner = make_cleaner(log, clock)
    assert cleaner.clean_filthiest()
    stored = read_log(log)
    assert {r.key: r.value for r in stored.records} == want  # aborted data physically gone
    assert {r.key: r.value for r in read_log(log, read_committed=True).records} == want
    # the aborted producer's batches survive only as empty batches (its sequence state)
    assert all(h.records_count == 0 for h in stored.batches if h.producer_id == 2 and not h.is_control)
    assert len(stored.markers) == 4  # markers stay within delete.retention.ms
    # later passes, past the horizon: the markers of transactions whose data is gone go too
    for _ in range(3):
        clock.now_ms += 1000
        write(log, [(b"g", b"more")])
        log.roll()
        cleaner.clean_filthiest()
    stored = read_log(log)
    assert {r.key: r.value for r in read_log(log, read_committed=True).records} == {**want, b"g": b"more"}
    # COMMIT markers whose transaction still has data stay (4: a, 10: c); the first ABORT
    # (8), whose data is gone, went; the last ABORT (12) stays with the aborted producer's
    # last batch, kept empty for its sequence state (Kafka's rules)
    assert stored.markers == [(4, True), (10, True), (12, False)]
    entries = [t for s in log.segments for t in s.txn_index.entries]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in entries] == [(2, 11, 12)]
    log.close()
