"""The bytes of the metadata log in the bucket: keys, the head, batches, snapshots.

``docs/adr/0025-metadata-log.md`` describes the layout (format 3)::

    cluster/metadata.json                                  the head (small; rewritten per snapshot)
    cluster/metadata/snapshot/<revision:020d>.json.gz      a format-2 document, gzipped
    cluster/metadata/log/<revision:020d>.jsonl             one batch: the records of that revision

A batch is JSON Lines: a header line ``{"batch": {...}}`` then one record per line,
gzipped when it is 64 KiB or more (told apart by the gzip magic, which never begins
JSON). What the records mean is :mod:`controller.metadata_records`.

Pure functions; thread-safe. Sizes are bounded before anything is decoded.
"""

from __future__ import annotations

import gzip
import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "HEAD_FORMAT",
    "Batch",
    "Head",
    "MetadataLogError",
    "batch_object",
    "batch_text",
    "decode_batch",
    "decode_batch_text",
    "decode_head",
    "decode_snapshot",
    "deflate_lines",
    "encode_batch",
    "encode_head",
    "encode_snapshot",
    "log_key",
    "record_lines",
    "log_prefix",
    "snapshot_key",
    "stored_batch_text",
]

HEAD_FORMAT = 3
GZIP_FROM_BYTES = 64 * 1024
GZIP_LEVEL = 6
#: the most a batch or snapshot may inflate to: a create of 100,000 partitions is ~24 MB
MAX_DECODED_BYTES = 512 * 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b"


class MetadataLogError(ValueError):
    """A head, batch or snapshot that is not what format 3 says (truncated, miscounted,
    too large, or from a newer Strata)."""


def log_prefix(head_key: str) -> str:
    """``cluster/metadata.json`` -> ``cluster/metadata``: where the log and snapshots live."""
    return head_key[: -len(".json")] if head_key.endswith(".json") else head_key


def log_key(prefix: str, revision: int) -> str:
    return f"{prefix}/log/{revision:020d}.jsonl"


def snapshot_key(prefix: str, revision: int) -> str:
    return f"{prefix}/snapshot/{revision:020d}.json.gz"


@dataclass(frozen=True, slots=True)
class Head:
    """The head object: where the log starts and which snapshots replay begins from.

    Invariant: ``log_start <= snapshot + 1``; ``previous_snapshot`` (-1: none) is the
    older snapshot still kept, written at ``previous_written_ms``."""

    cluster_id: str
    snapshot: int
    log_start: int
    controller_id: int
    controller_epoch: int
    written_ms: int
    previous_snapshot: int = -1
    previous_written_ms: int = 0
    snapshot_written_ms: int = 0


@dataclass(frozen=True, slots=True)
class Batch:
    """One slot of the log: its header and records (dicts with a ``type``)."""

    revision: int
    controller_id: int
    controller_epoch: int
    batch_id: str
    written_ms: int
    records: list[dict[str, Any]]
    #: the records' lines as :func:`record_lines` makes them, when made already (a fencing made
    #: ahead, :mod:`controller.fence_ahead`); None: made from ``records`` when written
    lines: bytes | None = field(default=None, compare=False, repr=False)
    #: ``lines`` deflated already (:func:`deflate_lines`, made with them); None: deflated when written
    deflated: bytes | None = field(default=None, compare=False, repr=False)


