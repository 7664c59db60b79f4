"""Helpers of the log cleaner tests: a log of keyed records, reads, the latest-per-key model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from common.record.batch import (
    BatchHeader,
    Compression,
    Record,
    build_batch,
    decode_batch,
    iter_batches,
)
from common.record.control import read_marker
from local_tier.cleaning.manager import CleanerConfig, LogCleaner, Throttler
from local_tier.config import LogConfig
from local_tier.log import Log

__all__ = ["Clock", "Stored", "compact_config", "make_cleaner", "read_log", "write"]


def compact_config(**overrides: object) -> LogConfig:
    values: dict[str, object] = {
        "segment_bytes": 1024,
        "index_interval_bytes": 100,
        "file_delete_delay_ms": 0,
        "cleanup_policy": "compact",
        "delete_retention_ms": 1000,
        "min_cleanable_dirty_ratio": 0.0,
    }
    values.update(overrides)
    return LogConfig(**values)  # type: ignore[arg-type]


class Clock:
    """The cleaner's time, moved by the test."""

    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def make_cleaner(log: Log, clock: Callable[[], int], throttler: Throttler | None = None,
                 **config: object) -> LogCleaner:
    """A cleaner of ``log`` alone, run by the test's thread (its owner thread is the test's)."""
    return LogCleaner(
        log.dir.parent,
        lambda: {(log.topic, log.partition): log},
        lambda fn: fn(),
        CleanerConfig(**config),  # type: ignore[arg-type]
        clock_ms=clock,
        throttler=throttler,
    )


def write(
    log: Log,
    records: Sequence[tuple[bytes | None, bytes | None]],
    *,
    timestamp: int = 1_000,
    compression: Compression = Compression.NONE,
    producer: tuple[int, int, int] | None = None,
    transactional: bool = False,
) -> int:
    """Append one batch of ``(key, value)`` records; its first offset."""
    pid, epoch, seq = producer if producer is not None else (-1, -1, -1)
    batch = build_batch(
        [(k, v, (), timestamp) for k, v in records],
        compression=compression,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )
    info = log.append_as_leader(batch, 0)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


@dataclass(frozen=True, slots=True)
class Stored:
    """What a full read of the log holds: data records, and every batch header."""

    records: list[Record]
    batches: list[BatchHeader]
    markers: list[tuple[int, bool]]  # (offset, committed)


def read_log(log: Log, *, read_committed: bool = False) -> Stored:
    """Every batch from the log start to the log end, as a consumer reads it."""
    records: list[Record] = []
    batches: list[BatchHeader] = []
    markers: list[tuple[int, bool]] = []
    offset = log.log_start_offset
    end = log.log_end_offset
    aborted = log.aborted_txns(offset, end) if read_committed else []
    while offset < end:
        data = log.read(offset, 1 << 30, max_offset=end)
        if not data.regions:
            break
        buf = b"".join(region.read_bytes() for region in data.regions)
        for pos, header in iter_batches(buf):
            if header.next_offset <= offset:
                continue
            batches.append(header)
            if header.is_control:
                marker = read_marker(buf, pos)
                if marker is not None:
                    markers.append((header.base_offset, marker.committed))
            elif not (
                read_committed
                and header.is_transactional
                and any(
                    t.producer_id == header.producer_id and t.first_offset <= header.base_offset <= t.last_offset
                    for t in aborted
                )
            ):
                records.extend(r for r in decode_batch(buf, pos)[1] if r.offset >= offset)
            offset = header.next_offset
    return Stored(records, batches, markers)


def log_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())
