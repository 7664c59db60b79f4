"""The transaction coordinator's seams on the single-node broker.

:func:`start_transaction_coordinator` is what :meth:`service.broker.Broker.open`
calls: it builds the coordinator over the broker's local log of
``__transaction_state`` (:class:`BrokerTxnStateLog`), its marker writer and
producer-id source (:class:`BrokerMarkers`, :class:`BrokerProducerIds`: the
partition side's :func:`service.txn_markers.write_txn_markers` and
:class:`service.producer_ids.ProducerIdManager`) and asyncio timers, then
loads every hosted partition, which finishes the transactions a crash left
prepared.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from controller.configs import BrokerConfig
from local_tier.errors import ErrorCode, KafkaError
from local_tier.records import build_batch
from service.groups.runtime import LoopTimer, OffsetsHost, ensure_internal_topic
from service.log_replay import iter_log_records
from service.producer_ids import ProducerIdManager
from service.transactions.coordinator import TransactionCoordinator
from service.transactions.metadata import TopicPartition
from service.transactions.records import TRANSACTION_STATE_TOPIC
from service.transactions.seams import TxnConfig

__all__ = [
    "BrokerTxnStateLog",
    "TxnHost",
    "start_transaction_coordinator",
    "transaction_state_topic_configs",
    "txn_config",
]


class TxnHost(OffsetsHost, Protocol):
    """What the coordinator's runtime needs of the broker (:class:`service.broker.Broker` has it):
    what the group coordinator's does, and producer ids and the markers."""

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
        return ensure_internal_topic(
            self._broker, TRANSACTION_STATE_TOPIC, "transaction.state.log.num.partitions",
            transaction_state_topic_configs(self._broker.config),
        )

    def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        batch = build_batch([(key, value, (), int(time.time() * 1000))])
        self._broker.append(TRANSACTION_STATE_TOPIC, partition, batch)

    def replay(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        log = self._broker.logs.get_log(TRANSACTION_STATE_TOPIC, partition)
        if log is None:
            return
        for header, record in iter_log_records(log):
            if not header.is_control and record.key is not None:
                yield record.key, record.value

    def hosted_partitions(self) -> Sequence[int]:
        return sorted(p for t, p in self._broker.logs.all_logs() if t == TRANSACTION_STATE_TOPIC)


class BrokerMarkers:
    """:class:`~service.transactions.seams.MarkerWriter`: the broker's own ``write_txn_markers``.

    Single node: every partition is local. A cluster phase routes each
    partition's markers to its leader with WriteTxnMarkers instead.
    """

    def __init__(self, broker: TxnHost) -> None:
        self._broker = broker

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Sequence[TopicPartition],
    ) -> Mapping[TopicPartition, ErrorCode]:
        return self._broker.write_txn_markers(
            producer_id=producer_id, producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch, committed=commit, partitions=partitions,
        )


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


def start_transaction_coordinator(broker: TxnHost) -> TransactionCoordinator:
    """A coordinator loaded from the broker's logs, its timers on the running loop."""
    coordinator = TransactionCoordinator(
        BrokerTxnStateLog(broker),
        BrokerMarkers(broker),
        BrokerProducerIds(broker),
        LoopTimer(),
        txn_config(broker.config),
    )
    coordinator.startup()
    return coordinator
