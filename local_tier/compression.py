"""Record batch compression codecs (the low three bits of a v2 batch's attributes).

* gzip: the standard library.
* snappy: ``cramjam``. Decoding accepts both raw snappy and the xerial framing
  written by the Java client (``b"\\x82SNAPPY\\x00"``, int32 version, int32
  compat, then repeated ``[int32 length, raw snappy block]``); encoding writes the
  xerial framing with 32 KiB blocks, as the Java client does (librdkafka and
  kafka-python read it).
* lz4: the LZ4 *frame* format (``lz4.frame``), as Kafka ≥ 0.10 uses it.
* zstd: ``zstandard``; decoding uses a streaming decompressor because producers
  (librdkafka, Java) write frames without a content size.

Any failure of a third-party decoder is translated here, once, into
:class:`~local_tier.errors.CorruptRecordError`. ``decompress(..., max_size=N)``
stops at ``N`` bytes of output (:class:`~local_tier.errors.RecordTooLargeError`
past it), so a small batch that inflates to gigabytes costs at most ``N``.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from local_tier.errors import (
    CorruptRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)

__all__ = ["Compression", "compress", "decompress"]


class Compression(IntEnum):
    """Kafka's compression codec ids."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")

_DECODE_ERRORS = (
    OSError,
    EOFError,
    ValueError,
    RuntimeError,
    zlib.error,
    zstandard.ZstdError,
    cramjam.DecompressionError,
)
_ZSTD_COMPRESSOR = zstandard.ZstdCompressor()
_ZSTD_DECOMPRESSOR = zstandard.ZstdDecompressor()


def _codec(codec: int) -> Compression:
    try:
        return Compression(codec)
    except ValueError:
        raise UnsupportedCompressionTypeError(f"unknown compression codec {codec}") from None


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress ``data`` with ``codec`` (``Compression.NONE`` returns the bytes unchanged)."""
    kind = _codec(codec)
    if kind is Compression.NONE:
        return bytes(data)
    if kind is Compression.GZIP:
        return gzip.compress(data, mtime=0)
    if kind is Compression.SNAPPY:
        return _xerial_encode(memoryview(data))
    if kind is Compression.LZ4:
        return bytes(lz4.frame.compress(data))
    return bytes(_ZSTD_COMPRESSOR.compress(data))


def decompress(
    codec: int, data: bytes | bytearray | memoryview, *, max_size: int | None = None
) -> bytes:
    """Decompress ``data``; raises CorruptRecordError when it is not valid for ``codec``.

    With ``max_size``, output beyond ``max_size`` bytes is never produced: the
    call raises RecordTooLargeError instead.
    """
    kind = _codec(codec)
    if kind is Compression.NONE:
        out = bytes(data)
    else:
        try:
            if max_size is not None:
                out = _bounded(kind, memoryview(data), max_size)
            elif kind is Compression.GZIP:
                out = gzip.decompress(data)
            elif kind is Compression.SNAPPY:
                out = _snappy_decode(memoryview(data))
            elif kind is Compression.LZ4:
                out = bytes(lz4.frame.decompress(data))
            else:
                out = bytes(_ZSTD_DECOMPRESSOR.decompressobj().decompress(data))
        except _DECODE_ERRORS as exc:
            raise CorruptRecordError(f"cannot decompress {kind.name} records: {exc}") from exc
    if max_size is not None and len(out) > max_size:
        raise _too_large(kind, max_size)
    return out


def _too_large(kind: Compression, max_size: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"{kind.name} records decompress to more than {max_size} bytes")


def _bounded(kind: Compression, data: memoryview, max_size: int) -> bytes:
    """At most ``max_size + 1`` bytes of output, whatever the input claims."""
    limit = max_size + 1
    if kind is Compression.SNAPPY:
        if len(data) >= 16 and data[:8] == _XERIAL_MAGIC:
            total, pos = 0, 16
            while pos + 4 <= len(data):
                (length,) = _INT32.unpack_from(data, pos)
                if length < 0 or pos + 4 + length > len(data):
                    break  # _snappy_decode says what is wrong
                total += int(cramjam.snappy.decompress_raw_len(data[pos + 4 : pos + 4 + length]))
                pos += 4 + length
        else:
            total = int(cramjam.snappy.decompress_raw_len(data))
        if total > max_size:
            raise _too_large(kind, max_size)
        return _snappy_decode(data)
    if kind is Compression.ZSTD:
        reader = _ZSTD_DECOMPRESSOR.stream_reader(bytes(data), read_across_frames=True)
        chunks, size = [], 0
        while size < limit and (chunk := reader.read(limit - size)):
            chunks.append(chunk)
            size += len(chunk)
        rest = bytes(data)
        while size < limit and rest:  # all of it fits: check that no frame is cut short
            frame = _ZSTD_DECOMPRESSOR.decompressobj()
            frame.decompress(rest)
            if not frame.eof:
                raise EOFError("truncated zstd frame")
            rest = frame.unused_data
        return b"".join(chunks)
    out = bytearray()
    rest = bytes(data)
    while rest and len(out) < limit:  # one member (gzip) or frame (lz4) per round
        if kind is Compression.GZIP:
            gz = zlib.decompressobj(wbits=31)
            out += gz.decompress(rest, limit - len(out))
            if not gz.eof and len(out) < limit:
                raise EOFError("truncated gzip stream")
            rest = gz.unused_data
        else:
            frame = lz4.frame.LZ4FrameDecompressor()
            out += frame.decompress(rest, max_length=limit - len(out))
            if not frame.eof and len(out) < limit:
                raise EOFError("truncated lz4 frame")
            rest = frame.unused_data
    return bytes(out)


def _xerial_encode(data: memoryview) -> bytes:
    parts = [_XERIAL_HEADER]
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decode(data: memoryview) -> bytes:
    if len(data) < 16 or data[:8] != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(data))
    # The version/compat ints are ignored: some producers write them little-endian.
    out: list[bytes] = []
    pos = 16
    while pos < len(data):
        if pos + 4 > len(data):
            raise ValueError("truncated xerial snappy block length")
        (length,) = _INT32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise ValueError("truncated xerial snappy block")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + length])))
        pos += length
    return b"".join(out)
