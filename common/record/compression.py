"""Record batch compression codecs (the low three bits of a v2 batch's attributes).

* gzip: the standard library.
* snappy: ``cramjam``. Decoding accepts both raw snappy and the xerial framing
  written by the Java client (``b"\\x82SNAPPY\\x00"``, int32 version, int32
  compat, then repeated ``[int32 length, raw snappy block]``); encoding writes the
  xerial framing with 32 KiB blocks, as the Java client does (librdkafka and
  kafka-python read it).
* lz4: the LZ4 *frame* format (``lz4.frame``), as Kafka ≥ 0.10 uses it.
* zstd: ``zstandard``; producers (librdkafka, Java) write frames without a content
  size, so a bounded decoding gives the decoder a buffer of the bound, and goes stepwise
  through a streaming decompressor where that does not fit (several frames, an error).

Any failure of a third-party decoder is translated here, once, into
:class:`~common.errors.CorruptRecordError`.

``decompress(..., max_size=N)`` never produces more than N bytes: a payload that
would inflate further raises :class:`InflateLimitExceeded` after at most about
N bytes of work (a 1 MiB gzip payload can inflate to a gigabyte).
"""

from __future__ import annotations

import contextlib
import gzip
import struct
import threading
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from common.errors import (
    CorruptRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)

__all__ = ["Compression", "InflateLimitExceeded", "compress", "decompress"]


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
_ZSTD_MIN_SLICE = 1024  # input bytes per step at least (at most 32 MiB of output)
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_WALK_BLOCKS = 64  # blocks of up to 128 KiB each: 8 MiB of records in the usual frame
_LZ4_STEP = 2 * 1024 * 1024  # python-lz4 allocates each step up front (64 MiB steps cost 5x)
#: zstandard's (de)compressor objects must not be shared between threads (a shared
#: one crashed the process when Produce validation ran on two threads): one per thread
_zstd = threading.local()


def _zstd_compressor() -> zstandard.ZstdCompressor:
    if not hasattr(_zstd, "compressor"):
        _zstd.compressor = zstandard.ZstdCompressor()
    return _zstd.compressor  # type: ignore[no-any-return]


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    if not hasattr(_zstd, "decompressor"):
        _zstd.decompressor = zstandard.ZstdDecompressor()
    return _zstd.decompressor  # type: ignore[no-any-return]


class InflateLimitExceeded(RecordTooLargeError):
    """The payload inflates to more than the ``max_size`` given to :func:`decompress`.

    A ``RecordTooLargeError`` (MESSAGE_TOO_LARGE) for callers that only bound memory
    (the record browser); Produce validation catches it by name (a batch that is too
    big to check on the event loop goes to the validator threads; past
    ``MAX_INFLATED_BATCH_BYTES`` it is INVALID_RECORD).
    """


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
    return bytes(_zstd_compressor().compress(data))


def decompress(
    codec: int, data: bytes | bytearray | memoryview, *, max_size: int | None = None
) -> bytes:
    """Decompress ``data``; raises CorruptRecordError when it is not valid for ``codec``.

    With ``max_size``, raises :class:`InflateLimitExceeded` (a RecordTooLargeError)
    instead of producing more than ``max_size`` bytes.
    """
    kind = _codec(codec)
    if kind is Compression.NONE:
        if max_size is not None and len(data) > max_size:
            raise InflateLimitExceeded(f"NONE records are more than {max_size} bytes")
        return bytes(data)
    try:
        if max_size is not None:
            return _bounded(kind, data, max_size)
        if kind is Compression.GZIP:
            return gzip.decompress(data)
        if kind is Compression.SNAPPY:
            return _snappy_decode(memoryview(data))
        if kind is Compression.LZ4:
            return bytes(lz4.frame.decompress(data))
        return bytes(_zstd_decompressor().decompressobj().decompress(data))
    except _DECODE_ERRORS as exc:
        raise CorruptRecordError(f"cannot decompress {kind.name} records: {exc}") from exc