def encode_head(head: Head, prefix: str) -> bytes:
    body = {
        "version": HEAD_FORMAT,
        "cluster_id": head.cluster_id,
        "snapshot": {
            "revision": head.snapshot,
            "key": snapshot_key(prefix, head.snapshot),
            "written_ms": head.snapshot_written_ms,
        },
        "previous_snapshot": (
            None if head.previous_snapshot < 0
            else {"revision": head.previous_snapshot, "written_ms": head.previous_written_ms}
        ),
        "log_start": head.log_start,
        "written_by": {"controller_id": head.controller_id, "controller_epoch": head.controller_epoch},
        "written_ms": head.written_ms,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def decode_head(document: dict[str, Any]) -> Head:
    """A parsed head document (``version`` 3) as a :class:`Head`."""
    try:
        snapshot = document["snapshot"]
        previous = document.get("previous_snapshot") or {}
        writer = document["written_by"]
        head = Head(
            cluster_id=str(document["cluster_id"]),
            snapshot=_int(snapshot["revision"]),
            snapshot_written_ms=_int(snapshot.get("written_ms", 0)),
            log_start=_int(document["log_start"]),
            controller_id=_int(writer["controller_id"]),
            controller_epoch=_int(writer["controller_epoch"]),
            written_ms=_int(document["written_ms"]),
            previous_snapshot=_int(previous.get("revision", -1)),
            previous_written_ms=_int(previous.get("written_ms", 0)),
        )
    except (KeyError, TypeError, AttributeError) as err:
        raise MetadataLogError(f"the metadata head is malformed: {err!r}") from err
    if head.log_start > head.snapshot + 1:
        raise MetadataLogError(
            f"the metadata head's log starts at {head.log_start}, after its snapshot {head.snapshot}"
        )
    return head


def encode_batch(batch: Batch) -> bytes:
    """The object of ``batch``: its text (:func:`batch_text`), gzipped from 64 KiB."""
    return batch_object(batch_text(batch), batch)


def batch_object(text: bytes, batch: Batch | None = None) -> bytes:
    """What is stored for a batch of ``text``: the text, gzipped from :data:`GZIP_FROM_BYTES`.

    When ``batch`` (whose text it is) carries its lines deflated already, only the header line
    is compressed here: the gzip member is the header's deflate, flushed to a byte boundary
    (``Z_SYNC_FLUSH``: a non-final empty block), then the lines' own stream, then the text's
    CRC-32 and length. It is one gzip member of the same text, which every gzip reader
    inflates as any other; the bytes differ from :func:`gzip.compress`'s, which nothing
    compares. A fencing made ahead so writes 3,300 records at 10,000 partitions without the
    5-10 ms of deflating them in the death's path."""
    if len(text) < GZIP_FROM_BYTES:
        return text
    if batch is None or batch.lines is None or batch.deflated is None:
        return gzip.compress(text, GZIP_LEVEL, mtime=0)
    header = len(text) - len(batch.lines)
    if header <= 0 or text[header - 1:header] != b"\n":
        raise ValueError("the batch text does not end with the batch's lines")
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = compressor.compress(text[:header]) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return head + batch.deflated + struct.pack("<II", zlib.crc32(text), len(text) & 0xFFFFFFFF)


def deflate_lines(lines: bytes) -> bytes:
    """``lines`` as a raw deflate stream of their own, ended (its last block final): what
    :func:`batch_object` appends after a batch's header."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(lines) + compressor.flush()


def batch_text(batch: Batch) -> bytes:
    """The JSON Lines of ``batch``: its header line, then a line per record."""
    header = {
        "batch": {
            "revision": batch.revision,
            "controller_id": batch.controller_id,
            "controller_epoch": batch.controller_epoch,
            "batch_id": batch.batch_id,
            "written_ms": batch.written_ms,
            "records": len(batch.records),
        }
    }
    lines = record_lines(batch.records) if batch.lines is None else batch.lines
    return orjson.dumps(header) + b"\n" + lines


def record_lines(records: list[dict[str, Any]]) -> bytes:
    """The lines of ``records`` in a batch's text: one per record, each ended by a newline."""
    if not records:
        return b""
    try:  # every record at C speed, the common case
        lines = list(map(orjson.dumps, records))
    except TypeError:  # one orjson refuses (orjson.JSONEncodeError): record by record
        lines = [_record_line(r) for r in records]
    lines.append(b"")
    return b"\n".join(lines)


def _record_line(record: dict[str, Any]) -> bytes:
    """One record as compact JSON (orjson; the standard module for what orjson refuses, such
    as an integer past 64 bits in a section's value): the same text either way."""
    try:
        return orjson.dumps(record)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()


def decode_batch(data: bytes, revision: int) -> Batch:
    """The batch stored in slot ``revision``; :class:`MetadataLogError` if it is not one."""
    return decode_batch_text(stored_batch_text(data, revision), revision)


#: a batch's record lines as a fencing made ahead holds them (``controller.fence_ahead``): their
#: raw deflate stream (:func:`deflate_lines`, what :func:`batch_object` appends after the header)
#: and the lines themselves
KnownLines = tuple[bytes, bytes]
#: the most a batch's header line may inflate to when its lines are known
_MAX_HEADER_BYTES = 64 * 1024


def stored_batch_text(data: bytes, revision: int, known: Sequence[KnownLines] = ()) -> bytes:
    """The JSON Lines of the batch stored in slot ``revision`` (inflated, checked UTF-8). An
    object that ends with one of the ``known`` lines' deflate stream has only its header
    inflated (:func:`known_text`)."""
    if known and data[:2] == _GZIP_MAGIC:
        text = known_text(data, known)
        if text is not None:
            return text
    return _inflate(data, f"metadata log slot {revision}").encode()


def known_text(data: bytes, known: Sequence[KnownLines]) -> bytes | None:
    """The text of the gzip member ``data`` (:func:`batch_object`) when its lines are one of
    the ``known`` ones, byte for byte in their deflate stream: only the header before them is
    inflated, and the text's CRC-32 and length are checked as gzip would. None otherwise (the
    caller inflates it all). Equal deflate bytes inflate to equal lines; a writer whose zlib
    makes other bytes is simply not recognised. At 10,000 partitions a death's two batches
    inflate to 1.4 MB, 2-6 ms of a survivor busy with the death."""
    end = len(data) - 8
    for deflated, lines in known:
        start = end - len(deflated)
        if start <= 10 or not data.startswith(deflated, start):
            continue
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            header = inflater.decompress(data[:start], _MAX_HEADER_BYTES)
        except zlib.error:
            return None
        if inflater.unconsumed_tail or inflater.eof or not header.endswith(b"\n"):
            return None
        text = header + lines
        if struct.unpack("<II", data[end:]) != (zlib.crc32(text), len(text) & 0xFFFFFFFF):
            return None
        try:
            header.decode()
        except UnicodeDecodeError:
            return None
        return text
    return None


def decode_batch_text(text: bytes, revision: int) -> Batch:
    """The batch of ``text`` (:func:`stored_batch_text`) from slot ``revision``."""
    first, _, rest = text.partition(b"\n")
    try:
        header = orjson.loads(first)["batch"]
        records = _records(rest)
        batch = Batch(
            revision=_int(header["revision"]),
            controller_id=_int(header["controller_id"]),
            controller_epoch=_int(header["controller_epoch"]),
            batch_id=str(header["batch_id"]),
            written_ms=_int(header["written_ms"]),
            records=records,
        )
        count = _int(header["records"])
    except (IndexError, KeyError, TypeError, ValueError) as err:
        raise MetadataLogError(f"metadata log slot {revision} is malformed: {err!r}") from err
    if batch.revision != revision:
        raise MetadataLogError(f"metadata log slot {revision} holds batch {batch.revision}")
    if count != len(records) or not all(isinstance(r, dict) and "type" in r for r in records):
        raise MetadataLogError(
            f"metadata log slot {revision} says {count} records but holds {len(records)} "
            "(truncated or not written by Strata)"
        )
    return batch


def _records(text: bytes) -> list[Any]:
    """The records of a batch's lines after its header: one parse of them all as a JSON
    array (a line of JSON text holds no raw newline, so the newlines can become commas), or
    line by line when that fails (a line only the standard module reads, or a broken one)."""
    body = text.rstrip(b"\n")
    if not body:
        return []
    try:
        records = orjson.loads(b"[" + body.replace(b"\n", b",") + b"]")
    except orjson.JSONDecodeError:
        return [_record(line) for line in text.splitlines() if line]
    return records


def _record(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:  # what orjson refuses and the standard module reads (a
        return json.loads(line)     # 64-bit overflow), or the same ValueError again


def encode_snapshot(document: bytes) -> bytes:
    """A format-2 document (:func:`controller.document_codec.encode`) as a snapshot object."""
    return gzip.compress(document, 6, mtime=0)


def decode_snapshot(data: bytes, revision: int) -> bytes:
    """The format-2 document inside snapshot object ``revision``."""
    return _inflate(data, f"metadata snapshot {revision}").encode()


def _inflate(data: bytes, what: str) -> str:
    if data[:2] == _GZIP_MAGIC:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            raw = inflater.decompress(data, MAX_DECODED_BYTES)
        except zlib.error as err:
            raise MetadataLogError(f"{what} is not valid gzip: {err}") from err
        if inflater.unconsumed_tail:
            raise MetadataLogError(f"{what} inflates to more than {MAX_DECODED_BYTES} bytes")
        data = raw
    elif len(data) > MAX_DECODED_BYTES:
        raise MetadataLogError(f"{what} is larger than {MAX_DECODED_BYTES} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        raise MetadataLogError(f"{what} is not UTF-8: {err}") from err


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MetadataLogError(f"{value!r} is not an integer")
    return value
