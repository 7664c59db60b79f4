"""The transaction coordinator's seams on the broker.

:func:`start_transaction_coordinator` is what :meth:`service.broker.Broker.start`
calls: it builds the coordinator over the broker's local log of
``__transaction_state`` (:class:`BrokerTxnStateLog`), its marker writer and
producer-id source (:class:`BrokerMarkers`, :class:`BrokerProducerIds`: the
partition side's :func:`service.replication.txn_markers.write_txn_markers` for the
partitions this broker leads, WriteTxnMarkers to the leader of every other one;
:class:`service.transactions.producer_ids.ProducerIdManager`) and asyncio timers. It
coordinates no transactional id yet: :class:`TxnLeadership` loads a
``__transaction_state`` partition when this broker becomes its leader (with the
partition's leader epoch as the coordinator epoch, as Kafka does), which
finishes the transactions a crash left prepared, and unloads it when the
leadership moves on -- exactly as groups follow ``__consumer_offsets``. The topic
is created through the controller by FindCoordinator
(:func:`ensure_transaction_state_topic`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from common.config import BrokerConfig
from common.errors import ErrorCode, KafkaError
from common.record.batch import build_batch
from controller.records import TopicInfo
from local_tier.read_view import LogReadView
from local_tier.replay import iter_log_records
from service.cluster.wire import request_module
from service.groups.runtime import (
    LoopTimer,
    OffsetsHost,
    create_internal_topic,
    ensure_internal_topic,
)
from service.replication import barrier
from service.transactions.coordinator import TransactionCoordinator
from service.transactions.metadata import TopicPartition
from service.transactions.producer_ids import ProducerIdManager
from service.transactions.records import TRANSACTION_STATE_TOPIC
from service.transactions.seams import TxnConfig

if TYPE_CHECKING:
    from service.cluster.channel import PeerChannels
    from service.replication.partition import Partition

__all__ = [
    "BrokerTxnStateLog",
    "TxnHost",
    "TxnLeadership",
    "ensure_transaction_state_topic",
    "start_transaction_coordinator",
    "transaction_state_topic_configs",
    "txn_config",
]


class TxnHost(OffsetsHost, Protocol):
    """What the coordinator's runtime needs of the broker (:class:`service.broker.Broker` has it):
    what the group coordinator's does, and producer ids and the markers."""

    @property
    def node_id(self) -> int: ...

    @property
    def producer_ids(self) -> ProducerIdManager: ...

    def write_txn_markers(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]: ...

    async def wait_replicated(self, topic: str, partition: int, offset: int, timeout_ms: int) -> None: ...


def transaction_state_topic_configs(config: BrokerConfig) -> dict[str, str]:
    """Compacted as Kafka's (the last state per transactional id stays; ADR 0019), local
    only (ADR 0013)."""
    return {
        "cleanup.policy": "compact",
        "retention.ms": "-1",
        "segment.bytes": str(config.get_int("transaction.state.log.segment.bytes")),
        "remote.storage.enable": "false",
    }


