"""Bounded decompression: a batch that inflates past ``max_size`` stops there, in every codec."""

from __future__ import annotations

import gzip

import pytest

from local_tier.compression import Compression, compress, decompress
from local_tier.errors import CorruptRecordError, RecordTooLargeError

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


def test_a_gzip_bomb_costs_at_most_the_bound() -> None:
    bomb = gzip.compress(b"\x00" * 64 * 1024 * 1024)  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < 100_000
    with pytest.raises(RecordTooLargeError):
        decompress(Compression.GZIP, bomb, max_size=1024 * 1024)


def test_concatenated_gzip_members_are_all_read() -> None:
    packed = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(Compression.GZIP, packed, max_size=100) == b"first second"
