"""What a start after a clean shutdown still checks: the last segment's tail and every index.

The clean-shutdown marker skips recovery, but not these checks: a torn or
garbage last batch is cut (its offsets are never handed out twice), and an index
whose values point outside the log, go backwards or disagree with the log is
rebuilt from the ``.log`` instead of reaching ``os.pread``.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest

from common.record.batch import decode_all, stamp_batch
from local_tier.config import LogConfig
from local_tier.log import Log
from local_tier.manager import CLEAN_SHUTDOWN_FILE, LogManager
from tests.local_tier.batches import make_batch, small_config

BATCH = len(make_batch(5))


def _config(_topic: str = "t") -> LogConfig:
    return small_config(segment_bytes=BATCH * 3)  # 3 batches (15 offsets) a segment


def _offsets(log: Log) -> list[int]:
    log.update_high_watermark(log.log_end_offset)
    out: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        info = log.read(offset, 10**6)
        records = [r for region in info.regions for r in decode_all(region.read_bytes())]
        assert records, f"no records at offset {offset}"
        out += [r.offset for r in records if r.offset >= offset]
        offset = records[-1].offset + 1
    return out


def _shut_down_cleanly(root: Path, batches: int = 8) -> Path:
    """A log t-0 of ``batches`` batches of 5 records, shut down with the marker; its dir."""
    manager = LogManager(root)
    manager.load(_config)
    log = manager.get_or_create_log("t", 0, _config())
    for i in range(batches):  # offset o has timestamp 1000 + o
        log.append_as_leader(make_batch(5, timestamp=1_000 + 5 * i), 0)
    manager.shutdown()
    assert (root / CLEAN_SHUTDOWN_FILE).exists()
    return root / "t-0"


def _reload(root: Path) -> tuple[LogManager, Log]:
    manager = LogManager(root)
    manager.load(_config)
    log = manager.get_log("t", 0)
    assert log is not None
    return manager, log


def _stamped_batch(base_offset: int) -> bytes:
    buf = bytearray(make_batch(5))
    stamp_batch(buf, 0, base_offset=base_offset, leader_epoch=0, log_append_time_ms=None)
    return bytes(buf)


@pytest.mark.parametrize("damage", ["torn", "torn-and-indexed", "garbage-crc"])
def test_a_bad_last_batch_after_a_clean_shutdown_is_cut(tmp_path: Path, damage: str) -> None:
    part = _shut_down_cleanly(tmp_path)  # offsets 0..39; last segment 30.. holds 2 batches
    active = part / "00000000000000000030.log"
    good_size = active.stat().st_size
    batch = _stamped_batch(40)
    if damage == "garbage-crc":  # a whole batch whose body no longer matches its CRC
        tail = batch[:-8] + b"\xee" * 8
    else:  # the first part of a batch: a write cut short by a full disk
        tail = batch[: len(batch) // 2]
    with open(active, "ab") as f:
        f.write(tail)
    if damage == "torn-and-indexed":  # the old append order: index entry before the bytes
        with open(part / "00000000000000000030.index", "ab") as f:
            f.write(struct.pack(">ii", 44 - 30, good_size))

    manager, log = _reload(tmp_path)
    try:
        assert log.log_end_offset == 40
        assert active.stat().st_size == good_size
        info = log.append_as_leader(make_batch(5), 0)
        assert info.first_offset == 40
        assert _offsets(log) == list(range(45))
    finally:
        manager.shutdown()


def _corrupt(path: Path, kind: str) -> None:
    entry = 8 if path.suffix == ".index" else 12
    count = max(2, path.stat().st_size // entry)
    if kind == "negative":  # every field -1: negative positions and relative offsets
        path.write_bytes(b"\xff" * entry * count)
    elif kind == "backwards":
        data = path.read_bytes()
        path.write_bytes(data[entry:] + data[:entry])
    elif kind == "beyond-the-log":
        fmt = ">ii" if entry == 8 else ">qi"
        path.write_bytes(path.read_bytes() + struct.pack(fmt, 2**31 - 1, 2**31 - 1))
    elif kind == "torn-entry":
        path.write_bytes(path.read_bytes() + b"\x01\x02\x03")
    elif kind == "mid-batch":  # in range and increasing, but not at a batch start
        path.write_bytes(struct.pack(">ii", 1, 7) + struct.pack(">ii", 9, BATCH + 7))
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize(
    ("suffix", "kind"),
    [
        (".index", "negative"),
        (".index", "backwards"),
        (".index", "beyond-the-log"),
        (".index", "torn-entry"),
        (".index", "mid-batch"),
        (".timeindex", "negative"),
        (".timeindex", "backwards"),
        (".timeindex", "beyond-the-log"),
    ],
)
@pytest.mark.parametrize("segment", ["00000000000000000000", "00000000000000000030"])
def test_a_corrupt_index_is_rebuilt_from_the_log(
    tmp_path: Path, segment: str, suffix: str, kind: str
) -> None:
    part = _shut_down_cleanly(tmp_path)
    before = {p.name: p.read_bytes() for p in part.iterdir() if p.suffix in (".index", ".timeindex")}
    _corrupt(part / (segment + suffix), kind)

    manager, log = _reload(tmp_path)
    try:
        assert log.log_end_offset == 40
        assert _offsets(log) == list(range(40))
        assert log.fetch_offset_by_timestamp(1_002) == (2, 1_002)
        assert log.fetch_offset_by_timestamp(1_033) == (33, 1_033)
        rebuilt = {p.name: p.read_bytes() for p in part.iterdir() if p.name in before}
        assert rebuilt == before  # the same entries as the appends wrote
    finally:
        manager.shutdown()


def test_a_wrong_entry_the_start_cannot_see_only_slows_reads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An in-range, increasing first entry that points inside a batch: reads stay right."""
    part = _shut_down_cleanly(tmp_path)
    index = part / "00000000000000000000.index"
    assert index.read_bytes() == struct.pack(">iiii", 9, BATCH, 14, 2 * BATCH)
    index.write_bytes(struct.pack(">iiii", 9, BATCH - 5, 14, 2 * BATCH))

    manager, log = _reload(tmp_path)
    try:
        assert index.read_bytes()[:8] == struct.pack(">ii", 9, BATCH - 5)  # not rebuilt
        log.update_high_watermark(log.log_end_offset)
        with caplog.at_level(logging.WARNING, logger="strata.local_tier"):
            for offset in range(40):  # one batch each, found through the index
                info = log.read(offset, 1)
                batch = decode_all(b"".join(r.read_bytes() for r in info.regions))
                assert batch[0].offset <= offset <= batch[-1].offset
        assert caplog.text.count("does not match the log; scanning the segment from its start") == 1
    finally:
        manager.shutdown()


