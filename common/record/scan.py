"""The framing walk over the records of one batch: the C walk, or its pure-Python twin.

``scan_records(records, count)`` returns None when the record section of a batch
holds exactly ``count`` well-framed records, else ``(record index, byte position,
reason)`` for the first fault; what is checked is written at the top of
``common/record/_recordscan.c``. The C walk is built by setup.py (optional); without
it ``scan_records`` is :func:`scan_records_py`, about a hundred times slower,
with the same answers (tests/common/record/test_scan.py compares them).
``RECORD_WALK_IN_C`` says which one runs. Pure functions: thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable

from common.record._varint import read_varint

__all__ = ["RECORD_WALK_IN_C", "scan_records", "scan_records_py"]

Buffer = bytes | bytearray | memoryview


def scan_records_py(data: Buffer, count: int) -> tuple[int, int, str] | None:
    """The pure-Python twin of ``common/record/_recordscan.c``'s ``scan`` (same checks, same answers)."""
    if count < 0:
        return 0, 0, "negative record count"
    end = len(data)
    pos = 0

    def field(pos: int, stop: int, nullable: bool) -> int:
        length, pos = _varint(data, pos, stop, 5)
        if length == -1 and nullable:
            return pos
        if length < 0 or length > stop - pos:
            raise ValueError("field runs past its record")
        return pos + length

    for index in range(count):
        start = pos
        if pos >= end:
            return index, start, "the batch ends before its declared record count"
        try:
            length, pos = _varint(data, pos, end, 5)
        except ValueError:
            return index, start, "malformed record length"
        if length < 1 or length > end - pos:
            return index, start, "record length runs past the end of the batch"
        stop = pos + length
        pos += 1  # attributes
        try:
            _, pos = _varint(data, pos, stop, 10)
        except ValueError:
            return index, start, "malformed timestamp delta"
        try:
            offset_delta, pos = _varint(data, pos, stop, 5)
        except ValueError:
            return index, start, "malformed offset delta"
        if offset_delta != index:
            return index, start, "offset delta differs from the record's position in the batch"
        for what in ("key", "value"):
            try:
                pos = field(pos, stop, True)
            except ValueError:
                return index, start, f"malformed {what}"
        try:
            headers, pos = _varint(data, pos, stop, 5)
        except ValueError:
            headers = -1
        if headers < 0 or headers > stop - pos:
            return index, start, "malformed header count"
        for _ in range(headers):
            try:
                pos = field(field(pos, stop, False), stop, True)
            except ValueError:
                return index, start, "malformed record header"
        if pos != stop:
            return index, start, "record fields do not end where its length says"
    if pos != end:
        return count, pos, "bytes remain after the declared record count"
    return None


def _varint(data: Buffer, pos: int, stop: int, max_bytes: int) -> tuple[int, int]:
    """A zig-zag varint of at most ``max_bytes`` ending by ``stop``; ValueError otherwise."""
    try:
        return read_varint(data, pos, stop, max_bytes)
    except IndexError:
        raise ValueError("varint runs past its record") from None


def _load_c_walk() -> Callable[[Buffer, int], tuple[int, int, str] | None] | None:
    try:  # the C walk (setup.py builds it; optional)
        from common.record._recordscan import scan
    except ImportError:  # pragma: no cover - without a compiler: slower, same answers
        return None
    return scan  # type: ignore[no-any-return]


_C_WALK = _load_c_walk()
RECORD_WALK_IN_C = _C_WALK is not None
scan_records: Callable[[Buffer, int], tuple[int, int, str] | None] = _C_WALK or scan_records_py