def txn_config(config: BrokerConfig) -> TxnConfig:
    return TxnConfig(
        max_timeout_ms=config.get_int("transaction.max.timeout.ms"),
        abort_interval_ms=config.get_int("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
        id_expiration_ms=config.get_int("transactional.id.expiration.ms"),
        expiration_interval_ms=config.get_int("transaction.remove.expired.transaction.cleanup.interval.ms"),
        markers_delay_ms=config.get_int("transaction.markers.delay.ms"),
    )


class BrokerTxnStateLog:
    """:class:`service.transactions.seams.TxnStateLog` over the broker's local log."""

    def __init__(self, broker: TxnHost) -> None:
        self._broker = broker

    def ensure(self) -> int:
        return ensure_internal_topic(self._broker, TRANSACTION_STATE_TOPIC)

    def append(self, partition: int, key: bytes, value: bytes | None) -> int:
        batch = build_batch([(key, value, (), int(time.time() * 1000))])
        return self._broker.append(TRANSACTION_STATE_TOPIC, partition, batch).last_offset + 1

    async def wait_replicated(self, partition: int, end_offset: int) -> ErrorCode:
        """``offsets.commit.timeout.ms`` at most, as every coordinator write (Kafka's acks=all)."""
        try:
            await self._broker.wait_replicated(
                TRANSACTION_STATE_TOPIC, partition, end_offset, self._broker.config.get_int("offsets.commit.timeout.ms")
            )
        except KafkaError as exc:
            return barrier.coordinator_error(exc)
        return ErrorCode.none

    def replay(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        """The log's read view is taken now, on the loop; iterating it reads the segment
        files only, so it may go on on a worker thread."""
        log = self._broker.logs.get_log(TRANSACTION_STATE_TOPIC, partition)
        return iter(()) if log is None else _records(log.read_view())

    def hosted_partitions(self) -> Sequence[int]:
        """None to load up front: :class:`TxnLeadership` loads each partition as this broker
        becomes its leader (a local log of a partition led elsewhere is not this broker's)."""
        return ()


def _records(view: LogReadView) -> Iterator[tuple[bytes, bytes | None]]:
    for header, record in iter_log_records(view):
        if not header.is_control and record.key is not None:
            yield record.key, record.value


class BrokerMarkers:
    """:class:`~service.transactions.seams.MarkerWriter`: markers of the partitions this broker
    leads through its own ``write_txn_markers``, those of every other partition in one
    WriteTxnMarkers (27) per leader over the inter-broker channels (Kafka's
    TransactionMarkerChannelManager). A leader that cannot be reached, or answers an error,
    leaves its partitions failed: the completion retries them and the metadata names the
    leader again. Lives on the event loop.
    """

    def __init__(
        self, broker: TxnHost, peers: PeerChannels | None = None, timeout_s: float = 30.0,
        replication_timeout_ms: int = 5000,
    ) -> None:
        self._broker = broker
        self._peers = peers
        self._timeout_s = timeout_s
        self._timeout_ms = replication_timeout_ms

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Sequence[TopicPartition],
    ) -> Mapping[TopicPartition, ErrorCode]:
        local: list[TopicPartition] = []
        remote: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in partitions:
            registration = self._broker.controller.partition(*tp)
            leader = -1 if registration is None else registration.leader
            if self._peers is None or leader < 0 or leader == self._broker.node_id:
                local.append(tp)  # a partition with no leader answers NOT_LEADER_OR_FOLLOWER
            else:
                remote[leader].append(tp)
        results: dict[TopicPartition, ErrorCode] = {}
        if local:
            with barrier.recording() as writes:
                results.update(self._broker.write_txn_markers(
                    producer_id=producer_id, producer_epoch=producer_epoch,
                    coordinator_epoch=coordinator_epoch, committed=commit, partitions=local,
                ))
            # a marker counts once the partition's in-sync replicas hold it (as Kafka's
            # acks=all marker append): else a failover could lose it, leaving the
            # transaction open on the new leader
            failed = await barrier.wait_replicated(self._broker, writes, self._timeout_ms)
            results.update((tp, exc.code) for tp, exc in failed.items())
        answers = await asyncio.gather(*(
            self._send(node, tps, producer_id, producer_epoch, coordinator_epoch, commit)
            for node, tps in remote.items()
        ))
        for answer in answers:
            results.update(answer)
        return results

    async def _send(
        self,
        node: int,
        partitions: Sequence[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, index in partitions:
            by_topic[topic].append(index)

        def body(version: int) -> Any:
            mod = request_module(_WRITE_TXN_MARKERS, version)
            topics = tuple(
                mod.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items()
            )
            marker = mod.WritableTxnMarker(
                producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
                topics=topics, coordinator_epoch=coordinator_epoch,
            )
            return mod.WriteTxnMarkersRequest(markers=(marker,))

        assert self._peers is not None
        failed = dict.fromkeys(partitions, ErrorCode.not_leader_or_follower)
        try:
            _, answer = await self._peers.request(node, _WRITE_TXN_MARKERS, body, timeout_s=self._timeout_s)
        except KafkaError as exc:
            _log.info("WriteTxnMarkers to broker %d failed (%s); retrying later", node, exc)
            return failed
        results: dict[TopicPartition, ErrorCode] = {}
        for marker in answer.markers:
            for topic in marker.topics:
                for part in topic.partitions:
                    results[(str(topic.name), int(part.partition_index))] = ErrorCode(int(part.error_code))
        return {tp: results.get(tp, ErrorCode.unknown_server_error) for tp in partitions}


_WRITE_TXN_MARKERS = 27
_log = logging.getLogger("strata.transactions")


class CoordinatorNotAvailableError(KafkaError):
    code = ErrorCode.coordinator_not_available


class BrokerProducerIds:
    """:class:`~service.transactions.seams.ProducerIds` from the broker's durable id blocks."""

    def __init__(self, broker: TxnHost) -> None:
        self._broker = broker

    async def next_producer_id(self) -> int:
        try:
            return await self._broker.producer_ids.generate_producer_id()
        except OSError as exc:  # the block could not be reserved
            raise CoordinatorNotAvailableError(f"no producer id block: {exc}") from exc


def start_transaction_coordinator(broker: TxnHost, peers: PeerChannels | None = None) -> TransactionCoordinator:
    """A coordinator over the broker's logs, its timers on the running loop, coordinating
    the ids of no partition until :class:`TxnLeadership` loads them; its markers for
    partitions led elsewhere go over ``peers``."""
    coordinator = TransactionCoordinator(
        BrokerTxnStateLog(broker),
        BrokerMarkers(broker, peers, broker.config.get_int("controller.socket.timeout.ms") / 1000,
                      broker.config.get_int("offsets.commit.timeout.ms")),
        BrokerProducerIds(broker),
        LoopTimer(),
        txn_config(broker.config),
        broker.may_lead,
    )
    coordinator.startup()
    return coordinator


async def ensure_transaction_state_topic(broker: TxnHost) -> TopicInfo:
    """``__transaction_state``, created through the controller when missing (FindCoordinator)."""
    return await create_internal_topic(
        broker, TRANSACTION_STATE_TOPIC, "transaction.state.log.num.partitions",
        "transaction.state.log.replication.factor", transaction_state_topic_configs(broker.config),
    )


class TxnLeadership:
    """A leadership listener of the replica manager: the coordinator loads a
    ``__transaction_state`` partition when this broker becomes its leader, its leader epoch
    the coordinator epoch its markers carry (a deposed coordinator's markers are then
    refused as TRANSACTION_COORDINATOR_FENCED), and unloads it when another broker leads it.
    The log is read on a worker thread (:meth:`TransactionCoordinator.load_off_loop`)."""

    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self._coordinator = coordinator
        self._loads: set[asyncio.Task[None]] = set()

    def on_leader(self, partition: Partition) -> None:
        if partition.topic == TRANSACTION_STATE_TOPIC:
            # a new leader epoch of a partition already led: its marker writes in flight stop
            # and the load starts them again under the new coordinator epoch
            self._coordinator.unload(partition.index)
            load = asyncio.ensure_future(
                self._coordinator.load_off_loop(partition.index, max(partition.leader_epoch, 0)))
            self._loads.add(load)
            load.add_done_callback(self._loads.discard)

    def on_resign(self, topic: str, index: int, deleted: bool) -> None:
        if topic == TRANSACTION_STATE_TOPIC:
            self._coordinator.unload(index)