def test_an_index_larger_than_segment_index_bytes_is_not_read_whole(tmp_path: Path) -> None:
    part = _shut_down_cleanly(tmp_path)
    index = part / "00000000000000000000.index"
    good = index.read_bytes()
    with open(index, "ab") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: 64 MiB of zero entries
    manager, log = _reload(tmp_path)
    try:
        assert _offsets(log) == list(range(40))
        assert index.read_bytes() == good
    finally:
        manager.shutdown()


def test_recovery_keeps_batches_larger_than_a_lowered_max_message_bytes(tmp_path: Path) -> None:
    """max.message.bytes bounds what a producer may append, not what recovery keeps."""
    log = Log(tmp_path / "t-0", "t", 0, small_config(), needs_recovery=False)
    log.append_as_leader(make_batch(5, value_size=2_000), 0)
    log.append_as_leader(make_batch(5), 0)
    log.close()
    lowered = small_config(max_message_bytes=1_000)
    reopened = Log(tmp_path / "t-0", "t", 0, lowered, needs_recovery=True)
    try:
        assert reopened.log_end_offset == 10
        assert _offsets(reopened) == list(range(10))
    finally:
        reopened.close()
    assert os.path.getsize(tmp_path / "t-0" / "00000000000000000000.log") > 10_000


def test_recovery_checks_a_batch_larger_than_its_window_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory stays bounded by the window; a damaged large batch is still found and cut."""
    monkeypatch.setattr("local_tier.segment._RECOVERY_CHUNK", 4096)
    log = Log(tmp_path / "t-0", "t", 0, small_config(), needs_recovery=False)
    for value_size in (3_000, 10, 3_000):  # 15 KB, 0.1 KB, 15 KB batches
        log.append_as_leader(make_batch(5, value_size=value_size), 0)
    good_end = log.active_segment.size - len(make_batch(5, value_size=3_000))
    log.close()
    path = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[-7_000] ^= 0xFF  # inside the last batch, two windows in
    path.write_bytes(bytes(data))

    reopened = Log(tmp_path / "t-0", "t", 0, small_config(), needs_recovery=True)
    try:
        assert reopened.log_end_offset == 10
        assert _offsets(reopened) == list(range(10))
        assert path.stat().st_size == good_end
        assert "CRC mismatch" in (reopened.active_segment.recovery_error or "")
    finally:
        reopened.close()
