"""Log: one partition's sequence of segments, with append, read, roll, flush, recovery and retention.

Over 500 lines because append, roll, flush, read, recovery at load and
retention all mutate the same segment list and offsets under one invariant
(contiguous segments, ``log_start ≤ high watermark ≤ log end``); split apart,
each piece would need the others' private state.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

from common.errors import (
    InvalidRequestError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
)
from common.record.batch import (
    ValidatedRecords,
    check_replicated_batches,
    decode_batch,
    iter_batches,
    stamp_batch,
    validate_batches,
)
from local_tier.checkpoint import fsync_dir, write_checkpoint
from local_tier.cleaning.cleaner import LastRecord
from local_tier.cleaning.keys import require_keys
from local_tier.cleaning.swap import CLEANED_SUFFIX, SWAP_SUFFIX, recover_swaps
from local_tier.cleaning.view import CleanableSegment, LogCleaningView
from local_tier.config import LogConfig
from local_tier.dir_failure import LogDirFailure, is_disk_full
from local_tier.epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from local_tier.index import CorruptIndexError
from local_tier.log_producers import analyze_append, apply_append, replay_segments
from local_tier.ownership import Owned, owner_only
from local_tier.producer_snapshot import write_snapshot
from local_tier.producer_state import AppendOrigin, ProducerStateManager
from local_tier.read_view import LogReadView, regions_from
from local_tier.segment import DELETED_SUFFIX, FileRegion, LogSegment, segment_file_name
from local_tier.txn_index import AbortedTxn, TxnSearch

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "FetchDataInfo",
    "Log",
    "LogAppendInfo",
]

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms

_INT32_MAX = 2**31 - 1
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")
_log = logging.getLogger("strata.local_tier")
_T = TypeVar("_T")


class LogAppendInfo(NamedTuple):  # one per append: a tuple builds ~10x faster than a frozen dataclass
    """What an append assigned: offsets ``first_offset..last_offset`` inclusive."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 for CreateTime topics
    log_start_offset: int
    record_count: int
    size: int
    #: a retried idempotent batch already in the log: the offsets are the original
    #: ones and nothing was written
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Whole batches for a fetch, as file regions (usually one) to sendfile in order."""

    start_offset: int
    regions: list[FileRegion]
    size: int
    high_watermark: int
    log_start_offset: int


def _now_ms() -> int:
    return int(time.time() * 1000)


def _done(result: bool) -> Future[bool]:
    future: Future[bool] = Future()
    future.set_result(result)
    return future


def _run_now(job: Callable[[], _T]) -> Future[_T]:
    """``job`` run on this thread, as the future a scheduler would have given."""
    future: Future[_T] = Future()
    try:
        future.set_result(job())
    except BaseException as exc:
        future.set_exception(exc)
    return future


class Log(Owned):
    """One partition's log in ``<log_dir>/<topic>-<partition>/``.

    Invariants: segments are sorted by base offset and contiguous (each one's
    ``next_offset`` is the next one's ``base_offset``); the last is the active
    segment, the only one appended to; ``log_start_offset ≤ high_watermark ≤
    log_end_offset``; every offset below ``recovery_point`` is fsynced, and so is
    the ``leader-epoch-checkpoint`` entry of every epoch starting below it (ADR 0030);
    the checkpoint holds no epoch starting beyond the log end.

    A failed fsync, or a failed write other than a full disk, takes the log
    directory offline (``failure``, shared by every log of the directory; see
    :mod:`local_tier.dir_failure`): from then on appends and flushes answer
    KAFKA_STORAGE_ERROR and the recovery point stays where the last good fsync put it.

    Thread-safety: not thread-safe: mutated only on the broker's event loop
    thread. The exceptions are the jobs it hands to ``scheduler`` (the LogManager's
    single flush thread): the fsyncs that follow a roll, :meth:`schedule_flush` or
    ``flush.messages``, which then advance ``recovery_point`` under a small lock,
    the writes of the leader-epoch checkpoint, and the closing and unlinking of
    segments the log no longer holds. The thread
    runs jobs in order, so a segment is closed only after the fsyncs queued before.
    The event loop never waits for that thread. Without a scheduler those jobs run
    inline.
    """

    def __init__(
        self,
        dir: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        needs_recovery: bool,
        log_start_offset: int | None = None,
        high_watermark: int | None = None,
        scheduler: Executor | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        failure: LogDirFailure | None = None,
        on_roll: Callable[[Log], None] | None = None,
        on_change: Callable[[Log], None] | None = None,
    ) -> None:
        self._init_owner()
        #: called on the owner after each roll (the tiering uploads the sealed segment soon)
        self._on_roll = on_roll
        #: called on the owner after each change (:meth:`_changed`): the log manager's
        #: checkpoints then revisit this log only, not every log of the directory
        self._on_change = on_change
        #: how many changes the log has had (:meth:`_changed`): a periodic pass that remembers
        #: it knows, without looking further, that an idle log has nothing new for it
        self.changes = 0
        self.dir = dir
        self._failure = failure if failure is not None else LogDirFailure(dir.parent)
        self._topic = topic
        self._partition = partition
        self._config = config
        self._scheduler = scheduler
        self._lock = threading.Lock()  # guards _recovery_point and _truncations against the flush thread
        self._truncations = 0  # a flush queued before a truncation must not raise the recovery point
        #: the start of the oldest leader epoch not yet in the fsynced checkpoint: no flush
        #: raises the recovery point past it (ADR 0030); the checkpoint writes queued so far;
        #: whether the last one failed on a full disk (the next append queues it again)
        self._epoch_floor: int | None = None
        self._epoch_writes = 0
        self._epoch_retry = False
        self._pending_flushes: list[Future[object]] = []
        self._last_flush: tuple[int, Future[bool]] | None = None  # (up to offset, its job)
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms()
        self._closed = False
        self._first_recovered_base: int | None = None
        self._write_failing = False  # the last write failed: warn once, note the recovery
        dir.mkdir(parents=True, exist_ok=True)
        recovered_epochs = self._load(recovery_point, needs_recovery)
        leo = self.log_end_offset
        self._log_start_offset = min(max(log_start_offset or 0, self._bases[0]), leo)
        # the checkpointed high watermark (None: none kept, the log end); a leader whose
        # ISR is itself raises it to the log end, a follower takes its leader's
        hw = leo if high_watermark is None else high_watermark
        self._high_watermark = min(max(hw, self._log_start_offset), leo)
        self._leader_epoch_cache = LeaderEpochCache(
            dir / LEADER_EPOCH_CHECKPOINT, lambda: self.log_end_offset
        )
        self._leader_epoch_cache.truncate_from_end(leo)
        rebuilt = self._rebuild_epochs(recovered_epochs)
        self._leader_epoch_cache.truncate_from_start(self._log_start_offset)
        if rebuilt is not None:
            self._persist_rebuilt(rebuilt)
        self._leader_epoch_cache.write_later(self._write_epochs)
        self._producer_state = ProducerStateManager(dir, self.name)
        self._producer_id_expiration_ms = producer_id_expiration_ms
        self._load_producer_state(producer_id_expiration_ms)

    # ------------------------------------------------------------------ loading

    def _load(self, recovery_point: int, needs_recovery: bool) -> list[tuple[int, int]]:
        """Open the segments, recovering those from ``recovery_point`` on after an unclean
        stop; returns the leader epochs the recovered batches start (``(epoch, offset)``)."""
        # one listing of the directory serves every check below (a start opens 10,000 logs)
        names = os.listdir(self.dir)
        if any(name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)) for name in names):
            recover_swaps(self.dir, self.name)  # a cleaning a crash interrupted (ADR 0019)
            names = os.listdir(self.dir)
        names = self._remove_leftovers(names)
        bases = sorted(
            int(name[:-4]) for name in names
            if name.endswith(".log") and len(name) == 24 and name[:20].isdigit()
        )
        for base in bases:
            last = base == bases[-1]
            self._add_segment(LogSegment.open(self.dir, base, self._config, validate_tail=last, listing=names))
        if not self._segments:
            self._add_segment(LogSegment.open(self.dir, 0, self._config, create=True))
        first_unflushed = max(0, bisect_right(self._bases, recovery_point) - 1)
        recovered: list[LogSegment] = []
        for index, segment in enumerate(self._segments):
            if needs_recovery and index >= first_unflushed:
                if self._first_recovered_base is None:
                    self._first_recovered_base = segment.base_offset
                recovered.append(segment)
                truncated = self._recover_segment(segment)
            else:
                try:
                    segment.sanity_check()
                    continue
                except CorruptIndexError as exc:
                    _log.warning(
                        "%s: %s; rebuilding the indexes of %s",
                        self.name,
                        exc,
                        segment.log_path.name,
                    )
                    truncated = self._recover_segment(segment)
            if truncated:
                self._drop_segments_after(index)
                break
        for segment in recovered:
            segment.flush()
        with self._lock:
            self._recovery_point = (
                self.log_end_offset
                if needs_recovery
                else max(self._bases[0], min(recovery_point, self.log_end_offset))
            )
        kept = [segment for segment in recovered if segment in self._segments]
        return [epoch for segment in kept for epoch in segment.recovered_epochs]

    def _rebuild_epochs(self, recovered: list[tuple[int, int]]) -> int | None:
        """After an unclean stop the recovered batches say which epochs start where from the
        first recovered segment on: the checkpoint is written after the appends that start
        an epoch (ADR 0030), and may lack one, or still hold one a truncation cut from
        memory only. The cache is cut there and given the batches' epochs; returns the
        offset from which it changed (None: the file already said so)."""
        if self._first_recovered_base is None:
            return None
        cache = self._leader_epoch_cache
        before = cache.entries
        cache.truncate_from_end(self._first_recovered_base)
        for epoch, start in recovered:
            if epoch >= 0 and epoch > cache.latest_epoch and start < self.log_end_offset:
                cache.assign(epoch, start, persist=False)
        if cache.entries == before:
            return None
        changed = [entry for entry in cache.entries if entry not in before]
        return changed[0][1] if changed else self._first_recovered_base

    def _persist_rebuilt(self, added: int) -> None:
        """Write and fsync the rebuilt epochs before the log serves. If that fails, no flush
        counts offset ``added`` or later durable until a later write succeeds, and the next
        start recovers them again."""
        try:
            self._leader_epoch_cache.persist()
        except OSError as exc:
            _log.warning("%s: cannot write the leader epochs recovered from offset %d (%s)",
                         self.name, added, exc)
            with self._lock:
                self._recovery_point = min(self._recovery_point, added)
                self._epoch_floor = added

    def _write_epochs(self, entries: list[tuple[int, int]], adds_from: int | None) -> None:
        """Write (and fsync) the leader-epoch checkpoint on the flush thread, after the jobs
        queued before: the event loop does no file work for an epoch. Until it is done no
        flush counts offsets from ``adds_from`` on durable (the epoch it adds), so a crash
        before recovers those batches and rebuilds their epochs from them
        (:meth:`_rebuild_epochs`)."""
        with self._lock:
            if adds_from is not None:
                floor = self._epoch_floor
                self._epoch_floor = adds_from if floor is None else min(floor, adds_from)
            self._epoch_writes += 1
            written = self._epoch_writes
        path, failure, name = self.dir / LEADER_EPOCH_CHECKPOINT, self._failure, self.name

        def job() -> None:
            # a closed log was deleted or moved away: a topic made again under its name may
            # have a new directory at ``path`` by now (a shutdown waits for this job first)
            if failure.offline or self._closed:
                return
            try:
                write_checkpoint(path, entries)
            except FileNotFoundError:  # the log was deleted meanwhile
                return
            except OSError as exc:
                if not is_disk_full(exc):
                    failure.fail(f"write of the leader-epoch checkpoint of {name}", exc)
                    return
                _log.warning("%s: cannot write its leader-epoch checkpoint (%s); again at the next "
                             "append", name, exc)
                self._epoch_retry = True
                return
            with self._lock:
                if self._epoch_writes == written:  # else a later write's job clears it
                    self._epoch_floor = None

        self._submit(job)

    def _catch_up_epochs(self, what: str) -> None:
        """An append takes along what the checkpoint still lacks: entries the cache holds in
        memory only (a leadership's epoch, a rebuild that could not be written) and a write
        a full disk refused (queued again; its floor is still set)."""
        if self._leader_epoch_cache.needs_persist:
            self._guarded(what, self._leader_epoch_cache.persist)
        if self._epoch_retry:
            self._epoch_retry = False
            self._write_epochs(self._leader_epoch_cache.entries, None)

    def _raise_recovery_point(self, offset: int) -> None:
        """Move the recovery point up to ``offset``, not past the start of an epoch whose
        checkpoint is not written yet (ADR 0030). The caller holds ``_lock``."""
        floor = self._epoch_floor
        durable = offset if floor is None else min(offset, floor)
        self._recovery_point = max(self._recovery_point, durable)

    @owner_only
    def settle_epochs(self) -> bool:
        """At shutdown, after :meth:`wait_for_flushes` (nothing is served any more): a
        checkpoint write that did not complete (a full disk) is made now, on this thread.
        False when it fails again: then no clean-shutdown marker may be written, and the
        next start recovers the batches and their epochs."""
        with self._lock:
            pending = self._epoch_floor is not None
        if not pending:
            return True
        try:
            write_checkpoint(self.dir / LEADER_EPOCH_CHECKPOINT, self._leader_epoch_cache.entries)
        except OSError as exc:
            _log.warning("%s: cannot write its leader-epoch checkpoint at shutdown (%s)",
                         self.name, exc)
            return False
        with self._lock:
            self._epoch_floor = None
        self._epoch_retry = False
        return True

    def _load_producer_state(self, expiration_ms: int) -> None:
        """Latest snapshot, then replay of the batches after it (ADR 0011).

        After an unclean stop the replay starts no later than the first recovered
        segment, whose transaction index may have lost entries with its tail.
        """
        state = self._producer_state
        leo = self.log_end_offset
        upper = leo if self._first_recovered_base is None else min(leo, self._first_recovered_base)
        snapshot = state.load(upper, now_ms=_now_ms(), expiration_ms=expiration_ms)
        start = max(snapshot, self._bases[0])
        if snapshot < 0:
            state.clear(start)
        replayed = replay_segments(state, self._segments, start)
        state.map_end_offset = leo
        if replayed:  # the snapshot only saves the next start a replay: written off the loop
            _log.info("%s: producer state rebuilt from offset %d (%d batches)", self.name, start, replayed)
            self._snapshot_in_background()

    def _remove_leftovers(self, names: list[str]) -> set[str]:
        """Delete the leftover files among ``names`` (this log's directory); the names kept."""
        kept = set(names)
        for name in names:
            stem, dot, suffix = name.rpartition(".")
            if name.endswith(_LEFTOVER_SUFFIXES):
                _log.info("%s: removing leftover file %s", self.name, name)
            elif dot and suffix in ("index", "timeindex", "txnindex") and stem + ".log" not in kept:
                _log.info("%s: removing index %s without a log", self.name, name)
            else:
                continue
            (self.dir / name).unlink(missing_ok=True)
            kept.discard(name)
        return kept

    def _recover_segment(self, segment: LogSegment) -> int:
        truncated = segment.recover()
        if truncated:
            _log.warning(
                "Recovery of %s: truncated %d invalid bytes at position %d of segment %s (%s)",
                self.name,
                truncated,
                segment.size,
                segment.log_path.name,
                segment.recovery_error,
            )
        return truncated

    def _drop_segments_after(self, index: int) -> None:
        for segment in self._segments[index + 1 :]:
            _log.warning(
                "%s: deleting segment %s, which follows a truncated segment",
                self.name,
                segment.log_path.name,
            )
            segment.remove_files()
        del self._segments[index + 1 :]
        del self._bases[index + 1 :]

    def _add_segment(self, segment: LogSegment) -> None:
        self._segments.append(segment)
        self._bases.append(segment.base_offset)

    # ------------------------------------------------------------------ properties

    @property
    def name(self) -> str:
        return f"{self._topic}-{self._partition}"

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def partition(self) -> int:
        return self._partition

    @property
    @owner_only
    def config(self) -> LogConfig:
        return self._config

    @owner_only
    def update_config(self, config: LogConfig) -> None:
        """Apply new topic configs (index sizes apply to segments created from now on)."""
        self._config = config
        for segment in self._segments:
            segment.config = config
        self._changed()

    @property
    @owner_only
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    @owner_only
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    @owner_only
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    @owner_only
    def recovery_point(self) -> int:
        with self._lock:
            return self._recovery_point

    @property
    @owner_only
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    @owner_only
    def segments(self) -> list[LogSegment]:
        """The live segments, oldest first (a copy)."""
        return list(self._segments)

    @property
    @owner_only
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    @owner_only
    def producer_state(self) -> ProducerStateManager:
        return self._producer_state

    @property
    @owner_only
    def last_stable_offset(self) -> int:
        """Offsets below it hold no record of an open transaction (read_committed reads up to it)."""
        first_unstable = self._producer_state.first_unstable_offset
        if first_unstable is None:
            return self._high_watermark
        return min(first_unstable, self._high_watermark)

    @property
    @owner_only
    def leader_epoch_cache(self) -> LeaderEpochCache:
        return self._leader_epoch_cache

    @property
    @owner_only
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    @owner_only
    def flush_in_flight(self) -> bool:
        """Whether a flush is still queued or running on the flush thread: the recovery point
        moves when it is done (the flush thread runs jobs in order, so the last one is enough)."""
        last = self._last_flush
        return last is not None and not last[1].done()

    @property
    @owner_only
    def background_pending(self) -> bool:
        """Whether a job queued on the flush thread (a flush, the producer snapshot of a
        roll, a segment's deletion) has not run yet."""
        return any(not f.done() for f in self._pending_flushes)

    def _changed(self) -> None:
        """Something periodic work reads has changed: the log end, the segments, the high
        watermark, the log start, the config, or a flush was scheduled (the recovery point)."""
        self.changes += 1
        if self._on_change is not None:
            self._on_change(self)

    # ------------------------------------------------------------------ append

    @owner_only
    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        validated: ValidatedRecords | None = None,
        now_ms: int | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate (unless done), check producer state, assign offsets, stamp and append.

        Per-batch work only. Does not move the high watermark. A client's retried
        idempotent batch that is already in the log is answered with its original
        offsets (``duplicate``) and not written again. ``origin`` is
        ``COORDINATOR`` for transaction markers and a coordinator's own writes
        (epochs checked, no sequences).
        """
        self._failure.check(self.name)
        config = self._config
        if validated is None:
            validated = validate_batches(records, max_message_bytes=config.max_message_bytes)
        if config.compact and origin is not AppendOrigin.REPLICATION:
            require_keys(records, validated, self.name)
        if validated.size > config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"record set of {validated.size} bytes exceeds segment.bytes ({config.segment_bytes})"
            )
        now = _now_ms() if now_ms is None else now_ms
        append_time = now if config.message_timestamp_type == "LogAppendTime" else None
        first_offset = offset = self.log_end_offset
        producers = analyze_append(self._producer_state, records, validated, first_offset, origin)
        if producers.duplicate is not None:
            dup = producers.duplicate
            return LogAppendInfo(
                first_offset=dup.first_offset,
                last_offset=dup.last_offset,
                log_append_time_ms=dup.timestamp if append_time is not None else -1,
                log_start_offset=self._log_start_offset,
                record_count=0,
                size=0,
                duplicate=True,
            )
        # stamped in place when the caller handed a writable view (the server's request
        # frames are), else in a copy
        buf = records if isinstance(records, memoryview) and not records.readonly else bytearray(records)
        for position, header in validated.headers:
            stamp_batch(
                buf,
                position,
                base_offset=offset,
                leader_epoch=leader_epoch,
                log_append_time_ms=append_time,
            )
            offset += header.last_offset_delta + 1
        last_offset = offset - 1
        if append_time is None:
            max_timestamp = validated.max_timestamp
            offset_of_max = first_offset + validated.shallow_offset_of_max_timestamp
        else:
            max_timestamp, offset_of_max = append_time, first_offset
        segment = self._maybe_roll(len(buf), now, last_offset)
        if leader_epoch > self._leader_epoch_cache.latest_epoch:
            # Before the bytes: if this write fails, nothing was appended. If the
            # append then fails, the entry names the offset the next append gets.
            self._guarded(
                f"record leader epoch {leader_epoch} for",
                lambda: self._leader_epoch_cache.assign(leader_epoch, first_offset),
            )
        self._catch_up_epochs(f"record leader epoch {leader_epoch} for")
        self._guarded(
            "append to",
            lambda: segment.append(last_offset, max_timestamp, offset_of_max, buf, now_ms=now),
        )
        # the bytes are in: producer state and the .txnindex follow (a failing index write
        # leaves the entry to the replay at the next start, as after a crash)
        self._guarded(
            "index the transactions of",
            lambda: apply_append(self._producer_state, producers, segment, last_offset + 1),
        )
        if self._write_failing:
            self._write_failing = False
            _log.info("%s: appends succeed again", self.name)
        self._changed()
        self._count_unflushed(validated.record_count, now)
        return LogAppendInfo(
            first_offset=first_offset,
            last_offset=last_offset,
            log_append_time_ms=-1 if append_time is None else append_time,
            log_start_offset=self._log_start_offset,
            record_count=validated.record_count,
            size=len(buf),
        )

    def _count_unflushed(self, records: int, now_ms: int) -> None:
        """``flush.messages``: once that many records are unflushed, fsync them on the flush
        thread; the Produce that crossed the line is answered after (:meth:`pending_flush`)."""
        self._unflushed_messages += records
        if self._unflushed_messages >= self._config.flush_messages:
            self.schedule_flush(now_ms)

    def _guarded(self, what: str, action: Callable[[], None]) -> None:
        """Run ``action``; an OSError (a full disk, an I/O error) becomes KafkaStorageError.

        The local tier's writers undo their own partial work before raising, so
        the log is as it was before the call. Any error but a full disk takes the
        log directory offline.
        """
        try:
            action()
        except OSError as exc:
            if not is_disk_full(exc):
                self._failure.fail(f"{what} {self.name}", exc)
            raise self._storage_error(what, exc) from exc

    def _storage_error(self, what: str, exc: OSError) -> KafkaStorageError:
        if not self._write_failing:  # once per episode: a full disk fails every retry
            self._write_failing = True
            _log.warning(
                "cannot %s %s (%s); answering KAFKA_STORAGE_ERROR until a write succeeds",
                what,
                self.name,
                exc,
            )
        return KafkaStorageError(
            f"cannot {what} partition {self.name}: {exc.strerror or exc}; nothing was appended"
        )

    def _maybe_roll(self, size: int, now_ms: int, last_offset: int) -> LogSegment:
        segment = self._segments[-1]
        if segment.size == 0:
            return segment
        config = self._config
        created = segment.created_ms
        if (
            segment.size + size > config.segment_bytes
            or (created is not None and now_ms - created > config.segment_ms)
            or segment.is_full()
            or last_offset - segment.base_offset > _INT32_MAX
        ):
            return self.roll(now_ms)
        return segment

    @owner_only
    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset; fsync the old ones in the background.

        Raises KafkaStorageError, with the log unchanged, when the new segment's
        files cannot be made (a full disk).
        """
        self._failure.check(self.name)
        active = self._segments[-1]
        new_base = self.log_end_offset
        if active.base_offset == new_base:
            return active  # already empty at the log end
        try:
            active.on_become_inactive()
        except OSError as exc:  # an optimisation: loading derives the max timestamp anyway
            _log.info("%s: no final time index entry for %s (%s)", self.name,
                      active.log_path.name, exc)
        created: list[LogSegment] = []
        self._guarded("roll", lambda: created.append(
            LogSegment.open(self.dir, new_base, self._config, create=True)))
        segment = created[0]
        self._add_segment(segment)
        _log.debug("%s: rolled to segment %s", self.name, segment_file_name(new_base, ".log"))
        self._flush_up_to(new_base, background=True)
        self._snapshot_in_background()
        self._changed()
        if self._on_roll is not None:
            self._on_roll(self)
        return segment

    # ------------------------------------------------------------------ producers

    def _snapshot_in_background(self) -> None:
        """Kafka's snapshot at roll (and after a rebuild): the state as of the log end, written
        off the loop; skipped if the log is truncated before it is written (its state may be
        gone; a snapshot written meanwhile above the log end is deleted at the next load)."""
        offset, data = self._producer_state.snapshot_bytes()
        with self._lock:
            truncations = self._truncations

        def job() -> None:
            with self._lock:
                if self._truncations != truncations:
                    return
            try:
                write_snapshot(self.dir, offset, data)
            except OSError as exc:  # e.g. a full disk: a later snapshot or a replay covers it
                _log.warning("%s: producer snapshot at %d failed: %s", self.name, offset, exc)

        self._submit(job)

    @owner_only
    def take_producer_snapshot(self, *, fsync: bool = True) -> None:
        """Write the producer snapshot at the log end now (clean shutdown); not again when one
        at the log end is there already, nor for an empty log without producers (10,000 idle
        or new partitions took 8-20 s to stop). Without ``fsync`` the caller makes it durable
        (one ``syncfs`` for every log, ``local_tier/shutdown.py``)."""
        state = self._producer_state
        if state.has_snapshot_at(self.log_end_offset) or (
            self.log_end_offset == self._log_start_offset and not state.producers
        ):  # an empty log without producers: a load has nothing to replay, so nothing to save
            return
        self._producer_state.map_end_offset = self.log_end_offset
        self._producer_state.take_snapshot(fsync=fsync)

    @owner_only
    def note_synced(self) -> None:
        """Everything written to the log is durable (a ``syncfs`` of its filesystem after
        :meth:`wait_for_flushes`, at shutdown): the recovery point moves to the log end."""
        with self._lock:
            self._raise_recovery_point(self.log_end_offset)
        self._unflushed_messages = 0

    @owner_only
    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """``producer.id.expiration.ms``: forget idle producers without an open transaction."""
        return self._producer_state.remove_expired(now_ms, expiration_ms)

    @owner_only
    def collect_aborted_txns(self, search: TxnSearch, *, min_base: int = 0) -> None:
        """Add the aborted transactions of the local segments to ``search``: from the segment
        holding its fetch offset on, skipping segments based below ``min_base`` (those a
        remote search already read)."""
        first = max(0, bisect_right(self._bases, search.fetch_offset) - 1)
        for segment in self._segments[first:]:
            if search.complete:
                break
            if segment.base_offset >= min_base:
                search.add(segment.txn_index.entries)

    @owner_only
    def aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound)`` (read_committed fetches)."""
        search = TxnSearch(fetch_offset, upper_bound, [])
        self.collect_aborted_txns(search)
        return search.found

    def _submit(self, job: Callable[[], _T]) -> Future[_T]:
        """Run ``job`` on the flush thread, after the jobs queued before it (inline without one)."""
        if self._scheduler is None:
            return _run_now(job)
        self._pending_flushes = [f for f in self._pending_flushes if not f.done()]
        try:
            future = self._scheduler.submit(job)
        except RuntimeError:  # the scheduler was shut down: nothing queued there to wait for
            return _run_now(job)
        self._pending_flushes.append(future)
        return future

    def _discard(self, segment: LogSegment) -> None:
        """Take ``segment``'s files out of the way now (renamed ``*.deleted``) and close and
        unlink them on the flush thread, after the fsyncs queued before that may name them."""
        segment.delete()
        self._submit(lambda: self._remove_files([segment]))

    def _remove_files(self, segments: list[LogSegment]) -> None:
        """Close and unlink ``segments`` (on the flush thread); a failure is logged, not raised."""
        for segment in segments:
            try:
                segment.remove_files()
            except OSError:
                _log.exception("%s: cannot remove %s", self.name, segment.log_path)

    # ------------------------------------------------------------------ flush

    @owner_only
    def flush(self, offset: int | None = None, *, now_ms: int | None = None) -> bool:
        """fsync every segment holding offsets below ``offset`` (default: the log end), on the
        calling thread (shutdown, tests: the broker's loop schedules its flushes). False when
        the fsync failed or the log directory is offline: nothing below is durable then."""
        done = self._flush_up_to(self.log_end_offset if offset is None else offset, background=False)
        self._last_flush_ms = _now_ms() if now_ms is None else now_ms
        return done.result()

    @owner_only
    def schedule_flush(self, now_ms: int | None = None) -> Future[bool]:
        """Like :meth:`flush` to the log end, but on the scheduler thread when there is one."""
        done = self._flush_up_to(self.log_end_offset, background=True)
        self._last_flush_ms = _now_ms() if now_ms is None else now_ms
        return done

    @owner_only
    def pending_flush(self, offset: int) -> Future[bool] | None:
        """The flush scheduled to make the offsets below ``offset`` durable, if there is one
        (``flush.messages`` crossed by their append): their Produce is answered after it,
        KAFKA_STORAGE_ERROR if its result is False."""
        last = self._last_flush
        if last is None or last[0] < offset:
            return None
        return last[1]

    def _flush_up_to(self, offset: int, *, background: bool) -> Future[bool]:
        offset = min(offset, self.log_end_offset)
        failure = self._failure
        if failure.offline:  # (recorded: an append that raced the failure must not be answered)
            self._last_flush = (offset, _done(False))
            return self._last_flush[1]
        recovery_point = self.recovery_point
        if offset <= recovery_point:
            return _done(True)
        segments = [
            s for s in self._segments if s.base_offset < offset and s.next_offset > recovery_point
        ]
        if offset == self.log_end_offset:
            self._unflushed_messages = 0
        with self._lock:
            truncations = self._truncations

        def job() -> bool:
            if failure.offline:  # a later fsync that succeeds proves nothing about the pages lost
                return False
            try:
                for segment in segments:
                    segment.flush()
            except ValueError:  # a descriptor closed meanwhile: the segment left the log
                _log.info("%s: flush up to offset %d skipped: a segment was closed", self.name, offset)
                return False
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    _log.info("%s: flush up to offset %d skipped: %s", self.name, offset, exc)
                    return False
                failure.fail(f"fsync of {self.name} up to offset {offset}", exc)
                return False
            with self._lock:
                if self._truncations == truncations:  # else the offsets it covered may be gone
                    self._raise_recovery_point(offset)
            return True

        future = self._submit(job) if background else _run_now(job)
        self._last_flush = (offset, future)
        self._changed()  # the recovery point moves once the job is done (flush_in_flight)
        return future

    @owner_only
    def wait_for_flushes(self) -> None:
        """Block until the jobs submitted to the flush thread so far are done (tests,
        shutdown: never on a serving event loop)."""
        for future in self._pending_flushes:
            future.result()
        self._pending_flushes.clear()

    # ------------------------------------------------------------------ read

    @owner_only
    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to ``[log_start_offset, log_end_offset]``."""
        high_watermark = min(max(offset, self._log_start_offset), self.log_end_offset)
        if high_watermark != self._high_watermark:
            self._high_watermark = high_watermark
            self._changed()
        return high_watermark

    def _out_of_range(self, offset: int) -> OffsetOutOfRangeError:
        return OffsetOutOfRangeError(
            f"offset {offset} is out of range for partition {self.name}: valid offsets are "
            f"[{self._log_start_offset}, {self.log_end_offset}]"
        )

    @owner_only
    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Whole batches from the one containing ``start_offset``, below ``max_offset`` (default:
        HW), from one segment or more (:func:`~local_tier.read_view.regions_from`)."""
        if start_offset < self._log_start_offset or start_offset > self.log_end_offset:
            raise self._out_of_range(start_offset)
        limit = self._high_watermark if max_offset is None else max_offset
        empty = FetchDataInfo(start_offset, [], 0, self._high_watermark, self._log_start_offset)
        if start_offset >= limit:
            return empty
        regions = regions_from(self._segments, self._bases, start_offset, max_bytes, limit, min_one_message)
        if not regions:
            return empty
        return FetchDataInfo(
            start_offset,
            regions,
            sum(r.length for r in regions),
            self._high_watermark,
            self._log_start_offset,
        )

    @owner_only
    def read_view(self) -> LogReadView:
        """The segments and offsets as of now, to read on another thread (see
        :mod:`local_tier.ownership`)."""
        return LogReadView(
            self.name, self._log_start_offset, self.log_end_offset, tuple(self._segments), tuple(self._bases)
        )

    @owner_only
    def fetch_offset_by_timestamp(
        self, timestamp: int, *, max_offset: int | None = None
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` for ListOffsets, only offsets below ``max_offset`` (default: HW).

        ``timestamp ≥ 0``: the first record with a timestamp ≥ it. Special values:
        ``MAX_TIMESTAMP`` (-3) the record holding the max timestamp,
        ``EARLIEST_TIMESTAMP`` (-2) ``(log_start_offset, -1)``,
        ``LATEST_TIMESTAMP`` (-1) ``(max_offset, -1)``.
        """
        limit = self._high_watermark if max_offset is None else max_offset
        if timestamp == EARLIEST_TIMESTAMP:
            return self._log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return limit, -1
        found: tuple[int, int] | None = None
        if timestamp == MAX_TIMESTAMP:
            best = max(self._segments, key=lambda s: s.max_timestamp)
            if best.max_timestamp >= 0:
                found = _max_timestamp_record(best)
        elif timestamp >= 0:
            for segment in self._segments:
                if segment.max_timestamp < timestamp:
                    continue
                found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    break
        else:
            raise InvalidRequestError(f"unsupported ListOffsets timestamp {timestamp}")
        if found is None or found[0] >= limit or found[0] < self._log_start_offset:
            return None
        return found

    # ------------------------------------------------------------------ follower side

    @owner_only
    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo | None:
        """Append batches fetched from the leader as they are: offsets and leader epochs
        were assigned by the leader (Kafka's ``appendAsFollower``).

        Only whole batches are taken (a trailing partial batch is ignored); every batch
        is CRC-checked (its records were checked by the leader) and must start at or
        after the end of the one before, the first at or after the log end offset, as
        in Kafka (a compacted log has gaps; ``OffsetOutOfRangeError`` otherwise: the
        follower must truncate or start again). New leader epochs go into the
        leader-epoch cache. Returns None when ``records`` holds no whole batch. Does not
        move the high watermark.
        """
        self._failure.check(self.name)
        view = records if isinstance(records, memoryview) else memoryview(records)
        whole = 0
        for pos, header in iter_batches(view):
            whole = pos + header.size
        if whole == 0:
            return None
        view = view[:whole]
        validated = check_replicated_batches(view, max_message_bytes=max(whole, self._config.max_message_bytes))
        expected = first_offset = self.log_end_offset
        producers = analyze_append(
            self._producer_state, view, validated, first_offset, AppendOrigin.REPLICATION
        )
        max_timestamp, offset_of_max = -1, first_offset
        for _, header in validated.headers:
            if header.base_offset < expected:  # a compacted log has gaps between batches
                raise OffsetOutOfRangeError(
                    f"{self.name}: fetched batch at offset {header.base_offset}, the log ends at "
                    f"{expected}"
                )
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
            expected = header.next_offset
        last_offset = expected - 1
        now = _now_ms()
        segment = self._maybe_roll(whole, now, last_offset)
        for _, header in validated.headers:
            epoch = header.partition_leader_epoch
            if epoch > self._leader_epoch_cache.latest_epoch:
                self._guarded(
                    f"record leader epoch {epoch} for",
                    lambda e=epoch, o=header.base_offset: self._leader_epoch_cache.assign(e, o),
                )
        self._catch_up_epochs("record the leader epochs of")
        self._guarded(
            "append to",
            lambda: segment.append(last_offset, max_timestamp, offset_of_max, view, now_ms=now),
        )
        self._guarded(
            "index the transactions of",
            lambda: apply_append(self._producer_state, producers, segment, last_offset + 1),
        )
        self._changed()
        self._count_unflushed(validated.record_count, now)
        return LogAppendInfo(
            first_offset=first_offset,
            last_offset=last_offset,
            log_append_time_ms=-1,
            log_start_offset=self._log_start_offset,
            record_count=validated.record_count,
            size=whole,
        )

    @owner_only
    def truncate_to(self, offset: int) -> bool:
        """Remove every record at or above ``offset`` (a follower whose log diverged from
        its leader's, KIP-101); True if anything was removed. Never below the log start."""
        target = max(offset, self._log_start_offset)
        if target >= self.log_end_offset:
            # no record goes, but an epoch that starts at the cut (with no records yet) does
            self._leader_epoch_cache.truncate_from_end(target)
            return False
        with self._lock:  # before the cut: a flush queued earlier must not count it durable
            self._truncations += 1
        while len(self._segments) > 1 and self._bases[-1] >= target:
            self._bases.pop()
            self._discard(self._segments.pop())
        self._segments[-1].truncate_to(target)
        leo = self.log_end_offset
        self._leader_epoch_cache.truncate_from_end(leo)
        self._high_watermark = min(self._high_watermark, leo)
        with self._lock:
            self._recovery_point = min(self._recovery_point, leo)
        self._first_recovered_base = None
        self._load_producer_state(self._producer_id_expiration_ms)  # snapshots above go too
        self._changed()
        _log.info("%s: truncated to offset %d", self.name, leo)
        return True

    @owner_only
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at ``offset`` (a new replica that takes the
        older part of the log from the bucket, KIP-405)."""
        with self._lock:
            self._truncations += 1
        for segment in self._segments:
            self._discard(segment)
        self._segments.clear()
        self._bases.clear()
        self._add_segment(LogSegment.open(self.dir, offset, self._config, create=True))
        self._log_start_offset = offset
        self._high_watermark = offset
        with self._lock:
            self._recovery_point = offset
        self._leader_epoch_cache.truncate_from_end(0)
        self._producer_state.clear(offset)
        self._producer_state.delete_snapshots_below(2**63 - 1)
        self._changed()
        _log.info("%s: starts empty at offset %d", self.name, offset)

    @owner_only
    def start_from_remote(
        self, offset: int, epochs: list[tuple[int, int]], producer_snapshot: bytes | None
    ) -> None:
        """Start empty at ``offset`` after what the bucket holds, with the state a leader of
        it needs (KIP-405's auxiliary state): the leader-epoch history of the remote
        segments, cut at ``offset``, and the producer snapshot taken at ``offset`` (the
        idempotent and transactional producers' state, so duplicates are still recognised
        and open transactions still known if this replica comes to lead)."""
        self.truncate_fully_and_start_at(offset)
        for epoch, start in epochs:
            self._leader_epoch_cache.assign(epoch, min(start, offset))
        self._leader_epoch_cache.truncate_from_start(offset)
        if producer_snapshot:
            write_snapshot(self.dir, offset, producer_snapshot)
            self._load_producer_state(self._producer_id_expiration_ms)
        self._changed()  # the leader-epoch history, after the log end

    # ------------------------------------------------------------------ retention

    @owner_only
    def delete_retention_segments(self, now_ms: int, *, remote_boundary: int | None = None) -> int:
        """Apply retention.ms, retention.bytes and the log start offset; returns segments deleted.

        With ``remote.storage.enable`` this is *local* retention: ``local.retention.*``
        apply (``-2``: the same as ``retention.*``), and only segments wholly below
        ``remote_boundary`` (the next offset the bucket does not hold yet) may go, so
        nothing is deleted that is not in the bucket, except segments wholly below the
        log start offset (their records were deleted). The whole log's retention is
        then the remote tier's job.
        """
        if len(self._segments) == 1 and not self._segments[0].size and not self._pending_deletes:
            return 0  # an empty log: nothing to delete (the pass over 10,000 idle ones is cheap)
        self._remove_due_deletes(now_ms)
        remote = self._config.remote_storage_enable
        deleted = 0
        while True:
            segment = self._segments[0]
            reason = self._retention_reason(segment, now_ms, local=remote)
            if reason is None:
                break
            upper = self._bases[1] if len(self._segments) > 1 else self.log_end_offset
            if upper > self._high_watermark:
                break
            # records below the log start are deleted (DeleteRecords): the bucket need
            # not hold them first
            below_start = upper <= self._log_start_offset
            if remote and not below_start and (remote_boundary is None or upper > remote_boundary):
                break
            if segment is self._segments[-1]:
                if segment.size == 0:
                    break
                self.roll(now_ms)
            self._delete_segment(segment, now_ms, reason)
            deleted += 1
        if deleted:
            self.maybe_increment_log_start_offset(self._bases[0])
            self._delete_stale_snapshots()
        return deleted

    @owner_only
    def local_retention_waits_for_remote(self, now_ms: int, remote_boundary: int | None) -> bool:
        """Whether local retention would delete the oldest segment of this tiered log but
        the bucket does not hold it yet, as far as ``remote_boundary`` says (a follower's
        cue to read the manifest again)."""
        if not self._config.remote_storage_enable or len(self._segments) < 2:
            return False
        upper = self._bases[1]
        if upper > self._high_watermark or (remote_boundary is not None and upper <= remote_boundary):
            return False
        return self._retention_reason(self._segments[0], now_ms, local=True) is not None

    def _delete_stale_snapshots(self) -> None:
        """Producer snapshots below the first segment go with it; the newest always stays."""
        offsets = self._producer_state.snapshot_offsets()
        keep_from = min(self._bases[0], offsets[-1]) if offsets else self._bases[0]
        self._producer_state.delete_snapshots_below(keep_from)

    def _retention_reason(self, segment: LogSegment, now_ms: int, *, local: bool = False) -> str | None:
        config = self._config
        upper = self._bases[1] if len(self._segments) > 1 else self.log_end_offset
        if upper <= self._log_start_offset and segment.size > 0:
            return f"log start offset {self._log_start_offset} breach"
        if not local and not config.delete:
            return None  # cleanup.policy=compact: the cleaner bounds the log, not time or size
        retention_ms, retention_bytes = config.retention_ms, config.retention_bytes
        ms_name, bytes_name = "retention.ms", "retention.bytes"
        if local:
            if config.local_retention_ms != -2:
                retention_ms, ms_name = config.local_retention_ms, "local.retention.ms"
            if config.local_retention_bytes != -2:
                retention_bytes, bytes_name = config.local_retention_bytes, "local.retention.bytes"
        if retention_ms >= 0 and now_ms - segment.largest_timestamp > retention_ms:
            return f"{ms_name} {retention_ms} breach"
        if retention_bytes >= 0 and self.size_in_bytes - segment.size >= retention_bytes:
            return f"{bytes_name} {retention_bytes} breach"
        return None

    def _delete_segment(self, segment: LogSegment, now_ms: int, reason: str) -> None:
        _log.info("%s: deleting segment %s due to %s", self.name, segment.log_path.name, reason)
        del self._segments[0]
        del self._bases[0]
        segment.delete()
        self._pending_deletes.append((now_ms + self._config.file_delete_delay_ms, segment))
        self._changed()
        self._remove_due_deletes(now_ms)

    def _remove_due_deletes(self, now_ms: int) -> None:
        """Unlink the segments whose ``file.delete.delay.ms`` has passed.

        With a scheduler this runs on the flush thread, never on the caller's (the
        broker's event loop): unlinking a segment frees its page-cache pages, and the
        batch a tiering round dropped ``file.delete.delay.ms`` earlier (hundreds of
        MB) held the event loop for over 100 ms, as did waiting here for queued
        fsyncs. The flush thread runs jobs in order, so the fsyncs queued before the
        removal (which may still name these descriptors) are done by then.
        """
        due = [s for when, s in self._pending_deletes if when <= now_ms]
        if not due:
            return
        self._pending_deletes = [(w, s) for w, s in self._pending_deletes if w > now_ms]
        self._submit(lambda: self._remove_files(due))

    @owner_only
    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset (DeleteRecords, tiering); never beyond the high watermark."""
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self.name} to {offset}, "
                f"beyond the high watermark {self._high_watermark}"
            )
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self._leader_epoch_cache.truncate_from_start(offset)
        self._changed()
        return True

    # ------------------------------------------------------------------ cleaning

    @property
    def closed(self) -> bool:
        return self._closed

    @owner_only
    def cleaning_view(self) -> LogCleaningView:
        """What the cleaner needs, as of now (call on the owner thread; see ADR 0019)."""
        sealed = self._segments[:-1]
        segments = tuple(
            CleanableSegment(
                segment=seg,
                base_offset=seg.base_offset,
                upper=self._bases[i + 1],
                size=seg.size,
                index_bytes=seg.offset_index.size_in_bytes + seg.time_index.size_in_bytes,
                log_path=seg.log_path,
                largest_timestamp=seg.largest_timestamp,
                txn_entries=tuple(seg.txn_index.entries),
            )
            for i, seg in enumerate(sealed)
        )
        producers = self._producer_state.producers
        last_records = {
            pid: LastRecord(entry.last_data_offset if entry.last_data_offset >= 0 else None,
                            entry.producer_epoch)
            for pid, entry in producers.items()
        }
        active = self._segments[-1]
        return LogCleaningView(
            topic=self._topic,
            partition=self._partition,
            dir=self.dir,
            config=self._config,
            log_start_offset=self._log_start_offset,
            last_stable_offset=self.last_stable_offset,
            active_base_offset=active.base_offset,
            active_size=active.size,
            log_end_offset=self.log_end_offset,
            segments=segments,
            active_txn_entries=tuple(active.txn_index.entries),
            last_records=last_records,
        )

    def _holds_run(self, cleaned: LogSegment, replaced: list[LogSegment]) -> int | None:
        """Where ``replaced`` starts among the sealed segments, if they are still there, in order."""
        if self._closed or not replaced or replaced[0].base_offset != cleaned.base_offset:
            return None
        first = next((i for i, seg in enumerate(self._segments) if seg is replaced[0]), None)
        if first is None:
            return None
        last = first + len(replaced)
        if last >= len(self._segments) or any(a is not b for a, b in zip(self._segments[first:last], replaced)):
            return None
        return first

    @owner_only
    def begin_swap(self, cleaned: LogSegment, replaced: list[LogSegment]) -> bool:
        """First half of swapping ``cleaned`` (its files ``*.cleaned``, fsynced) in for
        ``replaced``: rename its files ``*.swap`` (from then on a restart completes the swap).

        On the owner thread. ``replaced`` must still be consecutive sealed segments of this
        log starting at ``cleaned``'s base; otherwise (the log was truncated, deleted or its
        head removed meanwhile) nothing changes and False is returned: the caller removes
        the cleaned files. See :mod:`local_tier.cleaning.swap` and ADR 0019.
        """
        if self._holds_run(cleaned, replaced) is None:
            return False
        cleaned.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(self.dir)
        return True

    @owner_only
    def finish_swap(self, cleaned: LogSegment, replaced: list[LogSegment], now_ms: int | None = None) -> bool:
        """Second half (after :meth:`begin_swap`): the replaced segments are renamed
        ``*.deleted`` and stay open ``file.delete.delay.ms`` for reads in flight, the cleaned
        one takes its final names and their place. False (nothing changed; the caller removes
        the ``*.swap`` files) when the log changed in between."""
        first = self._holds_run(cleaned, replaced)
        if first is None:
            return False
        now = _now_ms() if now_ms is None else now_ms
        for segment in replaced:
            segment.delete()
            self._pending_deletes.append((now + self._config.file_delete_delay_ms, segment))
        cleaned.change_suffix(SWAP_SUFFIX, "")
        fsync_dir(self.dir)
        self._segments[first : first + len(replaced)] = [cleaned]
        self._bases[first : first + len(replaced)] = [cleaned.base_offset]
        self._changed()
        _log.info(
            "%s: swapped in cleaned segment %s (%d bytes) for %d segment(s) of %d bytes",
            self.name, cleaned.log_path.name, cleaned.size, len(replaced),
            sum(seg.size for seg in replaced),
        )
        self._remove_due_deletes(now)
        return True

    # ------------------------------------------------------------------ lifecycle

    @owner_only
    def close(self) -> None:
        """Close every file (idempotent), on the flush thread after the fsyncs queued there:
        the caller (the event loop) does not wait for them."""
        if (job := self.close_job()) is not None:
            self._submit(job)

    @owner_only
    def close_job(self) -> Callable[[], None] | None:
        """:meth:`close` for a caller closing many logs: the log is closed now, and the
        returned job (None: it was already) closes its files; the caller runs it on the
        flush thread after the jobs queued there (one submit for many logs: each submit
        is a round trip of the interpreter lock with the flush thread)."""
        if self._closed:
            return None
        self._closed = True
        self._leader_epoch_cache.release(self.log_end_offset)
        live = list(self._segments)
        doomed = [segment for _, segment in self._pending_deletes]
        self._pending_deletes.clear()

        def job() -> None:
            for segment in live:
                segment.close()
            self._remove_files(doomed)

        return job

    @owner_only
    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _owner_label(self) -> str:
        return f"Log({self.name})"

    def __repr__(self) -> str:
        return (
            f"Log({self.name}, log_start_offset={self._log_start_offset}, "
            f"high_watermark={self._high_watermark}, log_end_offset={self._segments[-1].next_offset})"
        )


def _max_timestamp_record(segment: LogSegment) -> tuple[int, int]:
    """``(offset, timestamp)`` of the first record holding ``segment``'s max timestamp.

    The segment (like Kafka's time index) knows the batch of its max timestamp, not
    the record: ListOffsets -3 answers that record's offset, as Kafka does since 3.8
    (KAFKA-16310), so the batch is read and decoded here.
    """
    wanted = segment.max_timestamp
    region = segment.read(segment.offset_of_max_timestamp, 1, min_one_message=True)
    if region is not None and region.length:
        data = region.read_bytes()
        for pos, header in iter_batches(data):
            if header.max_timestamp != wanted:
                continue
            for record in decode_batch(data, pos)[1]:
                if record.timestamp == wanted:
                    return record.offset, wanted
    return segment.offset_of_max_timestamp, wanted
