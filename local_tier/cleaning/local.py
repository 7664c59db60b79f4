"""Cleaning a local log: the dirty range, the pass over its segment files, the swaps.

:func:`cleanable_range` is Kafka's ``cleanableOffsets`` + ``LogToClean``: where the
dirty section starts and ends, and how dirty the log is. :func:`clean_log` runs
one pass (:mod:`.cleaner`) over a :class:`~.view.LogCleaningView`, reading the
segment files with descriptors of its own and writing each group's cleaned
segment as ``*.cleaned`` files, and asks the log's owner thread (``owner``) to
swap each one in (:meth:`local_tier.log.Log.begin_swap`, :meth:`~local_tier.log.Log.finish_swap`). Appends go on
meanwhile: the active segment is never part of a pass.

Runs on a cleaner thread; touches the log only through ``owner``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from common.record.batch import BATCH_OVERHEAD, iter_batches, read_batch_header
from local_tier.cleaning.cleaner import (
    INT32_MAX,
    CleanContext,
    CleanerIO,
    CleaningAborted,
    FileReader,
    SourceSegment,
    build_offset_map,
    clean_group,
    group_segments_by_size,
)
from local_tier.cleaning.offset_map import OffsetMap
from local_tier.cleaning.swap import CLEANED_SUFFIX
from local_tier.cleaning.view import CleanableSegment, LogCleaningView
from local_tier.config import LogConfig
from local_tier.segment import LogSegment
from local_tier.txn_index import AbortedTxn, TxnSearch

if TYPE_CHECKING:
    from local_tier.log import Log

__all__ = ["CleanOutcome", "CleanableRange", "Owner", "SegmentSink", "clean_log", "cleanable_range"]

T = TypeVar("T")
Owner = Callable[[Callable[[], Any]], Any]
"""Runs a function on the log's owner thread and returns its result (blocking)."""
_log = logging.getLogger("strata.cleaner")


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """Kafka's ``LogToClean``: ``[first_dirty, first_uncleanable)`` and the byte counts."""

    first_dirty: int
    first_uncleanable: int  # a segment's base offset
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def dirty_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def first_batch_timestamp(segment: CleanableSegment) -> int:
    """The base timestamp of the segment's first batch (-1: unknown)."""
    try:
        with open(segment.log_path, "rb") as f:
            head = f.read(BATCH_OVERHEAD)
    except OSError:
        return -1
    if len(head) < BATCH_OVERHEAD:
        return -1
    return read_batch_header(head).base_timestamp


def cleanable_range(
    view: LogCleaningView,
    checkpoint: int | None,
    now_ms: int,
    first_batch_ts: Callable[[CleanableSegment], int] = first_batch_timestamp,
    limit: int | None = None,
) -> CleanableRange:
    """Kafka's ``cleanableOffsets``: the dirty section starts at the checkpoint (the log start
    when none, or when it lies outside the log) and ends before the LSO, the active segment
    and the first segment younger than ``min.compaction.lag.ms``, rounded down to a segment's
    base; ``max.compaction.lag.ms`` makes an old enough dirty section due at once. ``limit``,
    when given, ends it sooner (a tiered log's first offset not yet in the bucket)."""
    config = view.config
    first_dirty = checkpoint if checkpoint is not None else view.log_start_offset
    if first_dirty < view.log_start_offset or first_dirty > view.log_end_offset:
        first_dirty = view.log_start_offset  # the log was truncated or recreated meanwhile
    uncleanable = min(view.last_stable_offset, view.active_base_offset)
    if limit is not None:
        uncleanable = min(uncleanable, limit)
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in view.segments_from(first_dirty):
            if seg.largest_timestamp > now_ms - lag:
                uncleanable = min(uncleanable, seg.base_offset)
                break
    for seg in view.segments:  # whole segments only, as Kafka
        if seg.base_offset <= uncleanable < seg.upper:
            uncleanable = seg.base_offset
            break
    uncleanable = max(uncleanable, first_dirty)
    clean_bytes = sum(s.size for s in view.segments if s.upper <= first_dirty)
    cleanable = [s for s in view.segments if s.upper > first_dirty and s.base_offset < uncleanable]
    max_lag = max(config.max_compaction_lag_ms, 0)
    need_now = False
    if cleanable and max_lag < 2**62:
        stamps = [ts for ts in (first_batch_ts(s) for s in cleanable) if ts > 0]
        need_now = bool(stamps) and min(stamps) < now_ms - max_lag
    return CleanableRange(first_dirty, uncleanable, clean_bytes, sum(s.size for s in cleanable), need_now)


