"""Executor-side segment reading: chunking, offset bounds, codecs, CRC and truncation errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.record.batch import Compression, build_batch
from spark.bucket import open_bucket
from spark.options import StrataSourceError
from spark.segments import Columns, SegmentRef, offset_for_timestamp, read_segment

KEY = "topics/t/0/00000000000000000000-" + "a" * 32 + ".log"


def _segment(tmp_path: Path, batches: int = 20, per: int = 25) -> tuple[SegmentRef, bytes]:
    data = b""
    for b in range(batches):
        codec = list(Compression)[b % len(Compression)]
        records = [(b"k%d" % (b * per + i), b"v%d" % (b * per + i), [("h", b"%d" % i)], 1_000 + b * per + i)
                   for i in range(per)]
        data += build_batch(records, base_offset=b * per, compression=codec)
    path = tmp_path / KEY
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return SegmentRef("t", 0, KEY, 0, batches * per - 1, len(data)), data


def _read(tmp_path: Path, seg: SegmentRef, lo: int, hi: int, chunk: int) -> list[tuple]:
    bucket = open_bucket(tmp_path.as_uri())
    cols = Columns("t", 0, include_headers=True)
    out = []
    for batch in read_segment(bucket, seg, lo, hi, start_pos=0, end_pos=seg.size, columns=cols,
                              chunk_bytes=chunk):
        d = batch.to_pydict()
        out += list(zip(d["offset"], d["key"], d["value"], [h[0]["value"] for h in d["headers"]]))
    return out


@pytest.mark.parametrize("chunk", [97, 4096, 1 << 20])
def test_every_codec_and_any_chunk_size_give_the_same_records(tmp_path: Path, chunk: int) -> None:
    seg, _ = _segment(tmp_path)
    got = _read(tmp_path, seg, 0, 500, chunk)
    assert [r[0] for r in got] == list(range(500))
    assert got[123] == (123, b"k123", b"v123", b"%d" % (123 % 25))


def test_offset_bounds_cut_inside_batches(tmp_path: Path) -> None:
    seg, _ = _segment(tmp_path)
    assert [r[0] for r in _read(tmp_path, seg, 37, 262, 4096)] == list(range(37, 262))


def test_a_corrupt_batch_is_reported_with_its_object(tmp_path: Path) -> None:
    seg, data = _segment(tmp_path)
    broken = bytearray(data)
    broken[len(data) // 2] ^= 0xFF
    (tmp_path / KEY).write_bytes(bytes(broken))
    with pytest.raises(StrataSourceError, match="CRC mismatch|not a RecordBatch"):
        _read(tmp_path, seg, 0, 500, 4096)


@pytest.mark.parametrize("headers", [False, True], ids=["c-decoder", "aiokafka-reader"])
def test_a_batch_that_claims_more_records_than_it_holds_is_reported(tmp_path: Path, headers: bool) -> None:
    import crc32c

    seg, data = _segment(tmp_path, batches=3)
    broken = bytearray(data)
    first = 12 + int.from_bytes(broken[8:12], "big")  # the second batch starts here
    count_at = first + 57
    broken[count_at:count_at + 4] = (int.from_bytes(broken[count_at:count_at + 4], "big") + 1).to_bytes(4, "big")
    end = first + 12 + int.from_bytes(broken[first + 8:first + 12], "big")
    broken[first + 17:first + 21] = crc32c.crc32c(bytes(broken[first + 21:end])).to_bytes(4, "big")
    (tmp_path / KEY).write_bytes(bytes(broken))
    bucket = open_bucket(tmp_path.as_uri())
    cols = Columns("t", 0, include_headers=headers)
    with pytest.raises(StrataSourceError, match=r"batch at offset 25\b.*(malformed|record count does not fit)"):
        list(read_segment(bucket, seg, 0, 75, start_pos=0, end_pos=seg.size, columns=cols, chunk_bytes=4096))


def test_a_truncated_object_is_reported(tmp_path: Path) -> None:
    seg, data = _segment(tmp_path)
    (tmp_path / KEY).write_bytes(data[:-10])
    with pytest.raises(StrataSourceError, match="truncated"):
        _read(tmp_path, seg, 0, 500, 4096)


def test_offset_for_timestamp_finds_the_first_record_at_or_after(tmp_path: Path) -> None:
    seg, _ = _segment(tmp_path)
    bucket = open_bucket(tmp_path.as_uri())
    assert offset_for_timestamp(bucket, seg, 1_000 + 333, 4096) == 333
    assert offset_for_timestamp(bucket, seg, 0, 4096) == 0
    assert offset_for_timestamp(bucket, seg, 10**13, 4096) is None


def test_the_c_decoder_is_built_and_agrees_with_aiokafkas_reader(tmp_path: Path) -> None:
    from spark import segments

    assert segments._fast is not None, "spark._decode was not built (pip install -e . needs a C compiler)"
    data = b""
    for b, codec in enumerate(Compression):
        records = [(None if i % 3 == 0 else b"k%d" % i, None if i % 5 == 0 else b"v" * i, [("h", None)],
                    5_000 + i) for i in range(40)]
        data += build_batch(records, base_offset=b * 40, compression=codec, timestamp_type=b % 2)
    path = tmp_path / KEY
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    seg = SegmentRef("t", 0, KEY, 0, 40 * len(Compression) - 1, len(data))
    bucket = open_bucket(tmp_path.as_uri())
    tables = []
    for headers in (False, True):
        cols = Columns("t", 0, include_headers=headers)
        batches = list(read_segment(bucket, seg, 7, 181, start_pos=0, end_pos=seg.size, columns=cols,
                                    chunk_bytes=333))
        tables.append([{k: v for k, v in row.items() if k != "headers"}
                       for batch in batches for row in batch.to_pylist()])
    fast, slow = tables
    assert fast == slow
    assert [r["offset"] for r in fast] == list(range(7, 181))
    assert fast[0]["key"] == b"k7" and fast[8]["key"] is None and fast[3]["value"] is None
    assert {r["timestampType"] for r in fast} == {0, 1}
