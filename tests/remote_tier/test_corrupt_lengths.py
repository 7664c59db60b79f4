"""A batch header whose length is zero or negative (issue #32): every walk over batches
that advances by the header's length raised instead of spinning forever -- the tiered
reader (a corrupt object in the bucket), the uploader's segment summary, and the header
read itself. Each walk runs in a thread with a deadline, so a spin fails the test."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from common.errors import CorruptRecordError
from common.record.batch import build_batch, iter_batches, peek_batch_header, read_batch_header
from fetch.remote_reader import RemoteReader
from remote_tier.storage_manager import summarize_segment


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``'s result or exception, failing the test if it has not returned in time."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still walking after {seconds} s: it spins"
    return out[0]


def _segment_with_a_bad_length(length: int) -> bytes:
    """Three batches; the second one's batch length (bytes 8..12) set to ``length``."""
    batches = [build_batch([(b"k", b"v%d" % i, (), 1_700_000_000_000)], base_offset=i) for i in range(3)]
    second = bytearray(batches[1])
    struct.pack_into(">i", second, 8, length)
    return batches[0] + bytes(second) + batches[2]


@pytest.mark.parametrize("length", [0, -12, -1, 5])
def test_reading_a_header_with_a_length_below_a_batch_is_a_corrupt_record(length: int) -> None:
    data = _segment_with_a_bad_length(length)
    first = read_batch_header(data)
    with pytest.raises(CorruptRecordError, match="invalid batch length"):
        read_batch_header(data, first.size)
    # a walk that stops by itself at a torn tail still stops there, quietly
    assert [pos for pos, _ in iter_batches(data)] == [0]
    assert peek_batch_header(data, first.size).batch_length == length


@pytest.mark.parametrize("length", [0, -12])
def test_the_uploaders_summary_of_such_a_segment_is_an_error_not_a_spin(tmp_path: Path, length: int) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_segment_with_a_bad_length(length))
    # the 1 MiB window holds the first batch, then a header it cannot pass
    result = _within(5, lambda: summarize_segment(path))
    assert isinstance(result, CorruptRecordError), result


@dataclass(frozen=True)
class _Seg:
    base_offset: int = 0


class _Source:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def cache_key(self, segment: object) -> str:
        return "seg"

    def get_range(self, segment: object, start: int, end: int) -> bytes:
        return self.data[start:end]

    def get_offset_index(self, segment: object) -> bytes:
        return b""

    def get_time_index(self, segment: object) -> bytes:
        return b""


@pytest.mark.parametrize("length", [0, -12])
def test_a_tiered_read_over_a_corrupt_header_is_a_corrupt_record_error(length: int) -> None:
    data = _segment_with_a_bad_length(length)
    reader = RemoteReader(_Source(data), threads=1, chunk_bytes=4096, cache_bytes=1 << 20)
    try:
        for offset in (1, 2):  # the batch holding it is found by walking past the bad header
            result = _within(5, lambda offset=offset: reader.read(_Seg(), len(data), offset, 1 << 20, True))
            assert isinstance(result, CorruptRecordError), result
        result = _within(5, lambda: reader.offset_for_timestamp(_Seg(), len(data), 1_800_000_000_000))
        assert isinstance(result, CorruptRecordError), result
    finally:
        reader.close()
