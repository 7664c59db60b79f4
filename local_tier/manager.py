"""LogManager: every partition log under one log directory, plus its checkpoints."""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from local_tier.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    fsync_dir,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from local_tier.cleaning.local import Owner
from local_tier.cleaning.manager import CleanerConfig, LogCleaner, Throttler
from local_tier.config import LogConfig
from local_tier.dir_failure import LogDirFailure, is_disk_full
from local_tier.log import DEFAULT_PRODUCER_ID_EXPIRATION_MS, Log
from local_tier.offset_files import OffsetFile, TopicPartition, succeeded
from local_tier.ownership import Owned, owner_only
from local_tier.shutdown import flush_and_close

__all__ = ["CLEAN_SHUTDOWN_FILE", "LogManager", "parse_log_dir_name"]

CLEAN_SHUTDOWN_FILE = ".strata_cleanshutdown"
_DELETE_SUFFIX = "-delete"
_log = logging.getLogger("strata.local_tier")


def parse_log_dir_name(name: str) -> tuple[str, int] | None:
    """``"my.topic-name-3"`` → ``("my.topic-name", 3)``; None when it is not a partition dir."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


#: the delete thread's pause between directories: it gives the GIL back, so the event loop
#: is never queued behind a long run of removals (a deleted topic's space comes back a little
#: later, about a second per 1,000 partitions)
_DELETE_PAUSE_S = 0.001


def _remove_dirs(paths: list[Path]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
        time.sleep(_DELETE_PAUSE_S)


class LogManager(Owned):
    """Owns the :class:`Log` of every partition in ``log_dir``.

    Files it holds: the partition directories, ``recovery-point-offset-checkpoint``,
    ``log-start-offset-checkpoint`` and the clean-shutdown marker
    ``.strata_cleanshutdown``, which exists only between :meth:`shutdown` and the
    next :meth:`load` (so a crash after loading means recovery at the next start).

    A full disk: a checkpoint that cannot be written is skipped with a warning
    (the old one stays; stale recovery points only make recovery re-validate
    more), and :meth:`shutdown` then leaves no clean-shutdown marker, so the
    next start validates the logs instead of trusting stale checkpoints.

    A failing disk (:attr:`failure`, :mod:`local_tier.dir_failure`): a failed fsync
    or a failed write other than a full disk takes the directory offline; nothing
    is written there any more (no flush, checkpoint, retention or marker), and the
    next start recovers every log.

    Thread-safety: not thread-safe: called on the broker's event loop thread. It
    owns one flush thread (a single-worker executor) that runs the fsyncs that
    follow a segment roll, a flush.ms or flush.messages flush, the checkpoint
    writes and the closing of logs, so the loop never waits on the disk for them.
    """

    def __init__(self, log_dir: Path, *, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self._init_owner()
        self.log_dir = log_dir
        self.producer_id_expiration_ms = producer_id_expiration_ms
        log_dir.mkdir(parents=True, exist_ok=True)
        self._logs: dict[tuple[str, int], Log] = {}
        self._checkpoint_failing = False  # read and written on the flush thread only
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-log-flush")
        self._last_checkpoint: Future[bool] | None = None
        self.failure = LogDirFailure(log_dir)
        #: removes deleted partitions' renamed directories (the process waits for it at exit)
        self._deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-log-delete")
        #: deleted logs not closed and renamed yet (:meth:`retire`), then their renamed dirs
        self._retiring: dict[tuple[str, int], Log] = {}
        self._doomed: list[Path] = []
        self.cleaner: LogCleaner | None = None
        #: told ``(topic, partition)`` on the owner after a log rolled a segment, or changed
        self.roll_listeners: list[Callable[[str, int], None]] = []
        self.change_listeners: list[Callable[[str, int], None]] = []
        self._recovery_points = OffsetFile(RECOVERY_POINT_CHECKPOINT, lambda log: log.recovery_point,
                                            unsettled=lambda log: log.flush_in_flight)
        self._start_offsets = OffsetFile(LOG_START_OFFSET_CHECKPOINT, lambda log: log.log_start_offset)
        self._high_watermark_file = OffsetFile(REPLICATION_OFFSET_CHECKPOINT, lambda log: log.high_watermark)
        self._offset_files = (self._recovery_points, self._start_offsets, self._high_watermark_file)
        #: the compacted logs (``cleanup.policy`` has compact): the cleaners' passes look at
        #: these only, not at every log of the directory
        self._compacted: dict[TopicPartition, Log] = {}
        #: how many logs each topic has here
        self._topic_logs: Counter[str] = Counter()

    @owner_only
    def start_cleaner(
        self, owner: Owner, config: CleanerConfig, limit: Callable[[Log], int | None] = lambda log: None,
        throttler: Throttler | None = None,
    ) -> LogCleaner:
        """Start the log cleaner of this directory (``log.cleaner.enable``; ADR 0019).

        ``owner`` runs a function on the thread that owns the logs (the broker's
        event loop) and returns its result; ``limit`` bounds a log's cleaning (see LogCleaner);
        ``throttler`` is the I/O budget it draws from (its own when None).
        """
        if self.cleaner is None:
            self.cleaner = LogCleaner(self.log_dir, self.all_logs, owner, config, limit=limit,
                                      throttler=throttler, compacted=self.compacted_logs)
            self.cleaner.start()
        return self.cleaner

    @owner_only
    def load(self, config_for: Callable[[str], LogConfig]) -> None:
        """Open every partition dir; recover from the checkpointed recovery points after a crash."""
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = read_offset_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = read_offset_checkpoint(self.log_dir / LOG_START_OFFSET_CHECKPOINT)
        hw_path = self.log_dir / REPLICATION_OFFSET_CHECKPOINT
        # a data dir written before high watermarks were checkpointed: every log's
        # high watermark is its log end, as it was then
        high_watermarks = read_offset_checkpoint(hw_path) if hw_path.exists() else None
        has_logs = any(p.is_dir() for p in self.log_dir.iterdir())
        if not clean and has_logs:
            _log.warning(
                "%s: no clean shutdown marker; recovering unflushed segments", self.log_dir
            )
        for path in sorted(self.log_dir.iterdir()):
            if not path.is_dir():
                continue
            if path.name.endswith(_DELETE_SUFFIX):
                _log.info("removing partition directory %s left over from a delete", path.name)
                shutil.rmtree(path, ignore_errors=True)
                continue
            parsed = parse_log_dir_name(path.name)
            if parsed is None:
                _log.warning("ignoring %s: not a <topic>-<partition> directory", path)
                continue
            topic, partition = parsed
            self._add(parsed, Log(
                path,
                topic,
                partition,
                config_for(topic),
                recovery_point=recovery_points.get(parsed, 0),
                needs_recovery=not clean,
                log_start_offset=start_offsets.get(parsed),
                high_watermark=None if high_watermarks is None else high_watermarks.get(parsed, 0),
                scheduler=self._executor,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
                failure=self.failure,
                on_roll=self._rolled,
                on_change=self._changed,
            ))
        if clean:
            marker.unlink()
            fsync_dir(self.log_dir)

    def _rolled(self, log: Log) -> None:
        for listener in self.roll_listeners:
            listener(log.topic, log.partition)

    def _changed(self, log: Log) -> None:
        """On the owner, after ``log`` changed: the checkpoints look at it at their next pass."""
        key = (log.topic, log.partition)
        for offsets in self._offset_files:
            offsets.dirty.add(key)
        for listener in self.change_listeners:
            listener(*key)

    def _add(self, key: TopicPartition, log: Log) -> None:
        self._logs[key] = log
        self._topic_logs[key[0]] += 1
        self._index(key, log)
        self._changed(log)

    def _drop(self, key: TopicPartition) -> Log | None:
        """Take ``key``'s log out of the manager (its checkpoint entries go at the next pass)."""
        log = self._logs.pop(key, None)
        if log is not None:
            self._topic_logs[key[0]] -= 1
            if not self._topic_logs[key[0]]:
                del self._topic_logs[key[0]]
            self._compacted.pop(key, None)
            self._changed(log)
        return log

    def _index(self, key: TopicPartition, log: Log) -> None:
        if log.config.compact:
            self._compacted[key] = log
        else:
            self._compacted.pop(key, None)

    @property
    def offline(self) -> bool:
        """The log directory failed: every partition on it is offline on this broker."""
        return self.failure.offline

    @owner_only
    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    @owner_only
    def get_or_create_log(self, topic: str, partition: int, config: LogConfig) -> Log:
        """The partition's log, created empty in ``<topic>-<partition>/`` when missing;
        KafkaStorageError when it is missing and the directory is offline."""
        log = self._logs.get((topic, partition))
        if log is None:
            self.failure.check(f"{topic}-{partition}")
            self._settle((topic, partition))
            log = Log(
                self.log_dir / f"{topic}-{partition}",
                topic,
                partition,
                config,
                needs_recovery=False,
                scheduler=self._executor,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
                failure=self.failure,
                on_roll=self._rolled,
                on_change=self._changed,
            )
            self._add((topic, partition), log)
        return log

    @owner_only
    def all_logs(self) -> dict[tuple[str, int], Log]:
        return dict(self._logs)

    @owner_only
    def compacted_logs(self) -> dict[TopicPartition, Log]:
        """The logs whose ``cleanup.policy`` has compact (a copy): what the cleaners look at."""
        return dict(self._compacted)

    @owner_only
    def hosted_topics(self) -> Collection[str]:
        """The topics with a log here (a live view: read it on the owner)."""
        return self._topic_logs.keys()

    @owner_only
    def update_config(self, topic: str, config: LogConfig) -> None:
        for key, log in self._logs.items():
            if key[0] == topic:
                log.update_config(config)
                self._index(key, log)

    @owner_only
    def delete_logs(self, topic: str) -> None:
        """Close the topic's logs, rename each dir to ``<dir>.<uuid>-delete``, then remove it."""
        for key in [key for key in self._logs if key[0] == topic]:
            if (doomed := self._remove(key)) is not None:
                shutil.rmtree(doomed, ignore_errors=True)
        if self.cleaner is not None:
            self.cleaner.forget(topic)
        self.checkpoint()

    @owner_only
    def delete_log(self, topic: str, partition: int, *, defer: bool = False) -> None:
        """Delete one partition's log (its topic deleted, or moved to another broker); no-op if
        absent. ``defer``: it only leaves the logs now; the caller deletes many and closes and
        renames them with :meth:`retire` a slice at a time, or :meth:`finish_deletes`."""
        log = self._drop((topic, partition))
        if log is not None:
            if self.cleaner is not None:  # a log created again under its name starts clean
                self.cleaner.forget(topic, partition)
            self._retiring[(topic, partition)] = log
            if not defer:
                self.finish_deletes()

    @owner_only
    def retire(self, limit: int) -> bool:
        """Close and rename up to ``limit`` deleted logs; True while more remain. The last one
        finishes the deletes: at 1,000 partitions closing and renaming all at once held the
        event loop 90 ms, and the ``rmtree`` and a checkpoint per partition 5.7 s."""
        jobs = []
        for key in list(self._retiring)[:limit]:
            log = self._retiring.pop(key)
            if (job := log.close_job()) is not None:
                jobs.append(job)
            self._retire_one(log)
        if jobs:
            self._executor.submit(_run_all, jobs)
        if self._retiring:
            return True
        self.finish_deletes()
        return False

    @owner_only
    def finish_deletes(self) -> None:
        """Close and rename every deleted log, checkpoint without them, then remove their
        directories on the delete thread, off the caller's loop."""
        while self._retiring:
            self._retire_one(self._retiring.popitem()[1])
        if not self._doomed:
            return
        doomed, self._doomed = self._doomed, []
        self.checkpoint()
        self._deleter.submit(_remove_dirs, doomed)

    def _settle(self, key: tuple[str, int]) -> None:
        """A log of ``key`` is about to be opened again: its deleted predecessor's directory
        must be renamed away first."""
        if key in self._retiring:
            self._retire_one(self._retiring.pop(key))

    def _retire_one(self, log: Log) -> None:
        if (doomed := self._close_and_rename(log)) is not None:
            self._doomed.append(doomed)

    def _remove(self, key: tuple[str, int]) -> Path | None:
        log = self._drop(key)
        assert log is not None
        return self._close_and_rename(log)

    def _close_and_rename(self, log: Log) -> Path | None:
        """Close the log and rename its dir to ``<dir>.<uuid>-delete``, which a restart removes
        if the process dies before it is gone; the renamed dir (None: the log dir is
        offline, nothing more is written there, and the next start deletes the stray log)."""
        log.close()
        if self.offline:
            return None
        doomed = log.dir.with_name(f"{log.dir.name}.{uuid.uuid4().hex}{_DELETE_SUFFIX}")
        log.dir.rename(doomed)
        return doomed

    @owner_only
    def checkpoint(self) -> Future[bool]:
        """Write the recovery points, log start offsets and high watermarks of every log,
        atomically, on the flush thread (the offsets are taken now, on the loop); a file whose
        entries did not change since its last successful write is not written again.

        The future's result is False, having logged why, when a checkpoint could not
        be written; a caller that answers only once they are durable (DeleteRecords)
        waits for it.
        """
        return self._write_checkpoints(self._offset_files, "the checkpoints")

    @owner_only
    def checkpoint_high_watermarks(self) -> Future[bool]:
        """Write every log's high watermark (``replica.high.watermark.checkpoint.interval.ms``)
        on the flush thread, if one changed: a restarted replica exposes nothing its leader had
        not committed. Its result is False, having logged why, when the file could not be written."""
        return self._write_checkpoints((self._high_watermark_file,), "the high watermarks")

    def _write_checkpoints(self, offset_files: tuple[OffsetFile, ...], what: str) -> Future[bool]:
        """Write the files that are due, in order on the flush thread, after the fsyncs queued
        before (so a recovery point written is one they made true); with none due, whether
        their last writes succeeded."""
        due = [f for f in offset_files if f.refresh(self._logs)]
        if not due:
            return self._written(offset_files)
        files = {f.name: dict(f.entries) for f in due}
        earlier = [f.written for f in offset_files if f not in due and f.written is not None]
        future = self._submit_checkpoints(files, what, earlier)
        for offset_file in due:
            offset_file.written = future
        return future

    def _written(self, offset_files: tuple[OffsetFile, ...]) -> Future[bool]:
        """Whether the last writes of ``offset_files`` succeeded, told on the flush thread after
        them when one is still queued there."""
        writes = [f.written for f in offset_files if f.written is not None]
        if all(w.done() for w in writes):
            result: Future[bool] = Future()
            result.set_result(all(succeeded(w) for w in writes))
            return result
        self._last_checkpoint = future = self._executor.submit(lambda: all(succeeded(w) for w in writes))
        return future

    def _submit_checkpoints(self, files: Mapping[str, Mapping[tuple[str, int], int]], what: str,
                            earlier: list[Future[bool]]) -> Future[bool]:
        """Write ``files`` on the flush thread; its result is also that of the ``earlier``
        writes of the other files asked for, done by then (the thread runs jobs in order)."""
        failure = self.failure

        def job() -> bool:
            if failure.offline:
                return False
            try:
                for name, offsets in files.items():
                    write_offset_checkpoint(self.log_dir / name, offsets)
            except OSError as exc:
                if not is_disk_full(exc):
                    failure.fail(f"writing {what} of {self.log_dir}", exc)
                elif not self._checkpoint_failing:  # once per episode, not every interval
                    self._checkpoint_failing = True
                    _log.warning("%s: cannot write %s (%s); keeping the previous ones",
                                 self.log_dir, what, exc)
                return False
            if self._checkpoint_failing:
                self._checkpoint_failing = False
                _log.info("%s: checkpoints written again", self.log_dir)
            return all(succeeded(w) for w in earlier)

        self._last_checkpoint = future = self._executor.submit(job)
        return future

    @owner_only
    def wait_for_checkpoints(self) -> bool:
        """Block until the checkpoints asked for so far are written (tests, shutdown)."""
        last = self._last_checkpoint
        return True if last is None else last.result()

    @owner_only
    def run_retention(
        self, now_ms: int, remote_boundary: Callable[[str, int], int | None] | None = None
    ) -> int:
        """Apply retention to every log; returns the number of segments deleted.

        ``remote_boundary(topic, partition)`` is the first offset not yet in the
        bucket, for logs with tiered storage (see ``Log.delete_retention_segments``).
        Nothing while the directory is offline.
        """
        if self.offline:
            return 0
        deleted = sum(
            log.delete_retention_segments(
                now_ms,
                remote_boundary=remote_boundary(*tp) if remote_boundary is not None else None,
            )
            for tp, log in self._logs.items()
        )
        if deleted:
            self.checkpoint()
        return deleted

    @owner_only
    def remove_expired_producers(self, now_ms: int) -> int:
        """``producer.id.expiration.ms`` over every log; returns the producers forgotten."""
        return sum(
            log.remove_expired_producers(now_ms, self.producer_id_expiration_ms)
            for log in self._logs.values()
        )

    @owner_only
    def run_flush(self, now_ms: int) -> None:
        """Flush (on the flush thread) every log whose flush.ms has elapsed."""
        if self.offline:
            return
        for log in self._logs.values():
            if now_ms - log.last_flush_ms >= log.config.flush_ms:
                log.schedule_flush(now_ms)

    @owner_only
    def shutdown(self) -> None:
        """Stop the cleaner; finish deleting deleted logs; flush and close all logs,
        checkpoint, and write the
        clean-shutdown marker only if every flush and checkpoint succeeded (after a
        failed fsync the data below the recovery points is not known to be on disk: the
        next start recovers it); stop the flush thread. Waits for the disk: the broker
        calls it last, when it serves nothing any more."""
        if self.cleaner is not None:
            self.cleaner.shutdown()
        self.finish_deletes()
        flushed = flush_and_close(list(self._logs.values()), self.log_dir, self.offline)
        if not flushed or self.offline:
            _log.warning("%s: not every log could be flushed (%s); no clean-shutdown marker: the "
                         "next start recovers the logs", self.log_dir, self.failure.reason)
        elif self.checkpoint().result():
            try:
                (self.log_dir / CLEAN_SHUTDOWN_FILE).touch()
                fsync_dir(self.log_dir)
            except OSError as exc:
                _log.warning("%s: cannot write the clean-shutdown marker (%s); the next start "
                             "recovers the logs", self.log_dir, exc)
        self._executor.shutdown(wait=True)
        self._deleter.shutdown(wait=False)


def _run_all(jobs: list[Callable[[], None]]) -> None:
    """Deleted logs' close jobs, on the flush thread: one failing does not stop the others."""
    for job in jobs:
        try:
            job()
        except Exception:  # noqa: BLE001 - their directories are removed whole anyway
            _log.exception("closing a deleted log's files failed")
