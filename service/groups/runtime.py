"""The coordinator's two seams to the broker: the ``__consumer_offsets`` log and asyncio timers.

:func:`start_coordinator` is what :meth:`service.broker.Broker.start` calls: it
builds the coordinator over the broker's local log of ``__consumer_offsets`` and
drives its timers with ``loop.call_later`` -- no polling. It serves no group
yet: :class:`OffsetsLeadership` loads the groups of each ``__consumer_offsets``
partition when this broker becomes its leader (the segment files are read on a
worker thread, never the log: :mod:`service.groups.loading`; the groups answer
COORDINATOR_LOAD_IN_PROGRESS meanwhile, and a failed load is retried) and unloads
them when it stops leading it. The topic itself is created through the
controller by FindCoordinator, the first time a client looks for a coordinator
(:meth:`BrokerOffsetLog.ensure` only reads it).

Committed offsets are served once the in-sync replicas of their partition hold
them: :class:`OffsetsReplication` waits for the replication of what the
coordinator wrote, as an ``acks=all`` producer does, and tells it
(:mod:`service.groups.pending`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from common.config import BrokerConfig
from common.errors import (
    CorruptRecordError,
    ErrorCode,
    KafkaError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
)
from common.record.batch import build_batch
from common.record.control import marker_from
from controller.events import MetadataListener, PartitionsCreated, TopicCreated, TopicDeleted
from controller.records import TopicInfo
from controller.registrations import PartitionRegistration
from controller.topic_changes import default_replication_factor
from local_tier.log import LogAppendInfo
from local_tier.manager import LogManager
from local_tier.producer_state import AppendOrigin
from service.group_configs import SECTION as GROUP_CONFIGS
from service.group_configs import overrides_of
from service.groups.coordinator import GroupCoordinator
from service.groups.errors import CoordinatorNotAvailableError
from service.groups.loading import PartitionSnapshot, take_snapshot
from service.groups.records import OFFSETS_TOPIC, partition_for
from service.groups.requests import GroupConfig

__all__ = [
    "OFFSETS_TOPIC_CONFIGS",
    "BrokerOffsetLog",
    "ControllerTopics",
    "LoopTimer",
    "OffsetsHost",
    "OffsetsLeadership",
    "OffsetsReplication",
    "create_internal_topic",
    "ensure_internal_topic",
    "ensure_offsets_topic",
    "offsets_topic_configs",
    "start_coordinator",
    "wait_until_serving",
]

#: __consumer_offsets is compacted, as Kafka's (the last record per key stays, so the
#: replay at start reads about one record per live group and offset); it is never
#: tiered (as in Kafka): the coordinator replays it from the local log at start. See
#: docs/adr/0003-consumer-offsets.md and docs/adr/0019-compaction.md.
OFFSETS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "remote.storage.enable": "false",
}
log = logging.getLogger("strata.groups")


class TopicsReader(Protocol):
    """The cluster metadata's topics as the broker reads them (its ``controller``)."""

    def topic(self, name: str) -> TopicInfo | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...

    def topics(self) -> list[TopicInfo]: ...

    def partition(self, name: str, index: int) -> PartitionRegistration | None: ...

    def registered_brokers(self) -> int: ...

    @property
    def metadata(self) -> Any: ...  # the cluster metadata: its ``section(name)``, group configs'

    def add_listener(self, listener: MetadataListener) -> None: ...


def offsets_topic_configs(config: BrokerConfig) -> dict[str, str]:
    """The topic configs ``__consumer_offsets`` is created with (``offsets.topic.segment.bytes``)."""
    return {**OFFSETS_TOPIC_CONFIGS, "segment.bytes": str(config.get_int("offsets.topic.segment.bytes"))}


class OffsetsHost(Protocol):
    """What the coordinator's runtime needs of the broker (:class:`service.broker.Broker` has it).

    The config (offsets topic size, group timings), the controller to look up
    ``__consumer_offsets``, topic creation, appends, and the local logs to replay.
    """

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def controller(self) -> TopicsReader: ...

    @property
    def logs(self) -> LogManager: ...

    async def create_topic(
        self,
        name: str,
        *,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
    ) -> TopicInfo: ...

    def append(
        self, topic: str, partition: int, records: bytes, origin: AppendOrigin = AppendOrigin.CLIENT,
        *, required_acks: int = 1,
    ) -> LogAppendInfo: ...

    def replicated(self, topic: str, partition: int, offset: int) -> bool: ...

    def may_lead(self) -> bool:
        """Whether this broker can still confirm its leaderships (a paused or cut-off one
        may have been replaced): its coordinators serve nothing from memory otherwise."""

    async def wait_replicated(self, topic: str, partition: int, offset: int, timeout_ms: int) -> None: ...


