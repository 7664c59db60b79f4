"""The uploader's summary of a segment (remote_tier.storage_manager.summarize_segment): the
same whatever the batches' sizes, and read by their headers, not whole.

A producer's batches of about 1 MB held one header per 1 MiB window, so the walk read every
byte of the segment: as much as the upload's own copy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.record.batch import build_batch, iter_batches
from remote_tier.storage_manager import summarize_segment


def _batch(offset: int, value_bytes: int, records: int = 1) -> bytes:
    rows = [(b"k", os.urandom(value_bytes), (), 1_700_000_000_000 + offset + i) for i in range(records)]
    return build_batch(rows, base_offset=offset, partition_leader_epoch=3 if offset >= 40 else 2)


def _segment(tmp_path: Path, sizes: list[tuple[int, int]], tail: bytes = b"") -> tuple[Path, bytes]:
    data, offset = b"", 0
    for value_bytes, records in sizes:
        data += _batch(offset, value_bytes, records)
        offset += records
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data + tail)
    return path, data


# small batches many to a window, batches larger than a window, one just under, mixed
MIXES = [
    [(100, 3)] * 50,
    [(1_000_000, 1)] * 5,
    [(65_400, 1), (100, 2), (200_000, 1), (10, 1), (70_000, 2), (5, 40), (1_000_000, 1), (100, 1)],
]


@pytest.mark.parametrize("sizes", MIXES)
@pytest.mark.parametrize("torn", [b"", b"\0" * 30, b"\0" * 200])
def test_the_summary_is_that_of_every_whole_batch(tmp_path: Path, sizes: list[tuple[int, int]], torn: bytes) -> None:
    path, data = _segment(tmp_path, sizes, torn if torn else b"")
    if torn == b"\0" * 200:  # a batch cut short after its header: a crash mid-write
        path.write_bytes(data + _batch(10_000, 5_000)[:200])
    summary = summarize_segment(path)
    headers = [h for _, h in iter_batches(data)]
    assert summary is not None
    assert summary.size_bytes == len(data)
    assert summary.base_offset == 0 and summary.last_offset == headers[-1].last_offset
    assert summary.record_count == sum(r for _, r in sizes)
    assert summary.max_timestamp == max(h.max_timestamp for h in headers)
    assert summary.min_timestamp == min(h.base_timestamp for h in headers)
    assert [e for e, _ in summary.epochs] == sorted({h.partition_leader_epoch for h in headers})


def test_large_batches_are_read_by_their_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, data = _segment(tmp_path, [(1_000_000, 1)] * 8)
    read: list[int] = []
    real = os.pread

    def counting(fd: int, size: int, position: int) -> bytes:
        got = real(fd, size, position)
        read.append(len(got))
        return got

    monkeypatch.setattr(os, "pread", counting)
    summary = summarize_segment(path)
    assert summary is not None and summary.record_count == 8
    assert sum(read) < len(data) / 10, f"read {sum(read):,} of {len(data):,} bytes"
