"""The remote cleaner on the broker: when to compact the bucket's part of a compacted tiered
partition, and running the pass off the event loop (ADR 0019).

Every ``log.cleaner.backoff.ms`` it looks at the tiered compacted partitions this
broker leads whose manifest the tiering task has loaded: the remote dirty ratio is
the bytes of the dirty section (bucket segments past the manifest's
``cleaner_offset`` plus the local sealed segments past the bucket's end, up to the
first uncleanable offset) over those plus the bucket's clean bytes; a partition is
due above its ``min.cleanable.dirty.ratio``, or when its oldest dirty record is
older than ``max.compaction.lag.ms``. A due partition's inputs are taken here,
on the loop, and the pass (:func:`remote_tier.compaction.compact_remote`) runs on
the remote-cleaner thread; expired ``replaced`` objects are deleted the same way.
The pass's compare-and-set is fenced by the leader epoch, so a deposed leader
publishes nothing.

Not thread-safe: everything but the passes runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from local_tier.cleaning.cleaner import CleanerIO, CleaningAborted
from local_tier.cleaning.manager import (
    CleanerConfig,
    LogCleanerProgress,
    Throttler,
    pause_for_tests,
)
from local_tier.cleaning.offset_map import OffsetMap
from local_tier.cleaning.view import LogCleaningView
from remote_tier.compaction import RemoteCompactionTask, compact_remote, expire_replaced
from remote_tier.errors import ObjectStoreError, RemoteStorageError
from remote_tier.manifest import PartitionManifest

if TYPE_CHECKING:
    from common.config import BrokerConfig
    from local_tier.log import Log
    from remote_tier.log_manager import RemoteLogManager, TieredLogs

__all__ = ["RemoteCleaner", "RemoteCleanerProgress", "remote_dirty_section"]

log = logging.getLogger("strata.remote_cleaner")


@dataclass(slots=True)
class RemoteCleanerProgress(LogCleanerProgress):
    """The local cleaner's progress, of the bucket's part: ``checkpoint`` is the manifest's
    cleaner offset, ``cleanable_bytes`` the dirty bytes across both tiers; ``state`` may also be
    "failing" (retried at the next round)."""

    replaced_objects_deleted: int = 0


@dataclass(frozen=True, slots=True)
class DirtySection:
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    oldest_dirty_ms: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def remote_dirty_section(manifest: PartitionManifest, view: LogCleaningView, now_ms: int) -> DirtySection:
    """The dirty section across both tiers (see the module docstring)."""
    start = max(manifest.log_start_offset, manifest.segments[0].base_offset if manifest.segments else 0)
    first_dirty = max(start, manifest.cleaner_offset or 0)
    remote_end = manifest.next_offset
    uncleanable = min(view.last_stable_offset, view.active_base_offset)
    lag = max(view.config.min_compaction_lag_ms, 0)
    bounds = [(s.base_offset, s.next_offset, s.max_timestamp) for s in manifest.segments]
    bounds += [(s.base_offset, s.upper, s.largest_timestamp) for s in view.segments if s.base_offset >= remote_end]
    for base, upper, largest in bounds:
        if upper > first_dirty and lag > 0 and largest > now_ms - lag:
            uncleanable = min(uncleanable, base)
        if base <= uncleanable < upper:  # whole segments only
            uncleanable = base
    uncleanable = max(uncleanable, first_dirty)
    clean = sum(s.size_bytes for s in manifest.segments if s.next_offset <= first_dirty)
    dirty_remote = [s for s in manifest.segments if s.next_offset > first_dirty and s.base_offset < uncleanable]
    dirty_local = [s for s in view.segments if remote_end <= s.base_offset < uncleanable]
    oldest = min([s.min_timestamp for s in dirty_remote if s.min_timestamp > 0] or [now_ms])
    return DirtySection(
        first_dirty,
        uncleanable,
        clean,
        sum(s.size_bytes for s in dirty_remote) + sum(s.size for s in dirty_local),
        oldest,
    )


class RemoteCleaner:
    """Schedules remote compaction passes (one partition at a time, one thread)."""

    def __init__(
        self,
        tiering: RemoteLogManager,
        config: BrokerConfig,
        cleaner: CleanerConfig,
        scratch_dir: Path,
        log_dir: Path,
        throttler: Throttler | None = None,
    ) -> None:
        self._tiering = tiering
        self._cleaner = cleaner
        self.enabled = tiering.enabled and cleaner.enable and config.get_bool("remote.log.compaction.enable")
        self.grace_ms = config.get_int("remote.log.compaction.object.retention.ms")
        self.interval_s = max(0.05, cleaner.backoff_ms / 1000)
        self.scratch_dir = scratch_dir
        self.log_dir = log_dir
        self.progress: dict[tuple[str, int], RemoteCleanerProgress] = {}
        #: the broker's cleaner I/O budget (``log.cleaner.io.max.bytes.per.second``), which the
        #: broker hands to the local log cleaner too: both tiers together stay under it
        self.throttler = throttler if throttler is not None else Throttler(cleaner.io_max_bytes_per_second)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-remote-cleaner")
        self._stop = threading.Event()
        self._busy: set[tuple[str, int]] = set()
        shutil.rmtree(scratch_dir, ignore_errors=True)  # a pass a crash interrupted

    def reconfigure(self, cleaner: CleanerConfig) -> None:
        """Dynamic ``log.cleaner.*`` broker configs: the I/O budget at once, the next pass's
        buffers and back-off."""
        self._cleaner = cleaner
        self.interval_s = max(0.05, cleaner.backoff_ms / 1000)
        self.throttler.rate = cleaner.io_max_bytes_per_second

    def close(self) -> None:
        self._stop.set()
        self._executor.shutdown(wait=True, cancel_futures=True)

    async def run(self, broker: TieredLogs) -> None:
        if not self.enabled:
            return
        while not self._stop.is_set():
            await asyncio.sleep(self.interval_s)
            try:
                await self.run_once(broker)
            except Exception:  # one bad round must not stop the cleaner
                log.exception("remote cleaner round failed")

    async def run_once(self, broker: TieredLogs) -> int:
        """One look at every tiered compacted partition; the passes run. Only the compacted logs
        are looked at: an idle broker's other partitions cost its rounds nothing."""
        passes = 0
        for (topic, partition), local in broker.logs.compacted_logs().items():
            info = broker.controller.topic(topic)
            config = local.config
            if info is None or not (config.compact and config.remote_storage_enable):
                continue
            if (topic, partition) in self._busy:
                continue
            topic_id = info.topic_id
            state = self._tiering.state(topic, partition)
            if state is None or not state.loaded or state.manifest is None or not state.manifest.segments:
                continue
            # only the partition's leader, once it has claimed the manifest at its leader epoch
            epoch = broker.leader_epoch(topic, partition)
            if epoch < 0 or state.claimed_epoch != epoch:
                continue
            passes += await self._maybe_clean(topic, partition, topic_id, local, state.manifest, epoch)
        return passes

    async def _maybe_clean(self, topic: str, partition: int, topic_id: uuid.UUID, local: Log,
                           manifest: PartitionManifest, epoch: int) -> int:
        key = (topic, partition)
        progress = self.progress.setdefault(key, RemoteCleanerProgress())
        now = int(time.time() * 1000)
        loop = asyncio.get_running_loop()
        if any(r.delete_after_ms <= now for r in manifest.replaced):
            self._busy.add(key)
            try:
                progress.replaced_objects_deleted += await loop.run_in_executor(
                    self._executor, lambda: expire_replaced(self._tiering.rsm, topic_id, partition,
                                                            now_ms=now, leader_epoch=epoch))
                manifest = await self._reload(topic, partition, topic_id) or manifest
            except (ObjectStoreError, RemoteStorageError) as exc:
                log.warning("deleting replaced objects of %s-%d failed (will retry): %s", topic, partition, exc)
            finally:
                self._busy.discard(key)
        view = local.cleaning_view()
        section = remote_dirty_section(manifest, view, now)
        progress.checkpoint = manifest.cleaner_offset
        progress.dirty_ratio, progress.cleanable_bytes = section.dirty_ratio, section.dirty_bytes
        max_lag = max(view.config.max_compaction_lag_ms, 0)
        due = section.dirty_ratio > view.config.min_cleanable_dirty_ratio or (
            section.dirty_bytes > 0 and max_lag < 2**62 and section.oldest_dirty_ms < now - max_lag
        )
        if not due or section.dirty_bytes == 0:
            return 0
        task = RemoteCompactionTask(
            topic=topic, topic_id=topic_id, partition=partition, leader_epoch=epoch,
            config=view.config, local_segments=view.segments, local_active_txns=view.active_txn_entries,
            first_uncleanable=section.first_uncleanable, last_records=view.last_records,
            scratch_dir=self.scratch_dir, now_ms=now, grace_ms=self.grace_ms,
        )
        self._busy.add(key)
        progress.state = "cleaning"
        started = time.monotonic()
        try:
            outcome = await loop.run_in_executor(self._executor, self._pass, task)
        except CleaningAborted as exc:
            log.info("remote compaction of %s-%d stopped: %s", topic, partition, exc)
            progress.state = "idle"
            return 0
        except Exception as exc:  # noqa: BLE001 - retried at the next round
            log.warning("remote compaction of %s-%d failed (will retry): %s", topic, partition, exc)
            progress.state, progress.error = "failing", str(exc)
            return 0
        finally:
            self._busy.discard(key)
        state = self._tiering.state(topic, partition)
        if state is not None and outcome.manifest is not None:
            state.adopt(outcome.manifest)
        progress.state, progress.error = "idle", None
        progress.passes += 1
        progress.last_run_ms, progress.last_duration_ms = now, int((time.monotonic() - started) * 1000)
        progress.bytes_read += outcome.bytes_read
        progress.bytes_written += outcome.bytes_written
        progress.checkpoint = outcome.manifest.cleaner_offset if outcome.manifest else None
        log.info("compacted %s-%d in the bucket: %d group(s) up to offset %d, %.1f MB read, %.1f MB written",
                 topic, partition, outcome.groups, outcome.end_offset, outcome.bytes_read / 1e6,
                 outcome.bytes_written / 1e6)
        return 1

    def _pass(self, task: RemoteCompactionTask) -> Any:
        io = CleanerIO(
            chunk_bytes=self._cleaner.io_buffer_size,
            throttle=self.throttler,
            check_done=self._check_done,
            pause=lambda point: pause_for_tests(self._cleaner.test_pause_points, self.log_dir, point, self._stop),
        )
        offset_map = OffsetMap(max(1, self._cleaner.dedupe_buffer_size // max(1, self._cleaner.threads)))
        return compact_remote(self._tiering.rsm, task, offset_map, io,
                              load_factor=self._cleaner.io_buffer_load_factor)

    def _check_done(self) -> None:
        if self._stop.is_set():
            raise CleaningAborted("the broker is shutting down")

    async def _reload(self, topic: str, partition: int, topic_id: uuid.UUID) -> PartitionManifest | None:
        loop = asyncio.get_running_loop()
        manifest = await loop.run_in_executor(self._executor, self._tiering.rsm.manifest, topic_id, partition)
        state = self._tiering.state(topic, partition)
        if state is not None and manifest is not None:
            state.adopt(manifest)
        return manifest

    def totals(self) -> dict[str, float]:
        rows = list(self.progress.values())
        return {
            "passes": sum(p.passes for p in rows),
            "bytes_read": sum(p.bytes_read for p in rows),
            "bytes_written": sum(p.bytes_written for p in rows),
            "last_run_ms": max((p.last_run_ms for p in rows), default=0),
            "replaced_objects_deleted": sum(p.replaced_objects_deleted for p in rows),
        }
