"""The console's record browser: a partition's records from an offset or a time, bounded.

Reads go through the broker's own read path, the one a Fetch takes
(:func:`fetch.planner.read_partitions`: the local log's file regions, or below
the local log start a remote plan served by the tiered-fetch threads through the
chunk cache), up to the high watermark, as a consumer would see them. Nothing
blocks the event loop: local file regions are read, and batches decoded, on the
default executor; remote reads are awaited on the tiered-fetch threads.

Bounds, whatever a request asks: at most :data:`MAX_RECORDS` records and
:data:`MAX_BYTES` bytes of batches read per request, at most
:data:`MAX_READS` reads, each batch decompressed to at most
:data:`MAX_DECOMPRESSED` bytes, and each key, value and header shown as its first
``preview_bytes`` bytes (its full size is given). A batch larger than the
request's ``max_bytes`` is not read; the answer says so and how to ask for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from common.errors import ErrorCode, KafkaError, RecordTooLargeError, for_code
from common.record.batch import decode_batch, iter_batches
from fetch.planner import PartitionFetch, read_partitions
from local_tier.segment import FileRegion
from service.http.views import PartitionsView

__all__ = ["MAX_BYTES", "MAX_RECORDS", "BrowseRequest", "browse"]

MAX_RECORDS = 500
MAX_BYTES = 8 * 1024 * 1024
MAX_READS = 4
MAX_DECOMPRESSED = 32 * 1024 * 1024
MAX_PREVIEW = 64 * 1024


@dataclass(frozen=True, slots=True)
class BrowseRequest:
    topic: str
    partition: int
    offset: int | None = None  # None with no timestamp: the last max_records records
    timestamp: int | None = None  # epoch ms: from the first record at or after it
    max_records: int = 50
    max_bytes: int = 1024 * 1024
    encoding: str = "text"  # text (UTF-8, hex where it is not) or hex
    preview_bytes: int = 1024


async def browse(view: PartitionsView, req: BrowseRequest) -> dict[str, Any]:
    """The records of ``req`` as JSON-ready dicts (see the OpenAPI ``Records`` schema)."""
    log = view.log_for(req.topic, req.partition)
    start = view.tiering.log_start_offset(req.topic, req.partition, log, exact=False)
    hw = log.high_watermark
    notes: list[str] = []
    offset = req.offset
    if req.timestamp is not None:
        found = await _offset_for_time(view, req, log)
        if found is None:
            notes.append(f"no record at or after timestamp {req.timestamp}")
        offset = hw if found is None else found
    elif offset is None:
        offset = max(start, hw - req.max_records)
    if offset < start:
        notes.append(f"offset {offset} is below the log start {start}: showing from {start}")
        offset = start
    out: dict[str, Any] = {"topic": req.topic, "partition": req.partition, "log_start_offset": start,
                           "high_watermark": hw, "from_offset": offset, "records": [],
                           "bytes_read": 0, "sources": []}
    position = offset
    loop = asyncio.get_running_loop()
    for _ in range(MAX_READS):
        budget = req.max_bytes - out["bytes_read"]
        if len(out["records"]) >= req.max_records or position >= hw or budget <= 0:
            break
        data, source = await _read(view, req, position, budget)
        if data is None:
            notes.append(f"the batch at offset {position} is larger than the "
                         f"{budget} bytes left of max_bytes; ask with a larger max_bytes "
                         f"(at most {MAX_BYTES})")
            break
        if not data:
            break
        out["bytes_read"] += len(data)
        out["sources"].append(source)
        wanted = req.max_records - len(out["records"])
        records, position, note = await loop.run_in_executor(None, _decode, data, position, wanted, req)
        out["records"] += records
        if note:
            notes.append(note)
            break
    out["next_offset"] = min(position, hw)
    out["note"] = "; ".join(notes) or None
    return out


async def _offset_for_time(view: PartitionsView, req: BrowseRequest, log: Any) -> int | None:
    """The first offset with a timestamp at or after ``req.timestamp`` (ListOffsets' answer)."""
    assert req.timestamp is not None
    found = None
    if view.tiering.enabled:
        found = await view.tiered_reads.offset_for_timestamp(req.topic, req.partition, req.timestamp, log)
    if found is None:
        found = log.fetch_offset_by_timestamp(req.timestamp)
    if found is None or found[0] >= log.high_watermark:
        return None
    return int(found[0])


async def _read(view: PartitionsView, req: BrowseRequest, offset: int,
                budget: int) -> tuple[bytes | None, str]:
    """Whole batches from ``offset`` within ``budget`` bytes; None if the first is larger."""
    data, _ = read_partitions(view, [PartitionFetch(req.topic, req.partition, offset, budget)],
                              max_bytes=budget, remote=view.tiering)
    part = data[0]
    if part.error_code != ErrorCode.none:
        raise for_code(part.error_code)(part.error_message or "")
    if part.remote is not None:
        parts = await view.tiered_reads.read(part.remote.target, offset, budget, False)
        return await _joined(parts) or None, "remote"  # empty: the batch is too big
    if part.size > budget:
        return None, "local"  # the first batch alone is over the budget: not read
    return await _joined([r for r in part.regions if isinstance(r, FileRegion)]), "local"


async def _joined(parts: Sequence[bytes | memoryview | FileRegion]) -> bytes:
    """The parts' bytes as one string; file regions are read on an executor thread."""
    loop = asyncio.get_running_loop()
    chunks = [
        await loop.run_in_executor(None, p.read_bytes) if isinstance(p, FileRegion) else bytes(p) for p in parts
    ]
    return b"".join(chunks)


def _decode(data: bytes, position: int, wanted: int,
            req: BrowseRequest) -> tuple[list[dict[str, Any]], int, str | None]:
    """Records at or after ``position`` from whole batches; returns them, the next
    position and a note when a batch could not be decoded (on an executor thread)."""
    records: list[dict[str, Any]] = []
    for pos, header in iter_batches(data):
        if header.next_offset <= position:
            continue
        if header.is_control:  # transaction markers: not records a consumer sees
            position = header.next_offset
            continue
        try:
            _, batch = decode_batch(data, pos, max_decompressed=MAX_DECOMPRESSED)
        except RecordTooLargeError:
            return records, position, (f"the batch at offset {header.base_offset} decompresses "
                                       f"to more than {MAX_DECOMPRESSED} bytes: not shown")
        except KafkaError as exc:
            return records, position, f"the batch at offset {header.base_offset} is unreadable: {exc}"
        for record in batch:
            if record.offset < position:
                continue
            if len(records) >= wanted:
                return records, record.offset, None
            records.append(_record_json(record, header.is_transactional, req))
            position = record.offset + 1
        position = max(position, header.next_offset)
    return records, position, None


def _record_json(record: Any, transactional: bool, req: BrowseRequest) -> dict[str, Any]:
    key, key_format = _show(record.key, req)
    value, value_format = _show(record.value, req)
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": key,
        "key_format": key_format,
        "key_size": -1 if record.key is None else len(record.key),
        "value": value,
        "value_format": value_format,
        "value_size": -1 if record.value is None else len(record.value),
        "headers": [{"key": name, "value": _show(v, req)[0]} for name, v in record.headers],
        "transactional": transactional,
    }


_CONTROL = frozenset(chr(c) for c in (*range(32), 127)) - {"\t", "\n", "\r"}


def _show(data: bytes | None, req: BrowseRequest) -> tuple[str | None, str]:
    """``data``'s first ``preview_bytes`` as text, or as hex when asked, when not UTF-8 or
    when it holds control characters (binary that happens to decode)."""
    if data is None:
        return None, "null"
    head = data[: req.preview_bytes]
    if req.encoding == "text":
        text: str | None
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError as exc:
            cut = exc.start >= len(head) - 3 and len(data) > len(head)  # a character cut in two
            text = head[: exc.start].decode("utf-8") if cut else None
        if text is not None and not _CONTROL.intersection(text):
            return text, "text"
    return head.hex(), "hex"
