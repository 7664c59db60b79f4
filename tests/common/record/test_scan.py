"""Record-level validation of produced batches (``validate_batches`` walking every record).

A CRC only proves the bytes are the producer's; these batches carry a correct CRC
and still lie, and must be refused with INVALID_RECORD naming the record:
a record length past the batch, a count the records do not fill, bytes after the
last record, a wrong offset delta, a negative header count, compressed garbage,
and a payload that inflates without bound. The C walk (``common.record._recordscan``)
and its pure-Python twin give the same answer on thousands of mutated batches.
"""

from __future__ import annotations

import os
import random
import struct

import pytest
import zstandard
from crc32c import crc32c

from common.errors import InvalidRecordError
from common.record import batch as records_module
from common.record import scan as record_scan
from common.record.batch import BATCH_OVERHEAD, Compression, build_batch, validate_batches
from common.record.compression import InflateLimitExceeded

MAX = 1 << 24


def _batch(count: int = 3, compression: Compression = Compression.NONE, value: bytes = b"v" * 20) -> bytes:
    return build_batch([(b"k%d" % i, value, [("h", b"x")], 1_000 + i) for i in range(count)],
                       compression=compression)


def _with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def _with_records(section: bytes, count: int, codec: int = 0) -> bytes:
    """A batch claiming ``count`` records whose record section is ``section``; CRC correct."""
    batch = bytearray(_batch(1))[:BATCH_OVERHEAD] + section
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, codec)
    struct.pack_into(">i", batch, 23, count - 1)  # last offset delta
    struct.pack_into(">i", batch, 57, count)  # records count
    return _with_crc(batch)


def _section(batch: bytes) -> bytes:
    return batch[BATCH_OVERHEAD:]


def _record(offset_delta: int, headers: int = 0) -> bytes:
    zigzag_headers = (headers << 1) ^ (headers >> 63)  # -1 -> 1
    body = bytes([0, 0]) + bytes([offset_delta * 2]) + b"\x02k" + b"\x02v" + bytes([zigzag_headers])
    return bytes([len(body) * 2]) + body


@pytest.mark.parametrize(
    ("section", "count", "reason"),
    [
        (_section(_batch(3))[:-5], 3, "runs past the end"),
        (_section(_batch(2)), 3, "ends before its declared record count"),
        (_section(_batch(3)) + b"\x00\x00", 3, "bytes remain after"),
        (_record(0) + _record(5), 2, "offset delta differs"),
        (_record(0, headers=-1), 1, "malformed header count"),
        (b"\x01", 1, "record length runs past"),  # zig-zag -1
    ],
    ids=["record past the end", "too few records", "trailing bytes", "offset delta", "negative headers",
         "negative length"],
)
def test_uncompressed_batches_that_lie_are_invalid_records(section: bytes, count: int, reason: str) -> None:
    with pytest.raises(InvalidRecordError, match=reason) as caught:
        validate_batches(_with_records(section, count), max_message_bytes=MAX)
    assert len(caught.value.record_errors) == 1


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_compressed_garbage_and_lying_records_are_invalid_records(codec: Compression) -> None:
    with pytest.raises(InvalidRecordError, match="cannot decompress|malformed|runs past|ends before"):
        validate_batches(_with_records(b"\x1f\x8b\x08 certainly not compressed" * 3, 3, codec),
                         max_message_bytes=MAX)
    lying = records_module.compress(codec, _section(_batch(2)))
    with pytest.raises(InvalidRecordError, match="ends before its declared record count"):
        validate_batches(_with_records(lying, 3, codec), max_message_bytes=MAX)
    good = _batch(50, codec)
    assert validate_batches(good, max_message_bytes=MAX).record_count == 50


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_a_compressed_stream_cut_after_the_last_record_is_refused(codec: Compression) -> None:
    """librdkafka refuses such a batch (_BAD_COMPRESSION): the stream must end, checksum included."""
    section = _section(_batch(20))
    if codec is Compression.ZSTD:
        whole = zstandard.ZstdCompressor(write_checksum=True).compress(section)
    else:
        whole = records_module.compress(codec, section)
    with pytest.raises(InvalidRecordError, match="truncated|cannot decompress"):
        validate_batches(_with_records(whole[:-4], 20, codec), max_message_bytes=MAX)
    assert validate_batches(_with_records(whole, 20, codec), max_message_bytes=MAX).record_count == 20


def test_a_payload_that_inflates_without_bound_is_refused_after_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records_module, "MAX_INFLATED_BATCH_BYTES", 8 << 20)
    bomb = zstandard.ZstdCompressor().compress(bytes(64 << 20))
    with pytest.raises(InvalidRecordError, match="inflate to more than"):
        validate_batches(_with_records(bomb, 1, Compression.ZSTD), max_message_bytes=MAX)
    big = _batch(2000, Compression.GZIP, os.urandom(100))
    with pytest.raises(InflateLimitExceeded):
        validate_batches(big, max_message_bytes=MAX, inflate_limit=64 * 1024)
    assert validate_batches(big, max_message_bytes=MAX).record_count == 2000


@pytest.mark.skipif(not record_scan.RECORD_WALK_IN_C,
                    reason="the C record walk is not built (python setup.py build_ext --inplace)")
def test_c_walk_and_python_twin_agree_on_mutated_batches() -> None:
    rnd = random.Random(21)
    section = _section(_batch(12, value=os.urandom(30)))
    c_scan, py_scan = record_scan.scan_records, record_scan.scan_records_py
    assert c_scan(section, 12) is None and py_scan(section, 12) is None
    for _ in range(5000):
        data = bytearray(section)
        for _ in range(rnd.randrange(1, 4)):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        if rnd.random() < 0.2:
            data = data[: rnd.randrange(len(data))]
        count = rnd.choice([12, 12, 11, 13, 1])
        assert c_scan(bytes(data), count) == py_scan(bytes(data), count)