def ensure_internal_topic(broker: OffsetsHost, name: str) -> int:
    """A coordinator's topic's (``__consumer_offsets``, ``__transaction_state``) partition
    count; COORDINATOR_NOT_AVAILABLE while it does not exist (FindCoordinator creates it
    through the controller: :func:`create_internal_topic`)."""
    info = broker.controller.topic(name)
    if info is None:
        raise CoordinatorNotAvailableError(f"{name} does not exist yet")
    return info.partitions


async def create_internal_topic(
    broker: OffsetsHost, name: str, partitions_key: str, replication_key: str, configs: Mapping[str, str]
) -> TopicInfo:
    """A coordinator's topic, created through the controller when missing, with
    ``partitions_key`` partitions, ``replication_key`` replicas and ``configs``."""
    info = broker.controller.topic(name)
    if info is not None:
        return info
    try:
        return await broker.create_topic(
            name,
            num_partitions=broker.config.get_int(partitions_key),
            replication_factor=default_replication_factor(
                broker.config, replication_key, broker.controller.registered_brokers()
            ),
            configs=configs,
        )
    except TopicAlreadyExistsError:
        info = broker.controller.topic(name)
        if info is None:
            raise CoordinatorNotAvailableError(f"{name} is being created") from None
        return info


class LoopTimer:
    """:class:`service.groups.seams.Timer` on the running asyncio loop."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000, callback)


class BrokerOffsetLog:
    """:class:`service.groups.seams.OffsetLog` over the broker's local log, a
    :class:`~service.groups.seams.ReplicatedLog`: appends are ``acks=all`` writes (refused
    while the ISR is below ``min.insync.replicas``, as Kafka's coordinators append)."""

    def __init__(self, broker: OffsetsHost) -> None:
        self._broker = broker
        self._open: dict[tuple[int, int], list[tuple[bytes, bytes | None]]] = {}

    def ensure(self) -> int:
        return ensure_internal_topic(self._broker, OFFSETS_TOPIC)

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        now = int(time.time() * 1000)
        batch = build_batch([(key, value, (), now) for key, value in records])
        self._broker.append(OFFSETS_TOPIC, partition, batch, required_acks=-1)

    def end_offset(self, partition: int) -> int:
        log_ = self._broker.logs.get_log(OFFSETS_TOPIC, partition)
        return 0 if log_ is None else log_.log_end_offset

    def replicated(self, partition: int, offset: int) -> bool:
        try:
            return self._broker.replicated(OFFSETS_TOPIC, partition, offset)
        except KafkaError:
            return False  # not enough in-sync replicas, or no longer the leader

    def append_transactional(
        self,
        partition: int,
        records: Sequence[tuple[bytes, bytes | None]],
        producer_id: int,
        producer_epoch: int,
    ) -> None:
        now = int(time.time() * 1000)
        batch = build_batch(
            [(key, value, (), now) for key, value in records],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=True,
        )
        # A coordinator's append: the producer's epoch is checked, not its sequence (Kafka's).
        self._broker.append(OFFSETS_TOPIC, partition, batch, AppendOrigin.COORDINATOR, required_acks=-1)

    def open_transactions(self) -> Mapping[tuple[int, int], Sequence[tuple[bytes, bytes | None]]]:
        return self._open

    def replay(self, partition: int | None = None) -> Iterator[tuple[bytes, bytes | None]]:
        """Records in offset order (of ``partition`` only, when given); a transaction's
        records where its COMMIT marker stands. Reads the files where it runs: the
        broker's loads go through :meth:`snapshot` and :meth:`replay_snapshot` instead.

        Aborted transactions are dropped; those with no marker yet are kept in
        :meth:`open_transactions` (``service.groups.txn_offsets``).
        """
        self._open = {}
        for index in self._partitions(partition):
            snapshot = self.snapshot(index)
            try:
                yield from self._replay_one(index, snapshot)
            finally:
                snapshot.close()

    def _partitions(self, partition: int | None) -> list[int]:
        return sorted(
            p for (topic, p) in self._broker.logs.all_logs()
            if topic == OFFSETS_TOPIC and partition in (None, p)
        )

    def snapshot(self, partition: int) -> PartitionSnapshot:
        """The partition's bytes as of now, taken on the loop (the log's owner), for
        :meth:`replay_snapshot` to read on a thread; the caller closes it."""
        return take_snapshot(self._broker.logs.get_log(OFFSETS_TOPIC, partition), f"{OFFSETS_TOPIC}-{partition}")

    def replay_snapshot(self, partition: int, snapshot: PartitionSnapshot) -> Iterator[tuple[bytes, bytes | None]]:
        """:meth:`replay` of one partition over a snapshot already taken (any thread)."""
        self._open = {}
        return self._replay_one(partition, snapshot)

    def _replay_one(self, index: int, snapshot: PartitionSnapshot) -> Iterator[tuple[bytes, bytes | None]]:
        for header, records in snapshot.batches():
            for record in records:
                if header.is_control:
                    held = self._open.pop((index, header.producer_id), [])
                    try:
                        marker = marker_from(header, record.key, record.value)
                    except CorruptRecordError:
                        marker = None  # as an abort: the held offsets are dropped
                    if marker is not None and marker.committed:
                        yield from held
                elif record.key is None:
                    continue
                elif header.is_transactional:
                    self._open.setdefault((index, header.producer_id), []).append(
                        (record.key, record.value)
                    )
                else:
                    yield record.key, record.value


class ControllerTopics:
    """:class:`service.groups.seams.TopicsImage` over the controller; its version moves on every
    topic creation, deletion and partition increase (a metadata listener)."""

    def __init__(self, controller: TopicsReader) -> None:
        self._controller = controller
        self.version = 1
        controller.add_listener(self._changed)

    def _changed(self, event: object) -> None:
        if isinstance(event, (TopicCreated, TopicDeleted, PartitionsCreated)):
            self.version += 1

    def by_name(self, name: str) -> tuple[uuid.UUID, int] | None:
        info = self._controller.topic(name)
        return None if info is None else (info.topic_id, info.partitions)

    def by_id(self, topic_id: uuid.UUID) -> tuple[str, int] | None:
        info = self._controller.topic_by_id(topic_id)
        return None if info is None else (info.name, info.partitions)

    def names(self) -> list[str]:
        return [t.name for t in self._controller.topics()]


def group_config(config: BrokerConfig) -> GroupConfig:
    """The coordinator's settings from the broker's config keys."""
    assignors = tuple(a.strip() for a in config.get_str("group.consumer.assignors").split(",") if a.strip())
    return GroupConfig(
        initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
        offsets_retention_ms=config.get_int("offsets.retention.minutes") * 60_000,
        consumer_session_timeout_ms=config.get_int("group.consumer.session.timeout.ms"),
        consumer_heartbeat_interval_ms=config.get_int("group.consumer.heartbeat.interval.ms"),
        consumer_max_size=config.get_int("group.consumer.max.size"),
        consumer_assignors=assignors or ("uniform", "range"),
        consumer_migration_policy=config.get_str("group.consumer.migration.policy").lower(),
    )


def start_coordinator(broker: OffsetsHost) -> GroupCoordinator:
    """A coordinator over the broker's logs, its timers on the running loop, serving the
    groups of no partition until :class:`OffsetsLeadership` loads them."""
    settings = dataclasses.replace(group_config(broker.config), group_overrides=overrides_of(
        lambda: broker.controller.metadata.section(GROUP_CONFIGS)))  # kafka-configs.sh --entity-type groups
    coordinator = GroupCoordinator(
        BrokerOffsetLog(broker), LoopTimer(), settings, ControllerTopics(broker.controller), broker.may_lead,
    )
    coordinator.serve_partitions()
    OffsetsReplication(broker, coordinator, broker.config.get_int("offsets.commit.timeout.ms"))
    return coordinator


class OffsetsReplication:
    """Waits, per ``__consumer_offsets`` partition, until its in-sync replicas hold the
    committed offsets the coordinator wrote, and tells it (``GroupCoordinator.replication``);
    only then are they served. One task per partition with writes waiting, oldest first
    (the high watermark passes them in that order); a wait that times out starts again,
    one that cannot succeed now (too few in-sync replicas, the leadership moving) backs
    off: the writes wait until they replicate or the partition is unloaded."""

    #: seconds before waiting again when the partition cannot replicate now
    BACKOFF_S = 0.1

    def __init__(self, broker: OffsetsHost, coordinator: GroupCoordinator, timeout_ms: int) -> None:
        self._broker = broker
        self._coordinator = coordinator
        self._timeout_ms = timeout_ms
        self._tasks: dict[int, asyncio.Task[None]] = {}
        coordinator.replication.on_pending = self.watch

    def watch(self, partition: int) -> None:
        """Writes of ``partition`` wait for its ISR: wait with them (once per partition)."""
        task = self._tasks.get(partition)
        if task is None or task.done():
            self._tasks[partition] = asyncio.ensure_future(self._wait(partition))

    async def _wait(self, partition: int) -> None:
        replication = self._coordinator.replication
        while (end := replication.pending_end(partition)) is not None:
            try:
                await self._broker.wait_replicated(OFFSETS_TOPIC, partition, end, self._timeout_ms)
            except RequestTimedOutError:
                continue
            except KafkaError as exc:
                log.debug("%s-%d: offsets up to %d wait for the ISR: %s", OFFSETS_TOPIC, partition, end, exc)
                await asyncio.sleep(self.BACKOFF_S)
                continue
            replication.replicated(partition, end)


async def ensure_offsets_topic(broker: OffsetsHost) -> TopicInfo:
    """``__consumer_offsets``, created through the controller when missing (FindCoordinator)."""
    return await create_internal_topic(
        broker, OFFSETS_TOPIC, "offsets.topic.num.partitions", "offsets.topic.replication.factor",
        offsets_topic_configs(broker.config),
    )


async def wait_until_serving(
    broker: OffsetsHost,
    coordinator: GroupCoordinator,
    node_id: int,
    group_ids: Iterable[str],
    timeout_s: float = 5.0,
) -> None:
    """Before a group request: create ``__consumer_offsets`` if it is missing, and wait
    (at most ``timeout_s``) while this broker leads a group's partition but has not
    loaded it yet, so a client that skipped FindCoordinator, or came right after it,
    is served instead of told to retry. Never raises: the request answers whatever
    error remains (NOT_COORDINATOR when another broker leads the partition)."""
    wanted = [g for g in group_ids if g]
    if not wanted:
        return
    try:
        info = await ensure_offsets_topic(broker)
    except KafkaError:
        return
    deadline = asyncio.get_running_loop().time() + timeout_s
    for group_id in wanted:
        while (error := coordinator.coordinator_error(group_id)) is not None:
            registration = broker.controller.partition(
                OFFSETS_TOPIC, partition_for(group_id, info.partitions)
            )
            mine = registration is not None and registration.leader == node_id and broker.may_lead()
            if error == ErrorCode.not_coordinator and not mine:
                break  # another broker coordinates it, none does right now, or this one cannot tell
            if asyncio.get_running_loop().time() >= deadline:
                return
            await asyncio.sleep(0.01)


class OffsetsLeadership:
    """Loads and unloads the coordinator's groups as this broker gains and loses the
    leadership of ``__consumer_offsets`` partitions (a listener of the replica manager).

    A load that fails (a read error, a damaged batch) is retried with a growing pause
    for as long as this broker leads the partition: its groups answer
    COORDINATOR_LOAD_IN_PROGRESS meanwhile, which clients retry, and are served as soon
    as a load succeeds, without waiting for the leadership to move.
    """

    #: seconds before the first retry of a failed load; doubled after each failure
    RETRY_BACKOFF_S = 0.25
    #: the longest pause between two attempts
    RETRY_BACKOFF_MAX_S = 5.0

    def __init__(self, broker: OffsetsHost, coordinator: GroupCoordinator) -> None:
        self._broker = broker
        self._coordinator = coordinator
        self._generation: dict[int, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def on_leader(self, topic: str, index: int) -> None:
        if topic != OFFSETS_TOPIC:
            return
        generation = self._generation.get(index, 0) + 1
        self._generation[index] = generation
        self._coordinator.begin_loading(index)
        task = asyncio.ensure_future(self._load(index, generation))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def on_resign(self, topic: str, index: int) -> None:
        if topic != OFFSETS_TOPIC:
            return
        self._generation[index] = self._generation.get(index, 0) + 1
        self._coordinator.unload_partition(index)

    def _leading(self, index: int, generation: int) -> bool:
        """Whether the leadership the load of ``generation`` is for still holds."""
        return self._generation.get(index) == generation

    async def _load(self, index: int, generation: int) -> None:
        """Load the partition's groups, again after a pause when it fails, until a load
        succeeds or the leadership moves on."""
        backoff = self.RETRY_BACKOFF_S
        attempt = 1
        while self._leading(index, generation):
            try:
                await self._load_once(index, generation)
            except Exception as exc:  # noqa: BLE001 - whatever failed, the groups must not stay unloaded
                if not self._leading(index, generation):
                    return
                log.warning(
                    "loading %s-%d failed (attempt %d), retrying in %.2f s: %s",
                    OFFSETS_TOPIC, index, attempt, backoff, exc, exc_info=attempt == 1,
                )
                self._coordinator.unload_partition(index)  # whatever the failed attempt left
                self._coordinator.begin_loading(index)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.RETRY_BACKOFF_MAX_S)
                attempt += 1
                continue
            if attempt > 1 and self._leading(index, generation):
                log.info("loaded %s-%d at attempt %d", OFFSETS_TOPIC, index, attempt)
            return

    async def _load_once(self, index: int, generation: int) -> None:
        """One load: the partition's bytes fixed on the loop, read and decoded on a worker
        thread, the groups rebuilt on the loop (when the leadership has not moved)."""
        offset_log = BrokerOffsetLog(self._broker)  # one per load: it keeps the open transactions
        snapshot = offset_log.snapshot(index)
        try:
            records = await asyncio.to_thread(lambda: list(offset_log.replay_snapshot(index, snapshot)))
        finally:
            snapshot.close()
        if self._leading(index, generation):
            self._coordinator.load_partition(index, records, offset_log.open_transactions())
