"""Tiered storage on the broker (Kafka's RemoteLogManager): upload, retain, plan history reads.

Over 500 lines because uploading, retention, orphan clean-up, read planning and the
leadership hand-over (claim the manifest's epoch, start a new replica after
what the bucket holds) all act on the same per-partition state (the cached
manifest, the upload flag, the claimed epoch); apart, each would reach into the
others' state.

For every partition of a topic with ``remote.storage.enable=true`` a periodic
task (``remote.log.manager.task.interval.ms``) uploads each sealed segment that
lies wholly below the high watermark, oldest first, and publishes it in the
partition manifest (``remote_tier`` does the upload-then-publish); then it applies
the whole log's retention (``retention.*``) to the remote segments, and every
``remote.log.orphan.cleanup.min.age.ms`` it deletes the partition's orphans
(objects of failed uploads no manifest references; also once at start-up). Local
retention (``local.retention.*``) deletes only segments the bucket already holds.

Fetches below the local log start are planned here (:meth:`RemoteLogManager.plan_remote_read`:
the segment in the cached manifest) and read by ``fetch/tiered.py`` on its own threads. All
object-store calls run on thread pools; the event loop only schedules them and reads cached
manifests.

Not thread-safe: the state here is touched on the event loop only; the blocking
calls it hands to threads take their inputs as arguments and return results.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from common.errors import (
    CorruptRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    ReplicaNotAvailableError,
)
from local_tier.producer_snapshot import snapshot_path
from local_tier.split import copy_segment_tail
from remote_tier.errors import FencedError, ObjectStoreError, RemoteStorageError
from remote_tier.manifest import PartitionManifest, RemoteSegment
from remote_tier.storage_manager import RemoteStorageManager
from remote_tier.store import ObjectStore
from remote_tier.tier_state import (
    NEVER,
    PartitionTierState,
    follow_remote_start,
    retention_due,
    retention_due_at,
)
from remote_tier.txn_indexes import RemoteTxnIndexes

if TYPE_CHECKING:
    from common.config import BrokerConfig
    from local_tier.log import Log
    from local_tier.manager import LogManager

#: how long the rounds of partitions that rolled a segment wait to gather a burst of rolls
ROLL_UPLOAD_DELAY_S = 0.5
#: manifests read one after another by one copier task when leaderships arrive in bulk
MANIFESTS_PER_TASK = 32
#: how long new leaderships taken in bulk (a failover) wait before their manifests are read
#: (they gather in one batch, after the takeover); fewer are read at once
LED_MANIFESTS_DELAY_S = 0.5
LED_MANIFESTS_BULK = 100

__all__ = ["PartitionTierState", "RemoteFetch", "RemoteStart", "TieredLogs", "RemoteLogManager"]

log = logging.getLogger("strata.tiering")


@dataclass(frozen=True, slots=True)
class RemoteStart:
    """Where a replica starts after what the bucket holds, with its auxiliary state."""

    offset: int
    epochs: list[tuple[int, int]]  # the remote segments' leader-epoch history
    producer_snapshot: bytes | None  # the producer state at ``offset``


class TieredLogs(Protocol):
    """What the periodic task reads of the broker: its local logs, the topics' ids, and
    which partitions it leads (only the leader uploads)."""

    @property
    def logs(self) -> LogManager: ...

    @property
    def controller(self) -> TopicSource: ...

    def leader_epoch(self, topic: str, partition: int) -> int:
        """This broker's leader epoch of the partition; -1 when it does not lead it."""
        ...


class TopicSource(Protocol):
    def topic(self, name: str) -> TopicId | None: ...


class TopicId(Protocol):
    """What the manager reads of a topic's metadata (the controller's ``TopicInfo``)."""

    @property
    def topic_id(self) -> uuid.UUID: ...


class LedPartition(Protocol):
    """What the manager reads of a partition this broker leads or starts to replicate
    (the replica manager's ``Partition``)."""

    @property
    def topic(self) -> str: ...

    @property
    def index(self) -> int: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def log(self) -> Log: ...


@dataclass(frozen=True, slots=True)
class RemoteFetch:
    """A partition read that must come from the bucket."""

    segment: RemoteSegment
    topic_id: uuid.UUID
    partition: int

    @property
    def base_offset(self) -> int:
        return self.segment.base_offset


def _now_ms() -> int:
    return int(time.time() * 1000)


