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


def test_zstd_frames_are_read_whole_however_they_are_cut() -> None:
    """One frame that spans the data is decoded in one call (its end found from its block
    headers); several frames, a cut checksum or bytes after the frame go the stepwise way."""
    import zstandard

    plain = zstandard.ZstdCompressor(write_content_size=False).compress(DATA)
    checked = zstandard.ZstdCompressor(write_checksum=True).compress(DATA)
    assert decompress(Compression.ZSTD, plain, max_size=len(DATA)) == DATA
    assert decompress(Compression.ZSTD, checked, max_size=len(DATA)) == DATA
    assert decompress(Compression.ZSTD, plain + checked, max_size=2 * len(DATA)) == DATA + DATA
    with pytest.raises(RecordTooLargeError):
        decompress(Compression.ZSTD, plain + checked, max_size=2 * len(DATA) - 1)
    for cut in (checked[:-2], plain[:-1], plain + b"\x00\x01\x02\x03\x04\x05\x06"):
        with pytest.raises(CorruptRecordError):
            decompress(Compression.ZSTD, cut, max_size=4 * len(DATA))


def test_a_zstd_frame_declaring_more_than_the_bound_is_refused_unread() -> None:
    bomb = compress(Compression.ZSTD, b"\x00" * 64 * 1024 * 1024)  # declares its 64 MiB
    with pytest.raises(RecordTooLargeError, match="more than 262144 bytes .their frame declares 67108864"):
        decompress(Compression.ZSTD, bomb, max_size=256 * 1024)
