"""The coordinator's two seams to the broker: the ``__consumer_offsets`` log and asyncio timers.

:func:`start_coordinator` is what :meth:`service.broker.Broker.open` calls: it
loads every group from the local log of ``__consumer_offsets`` (when the topic
exists; it is created, through the controller, the first time a group needs it)
and drives the coordinator's timers with ``loop.call_later`` — no polling.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from controller.configs import BrokerConfig
from controller.events import PartitionsCreated, TopicCreated, TopicDeleted
from controller.metadata import Controller, TopicInfo
from local_tier.control import marker_from
from local_tier.errors import CorruptRecordError, TopicAlreadyExistsError
from local_tier.log import LogAppendInfo
from local_tier.manager import LogManager
from local_tier.producer_state import AppendOrigin
from local_tier.records import build_batch
from service.groups.coordinator import GroupCoordinator
from service.groups.records import OFFSETS_TOPIC
from service.groups.requests import GroupConfig
from service.log_replay import iter_log_records

__all__ = [
    "OFFSETS_TOPIC_CONFIGS",
    "BrokerOffsetLog",
    "ControllerTopics",
    "LoopTimer",
    "OffsetsHost",
    "ensure_internal_topic",
    "offsets_topic_configs",
    "start_coordinator",
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
    def controller(self) -> Controller: ...

    @property
    def logs(self) -> LogManager: ...

    def create_topic(
        self, name: str, *, num_partitions: int = -1, configs: Mapping[str, str] | None = None
    ) -> TopicInfo: ...

    def append(
        self, topic: str, partition: int, records: bytes, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> LogAppendInfo: ...


def ensure_internal_topic(
    broker: OffsetsHost, name: str, partitions_key: str, configs: Mapping[str, str]
) -> int:
    """A coordinator's topic (``__consumer_offsets``, ``__transaction_state``), created on first
    use with ``partitions_key`` partitions and ``configs``; its partition count."""
    info = broker.controller.topic(name)
    if info is None:
        try:
            info = broker.create_topic(
                name, num_partitions=broker.config.get_int(partitions_key), configs=configs
            )
        except TopicAlreadyExistsError:
            info = broker.controller.topic(name)
            assert info is not None
    return info.partitions


class LoopTimer:
    """:class:`service.groups.seams.Timer` on the running asyncio loop."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000, callback)


class BrokerOffsetLog:
    """:class:`service.groups.seams.OffsetLog` over the broker's local log."""

    def __init__(self, broker: OffsetsHost) -> None:
        self._broker = broker
        self._open: dict[tuple[int, int], list[tuple[bytes, bytes | None]]] = {}

    def ensure(self) -> int:
        return ensure_internal_topic(
            self._broker,
            OFFSETS_TOPIC,
            "offsets.topic.num.partitions",
            offsets_topic_configs(self._broker.config),
        )

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        now = int(time.time() * 1000)
        batch = build_batch([(key, value, (), now) for key, value in records])
        self._broker.append(OFFSETS_TOPIC, partition, batch)

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
        self._broker.append(OFFSETS_TOPIC, partition, batch, AppendOrigin.COORDINATOR)

    def open_transactions(self) -> Mapping[tuple[int, int], Sequence[tuple[bytes, bytes | None]]]:
        return self._open

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Records in offset order; a transaction's records where its COMMIT marker stands.

        Aborted transactions are dropped; those with no marker yet are kept in
        :meth:`open_transactions` (``service.groups.txn_offsets``).
        """
        self._open = {}
        logs = sorted(
            (p, log) for (topic, p), log in self._broker.logs.all_logs().items() if topic == OFFSETS_TOPIC
        )
        for partition, log in logs:
            for header, record in iter_log_records(log):
                if header.is_control:
                    held = self._open.pop((partition, header.producer_id), [])
                    try:
                        marker = marker_from(header, record.key, record.value)
                    except CorruptRecordError:
                        marker = None  # as an abort: the held offsets are dropped
                    if marker is not None and marker.committed:
                        yield from held
                elif record.key is None:
                    continue
                elif header.is_transactional:
                    self._open.setdefault((partition, header.producer_id), []).append(
                        (record.key, record.value)
                    )
                else:
                    yield record.key, record.value


class ControllerTopics:
    """:class:`service.groups.seams.TopicsImage` over the controller; its version moves on every
    topic creation, deletion and partition increase (a metadata listener)."""

    def __init__(self, controller: Controller) -> None:
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
    """A coordinator loaded from the broker's logs, its timers on the running loop."""
    coordinator = GroupCoordinator(
        BrokerOffsetLog(broker), LoopTimer(), group_config(broker.config),
        ControllerTopics(broker.controller),
    )
    coordinator.load()
    return coordinator
