"""Bounded decompression: a batch that inflates past ``max_size`` stops there, in every codec."""

from __future__ import annotations

import gzip

import pytest

from common.errors import CorruptRecordError, RecordTooLargeError
from common.record.compression import Compression, compress, decompress

DATA = bytes(range(256)) * 64 + b"\x00" * 200_000  # 216 KiB, mostly zeros: inflates well


@pytest.mark.parametrize("codec", list(Compression))
def test_output_up_to_max_size_is_returned_and_beyond_it_refused(codec: Compression) -> None:
    packed = compress(codec, DATA)
    assert decompress(codec, packed, max_size=len(DATA)) == DATA
    with pytest.raises(RecordTooLargeError, match=f"more than {len(DATA) - 1} bytes"):
        decompress(codec, packed, max_size=len(DATA) - 1)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
                                   Compression.ZSTD])
def test_truncated_input_is_corrupt_not_short(codec: Compression) -> None:
    packed = compress(codec, DATA)
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed[: len(packed) // 2], max_size=len(DATA))


def test_a_bomb_costs_at_most_the_bound() -> None:
    for codec in (Compression.GZIP, Compression.ZSTD):
        bomb = compress(codec, b"\x00" * 16 * 1024 * 1024)  # 16 MiB of zeros in a few KiB
        assert len(bomb) < 20_000
        with pytest.raises(RecordTooLargeError):
            decompress(codec, bomb, max_size=256 * 1024)


def test_concatenated_gzip_members_are_all_read() -> None:
    packed = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(Compression.GZIP, packed, max_size=100) == b"first second"