class RemoteLogManager:
    """Only a partition's leader uploads, at its leader epoch: the first round after it
    became leader writes that epoch into the manifest (a compare-and-set), so from then
    on any upload of a deposed leader fails the manifest's epoch check and is never
    published (:class:`remote_tier.manifest.FencedError`). Where the bucket held no manifest
    when it became leader (nothing to write the epoch into), that is the first round with
    something to do, which claims before it uploads."""

    def __init__(self, store: ObjectStore, config: BrokerConfig) -> None:
        self.enabled = config.get_bool("remote.log.storage.system.enable")
        self.rsm = RemoteStorageManager(store)
        self.scratch_dir: Path | None = None  # where tails of straddling segments are cut
        self._loads: set[asyncio.Future[None]] = set()
        #: new leaderships whose manifests the next batch reads (:meth:`on_leader`)
        self._pending_loads: dict[tuple[str, int], PartitionTierState] = {}
        self._load_batch: asyncio.Future[None] | None = None
        self.interval_s = config.get_int("remote.log.manager.task.interval.ms") / 1000
        #: how long a read waits for a partition's manifest at start (as for a remote read)
        self.fetch_max_wait_ms = config.get_int("remote.fetch.max.wait.ms")
        self.orphan_min_age_ms = config.get_int("remote.log.orphan.cleanup.min.age.ms")
        self._copiers = ThreadPoolExecutor(
            max_workers=config.get_int("remote.log.manager.copier.thread.pool.size"),
            thread_name_prefix="strata-remote-copy",
        )
        self.partitions: dict[tuple[str, int], PartitionTierState] = {}
        self.uploaded_segments = 0
        self.uploaded_bytes = 0
        self.upload_failures = 0
        self.follower_manifest_reads = 0  # manifests a follower re-read for local retention
        self.txn_indexes = RemoteTxnIndexes(self.rsm)
        #: set once the start-up manifest reads are over (read or failed)
        self._manifests_read = asyncio.Event()
        #: partitions that rolled a segment since their last round (:meth:`segment_rolled`)
        self._rolled: set[tuple[str, int]] = set()
        self._roll_wake = asyncio.Event()

    def close(self) -> None:
        self._copiers.shutdown(wait=True, cancel_futures=True)

    # -- state read on the event loop ----------------------------------------

    def state(self, topic: str, partition: int) -> PartitionTierState | None:
        return self.partitions.get((topic, partition))

    def remote_boundary(self, topic: str, partition: int) -> int | None:
        state = self.partitions.get((topic, partition))
        return state.remote_next_offset if state is not None else None

    def local_clean_limit(self, local: Log) -> int | None:
        """Where the local cleaner stops on ``local`` (None: nowhere, an untiered log). A tiered
        log is cleaned on disk only below the bucket's end as this broker last read it: the
        uploader reads the segments past it as they are, and cleaning merges segments (ADR 0019)."""
        if not (self.enabled and local.config.remote_storage_enable):
            return None
        return self.remote_boundary(local.topic, local.partition) or 0

    def require_manifest(self, topic: str, partition: int, local: Log) -> None:
        """REPLICA_NOT_AVAILABLE (retriable) while the partition's manifest is unread.

        After a restart a tiered partition's local log may start far above its
        oldest record (local retention removed what the bucket holds), and only the
        manifest says where the log starts. Until the broker has read it, an answer
        taken from the local log alone would be wrong: ListOffsets(EARLIEST) would
        send a consumer to the local start and it would silently skip every record
        in the bucket (as Kafka, which answers REPLICA_NOT_AVAILABLE while its remote
        log metadata is not initialised for the partition). A local log starting at
        0 holds everything, and a partition without tiered storage has no manifest.
        """
        if not (self.enabled and local.config.remote_storage_enable and local.log_start_offset > 0):
            return
        state = self.partitions.get((topic, partition))
        # no state after the start-up reads: tiering was switched on for the topic since
        # (nothing of it was tiered by this broker run), and the first round reads it
        unread = not self._manifests_read.is_set() if state is None else not state.known
        if unread:
            raise ReplicaNotAvailableError(
                f"the remote tier of {topic}-{partition} is not loaded yet (its manifest is "
                "being read from the object store); retry"
            )

    async def wait_for_manifest(self, topic: str, partition: int, local: Log) -> None:
        """:meth:`require_manifest`, after waiting up to ``remote.fetch.max.wait.ms`` for
        the start-up manifest reads: a request arriving just after a restart is
        answered, not refused, unless the object store is slow or down."""
        try:
            self.require_manifest(topic, partition, local)
        except ReplicaNotAvailableError:
            if self._manifests_read.is_set():
                raise
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._manifests_read.wait(), self.fetch_max_wait_ms / 1000)
            self.require_manifest(topic, partition, local)

    def log_start_offset(self, topic: str, partition: int, local: Log, *, exact: bool = True) -> int:
        """The whole log's start: the bucket's when it holds older data than the disk.

        The oldest record left is the first remote segment's or the local log's,
        whichever comes first, but never below the manifest's log start offset
        (remote retention and DeleteRecords move it, possibly past data a segment or
        the local log still holds) nor below a DeleteRecords offset not yet in the
        cached manifest.

        ``exact``: REPLICA_NOT_AVAILABLE while the manifest is unread
        (:meth:`require_manifest`); otherwise the local log start is the best
        guess then (for reports: metrics, the admin API, a Fetch's informational
        ``log_start_offset``).
        """
        if exact:
            self.require_manifest(topic, partition, local)
        state = self.partitions.get((topic, partition))
        manifest = state.manifest if state is not None else None
        if state is None or manifest is None:
            return local.log_start_offset
        oldest = local.log_start_offset
        if manifest.segments:
            oldest = min(oldest, manifest.segments[0].base_offset)
        return max(oldest, manifest.log_start_offset, state.log_start_floor)

    def plan_remote_read(self, topic: str, partition: int, offset: int, local: Log) -> RemoteFetch:
        """The remote segment holding ``offset`` (below the local log start), or OFFSET_OUT_OF_RANGE."""
        start = self.log_start_offset(topic, partition, local)  # REPLICA_NOT_AVAILABLE if unread
        state = self.partitions.get((topic, partition))
        if self.enabled and local.config.remote_storage_enable and (
            state is None or (state.manifest is None and not state.loaded)
        ):
            raise ReplicaNotAvailableError(
                f"the tiered part of {topic}-{partition} is still being read from the bucket"
            )
        manifest = state.manifest if state is not None else None
        if manifest is None or offset < start:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {topic}-{partition} is outside the log "
                f"[{start}, {local.log_end_offset}]"
            )
        segment = manifest.segment_for(offset)
        if segment is None or segment.base_offset > offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {topic}-{partition} is in no remote segment "
                f"(the bucket holds [{manifest.log_start_offset}, {manifest.next_offset}))"
            )
        assert state is not None
        return RemoteFetch(segment, state.topic_id, partition)

    def plan_timestamp_reads(
        self, topic: str, partition: int, timestamp: int, local: Log, start_offset: int
    ) -> Iterator[RemoteFetch]:
        """The remote segments older than the local log where ListOffsets by ``timestamp``
        looks, in offset order: those holding a record at or after ``start_offset`` with a
        timestamp ≥ ``timestamp`` (none: the answer is not in the bucket). The first is
        found by bisection over the manifest."""
        self.require_manifest(topic, partition, local)
        state = self.partitions.get((topic, partition))
        manifest = state.manifest if state is not None else None
        if state is None or manifest is None:
            return iter(())
        local_start = local.log_start_offset
        candidates = manifest.segments_for_timestamp(timestamp, start_offset)
        older = itertools.takewhile(lambda s: s.base_offset < local_start, candidates)
        return (RemoteFetch(s, state.topic_id, partition) for s in older)

    async def delete_records(
        self, topic: str, topic_id: uuid.UUID, partition: int, offset: int, leader_epoch: int
    ) -> None:
        """DeleteRecords on a tiered partition: the manifest's log start moves to ``offset``.

        Returns once the manifest is committed (remote segments wholly below are
        then deleted); KafkaStorageError when the bucket cannot be written.
        """
        loop = asyncio.get_running_loop()
        try:
            manifest = await self._run_in_copier(
                loop, self._move_log_start, topic, topic_id, partition, offset, leader_epoch
            )
        except (ObjectStoreError, RemoteStorageError) as exc:
            raise KafkaStorageError(
                f"cannot move the log start of {topic}-{partition} in the bucket: {exc}"
            ) from exc
        state = self.partitions.get((topic, partition))
        if state is None or state.topic_id != topic_id:
            state = PartitionTierState(
                topic_id, next_orphan_cleanup_ms=_now_ms() + self.orphan_min_age_ms
            )
            self.partitions[(topic, partition)] = state
        if manifest is not None:
            state.adopt(manifest)
            state.loaded = state.known = True
        state.log_start_floor = max(state.log_start_floor, offset)

    def _move_log_start(
        self, topic: str, topic_id: uuid.UUID, partition: int, offset: int, leader_epoch: int
    ) -> PartitionManifest | None:
        return self.rsm.move_log_start(topic, topic_id, partition, offset, leader_epoch=leader_epoch)

    # -- the periodic task ---------------------------------------------------

    async def run(self, broker: TieredLogs) -> None:
        """Upload, retain and clean up, every ``remote.log.manager.task.interval.ms``."""
        if not self.enabled:
            return
        loop = asyncio.get_running_loop()
        # manifests first: until a partition's is read, reads below its local log
        # start are refused (require_manifest); the orphan clean-up lists the bucket
        # and can wait
        tiered = self._tiered_logs(broker)
        loads = await asyncio.gather(
            *(
                self._load_manifest(loop, topic, partition, local, self._state(topic, partition, topic_id))
                for topic, partition, local, topic_id, _ in tiered
            ),
            return_exceptions=True,
        )
        for (topic, partition, _, _, _), outcome in zip(tiered, loads, strict=True):
            if isinstance(outcome, Exception):  # the first round tries again
                log.warning("reading the manifest of %s-%d failed: %s", topic, partition, outcome)
        self._manifests_read.set()
        led = [(topic, partition, topic_id) for topic, partition, _, topic_id, _ in self._tiered_logs(broker)]
        await self._run_in_copier(loop, self._startup_cleanup, led)
        while True:
            try:
                await self.run_once(broker)
            except Exception:  # one bad round must not stop tiering for good
                log.exception("tiering round failed")
            await self._rounds_of_rolled(broker, loop.time() + self.interval_s)

    def segment_rolled(self, topic: str, partition: int) -> None:
        """A local log sealed a segment: its partition gets a round within
        :data:`ROLL_UPLOAD_DELAY_S` instead of at the next interval, so a sealed segment
        reaches the bucket (and Spark, and the local cleaner's bound, ADR 0019) in about a
        second. Called on the loop by the log manager (a set and an event: cheap)."""
        if self.enabled:
            self._rolled.add((topic, partition))
            self._roll_wake.set()

    async def _rounds_of_rolled(self, broker: TieredLogs, until: float) -> None:
        """Until ``until`` (loop time), rounds of the partitions that rolled, gathered over
        :data:`ROLL_UPLOAD_DELAY_S` (a burst of rolls is one round)."""
        loop = asyncio.get_running_loop()
        while (left := until - loop.time()) > 0:
            try:
                await asyncio.wait_for(self._roll_wake.wait(), left)
            except TimeoutError:
                return
            await asyncio.sleep(ROLL_UPLOAD_DELAY_S)
            self._roll_wake.clear()
            rolled, self._rolled = self._rolled, set()
            try:
                await self.run_once(broker, only=rolled)
            except Exception:  # one bad round must not stop tiering for good
                log.exception("tiering round of rolled partitions failed")

    @staticmethod
    def _tiered_logs(broker: TieredLogs, led: bool = True) -> list[tuple[str, int, Log, uuid.UUID, int]]:
        """(topic, partition, log, topic id, leader epoch) of every local log with tiered
        storage on that this broker leads (``led``), or follows."""
        out = []
        for (topic, partition), local in list(broker.logs.all_logs().items()):
            info = broker.controller.topic(topic)
            if not local.config.remote_storage_enable or info is None:
                continue
            epoch = broker.leader_epoch(topic, partition)
            if (epoch >= 0) == led:
                out.append((topic, partition, local, info.topic_id, epoch))
        return out

    async def run_once(self, broker: TieredLogs, only: set[tuple[str, int]] | None = None) -> None:
        """One round: every tiered partition's (``only``: those partitions', leaders' only).

        A partition a round found nothing to do for rests (``PartitionTierState.rest``): the
        next rounds skip it, reading one counter, until its log changes or a deadline of
        its own passes, so an idle broker's round costs next to nothing per partition."""
        loop = asyncio.get_running_loop()
        now = _now_ms()
        tasks = []
        for topic, partition, local, topic_id, epoch in self._round_logs(broker, now, only):
            state = self._state(topic, partition, topic_id)
            if epoch < 0:  # followed: its round only when local retention can wait for the bucket
                if len(local.segments) > 1:
                    tasks.append(self._follower_round(loop, topic, partition, local, topic_id))
                else:  # one segment: nothing is deleted locally until it rolls (a change)
                    state.rest(local, NEVER, led=False)
            elif not state.uploading and not self._nothing_to_do(local, state, epoch):
                tasks.append(self._partition_round(loop, topic, partition, local, state, epoch))
            elif only is not None:  # its round in flight may have missed the roll: once more after it
                self.segment_rolled(topic, partition)
            elif not state.uploading and not local.background_pending:  # (a roll's snapshot: soon)
                state.rest(local, retention_due_at(state.manifest, local.config), led=True)
        if tasks:
            await asyncio.gather(*tasks)

    def _round_logs(
        self, broker: TieredLogs, now_ms: int, only: set[tuple[str, int]] | None
    ) -> Iterator[tuple[str, int, Log, uuid.UUID, int]]:
        """(topic, partition, log, topic id, leader epoch: -1 when followed) of the tiered local
        logs a round looks at: ``only``'s leaders, or every one not resting."""
        logs = broker.logs
        if only is None:
            keyed: Iterable[tuple[tuple[str, int], Log | None]] = logs.all_logs().items()
        else:
            keyed = [(key, logs.get_log(*key)) for key in only]
        partitions = self.partitions
        for (topic, partition), local in keyed:
            if local is None:
                continue
            state = partitions.get((topic, partition))
            if only is None and state is not None and state.resting(local, now_ms):
                continue
            info = broker.controller.topic(topic)
            if not local.config.remote_storage_enable or info is None:
                continue
            epoch = broker.leader_epoch(topic, partition)
            if only is None or epoch >= 0:
                yield topic, partition, local, info.topic_id, epoch

    async def _follower_round(
        self, loop: asyncio.AbstractEventLoop, topic: str, partition: int, local: Log,
        topic_id: uuid.UUID,
    ) -> None:
        """A tiered partition this broker follows: only its leader uploads, but its local
        segments go once the manifest lists them (local retention, applied at once). The
        manifest is re-read only when local retention is waiting for it, so an idle
        follower costs the bucket nothing; the local log start follows the manifest's."""
        state = self._state(topic, partition, topic_id)
        if not local.local_retention_waits_for_remote(_now_ms(), state.remote_next_offset):
            return
        try:
            state.adopt(await self._run_in_copier(loop, self.rsm.manifest, topic_id, partition))
        except (ObjectStoreError, RemoteStorageError) as exc:
            log.warning("reading the manifest of %s-%d (followed) failed: %s", topic, partition, exc)
            return
        state.known = True
        self.follower_manifest_reads += 1
        follow_remote_start(local, state)
        # what waited for the manifest goes now, not at the next retention check
        if deleted := local.delete_retention_segments(_now_ms(), remote_boundary=state.remote_next_offset):
            log.info("%s-%d: %d local segment(s) the bucket holds deleted (follower)", topic, partition,
                     deleted)

    # -- leadership (a listener of the replica manager) -----------------------

    def on_leader(self, partition: LedPartition) -> None:
        """This broker leads the partition now: read its manifest at once (reads of the
        bucket part wait for it) and claim it at the next round."""
        if not self.enabled or not partition.log.config.remote_storage_enable:
            return
        state = self._state(partition.topic, partition.index, partition.topic_id)
        state.loaded = False
        state.wake()
        self._pending_loads[(partition.topic, partition.index)] = state
        if self._load_batch is None:  # one task for the leaderships of this turn of the loop
            self._load_batch = task = asyncio.ensure_future(self._read_led_manifests())
            self._loads.add(task)
            task.add_done_callback(self._loads.discard)

    async def _read_led_manifests(self) -> None:
        """The manifests of the partitions led since the last batch, read on the copier
        threads :data:`MANIFESTS_PER_TASK` at a time: a failover that moves 3,000
        leaderships here was 3,000 tasks and pool submissions on the event loop. When a
        started broker takes :data:`LED_MANIFESTS_BULK` or more in one turn, they begin
        :data:`LED_MANIFESTS_DELAY_S` later: a failover's
        leaderships arrive over several turns of the loop and join one batch, and 3,000
        manifest reads do not compete with the takeover itself (a read of the tiered part
        meanwhile uses the manifest known from before, or is answered REPLICA_NOT_AVAILABLE,
        retriable, as while the reads run)."""
        await asyncio.sleep(0)  # the rest of this turn's new leaderships join the batch
        if self._manifests_read.is_set() and len(self._pending_loads) >= LED_MANIFESTS_BULK:
            await asyncio.sleep(LED_MANIFESTS_DELAY_S)  # a takeover in bulk: read after it
        batch, self._pending_loads, self._load_batch = list(self._pending_loads.items()), {}, None
        loop = asyncio.get_running_loop()
        chunks = [batch[i:i + MANIFESTS_PER_TASK] for i in range(0, len(batch), MANIFESTS_PER_TASK)]
        read = await asyncio.gather(*(self._run_in_copier(loop, self._manifests, c) for c in chunks),
                                    return_exceptions=True)  # a chunk that failed whole: its next round
        for (topic, partition), state, manifest in itertools.chain.from_iterable(
                r for r in read if not isinstance(r, BaseException)):
            if isinstance(manifest, Exception):
                log.warning("reading the manifest of %s-%d failed (the next round retries): %s",
                            topic, partition, manifest)
            elif self.partitions.get((topic, partition)) is state and not state.loaded:
                state.adopt(manifest)
                state.loaded = state.known = True

    def _manifests(self, chunk: list[tuple[tuple[str, int], PartitionTierState]]) -> list[tuple[
            tuple[str, int], PartitionTierState, PartitionManifest | None | Exception]]:
        """On a copier thread: each partition's manifest, or the error reading it."""
        out: list[tuple[tuple[str, int], PartitionTierState, PartitionManifest | None | Exception]] = []
        for key, state in chunk:
            try:
                out.append((key, state, self.rsm.manifest(state.topic_id, key[1])))
            except Exception as exc:  # noqa: BLE001 - one bad manifest must not cost the batch
                out.append((key, state, exc))
        return out

    async def loaded(self) -> None:
        """Wait for the manifest reads started by :meth:`on_leader` (start-up waits for
        them, so history is served from the first request)."""
        while self._loads:
            await asyncio.gather(*list(self._loads), return_exceptions=True)

    def on_resign(self, topic: str, index: int, deleted: bool) -> None:
        """No longer the leader: no more uploads; a follower keeps the manifest it read."""
        state = self.partitions.get((topic, index))
        if state is not None:
            state.loaded = False
            state.claimed_epoch = -1
            state.wake()
        if deleted:
            self.partitions.pop((topic, index), None)

    async def bootstrap_replica(self, partition: LedPartition) -> RemoteStart | None:
        """Where a new (or far-behind) replica of a tiered topic starts: the first offset the
        bucket does not hold, with the leader-epoch history of the remote segments and the
        producer snapshot uploaded with the last one (None: nothing tiered, or tiering is
        off for it). Reads the manifest and that snapshot."""
        if not self.enabled or not partition.log.config.remote_storage_enable:
            return None
        loop = asyncio.get_running_loop()
        manifest = await self._run_in_copier(loop, self.rsm.manifest, partition.topic_id, partition.index)
        state = PartitionTierState(
            partition.topic_id, manifest=manifest, loaded=True, known=True,
            next_orphan_cleanup_ms=_now_ms() + self.orphan_min_age_ms,
        )
        self.partitions[(partition.topic, partition.index)] = state
        if manifest is None or not manifest.segments:
            return None
        last = manifest.segments[-1]
        snapshot = await self._run_in_copier(
            loop, self.rsm.read_producer_snapshot, last, partition.topic_id, partition.index
        )
        epochs = [e for segment in manifest.segments for e in segment.epochs]
        return RemoteStart(manifest.next_offset, epochs, snapshot)

    async def _claim(
        self, loop: asyncio.AbstractEventLoop, topic_id: uuid.UUID, partition: int, epoch: int
    ) -> PartitionManifest | None:
        """Write ``epoch`` into the partition's manifest (if it exists and is older), so a
        deposed leader's later publish is fenced; the manifest as it now is."""

        def claim() -> PartitionManifest | None:
            self.rsm.manifests.update(  # a copy: update writes nothing for the manifest it was given
                topic_id, partition,
                lambda current: replace(current) if current is not None and current.leader_epoch < epoch else None,
                leader_epoch=epoch,
            )
            return self.rsm.manifest(topic_id, partition)

        return await self._run_in_copier(loop, claim)

    def _state(self, topic: str, partition: int, topic_id: uuid.UUID) -> PartitionTierState:
        """The partition's state, new (nothing known) if absent or of an older topic id."""
        state = self.partitions.get((topic, partition))
        if state is None or state.topic_id != topic_id:
            # the startup clean-up (run) has just looked; the next pass is due then
            state = PartitionTierState(topic_id, next_orphan_cleanup_ms=_now_ms() + self.orphan_min_age_ms)
            self.partitions[(topic, partition)] = state
        return state

    async def _load_manifest(
        self, loop: asyncio.AbstractEventLoop, topic: str, partition: int, local: Log, state: PartitionTierState
    ) -> None:
        """Read the partition's manifest into ``state``; the local log start follows it."""
        state.adopt(await self._run_in_copier(loop, self.rsm.manifest, state.topic_id, partition))
        state.loaded = state.known = True
        follow_remote_start(local, state)

    async def _partition_round(
        self,
        loop: asyncio.AbstractEventLoop,
        topic: str,
        partition: int,
        local: Log,
        state: PartitionTierState,
        epoch: int,
    ) -> None:
        state.uploading = True
        state.wake()
        try:
            if state.claimed_epoch != epoch:
                state.adopt(await self._claim(loop, state.topic_id, partition, epoch))
                state.claimed_epoch, state.loaded, state.known = epoch, True, True
                follow_remote_start(local, state)
            if not state.loaded:
                await self._load_manifest(loop, topic, partition, local, state)
            # upload sealed segments, oldest first; the manifest is re-read once after
            # the batch (each upload already read and wrote it to publish)
            boundary = state.remote_next_offset
            uploaded_any = False
            while (segment := next_upload(local, boundary)) is not None:
                upper = local.segments[local.segments.index(segment) + 1].base_offset
                uploaded = await self._run_in_copier(
                    loop, self._upload, topic, state.topic_id, partition, segment, boundary,
                    local.config, epoch, snapshot_path(local.dir, upper),
                )
                self.uploaded_segments += 1
                self.uploaded_bytes += uploaded.size_bytes
                boundary, uploaded_any = uploaded.next_offset, True
            if uploaded_any:
                state.adopt(await self._run_in_copier(loop, self.rsm.manifest, state.topic_id, partition))
            # the whole log's retention, on the bucket (compact-only logs: the cleaner's job)
            config = local.config
            local_only = _local_only_bytes(local, state.remote_next_offset)
            if config.delete and retention_due(state.manifest, config, local_only, _now_ms()):
                removed = await self._run_in_copier(
                    loop,
                    self._retain,
                    state.topic_id,
                    partition,
                    config.retention_ms,
                    config.retention_bytes,
                    local_only,
                    epoch,
                )
                if removed:
                    state.adopt(await self._run_in_copier(loop, self.rsm.manifest, state.topic_id, partition))
                    follow_remote_start(local, state)
            # objects of uploads that failed while this broker runs (their discard
            # failed too, e.g. in an S3 outage): removed once old enough, without
            # waiting for a restart. No upload of this partition is in flight here.
            now = _now_ms()
            if now >= state.next_orphan_cleanup_ms:
                state.next_orphan_cleanup_ms = now + self.orphan_min_age_ms
                await self._run_in_copier(
                    loop, self._cleanup_orphans, topic, partition, state.topic_id, now
                )
            state.last_error = None
        except FencedError as exc:
            state.loaded, state.claimed_epoch = False, -1
            log.info("tiering of %s-%d stops: %s", topic, partition, exc)
        except (ObjectStoreError, RemoteStorageError, OSError, CorruptRecordError) as exc:
            # (CorruptRecordError: a local segment whose batches cannot be walked; counted
            # and retried like any failure, never a stuck upload thread)
            state.upload_failures += 1
            self.upload_failures += 1
            state.last_error = str(exc)
            state.loaded = False  # uploads may have been published: re-read before the next round
            log.warning("tiering of %s-%d failed (will retry): %s", topic, partition, exc)
        finally:
            state.uploading = False

    def _nothing_to_do(self, local: Log, state: PartitionTierState, epoch: int) -> bool:
        """Whether a round of this led partition would find nothing to do, told from memory: its
        manifest is read and claimed at this epoch, no sealed segment waits for upload, the cached
        manifest has nothing for retention, and its orphan clean-up is not due. An idle partition
        then costs the round a few attribute reads, not a task (issue 33: 10,000 of them).

        A partition whose manifest was read absent under this leadership is not claimed while it
        has nothing else to do: a claim writes nothing where there is no manifest, and the round
        that has something to do claims first (re-reading the manifest). 10,000 new partitions
        then cost their first round no claim each (two bucket reads and a copier hop apiece)."""
        if not state.loaded or (state.claimed_epoch != epoch and state.manifest is not None):
            return False
        boundary = state.remote_next_offset
        if next_upload(local, boundary) is not None:
            return False
        now = _now_ms()
        if now >= state.next_orphan_cleanup_ms:
            return False
        config = local.config
        return not (config.delete and retention_due(state.manifest, config, _local_only_bytes(local, boundary), now))

    def _upload(
        self,
        topic: str,
        topic_id: uuid.UUID,
        partition: int,
        local_segment: Any,
        boundary: int | None,
        config: Any,
        epoch: int,
        producer_snapshot: Path,
    ) -> RemoteSegment:
        """Upload ``local_segment`` with its indexes, transaction index and the producer
        snapshot at its end (the part from ``boundary`` on when the bucket holds its head)."""
        scratch = None
        source = local_segment
        if boundary is not None and local_segment.base_offset < boundary:
            # the bucket already holds this segment's head (an earlier leader rolled
            # elsewhere): upload a copy of the rest, cut at the batch that starts there
            scratch = (self.scratch_dir or local_segment.directory.parent) / (
                f"tier-{uuid.uuid4().hex}-delete"
            )
            source = copy_segment_tail(local_segment, boundary, scratch, config)
        try:
            segment = self.rsm.upload_segment(
                topic=topic,
                topic_id=topic_id,
                partition=partition,
                leader_epoch=epoch,
                log_path=source.log_path,
                index_path=source.offset_index.path,
                timeindex_path=source.time_index.path,
                # a tail copy keeps the whole segment's transaction index: entries
                # before its first offset are never read for it
                txn_index_path=local_segment.txn_index.path,
                producer_snapshot_path=producer_snapshot,
            )
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        log.info(
            "uploaded %s-%d segment [%d, %d] (%d bytes)",
            topic,
            partition,
            segment.base_offset,
            segment.last_offset,
            segment.size_bytes,
        )
        return segment

    def _retain(
        self,
        topic_id: uuid.UUID,
        partition: int,
        retention_ms: int,
        retention_bytes: int,
        local_only: int,
        epoch: int,
    ) -> int:
        removed = self.rsm.apply_retention(
            topic_id,
            partition,
            retention_ms=retention_ms,
            retention_bytes=retention_bytes,
            now_ms=int(time.time() * 1000),
            leader_epoch=epoch,
            local_only_bytes=local_only,
        )
        return len(removed)

    def _startup_cleanup(self, partitions: list[tuple[str, int, uuid.UUID]]) -> None:
        """Orphans of uploads a crash interrupted (older than the clean-up age), of the
        partitions listed on the loop (a copier thread never touches a log)."""
        now = _now_ms()
        for topic, partition, topic_id in partitions:
            self._cleanup_orphans(topic, partition, topic_id, now)

    def _cleanup_orphans(self, topic: str, partition: int, topic_id: uuid.UUID, now: int) -> None:
        try:
            self.rsm.cleanup_orphans(
                topic_id, partition, min_age_ms=self.orphan_min_age_ms, now_ms=now
            )
        except ObjectStoreError as exc:
            log.warning("orphan clean-up of %s-%d failed: %s", topic, partition, exc)

    async def delete_topic(self, topic: str, topic_id: uuid.UUID, partitions: int) -> None:
        """Remove a deleted topic's remote data (manifest first, then objects)."""
        for p in range(partitions):
            await self.delete_partition(topic, topic_id, p)

    async def delete_partition(self, topic: str, topic_id: uuid.UUID, partition: int) -> None:
        """Remove one partition's remote data (its topic was deleted); the state of a topic
        created again under the name meanwhile stays."""
        state = self.partitions.get((topic, partition))
        if state is not None and state.topic_id == topic_id:
            del self.partitions[(topic, partition)]
        try:
            await self._run_in_copier(
                asyncio.get_running_loop(), self.rsm.delete_partition, topic_id, partition
            )
        except ObjectStoreError as exc:
            log.warning("deleting remote data of %s-%d failed: %s", topic, partition, exc)

    async def _run_in_copier(self, loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> Any:
        return await loop.run_in_executor(self._copiers, fn, *args)


def next_upload(local: Log, boundary: int | None) -> Any:
    """The oldest sealed, committed local segment not wholly in the bucket (below
    ``boundary``); one that straddles it is uploaded from the boundary on."""
    segments = local.segments
    for i, segment in enumerate(segments[:-1]):  # never the active segment
        upper = segments[i + 1].base_offset
        if boundary is not None and upper <= boundary:
            continue  # already in the bucket
        if upper > local.last_stable_offset:
            return None  # not committed yet, or a transaction in it is still open
        if segment.size == 0 or upper <= local.log_start_offset:
            continue  # empty, or its records were deleted (DeleteRecords)
        if local.background_pending and not snapshot_path(local.dir, upper).exists():
            return None  # the roll's producer snapshot is still being written: the next pass
        return segment
    return None


def _local_only_bytes(local: Log, boundary: int | None) -> int:
    """The bytes of ``local``'s segments not in the bucket (from ``boundary``, the bucket's end, on)."""
    return sum(s.size for s in local.segments if boundary is None or s.base_offset >= boundary)
