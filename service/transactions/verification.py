"""Is a partition in a producer's transaction? Asked by a group coordinator for TxnOffsetCommit.

The producer must hold its transactional id and have added the group's
``__consumer_offsets`` partition (AddOffsetsToTxn) to its open transaction.
On one broker, or when this broker coordinates the id too, the transaction
coordinator answers in process; otherwise the group coordinator asks the
leader of the id's ``__transaction_state`` partition with AddPartitionsToTxn
v4 ``verify_only`` (KIP-890, Kafka's ``AddPartitionsToTxnManager``). An
unreachable or unknown transaction coordinator answers a retriable code
(COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR): the client looks again and
retries. Lives on the event loop.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from common.errors import ErrorCode, KafkaError
from controller.records import TopicInfo
from controller.registrations import PartitionRegistration
from service.cluster.wire import request_module
from service.transactions.coordinator import TransactionCoordinator
from service.transactions.metadata import TopicPartition
from service.transactions.records import TRANSACTION_STATE_TOPIC, txn_partition_for

if TYPE_CHECKING:
    from service.cluster.channel import PeerChannels

__all__ = ["verify_in_transaction"]

_ADD_PARTITIONS_TO_TXN = 24
_log = logging.getLogger("strata.transactions")


class _Topics(Protocol):
    def topic(self, name: str) -> TopicInfo | None: ...

    def partition(self, name: str, index: int) -> PartitionRegistration | None: ...


async def verify_in_transaction(
    local: TransactionCoordinator,
    topics: _Topics,
    peers: PeerChannels | None,
    node_id: int,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partition: TopicPartition,
    timeout_s: float = 30.0,
) -> ErrorCode:
    """NONE when ``partition`` is in the producer's ongoing transaction; else Kafka's code
    (PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING, INVALID_TXN_STATE, ...)."""
    code = local.transaction_includes(transactional_id, producer_id, producer_epoch, partition)
    if code != ErrorCode.not_coordinator or peers is None:
        return code
    info = topics.topic(TRANSACTION_STATE_TOPIC)
    if info is None:
        return ErrorCode.coordinator_not_available
    registration = topics.partition(TRANSACTION_STATE_TOPIC, txn_partition_for(transactional_id, info.partitions))
    leader = -1 if registration is None else registration.leader
    if leader < 0 or leader == node_id:
        return ErrorCode.coordinator_not_available if leader < 0 else code

    def body(version: int) -> Any:
        if version < 4:
            raise KafkaError(f"broker {leader} cannot verify a transaction (AddPartitionsToTxn v{version})")
        mod = request_module(_ADD_PARTITIONS_TO_TXN, version)
        txn = mod.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=True,
            topics=(mod.AddPartitionsToTxnTopic(name=partition[0], partitions=(partition[1],)),),
        )
        return mod.AddPartitionsToTxnRequest(transactions=(txn,))

    try:
        _, answer = await peers.request(leader, _ADD_PARTITIONS_TO_TXN, body, timeout_s=timeout_s)
    except KafkaError as exc:
        _log.info("verifying %s with broker %d failed: %s", transactional_id, leader, exc)
        return ErrorCode.coordinator_not_available
    if int(answer.error_code) != 0:
        return ErrorCode(int(answer.error_code))
    for result in answer.results_by_transaction:
        for topic in result.topic_results:
            for part in topic.results_by_partition:
                if (str(topic.name), int(part.partition_index)) == partition:
                    return ErrorCode(int(part.partition_error_code))
    return ErrorCode.unknown_server_error
