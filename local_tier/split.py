"""A copy of a sealed segment's tail, from a batch boundary on: :func:`copy_segment_tail`.

When leadership moves, the new leader's segments need not start where the
previous leader's did (each broker rolls its own), so the bucket may already
hold the first part of a local segment. Tiering then uploads only the rest:
this copies the batches from ``offset`` on into a new segment of its own, with
its indexes rebuilt, in a scratch directory; the live segment is not touched.
Blocking file I/O: for a worker thread.
"""

from __future__ import annotations

import os
from pathlib import Path

from local_tier.config import LogConfig
from local_tier.segment import LogSegment

__all__ = ["copy_segment_tail"]

_CHUNK = 1 << 20


def copy_segment_tail(segment: LogSegment, offset: int, directory: Path, config: LogConfig) -> LogSegment:
    """A closed segment in ``directory`` holding the batches of ``segment`` from the one
    that starts at ``offset`` (``ValueError`` if no batch starts there)."""
    start = None
    for position, header in segment._scan(0):  # noqa: SLF001 - same package, read-only
        if header.base_offset == offset:
            start = position
            break
        if header.base_offset > offset:
            break
    if start is None:
        raise ValueError(f"no batch of {segment.log_path.name} starts at offset {offset}")
    directory.mkdir(parents=True, exist_ok=True)
    tail = LogSegment.open(directory, offset, config, create=True)
    try:
        source_file = segment.file  # held: the loop's descriptor bound may let go of the segment's
        source = source_file.fileno()
        position, end = start, segment.size
        with open(tail.log_path, "ab", buffering=0) as out:
            while position < end:
                chunk = os.pread(source, min(_CHUNK, end - position), position)
                if not chunk:
                    break
                out.write(chunk)
                position += len(chunk)
        tail.recover()
        tail.on_become_inactive()
        tail.flush()
    finally:
        tail.close()
    return tail
