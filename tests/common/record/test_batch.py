from __future__ import annotations

import struct
import types

import cramjam
import kafka.codec
import pytest
import zstandard
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedForMessageFormatError,
)
from common.record.batch import (
    BATCH_OVERHEAD,
    Compression,
    Record,
    RecordTuple,
    build_batch,
    compress,
    decode_all,
    decode_batch,
    decompress,
    iter_batches,
    read_batch_header,
    stamp_batch,
    validate_batches,
)
from tests.local_tier.batches import make_batch

RECORDS: list[RecordTuple] = [
    (b"key-0", b"value-0" * 50, [("h1", b"v1"), ("h2", None)], 1_700_000_000_000),
    (None, b"value-1", [], 1_700_000_000_005),
    (b"key-2", None, [("h", b"")], 1_699_999_999_990),
]


@pytest.fixture()
def kafka_python_snappy(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python's snappy codec needs python-snappy; feed it cramjam's raw snappy instead.

    kafka-python still does its own xerial framing, so the framing is cross-checked.
    """
    shim = types.SimpleNamespace(
        compress=lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))),
        decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
    )
    monkeypatch.setattr(kafka.codec, "snappy", shim)


@pytest.mark.parametrize("codec", list(Compression))
def test_build_then_decode_round_trips_every_codec(codec: Compression) -> None:
    batch = build_batch(RECORDS, compression=codec, base_offset=100)
    header, records = decode_batch(batch)
    assert header.compression == codec
    assert header.records_count == 3
    assert header.max_timestamp == 1_700_000_000_005
    assert records == [
        Record(100 + i, ts or 0, key, value, tuple(headers))
        for i, (key, value, headers, ts) in enumerate(RECORDS)
    ]
    validate_batches(batch, max_message_bytes=1 << 20)


@pytest.mark.parametrize("codec", list(Compression))
def test_decoder_reads_batches_from_kafka_python(
    codec: Compression, kafka_python_snappy: None
) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, (key, value, headers, ts) in enumerate(RECORDS):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    data = bytes(builder.build())
    validated = validate_batches(data, max_message_bytes=1 << 20)
    assert validated.record_count == 3
    assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in decode_all(data)] == [
        (key, value, ts, headers) for key, value, headers, ts in RECORDS
    ]


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_reads_batches_we_build(codec: Compression, kafka_python_snappy: None) -> None:
    data = build_batch(RECORDS, compression=codec, base_offset=7)
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    got = [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in batch]
    assert got == [(7 + i, k, v, ts, h) for i, (k, v, h, ts) in enumerate(RECORDS)]


def test_snappy_decodes_raw_and_multi_block_xerial() -> None:
    payload = bytes(range(256)) * 1000  # > 32 KiB: several xerial blocks
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(payload))) == payload
    framed = compress(Compression.SNAPPY, payload)
    assert framed.startswith(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    assert decompress(Compression.SNAPPY, framed) == payload


def test_zstd_decodes_frames_without_content_size() -> None:
    payload = b"strata" * 1000
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(payload)
    assert decompress(Compression.ZSTD, frame) == payload


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_undecodable_payload_is_a_corrupt_record(codec: Compression) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x09xx")


def test_validate_reports_counts_and_max_timestamp_over_batches() -> None:
    first = make_batch(3, timestamp=100)
    second = make_batch(2, timestamp=500)
    third = make_batch(4, timestamp=200)
    validated = validate_batches(first + second + third, max_message_bytes=1 << 20)
    assert validated.record_count == 9
    assert validated.max_timestamp == 501
    assert validated.shallow_offset_of_max_timestamp == 4  # last offset of the 2nd batch
    assert [pos for pos, _ in validated.headers] == [0, len(first), len(first) + len(second)]
    assert validated.size == len(first) + len(second) + len(third)


def _with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def test_crc_mismatch_is_rejected() -> None:
    batch = bytearray(make_batch())
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        validate_batches(batch, max_message_bytes=1 << 20)


def test_garbage_magic_is_corrupt_and_old_magic_is_unsupported() -> None:
    batch = bytearray(make_batch())
    batch[16] = 7
    with pytest.raises(CorruptRecordError, match="magic"):
        validate_batches(batch, max_message_bytes=1 << 20)
    batch[16] = 1
    with pytest.raises(UnsupportedForMessageFormatError):
        validate_batches(batch, max_message_bytes=1 << 20)


@pytest.mark.parametrize("cut", [1, 11, 30, BATCH_OVERHEAD + 1])
def test_truncated_buffer_is_corrupt(cut: int) -> None:
    data = make_batch() * 2
    with pytest.raises(CorruptRecordError, match="incomplete"):
        validate_batches(data[:-cut], max_message_bytes=1 << 20)


def test_empty_record_set_and_short_batch_length_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        validate_batches(b"", max_message_bytes=1 << 20)
    batch = bytearray(make_batch())
    struct.pack_into(">i", batch, 8, 20)
    with pytest.raises(CorruptRecordError, match="smaller than"):
        validate_batches(batch, max_message_bytes=1 << 20)


def test_record_count_must_match_last_offset_delta() -> None:
    batch = bytearray(make_batch(3))
    struct.pack_into(">i", batch, 57, 5)
    with pytest.raises(InvalidRecordError):
        validate_batches(_with_crc(batch), max_message_bytes=1 << 20)


def test_unknown_codec_is_rejected() -> None:
    batch = bytearray(make_batch())
    struct.pack_into(">h", batch, 21, 6)
    with pytest.raises(UnsupportedCompressionTypeError):
        validate_batches(_with_crc(batch), max_message_bytes=1 << 20)


def test_batch_larger_than_max_message_bytes_is_rejected() -> None:
    batch = make_batch(value_size=1000)
    with pytest.raises(RecordTooLargeError):
        validate_batches(batch, max_message_bytes=len(batch) - 1)
    validate_batches(batch, max_message_bytes=len(batch))


def test_stamp_batch_sets_offset_and_epoch_without_touching_the_crc() -> None:
    original = make_batch(3, timestamp=42)
    buf = bytearray(original)
    stamp_batch(buf, 0, base_offset=1_000, leader_epoch=7)
    header = read_batch_header(buf)
    assert (header.base_offset, header.partition_leader_epoch) == (1_000, 7)
    assert buf[17:] == original[17:]
    validate_batches(buf, max_message_bytes=1 << 20)
    assert [r.offset for r in decode_all(buf)] == [1_000, 1_001, 1_002]


def test_stamp_batch_log_append_time_recomputes_the_crc() -> None:
    buf = bytearray(make_batch(3, timestamp=42))
    stamp_batch(buf, 0, base_offset=5, leader_epoch=1, log_append_time_ms=99_000)
    header = read_batch_header(buf)
    assert header.timestamp_type == 1
    assert header.max_timestamp == 99_000
    validate_batches(buf, max_message_bytes=1 << 20)
    assert {r.timestamp for r in decode_all(buf)} == {99_000}


def test_header_flags() -> None:
    header = read_batch_header(
        build_batch(
            [(None, b"x", [], 1)],
            is_control=True,
            is_transactional=True,
            producer_id=9,
            producer_epoch=1,
            base_sequence=0,
            compression=Compression.LZ4,
        )
    )
    assert header.is_control and header.is_transactional
    assert header.compression == Compression.LZ4
    assert header.timestamp_type == 0
    assert header.size == header.batch_length + 12
    assert (header.last_offset, header.next_offset) == (0, 1)


def test_iter_batches_stops_quietly_at_a_torn_tail() -> None:
    data = make_batch() + make_batch() + make_batch()[:-5]
    assert [pos for pos, _ in iter_batches(data)] == [0, len(make_batch())]


def test_build_batch_needs_records() -> None:
    with pytest.raises(ValueError):
        build_batch([])
