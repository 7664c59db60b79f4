"""The log cleaner: its threads, which log to clean next, the checkpoint (Kafka's
``LogCleaner`` + ``LogCleanerManager``).

``log.cleaner.threads`` daemon threads each loop: take the *filthiest* compacted
log (the highest dirty ratio above its ``min.cleanable.dirty.ratio``, or one whose
``max.compaction.lag.ms`` has passed), clean it (:func:`.local.clean_log`),
record the new first dirty offset in ``cleaner-offset-checkpoint`` (Kafka's
file and format, one per log directory), and back off
``log.cleaner.backoff.ms`` when there is nothing to do. One log is cleaned by
one thread at a time. A log whose cleaning fails unexpectedly (a corrupt batch)
is marked uncleanable until the next start, as in Kafka; a log that changed
under the cleaner (deleted, truncated) is simply tried again later. A pass that
fails on the file system (ENOSPC, EIO: the disk, not the data) is retried after a
back-off that doubles from ``log.cleaner.backoff.ms`` up to ``MAX_RETRY_BACKOFF_S``,
so a compacted log is cleaned again once space returns, without a restart (issue #36).

The threads read a log's state only through ``owner`` (the log's owner thread,
the broker's event loop), which also performs the swaps. ``throttler`` is shared:
``log.cleaner.io.max.bytes.per.second`` bounds the reads and writes of all
threads together, and of the remote cleaner's passes when the broker hands it the
same :class:`Throttler`.

Thread-safety: the public methods may be called from any thread; the progress
and checkpoint maps are guarded by one lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from common.errors import KafkaStorageError
from local_tier.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from local_tier.cleaning.cleaner import CleanerIO, CleaningAborted
from local_tier.cleaning.local import CleanableRange, Owner, clean_log, cleanable_range
from local_tier.cleaning.offset_map import OffsetMap
from local_tier.cleaning.view import LogCleaningView

if TYPE_CHECKING:
    from local_tier.log import Log

__all__ = [
    "CLEANER_CHECKPOINT",
    "CleanerConfig",
    "LogCleaner",
    "LogCleanerProgress",
    "Throttler",
    "pause_for_tests",
]

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
_log = logging.getLogger("strata.cleaner")
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings (Kafka's names and defaults)."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 1024 * 1024
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = float("inf")
    backoff_ms: int = 15_000
    #: tests only: stop at these named points of a pass (see :meth:`LogCleaner._pause`)
    test_pause_points: frozenset[str] = frozenset()


def pause_for_tests(points: frozenset[str], log_dir: Path, point: str, stop: threading.Event) -> None:
    """Tests only (``log.cleaner.test.pause.at``): at a listed point, write
    ``cleaner-paused-<point>`` in the log directory and wait: until the test deletes
    that file (the pass goes on), or the cleaner stops (the pass is given up). A test
    may also kill the broker there."""
    if point not in points:
        return
    marker = log_dir / f"cleaner-paused-{point}"
    marker.write_text(str(time.time()))
    _log.warning("log cleaner paused at %r (log.cleaner.test.pause.at)", point)
    while marker.exists():
        if stop.wait(0.05):
            raise CleaningAborted("paused for a test")
    _log.warning("log cleaner resumed at %r", point)


class Throttler:
    """Kafka's ``Throttler``: callers report the bytes they read or wrote, and sleep so that
    all of them together stay under ``rate`` bytes per second, measured over windows of at
    least ``check_s`` (Kafka's 300 ms).

    One instance is a broker's whole cleaner I/O budget
    (``log.cleaner.io.max.bytes.per.second``): the log cleaner's threads and the remote
    cleaner share it. A window's bytes are paid for up to ``start + bytes / rate``; the next
    window starts there, not when the excess was noticed, so a caller reporting bytes while
    another sleeps out the budget waits until that time too and two callers never spend
    the same stretch of time twice. ``observed_bytes`` and ``throttled_s`` count everything
    reported and slept. Thread-safe.
    """

    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        check_s: float = 0.3,
    ) -> None:
        self.rate = rate
        self.check_s = check_s
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._start = clock()
        self._bytes = 0
        self.observed_bytes = 0
        self.throttled_s = 0.0

    def __call__(self, nbytes: int) -> None:
        if self.rate == float("inf"):
            return
        with self._lock:
            self.observed_bytes += nbytes
            self._bytes += nbytes
            now = self._clock()
            elapsed = now - self._start
            if elapsed < 0:  # the budget is spent until _start: wait with the caller sleeping it out
                delay = -elapsed
            elif elapsed < self.check_s:
                return
            else:
                delay = self._bytes / self.rate - elapsed
                self._start, self._bytes = now + max(0.0, delay), 0
            if delay <= 0:
                return
            self.throttled_s += delay
        self._sleep(delay)


@dataclass(slots=True)
class LogCleanerProgress:
    """What the admin API and metrics show of one log's cleaning."""

    checkpoint: int | None = None  # the first offset not yet cleaned (None: never cleaned)
    dirty_ratio: float = 0.0
    cleanable_bytes: int = 0
    state: str = "idle"  # idle | cleaning | uncleanable | retrying (a file-system failure)
    passes: int = 0
    last_run_ms: int = 0
    last_duration_ms: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    error: str | None = None


@dataclass(slots=True)
class _Totals:
    passes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    last_run_ms: int = 0
    max_dirty_ratio: float = 0.0
    aborted: int = 0
    progress: dict[TopicPartition, LogCleanerProgress] = field(default_factory=dict)


#: the longest wait between passes of a log whose cleaning failed on the file system
MAX_RETRY_BACKOFF_S = 300.0


@dataclass(slots=True)
class _Retry:
    """A log whose last pass failed on the file system: when it may run again."""

    failures: int
    not_before: float  # time.monotonic()


class LogCleaner:
    """Compacts the compacted logs of one log directory (see the module docstring).

    ``logs()`` returns the directory's logs (called on any thread: it must return a
    copy); ``limit(log)`` is the offset its cleaning stops before, None for none (the broker
    gives a tiered log's first offset not yet in the bucket: the uploader reads the
    segments past it as they are, ADR 0019). ``compacted()`` (default: ``logs()``), called on
    the owner, returns at least the compacted logs: each pass looks at those only, so an idle
    broker's passes cost nothing per log that is not compacted.
    """

    def __init__(
        self,
        log_dir: Path,
        logs: Callable[[], Mapping[TopicPartition, Log]],
        owner: Owner,
        config: CleanerConfig,
        *,
        limit: Callable[[Log], int | None] = lambda log: None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        throttler: Throttler | None = None,
        compacted: Callable[[], Mapping[TopicPartition, Log]] | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.config = config
        self._logs = logs
        self._compacted = logs if compacted is None else compacted
        self._owner = owner
        self._limit = limit
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._in_progress: set[TopicPartition] = set()
        self._uncleanable: set[TopicPartition] = set()
        self._retries: dict[TopicPartition, _Retry] = {}
        self._checkpoints = read_offset_checkpoint(log_dir / CLEANER_CHECKPOINT)
        self._totals = _Totals()
        self._stop = threading.Event()
        self._wake = threading.Event()
        #: the cleaner threads by index; thread ``i`` runs while ``i < config.threads``
        self._threads: dict[int, threading.Thread] = {}
        #: the I/O budget, shared with whatever else the broker gives it to (the remote cleaner)
        self.throttler = throttler if throttler is not None else Throttler(config.io_max_bytes_per_second)
        self._map_bytes = max(1, config.dedupe_buffer_size // max(1, config.threads))

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        if not self.config.enable or self._threads:
            return
        with self._lock:
            self._start_missing()

    def _start_missing(self) -> None:
        """Start the threads ``config.threads`` asks for that are not running (lock held)."""
        for i in range(self.config.threads):
            if i not in self._threads:
                thread = threading.Thread(target=self._run, args=(i,), name=f"strata-log-cleaner-{i}", daemon=True)
                self._threads[i] = thread
                thread.start()

    def reconfigure(self, config: CleanerConfig) -> None:
        """New settings at run time (Kafka's ``LogCleaner.reconfigure``, dynamic ``log.cleaner.*``
        broker configs): the I/O rate and the next round's buffers and back-off at once; added
        threads start now, and threads beyond the new count stop after their round. Never
        blocks on a round: callable on the event loop."""
        with self._lock:
            self.config = config
            self._map_bytes = max(1, config.dedupe_buffer_size // max(1, config.threads))
            self.throttler.rate = config.io_max_bytes_per_second
            if config.enable and self._threads and not self._stop.is_set():
                self._start_missing()
        self._wake.set()  # a sleeping thread takes the new back-off, or leaves

    def shutdown(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(timeout_s)
        self._threads.clear()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def wake(self) -> None:
        """Look for work now instead of after the back-off."""
        self._wake.set()

    def _leaves(self, index: int) -> bool:
        """Whether thread ``index`` stops now (shutdown, or fewer threads configured)."""
        with self._lock:
            if self._stop.is_set() or index >= self.config.threads:
                self._threads.pop(index, None)
                return True
            return False

    def _run(self, index: int) -> None:
        while not self._leaves(index):
            try:
                cleaned = self.clean_filthiest()
            except Exception:  # a broken round must not stop the thread
                _log.exception("log cleaner round failed")
                cleaned = False
            if not cleaned:
                self._wake.wait(self.config.backoff_ms / 1000)
                self._wake.clear()

    # -- one round -----------------------------------------------------------------

    def clean_filthiest(self) -> bool:
        """Clean the filthiest log, if one is due; True when a log was cleaned."""
        chosen = self._grab_filthiest()
        if chosen is None:
            return False
        log, view, cleanable = chosen
        key = (view.topic, view.partition)
        started = time.monotonic()
        now = self._clock_ms()
        progress = self._progress(key)
        progress.state = "cleaning"
        io = CleanerIO(
            chunk_bytes=self.config.io_buffer_size,
            throttle=self.throttler,
            check_done=lambda: self._check_done(log),
            pause=self._pause,
        )
        try:
            outcome = clean_log(
                log, view, cleanable, owner=self._owner, offset_map=OffsetMap(self._map_bytes), io=io,
                now_ms=now, load_factor=self.config.io_buffer_load_factor,
            )
        except (CleaningAborted, FileNotFoundError) as exc:
            _log.info("cleaning of %s stopped: %s", view.name, exc)
            with self._lock:
                self._totals.aborted += 1
            progress.state = "idle"
            return False
        except (OSError, KafkaStorageError) as exc:  # the disk, not the data: full, or failing for now
            delay = self._retry_later(key)
            _log.warning("cleaning of %s failed on the file system (%s); it is tried again in %.1f s",
                         view.name, exc, delay)
            progress.state, progress.error = "retrying", str(exc)
            return False
        except Exception as exc:
            _log.exception("cleaning of %s failed; it is left uncleaned until the next start", view.name)
            with self._lock:
                self._uncleanable.add(key)
            progress.state, progress.error = "uncleanable", str(exc)
            return False
        finally:
            with self._lock:
                self._in_progress.discard(key)
        self._done_cleaning(key, outcome.end_offset)
        with self._lock:
            self._retries.pop(key, None)
        elapsed_ms = int((time.monotonic() - started) * 1000)
        with self._lock:
            totals = self._totals
            totals.passes += 1
            totals.bytes_read += outcome.bytes_read + outcome.map_bytes_read
            totals.bytes_written += outcome.bytes_written
            totals.last_run_ms = now
            progress.passes += 1
            progress.last_run_ms, progress.last_duration_ms = now, elapsed_ms
            progress.bytes_read += outcome.bytes_read + outcome.map_bytes_read
            progress.bytes_written += outcome.bytes_written
            progress.state = "idle"
            progress.error = None
        _log.info(
            "cleaned %s: offsets up to %d, %d group(s), %.1f MB read, %.1f MB written in %d ms",
            view.name, outcome.end_offset, outcome.groups,
            (outcome.bytes_read + outcome.map_bytes_read) / 1e6, outcome.bytes_written / 1e6, elapsed_ms,
        )
        return True

    def _retry_later(self, key: TopicPartition) -> float:
        """Note a pass of ``key`` that failed on the file system; seconds until the next."""
        with self._lock:
            failures = self._retries[key].failures + 1 if key in self._retries else 1
            delay = min(MAX_RETRY_BACKOFF_S, self.config.backoff_ms / 1000 * 2 ** (failures - 1))
            self._retries[key] = _Retry(failures, time.monotonic() + delay)
        return delay

    def _grab_filthiest(self) -> tuple[Log, LogCleaningView, CleanableRange] | None:
        with self._lock:
            now_s = time.monotonic()
            waiting = {key for key, retry in self._retries.items() if retry.not_before > now_s}
            skip = self._in_progress | set(self._uncleanable) | waiting

        def compacted_views() -> list[tuple[Log, LogCleaningView, int | None]]:
            """On the owner thread: the views of the compacted logs to consider, with their limits."""
            return [
                (log, log.cleaning_view(), self._limit(log))
                for key, log in self._compacted().items()
                if key not in skip and not log.closed and log.config.compact
            ]

        views: list[tuple[Log, LogCleaningView, int | None]] = self._owner(compacted_views)
        if not views:
            return None
        now = self._clock_ms()
        candidates = []
        for log, view, limit in views:
            key = (view.topic, view.partition)
            cleanable = cleanable_range(view, self.checkpoint(key), now, limit=limit)
            progress = self._progress(key)
            progress.dirty_ratio, progress.cleanable_bytes = cleanable.dirty_ratio, cleanable.cleanable_bytes
            if cleanable.total_bytes == 0:
                continue
            due = cleanable.dirty_ratio > view.config.min_cleanable_dirty_ratio or (
                cleanable.need_compaction_now and cleanable.cleanable_bytes > 0
            )
            candidates.append((cleanable.dirty_ratio, due, log, view, cleanable))
        with self._lock:
            self._totals.max_dirty_ratio = max((c[0] for c in candidates), default=0.0)
            ready = [c for c in candidates if c[1] and (c[3].topic, c[3].partition) not in self._in_progress]
            if not ready:
                return None
            _, _, log, view, cleanable = max(ready, key=lambda c: c[0])
            self._in_progress.add((view.topic, view.partition))
        return log, view, cleanable

    def _check_done(self, log: Log) -> None:
        if self._stop.is_set():
            raise CleaningAborted("the cleaner is shutting down")
        if log.closed:
            raise CleaningAborted(f"{log.name} was closed")

    def _pause(self, point: str) -> None:
        pause_for_tests(self.config.test_pause_points, self.log_dir, point, self._stop)

    # -- checkpoints and progress -------------------------------------------------------

    def checkpoint(self, key: TopicPartition) -> int | None:
        with self._lock:
            return self._checkpoints.get(key)

    def _done_cleaning(self, key: TopicPartition, end_offset: int) -> None:
        try:  # which logs still exist, read on their owner (never under self._lock: the loop takes it)
            live: set[TopicPartition] | None = set(self._owner(lambda: list(self._logs())))
        except CleaningAborted:
            live = None  # shutting down: write the checkpoint as it is
        with self._lock:
            self._checkpoints[key] = end_offset
            self._progress_locked(key).checkpoint = end_offset
            self._write_checkpoints_locked(live)

    def forget(self, topic: str, partition: int | None = None) -> None:
        """A deleted topic's logs (or one partition's: ``partition``) leave the checkpoint (its
        next write) and what the cleaner remembers of them, so a log created again under the
        name starts clean: not uncleanable, not "cleaned up to" the old log's offset."""
        def gone(key: TopicPartition) -> bool:
            return key[0] == topic and (partition is None or key[1] == partition)

        with self._lock:
            for key in [k for k in self._checkpoints if gone(k)]:
                del self._checkpoints[key]
            for key in [k for k in self._totals.progress if gone(k)]:
                del self._totals.progress[key]
            self._uncleanable = {k for k in self._uncleanable if not gone(k)}
            self._retries = {k: r for k, r in self._retries.items() if not gone(k)}

    def _write_checkpoints_locked(self, live: set[TopicPartition] | None) -> None:
        """The checkpoint file, less the logs not in ``live`` (all kept when None)."""
        entries = {k: v for k, v in self._checkpoints.items() if live is None or k in live}
        try:
            write_offset_checkpoint(self.log_dir / CLEANER_CHECKPOINT, entries)
        except OSError as exc:  # the next pass writes it again; a stale one only re-cleans
            _log.warning("%s: cannot write %s: %s", self.log_dir, CLEANER_CHECKPOINT, exc)

    def _progress(self, key: TopicPartition) -> LogCleanerProgress:
        with self._lock:
            return self._progress_locked(key)

    def _progress_locked(self, key: TopicPartition) -> LogCleanerProgress:
        progress = self._totals.progress.get(key)
        if progress is None:
            progress = self._totals.progress[key] = LogCleanerProgress(self._checkpoints.get(key))
        return progress

    def progress(self, topic: str, partition: int) -> LogCleanerProgress | None:
        """A copy of one log's progress (None: the cleaner has not looked at it)."""
        with self._lock:
            found = self._totals.progress.get((topic, partition))
            return None if found is None else LogCleanerProgress(**{
                name: getattr(found, name) for name in LogCleanerProgress.__dataclass_fields__
            })

    def totals(self) -> dict[str, float]:
        """Counters for the metrics: passes, bytes, the last run, the dirtiest ratio."""
        with self._lock:
            t = self._totals
            return {
                "passes": t.passes,
                "bytes_read": t.bytes_read,
                "bytes_written": t.bytes_written,
                "last_run_ms": t.last_run_ms,
                "max_dirty_ratio": t.max_dirty_ratio,
                "aborted": t.aborted,
                "uncleanable_partitions": len(self._uncleanable),
                "retrying_partitions": len(self._retries),
                "throttled_seconds": self.throttler.throttled_s,
            }
