"""The broker: wires the controller, the local logs and the fetch waiters together.

Handlers talk to the :class:`Broker`; it owns no protocol code and touches no
segment files itself (``local_tier`` does). Single-node: this broker leads every
partition at leader epoch 0 and the high watermark follows the log end offset
after each append (there are no followers to wait for, so ``acks=-1`` is
satisfied at once, as with ``min.insync.replicas=1``).

Not thread-safe: everything runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from controller.configs import BrokerConfig
from controller.metadata import (
    Controller,
    MetadataEvent,
    ObjectStoreMetadataStore,
    PartitionsCreated,
    TopicConfigChanged,
    TopicCreated,
    TopicDeleted,
    TopicInfo,
)
from fetch.planner import PartitionData
from fetch.sessions import FetchSessionCache
from fetch.waiter import AppendWaiters
from local_tier.config import LogConfig
from local_tier.errors import (
    ErrorCode,
    InvalidPartitionsError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    UnknownTopicOrPartitionError,
)
from local_tier.log import Log, LogAppendInfo
from local_tier.manager import LogManager
from local_tier.producer_state import AppendOrigin
from local_tier.records import ValidatedRecords
from remote_tier.filesystem import FileSystemObjectStore
from remote_tier.store import ObjectStore
from service.groups import GroupCoordinator, start_coordinator
from service.groups.records import OFFSETS_TOPIC
from service.latency import LatencyHistograms
from service.log_cleaning import LoopOwner, cleaner_config
from service.producer_ids import ProducerIdManager
from service.remote_cleaning import RemoteCleaner
from service.tiering import TieringService
from service.transactions import TransactionCoordinator, start_transaction_coordinator
from service.txn_markers import TransactionalInit, TxnCompletionHook, write_txn_markers

__all__ = ["Broker"]

log = logging.getLogger("strata.broker")

_FDS_PER_PARTITION = 3  # the active segment's .log, .index and .timeindex


class Broker:
    def __init__(
        self,
        *,
        data_dir: Path,
        config: BrokerConfig,
        advertised_host: str,
        advertised_port: int,
        object_store: ObjectStore | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.config = config
        self.node_id = config.get_int("node.id")
        self.leader_epoch = 0
        self.fetch_max_bytes = config.get_int("fetch.max.bytes")
        self.auto_create_topics = config.get_bool("auto.create.topics.enable")
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.waiters = AppendWaiters()
        self.fetch_sessions = FetchSessionCache(
            config.get_int("max.incremental.fetch.session.cache.slots")
        )
        self.requests: Counter[str] = Counter()
        self.errors: Counter[tuple[str, str]] = Counter()
        self.bytes_in: Counter[str] = Counter()
        self.bytes_out: Counter[str] = Counter()
        self.records_in: Counter[str] = Counter()
        self.records_out: Counter[str] = Counter()
        self.request_latency = LatencyHistograms()
        data_dir.mkdir(parents=True, exist_ok=True)
        # The object store holds the cluster metadata and the tiered segments; the
        # embedded default is a directory beside the logs.
        self.object_store = object_store or FileSystemObjectStore(data_dir / "bucket")
        self.controller = Controller(ObjectStoreMetadataStore(self.object_store), config)
        self.logs = LogManager(
            data_dir / "logs", producer_id_expiration_ms=config.get_int("producer.id.expiration.ms")
        )
        self.producer_ids = ProducerIdManager(self.controller.allocate_producer_ids)
        #: InitProducerId with a transactional id goes here (the transaction coordinator)
        self.transaction_coordinator: TransactionalInit | None = None
        #: topic -> called when transaction markers land in its partitions (ADR 0011)
        self.txn_completion_hooks: dict[str, TxnCompletionHook] = {}
        self.tiering = TieringService(self.object_store, config, self.leader_epoch)
        self.remote_cleaner = RemoteCleaner(
            self.tiering, config, cleaner_config(config), data_dir / "remote-compaction", data_dir / "logs"
        )
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = False
        self.groups: GroupCoordinator = None  # type: ignore[assignment]  # set by open()
        self.transactions: TransactionCoordinator = None  # type: ignore[assignment]  # set by open()

    # -- lifecycle ---------------------------------------------------------

    def open(self) -> None:
        """Register, load and recover the local logs, and reconcile them with the metadata."""
        self.controller.register_broker(self.advertised_host, self.advertised_port)
        self.logs.load(self._log_config)
        known = {t.name: t for t in self.controller.topics()}
        for topic in {tp[0] for tp in self.logs.all_logs()} - set(known):
            log.warning("deleting local logs of %r: the topic no longer exists", topic)
            self.logs.delete_logs(topic)
        for info in known.values():
            self._ensure_logs(info)
        self.controller.add_listener(self._on_metadata_event)
        self.groups = start_coordinator(self)
        self.txn_completion_hooks[OFFSETS_TOPIC] = self.groups.txn_offsets.on_markers
        self.transactions = start_transaction_coordinator(self)
        self.transaction_coordinator = self.transactions

    def start_log_cleaner(self) -> None:
        """Start the log cleaner threads, with this loop as the logs' owner (ADR 0019).

        Tiered compacted logs are compacted in the bucket instead (the remote cleaner)."""
        loop = asyncio.get_running_loop()
        self.logs.start_cleaner(
            LoopOwner(loop, lambda: self._closing),
            cleaner_config(self.config),
            eligible=lambda log_: not (log_.config.remote_storage_enable and self.tiering.enabled),
        )

    def close(self) -> None:
        self._closing = True
        if self.transactions is not None:
            self.transactions.shutdown()
        if self.groups is not None:
            self.groups.shutdown()
        self.waiters.notify_all()
        self.remote_cleaner.close()
        self.tiering.close()
        self.logs.shutdown()

    async def run_background(self) -> None:
        """Retention, flush and checkpoint schedules, like Kafka's log manager."""
        retention_s = self.config.get_int("log.retention.check.interval.ms") / 1000
        flush_s = self.config.get_int("log.flush.scheduler.interval.ms") / 1000
        checkpoint_s = self.config.get_int("log.flush.offset.checkpoint.interval.ms") / 1000
        expiry_s = self.config.get_int("producer.id.expiration.check.interval.ms") / 1000
        tick = max(0.05, min(retention_s, flush_s, checkpoint_s, expiry_s, 1.0))
        self.start_log_cleaner()
        self._spawn(self.remote_cleaner.run(self))
        next_retention = next_flush = next_checkpoint = next_expiry = time.monotonic()
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            now_ms = int(time.time() * 1000)
            try:
                if now >= next_retention:
                    next_retention = now + retention_s
                    if deleted := self.logs.run_retention(now_ms, self.tiering.remote_boundary):
                        log.info("retention deleted %d segment(s)", deleted)
                        self._restore_reserve()
                if now >= next_flush:
                    next_flush = now + flush_s
                    self.logs.run_flush(now_ms)
                if now >= next_checkpoint:
                    next_checkpoint = now + checkpoint_s
                    self.logs.checkpoint()
                if now >= next_expiry:
                    next_expiry = now + expiry_s
                    if expired := self.logs.remove_expired_producers(now_ms):
                        log.info("forgot %d expired producer id(s)", expired)
            except Exception:  # a failing schedule must not stop the others
                log.exception("background log maintenance failed")

    def _spawn(self, coro: Any) -> None:
        """Run a coroutine in the background, keeping a reference until it ends."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- topics ------------------------------------------------------------

    def _log_config(self, topic: str) -> LogConfig:
        if self.controller.topic(topic) is None:
            return LogConfig.from_properties(self.config.topic_defaults())
        return LogConfig.from_properties(self.controller.effective_topic_config(topic))

    def _ensure_logs(self, info: TopicInfo) -> None:
        cfg = self._log_config(info.name)
        for p in range(info.partitions):
            self.logs.get_or_create_log(info.name, p, cfg)

    def _on_metadata_event(self, event: MetadataEvent) -> None:
        if isinstance(event, (TopicCreated, PartitionsCreated)):
            self._ensure_logs(event.topic)
        elif isinstance(event, TopicDeleted):
            self.logs.delete_logs(event.topic.name)
            self._restore_reserve()
            self.waiters.notify_all()
            if self.groups is not None and event.topic.name != OFFSETS_TOPIC:
                self.groups.on_topics_deleted({event.topic.name})  # as Kafka: offsets go too
            if self.tiering.enabled:
                info = event.topic
                self._spawn(self.tiering.delete_topic(info.name, info.topic_id, info.partitions))
        elif isinstance(event, TopicConfigChanged):
            self.logs.update_config(event.topic.name, self._log_config(event.topic.name))

    def _restore_reserve(self) -> None:
        """Space was just freed: the embedded store takes back its full-disk reserve
        before producers can fill it again (docs/adr/0007-full-disk-and-data-dir-lock.md)."""
        if isinstance(self.object_store, FileSystemObjectStore):
            self.object_store.restore_reserve()

    def create_topic(
        self,
        name: str,
        *,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> TopicInfo:
        wanted = num_partitions if num_partitions > 0 else self.config.get_int("num.partitions")
        self._check_descriptors(wanted)
        return self.controller.create_topic(
            name, num_partitions, replication_factor, configs or {}, validate_only
        )

    def _check_descriptors(self, new_partitions: int) -> None:
        """Refuse partitions this process could not open files for (each holds about three).

        Past the descriptor limit every later file open fails (EMFILE), metadata writes
        included; refusing the request up front keeps the broker working.
        """
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return
        hosted = len(self.logs.all_logs())
        if (hosted + new_partitions) * _FDS_PER_PARTITION > soft * 0.8:
            raise InvalidPartitionsError(
                f"{new_partitions} more partitions would need more open files than this process may "
                f"hold (it hosts {hosted}; ulimit -n is {soft}, about {_FDS_PER_PARTITION} per partition): "
                "raise the limit (ulimit -n / LimitNOFILE) or create fewer partitions"
            )

    def delete_topic(self, name: str) -> TopicInfo:
        return self.controller.delete_topic(name)

    def create_partitions(self, name: str, total: int, validate_only: bool) -> TopicInfo:
        info = self.controller.topic(name)
        if info is not None:
            self._check_descriptors(total - info.partitions)
        return self.controller.create_partitions(name, total, validate_only)

    def alter_topic_configs(
        self, name: str, ops: Sequence[tuple[str, int, str | None]], validate_only: bool
    ) -> TopicInfo:
        return self.controller.incremental_alter_configs(name, ops, validate_only)

    # -- data path ---------------------------------------------------------

    def log_for(self, topic: str, partition: int) -> Log:
        found = self.logs.get_log(topic, partition)
        if found is None:
            raise UnknownTopicOrPartitionError(
                f"this server does not host partition {partition} of topic {topic!r}"
            )
        return found

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords: move the partition's log start offset up to ``offset``; the new start.

        ``-1`` means the high watermark. Beyond it (or below 0): OFFSET_OUT_OF_RANGE;
        on a compacted topic: POLICY_VIOLATION, as in Kafka. On a tiered partition
        the manifest moves first (its remote segments wholly below are deleted),
        then the local log; the log start offsets are checkpointed before this
        returns, so an answered DeleteRecords survives a crash. Local segments wholly
        below the new start go at the next retention pass.
        """
        log_ = self.log_for(topic, partition)
        if "compact" in log_.config.cleanup_policy.split(","):
            raise PolicyViolationError(
                f"records of {topic} can be deleted only if its cleanup.policy is delete"
            )
        target = log_.high_watermark if offset == -1 else offset
        if not 0 <= target <= log_.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {topic}-{partition} before offset {offset}: "
                f"the high watermark is {log_.high_watermark}"
            )
        await self.tiering.wait_for_manifest(topic, partition, log_)
        if target <= self.tiering.log_start_offset(topic, partition, log_):
            return self.tiering.log_start_offset(topic, partition, log_)
        info = self.controller.topic(topic)
        if log_.config.remote_storage_enable and self.tiering.enabled and info is not None:
            await self.tiering.delete_records(topic, info.topic_id, partition, target)
            log_ = self.log_for(topic, partition)  # the topic may have been deleted meanwhile
        if log_.maybe_increment_log_start_offset(target):
            self.logs.checkpoint()
        return self.tiering.log_start_offset(topic, partition, log_)

    def append(
        self,
        topic: str,
        partition: int,
        records: bytes | memoryview,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        validated: ValidatedRecords | None = None,
    ) -> LogAppendInfo:
        """Append to the partition's log; a duplicate idempotent batch writes nothing.

        ``validated``: what ``validate_batches`` made of ``records``, when the caller did it.
        """
        target = self.log_for(topic, partition)
        info = target.append_as_leader(records, self.leader_epoch, validated=validated, origin=origin)
        if info.duplicate:
            return info
        target.update_high_watermark(target.log_end_offset)
        self.bytes_in[topic] += info.size
        self.records_in[topic] += info.record_count
        self.waiters.notify(topic, partition)
        return info

    def write_txn_markers(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        partitions: Sequence[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        """COMMIT/ABORT markers into ``partitions``: see :func:`service.txn_markers.write_txn_markers`."""
        return write_txn_markers(
            self,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            committed=committed,
            partitions=partitions,
        )

    # -- counters (exported as metrics by the admin API) --------------------

    def metrics_request(self, api: str) -> None:
        self.requests[api] += 1

    def metrics_error(self, api: str, code: ErrorCode) -> None:
        self.errors[(api, code.name.upper())] += 1

    def metrics_fetch(self, data: Sequence[PartitionData]) -> None:
        for d in data:
            if d.size:
                self.bytes_out[d.topic] += d.size
                self.records_out[d.topic] += d.records


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