def _bounded(kind: Compression, data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    """Decompress with output bounded by ``max_size`` (the decoders' own limits, no guessing)."""
    inflate = {Compression.GZIP: _inflate_gzip, Compression.SNAPPY: _inflate_snappy,
               Compression.LZ4: _inflate_lz4, Compression.ZSTD: _inflate_zstd}[kind]
    return inflate(data, max_size)


def _inflate_gzip(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    members: list[bytes] = []
    size = 0
    rest: bytes | bytearray | memoryview = data
    while True:  # one or more gzip members
        inflater = zlib.decompressobj(wbits=31)
        member = inflater.decompress(rest, max_size - size + 1)
        size += len(member)
        if size > max_size or inflater.unconsumed_tail:
            raise InflateLimitExceeded(f"gzip records inflate to more than {max_size} bytes")
        if not inflater.eof:
            raise EOFError("truncated gzip stream")
        members.append(member)
        rest = inflater.unused_data
        if not rest:
            return b"".join(members)  # one member: that very object, no copy


def _inflate_snappy(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    view = memoryview(data)
    if len(view) >= 16 and view[:8] == _XERIAL_MAGIC:
        declared = 0
        pos = 16
        while pos + 4 <= len(view):
            (length,) = _INT32.unpack_from(view, pos)
            if length < 0:
                break  # _snappy_decode reports it
            declared += cramjam.snappy.decompress_raw_len(view[pos + 4 : pos + 4 + length])
            pos += 4 + length
    else:
        declared = cramjam.snappy.decompress_raw_len(view)
    if declared > max_size:
        raise InflateLimitExceeded(f"snappy records declare {declared} bytes: more than {max_size} bytes")
    return _snappy_decode(view)


def _inflate_lz4(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    # python-lz4 allocates max_length up front: ask for at most a step at a time
    inflater = lz4.frame.LZ4FrameDecompressor()
    step = min(max_size + 1, _LZ4_STEP)
    parts = [inflater.decompress(data, max_length=step)]
    size = len(parts[0])
    while not inflater.eof and not inflater.needs_input and size <= max_size:
        parts.append(inflater.decompress(b"", max_length=step))
        size += len(parts[-1])
    if size > max_size:
        raise InflateLimitExceeded(f"lz4 records inflate to more than {max_size} bytes")
    if not inflater.eof:
        raise EOFError("truncated lz4 frame")
    return b"".join(parts)


def _inflate_zstd(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    """Every frame decoded to its end (its checksum, if any, verified); a truncated frame is an error.

    One frame that spans the data (what every producer writes) is decoded in one call into
    a buffer of ``max_size`` (or of the size its header declares, when that is no more).
    Anything else (several frames, an error) goes the stepwise way: a zstd block inflates to
    at most 128 KiB from 4 bytes (32 KiB per input byte), so input is fed in slices that can
    overshoot ``max_size`` by a bounded amount, and an error says what it is.
    """
    view = memoryview(data)
    with contextlib.suppress(zstandard.ZstdError):  # a header it cannot read: stepwise
        if view[:4] == _ZSTD_MAGIC and (declared := zstandard.frame_content_size(view)) > max_size:
            raise InflateLimitExceeded(f"zstd records inflate to more than {max_size} bytes "
                                       f"(their frame declares {declared})")
    if _zstd_frame_end(view) == len(view):
        with contextlib.suppress(zstandard.ZstdError):  # too large for the buffer, or corrupt:
            return bytes(_zstd_decompressor().decompress(view, max_output_size=max_size))
    return _inflate_zstd_stepwise(view, max_size)  # (which says which)


def _zstd_frame_end(view: memoryview) -> int | None:
    """Where the zstd frame at the start of ``view`` ends, from its header and block headers
    (no decoding); None for anything but a whole zstd frame (a skippable frame, a cut one)
    and for one of more than :data:`_ZSTD_WALK_BLOCKS` blocks (a walk in Python is short)."""
    if len(view) < 6 or view[:4] != _ZSTD_MAGIC:
        return None
    try:
        pos = zstandard.frame_header_size(view)
    except zstandard.ZstdError:
        return None
    end = len(view)
    for _ in range(_ZSTD_WALK_BLOCKS):
        if pos + 3 > end:
            return None
        header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
        kind = (header >> 1) & 3
        if kind == 3:  # reserved
            return None
        pos += 3 + (1 if kind == 1 else header >> 3)  # an RLE block holds one byte
        if header & 1:  # the last block
            return pos + (4 if view[4] & 0x04 else 0)  # and the content checksum
    return None


def _inflate_zstd_stepwise(view: memoryview, max_size: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    pos = 0
    while True:  # one or more frames
        inflater = _zstd_decompressor().decompressobj()
        while not inflater.eof:
            if pos >= len(view):
                raise EOFError("truncated zstd frame")
            step = max(_ZSTD_MIN_SLICE, (max_size - size) >> 15)
            chunk = inflater.decompress(view[pos : pos + step])
            pos += step
            size += len(chunk)
            if size > max_size:
                raise InflateLimitExceeded(f"zstd records inflate to more than {max_size} bytes")
            parts.append(chunk)
        pos = min(pos, len(view)) - len(inflater.unused_data)  # where the frame ended
        if pos >= len(view):
            return b"".join(parts)


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