def _aborted_for(view: LogCleaningView, start: int, upper: int) -> list[AbortedTxn]:
    """Kafka's ``collectAbortedTransactions(start, upper)`` over the view's indexes."""
    search = TxnSearch(start, upper, [])
    for seg in view.segments:
        if seg.upper <= start:
            continue
        search.add(seg.txn_entries)
        if search.complete:
            return search.found
    search.add(view.active_txn_entries)
    return search.found


class SegmentSink:
    """A segment as the cleaner's output: a ``.cleaned`` one here, a scratch one the remote
    cleaner uploads (:mod:`remote_tier.compaction`)."""

    def __init__(self, segment: LogSegment) -> None:
        self.segment = segment

    def append(self, data: bytes, last_offset: int, max_timestamp: int, offset_of_max: int) -> None:
        self.segment.append(last_offset, max_timestamp, offset_of_max, data)

    def append_aborted(self, txn: AbortedTxn) -> None:
        self.segment.txn_index.append(txn)


@dataclass(frozen=True, slots=True)
class CleanOutcome:
    """What one pass did: the next first dirty offset, the groups swapped in, the I/O."""

    end_offset: int
    groups: int
    bytes_read: int
    bytes_written: int
    map_bytes_read: int


def _sources(view: LogCleaningView, segments: Sequence[CleanableSegment]) -> list[SourceSegment]:
    return [
        SourceSegment(FileReader(s.log_path), s.base_offset, s.upper, s.size, s.index_bytes,
                      _aborted_for(view, s.base_offset, s.upper))
        for s in segments
    ]


def _close(sources: Sequence[SourceSegment]) -> None:
    for source in sources:
        reader = source.reader
        if isinstance(reader, FileReader):
            reader.close()


