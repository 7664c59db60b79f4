"""Producer state in the partition log: idempotence, transactions, snapshots, rebuilds, expiry."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from common.record.batch import build_batch, decode_all
from common.record.control import build_marker_batch
from local_tier.config import LogConfig
from local_tier.log import Log
from local_tier.manager import LogManager
from local_tier.producer_snapshot import decode_snapshot, encode_snapshot
from local_tier.producer_state import AppendOrigin
from local_tier.txn_index import AbortedTxn
from tests.local_tier.batches import small_config

COORD = AppendOrigin.COORDINATOR


def batch(pid: int, epoch: int, seq: int, n: int = 3, *, txn: bool = False, ts: int | None = None) -> bytes:
    now = int(time.time() * 1000) if ts is None else ts
    return build_batch(
        [(b"k", b"v%d" % (seq + i), [], now) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def marker(pid: int, epoch: int, *, commit: bool, coordinator_epoch: int = 0) -> bytes:
    return build_marker_batch(
        producer_id=pid, producer_epoch=epoch, coordinator_epoch=coordinator_epoch, committed=commit
    )


@pytest.fixture()
def logs() -> Iterator[list[Log]]:
    opened: list[Log] = []
    yield opened
    for log in opened:
        log.close()


def open_log(path: Path, logs: list[Log], config: LogConfig | None = None, **kw: object) -> Log:
    log = Log(path, "t", 0, config or small_config(), needs_recovery=bool(kw.pop("unclean", False)), **kw)  # type: ignore[arg-type]
    logs.append(log)
    return log


def test_retried_batch_gets_its_original_offsets_and_is_stored_once(tmp_path: Path, logs: list[Log]) -> None:
    log = open_log(tmp_path / "t-0", logs)
    log.append_as_leader(batch(7, 0, 0), 0)
    second = batch(7, 0, 3)
    first = log.append_as_leader(second, 0)
    log.append_as_leader(batch(7, 0, 6), 0)
    retry = log.append_as_leader(second, 0)
    assert (retry.first_offset, retry.last_offset, retry.duplicate) == (3, 5, True)
    assert (first.first_offset, first.duplicate) == (3, False)
    assert log.log_end_offset == 9
    log.update_high_watermark(9)
    values = [r.value for r in decode_all(log.read(0, 1 << 20).regions[0].read_bytes())]
    assert values == [b"v%d" % i for i in range(9)]


def test_only_the_last_five_batches_are_recognised(tmp_path: Path, logs: list[Log]) -> None:
    log = open_log(tmp_path / "t-0", logs)
    for i in range(6):
        log.append_as_leader(batch(7, 0, 3 * i), 0)
    assert log.append_as_leader(batch(7, 0, 3), 0).duplicate  # 5th newest
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(7, 0, 0), 0)  # 6th newest: forgotten


def test_sequence_gap_and_old_epoch_are_refused_without_writing(tmp_path: Path, logs: list[Log]) -> None:
    log = open_log(tmp_path / "t-0", logs)
    log.append_as_leader(batch(7, 1, 0), 0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(7, 1, 5), 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(batch(7, 0, 3), 0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(7, 2, 3), 0)  # a new epoch starts at sequence 0
    assert log.append_as_leader(batch(7, 2, 0), 0).first_offset == 3
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(batch(7, 1, 3), 0)  # fenced by epoch 2
    assert log.log_end_offset == 6


def test_clients_cannot_write_markers_and_transactions_need_a_producer_id(tmp_path: Path, logs: list[Log]) -> None:
    log = open_log(tmp_path / "t-0", logs)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(marker(7, 0, commit=True), 0)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(batch(-1, -1, -1, txn=True), 0)
    assert log.log_end_offset == 0


def test_transactions_hold_the_lso_and_aborts_go_to_the_txn_index(tmp_path: Path, logs: list[Log]) -> None:
    log = open_log(tmp_path / "t-0", logs)
    log.append_as_leader(batch(1, 0, 0, 2), 0)  # 0-1 idempotent only
    log.append_as_leader(batch(2, 0, 0, 2, txn=True), 0)  # 2-3 txn A
    log.append_as_leader(batch(3, 0, 0, 2, txn=True), 0)  # 4-5 txn B
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(batch(2, 0, 2, 1, txn=False), 0)
    log.append_as_leader(marker(3, 0, commit=False), 0, origin=COORD)  # 6: abort B
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2  # A still open
    log.append_as_leader(marker(2, 0, commit=True), 0, origin=COORD)  # 7: commit A
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 8
    assert log.active_segment.txn_index.entries == [AbortedTxn(3, 4, 6, 2)]
    assert log.aborted_txns(0, 8) == [AbortedTxn(3, 4, 6, 2)]
    assert log.aborted_txns(7, 8) == []
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_as_leader(marker(2, 0, commit=True, coordinator_epoch=-5), 0, origin=COORD)


def test_crash_after_roll_rebuilds_from_the_roll_snapshot(tmp_path: Path, logs: list[Log]) -> None:
    config = small_config(segment_bytes=300)
    log = open_log(tmp_path / "t-0", logs, config)
    for i in range(4):
        log.append_as_leader(batch(9, 0, 3 * i), 0)
    log.append_as_leader(batch(5, 0, 0, 2, txn=True), 0)
    assert len(log.segments) > 1
    snapshots = log.producer_state.snapshot_offsets()
    assert snapshots and snapshots[-1] == log.active_segment.base_offset
    leo = log.log_end_offset
    log.close()  # no shutdown snapshot: as after kill -9 (close only releases descriptors)
    log = open_log(tmp_path / "t-0", logs, config, unclean=True)
    assert log.log_end_offset == leo
    assert log.append_as_leader(batch(9, 0, 9), 0).duplicate
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == leo - 2  # the open transaction came back
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(9, 0, 20), 0)


def test_crash_without_any_snapshot_rebuilds_state_and_txn_index_from_the_log(
    tmp_path: Path, logs: list[Log]
) -> None:
    log = open_log(tmp_path / "t-0", logs)
    log.append_as_leader(batch(4, 0, 0, 2, txn=True), 0)
    log.append_as_leader(marker(4, 0, commit=False), 0, origin=COORD)
    log.append_as_leader(batch(6, 3, 0), 0)
    log.close()
    for path in (tmp_path / "t-0").glob("*.snapshot"):
        path.unlink()
    (tmp_path / "t-0" / "00000000000000000000.txnindex").unlink()
    log = open_log(tmp_path / "t-0", logs, unclean=True)
    assert log.aborted_txns(0, log.log_end_offset) == [AbortedTxn(4, 0, 2, 3)]
    assert log.append_as_leader(batch(6, 3, 0), 0).duplicate
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(batch(6, 2, 3), 0)
    assert log.producer_state.snapshot_offsets() == [6]  # taken after the rebuild


def test_clean_shutdown_snapshot_keeps_all_five_batches(tmp_path: Path, logs: list[Log]) -> None:
    manager = LogManager(tmp_path)
    log = manager.get_or_create_log("t", 0, small_config())
    for i in range(5):
        log.append_as_leader(batch(8, 0, 3 * i), 0)
    manager.shutdown()
    assert log.producer_state.snapshot_offsets() == [15]
    manager = LogManager(tmp_path)
    manager.load(lambda _: small_config())
    reopened = manager.get_log("t", 0)
    assert reopened is not None
    assert reopened.append_as_leader(batch(8, 0, 0), 0).duplicate  # the oldest of the five
    manager.shutdown()


def test_a_corrupt_snapshot_is_dropped_and_the_log_replayed(tmp_path: Path, logs: list[Log]) -> None:
    log = open_log(tmp_path / "t-0", logs)
    log.append_as_leader(batch(8, 0, 0), 0)
    log.take_producer_snapshot()
    log.close()
    path = tmp_path / "t-0" / "00000000000000000003.snapshot"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    log = open_log(tmp_path / "t-0", logs)
    assert log.append_as_leader(batch(8, 0, 0), 0).duplicate


def test_idle_producers_expire_and_then_any_sequence_is_accepted(tmp_path: Path, logs: list[Log]) -> None:
    log = open_log(tmp_path / "t-0", logs)
    log.append_as_leader(batch(8, 0, 0, ts=1_000), 0)
    log.append_as_leader(batch(9, 0, 0, 2, txn=True, ts=1_000), 0)
    assert log.remove_expired_producers(now_ms=50_000, expiration_ms=100_000) == 0
    assert log.remove_expired_producers(now_ms=200_000, expiration_ms=100_000) == 1  # not the open txn
    assert log.producer_state.last_entry(8) is None
    assert not log.append_as_leader(batch(8, 0, 0, ts=1_000), 0).duplicate  # forgotten: written again
    assert log.append_as_leader(batch(8, 0, 3, ts=1_000), 0).first_offset == 8


def test_expired_producers_are_not_loaded_from_a_snapshot(tmp_path: Path, logs: list[Log]) -> None:
    log = open_log(tmp_path / "t-0", logs)
    log.append_as_leader(batch(8, 0, 0, ts=1_000), 0)
    log.take_producer_snapshot()
    log.close()
    log = open_log(tmp_path / "t-0", logs, producer_id_expiration_ms=1_000)
    assert log.producer_state.last_entry(8) is None


def test_snapshots_below_the_log_start_are_deleted(tmp_path: Path, logs: list[Log]) -> None:
    config = small_config(segment_bytes=300, retention_bytes=300)
    log = open_log(tmp_path / "t-0", logs, config)
    for i in range(12):
        log.append_as_leader(batch(9, 0, 3 * i), 0)
    log.update_high_watermark(log.log_end_offset)
    before = log.producer_state.snapshot_offsets()
    assert len(before) >= 3
    assert log.delete_retention_segments(now_ms=int(time.time() * 1000)) > 0
    after = log.producer_state.snapshot_offsets()
    assert min(before) < log.segments[0].base_offset <= min(after)
    assert log.append_as_leader(batch(9, 0, 33), 0).duplicate  # the state itself stays


def test_snapshot_codec_round_trip_and_refuses_garbage() -> None:
    from local_tier.producer_snapshot import CorruptSnapshotError
    from local_tier.producer_state import ProducerStateEntry

    entry = ProducerStateEntry(5, 2, 7, 1234, 99)
    entry.add_batch(2, 10, 100, 4, 1234)
    entry.add_batch(2, 12, 102, 1, 1235)
    (back,) = decode_snapshot(encode_snapshot([entry]))
    assert (back.producer_id, back.producer_epoch, back.coordinator_epoch, back.current_txn_first_offset) == (5, 2, 7, 99)
    assert list(back.batches) == list(entry.batches)
    data = encode_snapshot([entry])
    for bad in (data[:5], data[:-3], b"\x00\x01" + data[2:], data[:6] + b"\x7f\xff\xff\xff" + data[10:]):
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(bad)


def test_a_clean_stop_of_an_idle_log_does_not_rewrite_its_snapshot(tmp_path: Path, logs: list[Log]) -> None:
    log = open_log(tmp_path / "t-0", logs)
    log.append_as_leader(batch(8, 0, 0), 0)
    log.take_producer_snapshot()  # the first clean stop
    path = tmp_path / "t-0" / "00000000000000000003.snapshot"
    written = path.stat().st_mtime_ns, path.stat().st_ino
    log.close()
    log = open_log(tmp_path / "t-0", logs)
    log.take_producer_snapshot()  # stopped again without an append: the snapshot says it all
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == written
    log.append_as_leader(batch(8, 0, 3), 0)
    log.take_producer_snapshot()
    assert log.producer_state.snapshot_offsets() == [3, 6]


def test_a_leadership_epoch_is_written_with_the_first_append_not_before(tmp_path: Path, logs: list[Log]) -> None:
    """Becoming leader assigns the epoch in memory (no disk I/O per leadership on the loop);
    the first append of that epoch writes the checkpoint before its bytes."""
    log = open_log(tmp_path / "t-0", logs)
    checkpoint = tmp_path / "t-0" / "leader-epoch-checkpoint"
    log.leader_epoch_cache.assign(7, 0, persist=False)  # what Partition._become_leader does
    assert log.leader_epoch_cache.end_offset_for(7) == (7, 0)  # answered from memory at once
    assert not checkpoint.exists() and log.leader_epoch_cache.needs_persist
    log.append_as_leader(batch(8, 0, 0), 7)
    assert checkpoint.read_text() == "0\n1\n7 0\n" and not log.leader_epoch_cache.needs_persist
    log.close()
    assert open_log(tmp_path / "t-0", logs).leader_epoch_cache.entries == [(7, 0)]


def test_a_clean_stop_of_an_empty_log_writes_no_snapshot(tmp_path: Path, logs: list[Log]) -> None:
    log = open_log(tmp_path / "t-0", logs)
    log.take_producer_snapshot()
    assert log.producer_state.snapshot_offsets() == []  # nothing a load would replay
    log.append_as_leader(batch(8, 0, 0), 0)
    log.take_producer_snapshot()
    assert log.producer_state.snapshot_offsets() == [3]
