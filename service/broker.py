"""The broker: wires the cluster membership, the local logs, replication and the fetch waiters.

Handlers talk to the :class:`Broker`; it owns no protocol code and touches no segment
files itself (``local_tier`` does). A single-node ``strata up`` is a cluster of one:
the same code with one broker, holding the controller lease and leading every partition.

* Metadata comes from the bucket through a :class:`controller.MetadataView`
  (``self.controller`` reads it, :mod:`service.cluster.image`); each newer
  snapshot is applied on the event loop (:meth:`Broker.apply_metadata`): the
  :class:`~service.replication.replica_manager.ReplicaManager` opens, leads,
  follows and deletes partition logs as it says.
* Writes (topics, configs) go to the active controller: this broker's own
  :class:`controller.ClusterController` when it holds the lease, else over the
  wire (:mod:`service.cluster.node`).
* Appends go to partitions this broker leads, stamped with their leader epoch.

Not thread-safe: everything runs on the event loop thread (the controller, the
metadata poll and blocking object store calls run on threads of their own).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from common.config import BrokerConfig
from common.config.dynamic import SECTION as DYNAMIC_SECTION
from common.errors import ErrorCode
from common.latency import LatencyHistograms
from common.record.batch import ValidatedRecords
from controller.commit import Snapshot
from controller.document import ClusterMetadata
from controller.errors import NotControllerError
from controller.events import MetadataEvent, TopicDeleted
from controller.metadata import TopicInfo
from controller.metadata_view import MetadataView
from controller.registrations import Endpoint, ProducerIdsBlock
from fetch.planner import PartitionData
from fetch.sessions import FetchSessionCache
from fetch.tiered import TieredReader
from fetch.waiter import AppendWaiters
from local_tier.cleaning.settings import cleaner_config
from local_tier.config import LogConfig
from local_tier.log import Log, LogAppendInfo
from local_tier.manager import LogManager
from local_tier.ownership import LoopOwner
from local_tier.producer_state import AppendOrigin
from remote_tier.cleaner import RemoteCleaner
from remote_tier.filesystem import FileSystemObjectStore
from remote_tier.log_manager import RemoteLogManager
from remote_tier.store import ObjectStore
from service.cluster.image import MetadataImage
from service.cluster.node import ClusterNode, must_answer_locally
from service.cluster.topics import (
    allocate_producer_ids,
    alter_configs_remotely,
    create_topic_remotely,
    delete_topic_remotely,
)
from service.diskless.node import DisklessNode
from service.diskless.upkeep import run_upkeep
from service.groups import GroupCoordinator, start_coordinator
from service.groups.records import OFFSETS_TOPIC
from service.loop_lag import LoopLagProbe
from service.maintenance import run_maintenance
from service.replication.barrier import note_append
from service.replication.replica_manager import ReplicaManager
from service.replication.txn_markers import TransactionalInit, TxnCompletionHook, write_txn_markers
from service.replication.wiring import wire_replication
from service.security.setup import InterBrokerSecurity
from service.transactions import TransactionCoordinator, start_transaction_coordinator
from service.transactions.producer_ids import ProducerIdManager

__all__ = ["Broker"]

log = logging.getLogger("strata.broker")


class Broker:
    def __init__(
        self,
        *,
        data_dir: Path,
        config: BrokerConfig,
        advertised_listeners: Sequence[Endpoint],
        object_store: ObjectStore | None = None,
        inter_broker: InterBrokerSecurity | None = None,
    ) -> None:  # advertised_listeners: registered, the inter-broker one (inter_broker) first
        self.data_dir = data_dir
        self.config = config
        self.node_id = config.get_int("node.id")
        self.fetch_max_bytes = config.get_int("fetch.max.bytes")
        self.coordinator_write_timeout_ms = config.get_int("offsets.commit.timeout.ms")
        self.auto_create_topics = config.get_bool("auto.create.topics.enable")
        self.advertised_listeners = tuple(advertised_listeners)
        self.inter_broker = inter_broker or InterBrokerSecurity(self.advertised_listeners[0].name)
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
        self.loop_lag = LoopLagProbe.of(config)
        data_dir.mkdir(parents=True, exist_ok=True)
        # The object store holds the cluster metadata and the tiered segments; the
        # embedded default is a directory beside the logs.
        self.object_store = object_store or FileSystemObjectStore(data_dir / "bucket")
        self.view = MetadataView(self.object_store, head_check_ms=config.get_int("metadata.log.head.check.ms"))
        self.controller = MetadataImage(self.view, config, self._controller_id)
        self.logs = LogManager(
            data_dir / "logs", producer_id_expiration_ms=config.get_int("producer.id.expiration.ms")
        )
        self.replicas = ReplicaManager(self.node_id, self.logs, self._log_config, self.waiters)
        # blocks of producer ids come from the active controller (AllocateProducerIds)
        self.producer_ids = ProducerIdManager(self._allocate_producer_ids)
        #: InitProducerId with a transactional id goes here (the transaction coordinator)
        self.transaction_coordinator: TransactionalInit | None = None
        #: topic -> called when transaction markers land in its partitions (ADR 0011)
        self.txn_completion_hooks: dict[str, TxnCompletionHook] = {}
        self.tiering = RemoteLogManager(self.object_store, config)
        self.tiered_reads = TieredReader(self.tiering, config)
        #: the log cleaners' settings now (``log.cleaner.*``, dynamic ones included)
        self._cleaner_config = cleaner_config(config)
        self.remote_cleaner = RemoteCleaner(
            self.tiering, config, self._cleaner_config, data_dir / "remote-compaction", data_dir / "logs"
        )
        self.cluster: ClusterNode | None = None
        #: diskless topics: writes through the bucket, sequencing, reads (ADR 0027)
        self.diskless = DisklessNode(self)
        #: the dynamic broker configs the hosted logs follow, as stored in the metadata
        self._dynamic_section: str | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._restoring_reserve = False
        self.groups: GroupCoordinator = None  # type: ignore[assignment]  # set by start()
        self.transactions: TransactionCoordinator = None  # type: ignore[assignment]  # set by start()

    # -- lifecycle ---------------------------------------------------------

    async def start(self, versions: Mapping[int, int], ready_timeout_s: float) -> None:
        """Join the cluster, load the local logs, register, and wait until this broker is
        unfenced and has applied the metadata that says so (then it may serve). Its
        partitions are opened, led and followed only from the metadata that registered it."""
        self.cluster = ClusterNode(
            store=self.object_store,
            config=self.config,
            data_dir=self.data_dir,
            view=self.view,
            versions=versions,
            apply=self.apply_metadata,
            inter_broker=self.inter_broker,
            log_dir_offline=lambda: self.logs.offline,
        )
        await self.cluster.join()
        loop = asyncio.get_running_loop()
        self.logs.failure.add_listener(
            lambda reason: loop.call_soon_threadsafe(self._on_log_dir_offline, reason))
        self.logs.load(self._log_config)
        self.groups = start_coordinator(self)
        self.txn_completion_hooks[OFFSETS_TOPIC] = self.groups.txn_offsets.on_markers
        self.transactions = start_transaction_coordinator(self, self.cluster.marker_peers)
        self.transaction_coordinator = self.transactions
        self.controller.add_listener(self._on_metadata_event)
        wire_replication(self, self.cluster)
        assert self.cluster.poller is not None
        self.cluster.poller.apply_latest()
        if not await self.cluster.register(self.advertised_listeners, ready_timeout_s):
            log.warning("broker %d is not unfenced yet; serving anyway", self.node_id)
        snapshot = self.view.snapshot()
        if snapshot is not None:  # partitions from the metadata that registered this incarnation
            self.replicas.apply(snapshot.metadata)
            self.diskless.apply(snapshot.metadata)
        await self.tiering.loaded()  # the manifests of the partitions it leads

    def _on_log_dir_offline(self, reason: str) -> None:
        """The log directory failed (a failed fsync or write, on any thread): its partitions
        stop replicating here and answer KAFKA_STORAGE_ERROR (:meth:`ReplicaManager.go_offline`),
        and the next heartbeat, sent now, asks the controller to move their leaderships (ADR 0007)."""
        self.replicas.go_offline(reason)
        if self.cluster is not None and self.cluster.lifecycle is not None:
            self.cluster.lifecycle.poke()

    def apply_metadata(self, snapshot: Snapshot) -> None:
        """A newer metadata snapshot, on the loop: partitions, then listeners of topic events."""
        md = snapshot.metadata
        registered = None if self.cluster is None else self.cluster.registered_revision
        if registered is not None and snapshot.revision >= registered:
            # never before: a restarted broker would act on leaderships of its previous
            # incarnation, which its registration fences (a KRaft broker waits the same way)
            self.replicas.apply(md)
            self.diskless.apply(md)
        self._follow_dynamic_configs(md)
        self.controller.publish(md)
        if self.cluster is not None:
            self.cluster.metadata_applied()

    async def stop(self) -> None:
        """Leave the cluster cleanly (controlled shutdown, lease handed back), then stop the
        replica fetchers and ISR requests."""
        await self.diskless.stop()
        if self.cluster is not None:
            await self.cluster.leave(self.config.get_bool("controlled.shutdown.enable"))
        await self.replicas.close()

    def start_log_cleaner(self) -> None:
        """Start the log cleaner threads, with this loop as the logs' owner (ADR 0019); a tiered compacted
        log is cleaned on disk up to the bucket's end, in the bucket by the remote cleaner; one I/O budget."""
        self.logs.start_cleaner(
            LoopOwner(asyncio.get_running_loop(), lambda: self._closing),
            self._cleaner_config,
            limit=self.tiering.local_clean_limit,
            throttler=self.remote_cleaner.throttler,
        )

    def close(self) -> None:
        self._closing = True
        self.loop_lag.stop()
        if self.transactions is not None:
            self.transactions.shutdown()
        if self.groups is not None:
            self.groups.shutdown()
        self.replicas.shutdown()
        self.waiters.notify_all()
        self.remote_cleaner.close()
        self.diskless.close()
        self.tiered_reads.close()
        self.tiering.close()
        self.logs.shutdown()

    async def run_background(self) -> None:
        """The loop-lag probe, the log cleaners, then the periodic work (:mod:`service.maintenance`)."""
        self.loop_lag.start()
        self.start_log_cleaner()
        self.spawn(self.remote_cleaner.run(self))
        self.spawn(run_upkeep(self.diskless, self))
        await run_maintenance(self)

    def spawn(self, coro: Awaitable[Any]) -> None:
        """Run a coroutine in the background, keeping a reference until it ends."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- topics ------------------------------------------------------------

    def is_active_controller(self) -> bool:
        return self.cluster is not None and self.cluster.is_active_controller

    def forwards_controller_writes(self) -> bool:
        """Whether a controller write a client sent here goes to another broker."""
        return self.cluster is not None and not self.cluster.is_active_controller

    def _controller_id(self) -> int:
        return -1 if self.cluster is None else self.cluster.controller_id()

    @property
    def closing(self) -> bool:
        return self._closing

    def log_config(self, topic: str) -> LogConfig:
        """The effective configs of ``topic`` (the broker's defaults before any metadata)."""
        return self._log_config(topic)

    def _log_config(self, topic: str) -> LogConfig:
        if self.view.snapshot() is None:
            return LogConfig.from_properties(self.config.topic_defaults())
        if self.controller.topic(topic) is None:
            return LogConfig.from_properties(self.controller.broker_config().topic_defaults())
        return LogConfig.from_properties(self.controller.effective_topic_config(topic))

    def _follow_dynamic_configs(self, md: ClusterMetadata) -> None:
        """A change of the dynamic broker configs (kafka-configs.sh --entity-type brokers) reaches
        every hosted log at once, as Kafka's ``DynamicLogConfig.reconfigure``: topics without an
        override of their own follow the new defaults (retention, segment size, largest batch ...)."""
        section = md.sections.get(DYNAMIC_SECTION)
        if section == self._dynamic_section:
            return
        self._dynamic_section = section
        for topic in {topic for topic, _ in self.logs.all_logs()}:
            self.logs.update_config(topic, self._log_config(topic))
        cleaner = cleaner_config(self.controller.broker_config(md))
        if cleaner != self._cleaner_config:
            self._cleaner_config = cleaner
            self.remote_cleaner.reconfigure(cleaner)
            if self.logs.cleaner is not None:
                self.logs.cleaner.reconfigure(cleaner)

    def restore_reserve(self) -> None:
        self._restore_reserve()

    def _on_metadata_event(self, event: MetadataEvent) -> None:
        """Topic events of an applied snapshot (partitions follow in the replica manager)."""
        if isinstance(event, TopicDeleted) and event.topic.name != OFFSETS_TOPIC and self.groups is not None:
            self.groups.on_topics_deleted({event.topic.name})  # as Kafka: the groups' offsets of it go too

    def _restore_reserve(self) -> None:
        """Space was just freed: the embedded store takes back its full-disk reserve
        before producers can fill it again (docs/adr/0007-full-disk-and-data-dir-lock.md).
        On a worker thread, one at a time: it takes a lock other threads and processes hold
        while they write, and allocates the reserve (``fallocate``)."""
        store = self.object_store
        if not isinstance(store, FileSystemObjectStore) or self._restoring_reserve:
            return
        self._restoring_reserve = True

        async def restore() -> None:
            try:
                await asyncio.to_thread(store.restore_reserve)
            finally:
                self._restoring_reserve = False

        self.spawn(restore())

    def active_controller(self) -> Any:
        """This broker's controller when it is the active one; ``NotControllerError`` else."""
        cluster = self.cluster
        if cluster is None or cluster.controller is None or not cluster.controller.is_active:
            raise NotControllerError(
                f"broker {self.node_id} is not the active controller (the controller is "
                f"{self._controller_id()})"
            )
        return cluster.controller

    async def create_topic(
        self,
        name: str,
        *,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
        assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Create a topic through the active controller (this broker's, or over the wire
        for the topics a broker creates itself: auto-created, internal). ``assignments``
        (partition -> replicas) places the partitions by hand."""
        if self._goes_remote():
            assert self.cluster is not None
            return await create_topic_remotely(
                self.cluster, self.controller, name, num_partitions, replication_factor,
                configs or {}, validate_only,
            )
        controller = self.active_controller()
        return await asyncio.to_thread(
            controller.create_topic, name, num_partitions, replication_factor, dict(configs or {}),
            validate_only, assignments,
        )

    async def _allocate_producer_ids(self) -> ProducerIdsBlock:
        """A block of producer ids from the active controller (AllocateProducerIds, 67)."""
        cluster = self.cluster
        if cluster is None:
            raise NotControllerError("the broker has not joined its cluster yet")
        return await allocate_producer_ids(cluster)

    def replication_factor(self, info: TopicInfo) -> int:
        """The replica count of the topic's first partition (what CreateTopics reports)."""
        snapshot = self.view.snapshot()
        md = None if snapshot is None else snapshot.metadata
        first = None if md is None else md.partition(info.topic_id, 0)
        return len(first.replicas) if first is not None else self.config.get_int("default.replication.factor")

    def _goes_remote(self) -> bool:
        cluster = self.cluster
        return cluster is not None and not cluster.is_active_controller and not must_answer_locally()

    async def delete_topic(self, name: str) -> TopicInfo:
        if self._goes_remote():
            assert self.cluster is not None
            return await delete_topic_remotely(self.cluster, self.controller, name)
        return await asyncio.to_thread(self.active_controller().delete_topic, name)

    async def create_partitions(self, name: str, total: int, validate_only: bool,
                                assignments: Sequence[Sequence[int]] | None = None) -> TopicInfo:
        """Grow ``name`` to ``total`` partitions; ``assignments``: the replicas of each new one."""
        controller = self.active_controller()
        return await asyncio.to_thread(controller.create_partitions, name, total, validate_only,
                                       assignments)

    async def alter_topic_configs(
        self, name: str, ops: Sequence[tuple[str, int, str | None]], validate_only: bool
    ) -> TopicInfo:
        if self._goes_remote():
            assert self.cluster is not None
            return await alter_configs_remotely(self.cluster, self.controller, name, ops, validate_only)
        controller = self.active_controller()
        return await asyncio.to_thread(controller.incremental_alter_configs, name, ops, validate_only)

    # -- data path ---------------------------------------------------------

    def log_for(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Log:
        """The log of a partition this broker leads; NOT_LEADER_OR_FOLLOWER,
        FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH or UNKNOWN_TOPIC_OR_PARTITION else."""
        return self.replicas.leader_log(topic, partition, current_leader_epoch)

    def leader_epoch(self, topic: str, partition: int) -> int:
        """This broker's leader epoch of the partition; -1 when it does not lead it (a
        follower uploads and compacts nothing in the bucket)."""
        led = self.replicas.partition(topic, partition)
        return led.leader_epoch if led is not None and led.is_leader else -1

    def append(
        self,
        topic: str,
        partition: int,
        records: bytes | memoryview,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        validated: ValidatedRecords | None = None,
        required_acks: int = 1,
    ) -> LogAppendInfo:
        """Append to a partition this broker leads, stamped with its leader epoch; a
        duplicate idempotent batch writes nothing. ``required_acks`` -1 (acks=all) first
        needs ``min.insync.replicas`` replicas in the ISR (NOT_ENOUGH_REPLICAS else).

        ``validated``: what ``validate_batches`` made of ``records``, when the caller did it.
        """
        target = self.replicas.get_partition(topic, partition)
        log_ = target.check_leader()
        if required_acks == -1:
            target.check_min_isr()
        info = log_.append_as_leader(
            records, target.leader_epoch, validated=validated, origin=origin
        )
        note_append(topic, partition, info.last_offset + 1)  # a coordinator's write waits for the ISR
        if info.duplicate:
            return info
        self.replicas.after_append(target)
        self.bytes_in[topic] += info.size
        self.records_in[topic] += info.record_count
        return info

    def pending_flush(self, topic: str, partition: int, offset: int) -> Future[bool] | None:
        """The fsync that ``flush.messages`` scheduled for the offsets below ``offset`` of a
        partition led here, if one is still to be waited for (``Log.pending_flush``)."""
        flush = self.replicas.get_partition(topic, partition).log.pending_flush(offset)
        return None if flush is None or (flush.done() and flush.result()) else flush

    def replicated(self, topic: str, partition: int, offset: int) -> bool:
        """Whether every replica in the (maximal) ISR holds offsets below ``offset``
        (acks=all): :meth:`service.replication.partition.Partition.replicated`."""
        return self.replicas.get_partition(topic, partition).replicated(offset)

    def may_lead(self) -> bool:
        """Whether this broker can still confirm its leaderships (``BrokerLifecycle.may_lead``)."""
        return self.replicas.may_lead()

    async def wait_replicated(self, topic: str, partition: int, offset: int, timeout_ms: int) -> None:
        """Wait until :meth:`replicated`; REQUEST_TIMED_OUT after ``timeout_ms``."""
        await self.replicas.wait_replicated(topic, partition, offset, timeout_ms)

    def write_txn_markers(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        partitions: Sequence[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        """COMMIT/ABORT markers into ``partitions``: see :func:`service.replication.txn_markers.write_txn_markers`."""
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