def clean_log(
    log: Log,
    view: LogCleaningView,
    cleanable: CleanableRange,
    *,
    owner: Owner,
    offset_map: OffsetMap,
    io: CleanerIO,
    now_ms: int,
    load_factor: float = 0.9,
) -> CleanOutcome:
    """One pass over ``log`` (see the module docstring). Raises :class:`CleaningAborted`
    when a swap finds the log changed (the cleaned files are removed) or ``io`` says so;
    a file the log deleted meanwhile raises OSError."""
    first_dirty, uncleanable = cleanable.first_dirty, cleanable.first_uncleanable
    dirty = [s for s in view.segments if s.upper > first_dirty and s.base_offset < uncleanable]
    if not dirty:
        return CleanOutcome(first_dirty, 0, 0, 0, 0)
    dirty_sources = _sources(view, dirty)
    try:
        build_offset_map(dirty_sources, first_dirty, uncleanable, offset_map, io, load_factor=load_factor)
    finally:
        _close(dirty_sources)
    end_offset = offset_map.latest_offset + 1
    io.pause("mapped")
    config = view.config
    to_clean = [s for s in view.segments if s.base_offset < end_offset]
    sources = _sources(view, to_clean)
    groups = group_segments_by_size(sources, config.segment_bytes, config.segment_index_bytes, uncleanable)
    by_base = {s.base_offset: s for s in to_clean}
    ctx = CleanContext(offset_map, now_ms, config.delete_retention_ms, view.last_records)
    swapped = 0
    # the cleaned segment not yet swapped in, and its groups: the next group's output joins
    # it while both fit one segment (groups are made from the sizes before cleaning, so a
    # pass that empties them would leave a segment of one empty batch per group, issue #36)
    held: tuple[LogSegment, list[SourceSegment]] | None = None

    def swap_in(cleaned: LogSegment, group: list[SourceSegment]) -> None:
        cleaned.on_become_inactive()
        cleaned.flush()
        _keep_mtime(cleaned, by_base[group[-1].base_offset])
        io.pause("cleaned")
        replaced = [by_base[s.base_offset].segment for s in group]
        if not owner(functools.partial(log.begin_swap, cleaned, replaced)):
            raise CleaningAborted(f"{view.name} changed while it was cleaned")
        io.pause("swapping")  # a crash from here on completes the swap at the next start
        if not owner(functools.partial(log.finish_swap, cleaned, replaced)):
            raise CleaningAborted(f"{view.name} changed while its cleaned segment was swapped in")

    try:
        for group in groups:
            base = group[0].base_offset
            _remove_cleaned_files(view, base)
            cleaned = LogSegment.open(view.dir, base, config, create=True, suffix=CLEANED_SUFFIX)
            try:
                clean_group(group, SegmentSink(cleaned), ctx, io)
                if held is not None and _fits_together(held[0], cleaned, config):
                    _append_cleaned(held[0], cleaned, io)
                    held = (held[0], held[1] + list(group))
                    cleaned.remove_files()
                    continue
            except BaseException:
                cleaned.remove_files()
                raise
            if held is not None:
                swap_in(*held)
                held = None
                swapped += 1
                io.pause("swapped")
            held = (cleaned, list(group))
        if held is not None:
            swap_in(*held)
            held = None
            swapped += 1
            io.pause("swapped")
    finally:
        if held is not None:  # not swapped in: the pass failed or was aborted
            held[0].remove_files()
        _close(sources)
    stats = io.stats
    return CleanOutcome(end_offset, swapped, stats.bytes_read, stats.bytes_written, stats.map_bytes_read)


def _fits_together(first: LogSegment, second: LogSegment, config: LogConfig) -> bool:
    """Whether two cleaned segments, one after the other, make one segment."""
    return (
        first.size + second.size <= config.segment_bytes
        and first.offset_index.size_in_bytes + second.offset_index.size_in_bytes <= config.segment_index_bytes
        and second.next_offset - 1 - first.base_offset <= INT32_MAX
    )


def _append_cleaned(into: LogSegment, cleaned: LogSegment, io: CleanerIO) -> None:
    """Copy ``cleaned``'s batches and aborted transactions to the end of ``into``, a read
    window at a time (a batch larger than the window alone)."""
    position, end = 0, cleaned.size
    while position < end:
        chunk = cleaned.read_at(position, min(max(io.chunk_bytes, BATCH_OVERHEAD), end - position))
        whole = [(pos, header) for pos, header in iter_batches(chunk)]
        if not whole:  # one batch larger than the window
            header = read_batch_header(chunk)
            chunk = cleaned.read_at(position, header.size)
            whole = [(0, header)]
        used = whole[-1][0] + whole[-1][1].size
        top = max(whole, key=lambda w: w[1].max_timestamp)[1]
        into.append(whole[-1][1].last_offset, top.max_timestamp, top.last_offset, chunk[:used])
        io.stats.bytes_written += used
        io.throttle(used)
        position += used
    for txn in cleaned.txn_index.entries:
        into.txn_index.append(txn)


def _remove_cleaned_files(view: LogCleaningView, base: int) -> None:
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        (view.dir / f"{base:020d}{suffix}{CLEANED_SUFFIX}").unlink(missing_ok=True)


def _keep_mtime(cleaned: LogSegment, last: CleanableSegment) -> None:
    """The cleaned segment keeps its group's last modification time (Kafka does)."""
    try:
        mtime = os.stat(last.log_path).st_mtime
        os.utime(cleaned.log_path, (mtime, mtime))
    except OSError:
        pass
