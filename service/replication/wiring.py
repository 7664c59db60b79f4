"""Plugging the replica manager into the rest of the broker: :func:`wire_replication`.

* followers: a :class:`~service.replication.fetcher.ReplicaFetcherManager` over
  the cluster's peer channels, starting new replicas of tiered topics after
  what the bucket holds (the tiering service reads the manifest);
* ISR changes: an :class:`~service.replication.isr.AlterPartitionManager` over
  the controller client (this broker's own controller when it is active);
* leadership listeners: the group coordinator loads and unloads the
  ``__consumer_offsets`` partitions this broker leads, the transaction
  coordinator the ``__transaction_state`` ones, tiering starts and stops
  uploading;
* deleted logs: a deleted topic's remote data is removed by the broker that led
  the partition, a few partitions at a time (:class:`RemoteDeletes`).
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Awaitable
from typing import Any, Protocol

from common.config.broker import BrokerConfig
from remote_tier.log_manager import RemoteLogManager
from service.cluster.node import ClusterNode
from service.groups import GroupCoordinator
from service.groups.runtime import OffsetsHost, OffsetsLeadership
from service.replication.fetcher import FetcherConfig, ReplicaFetcherManager
from service.replication.isr import AlterPartitionManager
from service.replication.partition import Partition, monotonic_ms
from service.replication.replica_manager import ReplicaManager
from service.transactions import TransactionCoordinator
from service.transactions.runtime import TxnLeadership

__all__ = ["GroupLeadership", "ReplicationHost", "wire_replication"]


class ReplicationHost(OffsetsHost, Protocol):
    """What the wiring needs of the broker (:class:`service.broker.Broker` has it)."""

    @property
    def node_id(self) -> int: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def tiering(self) -> RemoteLogManager: ...

    @property
    def groups(self) -> GroupCoordinator: ...

    @property
    def transactions(self) -> TransactionCoordinator: ...

    def restore_reserve(self) -> None: ...

    def spawn(self, coro: Awaitable[Any]) -> None: ...


class GroupLeadership:
    """The group coordinator follows the leadership of ``__consumer_offsets``'s partitions."""

    def __init__(self, broker: ReplicationHost) -> None:
        self._offsets = OffsetsLeadership(broker, broker.groups)

    def on_leader(self, partition: Partition) -> None:
        self._offsets.on_leader(partition.topic, partition.index)

    def on_resign(self, topic: str, index: int, deleted: bool) -> None:
        self._offsets.on_resign(topic, index)


def wire_replication(broker: ReplicationHost, cluster: ClusterNode) -> None:
    """See the module docstring."""
    config = broker.config
    replicas = broker.replicas
    fetcher_config = FetcherConfig(
        node_id=broker.node_id,
        max_wait_ms=config.get_int("replica.fetch.wait.max.ms"),
        min_bytes=config.get_int("replica.fetch.min.bytes"),
        max_bytes=config.get_int("replica.fetch.response.max.bytes"),
        partition_max_bytes=config.get_int("replica.fetch.max.bytes"),
        backoff_ms=config.get_int("replica.fetch.backoff.ms"),
        request_timeout_ms=config.get_int("replica.socket.timeout.ms"),
    )
    replicas.may_lead = cluster.may_lead
    cluster.apply_plans = replicas.plans  # a death's apply worked out ahead, on the poller's thread
    followers = replicas.followers = ReplicaFetcherManager(
        fetcher_config, cluster.replica_peers, broker.tiering.bootstrap_replica, replicas.after_follower_append
    )
    broker.logs.change_listeners.append(followers.touch)  # a followed log's position may have moved
    controller = cluster.controller
    assert controller is not None and cluster.client is not None
    replicas.isr_changes = AlterPartitionManager(
        broker.node_id, cluster.client, lambda: cluster.broker_epoch, controller.alter_partition,
        on_applied=replicas.after_isr_change, on_dropped=replicas.after_isr_change_dropped,
    )
    arrived = replicas.follower_requests_ms  # a peer whose heartbeats are late but fetches arrive
    controller.peer_request_age_ms = lambda n: None if (at := arrived.get(n)) is None else monotonic_ms() - at
    replicas.add_listener(GroupLeadership(broker))
    replicas.add_listener(TxnLeadership(broker.transactions))
    replicas.add_listener(broker.tiering)

    remote_deletes = RemoteDeletes(broker)

    def log_deleted(topic: str, index: int, topic_id: uuid.UUID, delete_remote: bool) -> None:
        broker.restore_reserve()
        if delete_remote and broker.tiering.enabled:
            remote_deletes.add(topic, index, topic_id)

    replicas.on_log_deleted = log_deleted


class RemoteDeletes:
    """Deleted partitions whose data in the bucket goes, a few at a time: a task per partition
    made a 1,000-partition topic delete start 1,000 tasks in one turn of the event loop, a
    100 ms stall before any of them reached the object store's threads."""

    _CONCURRENCY = 2

    def __init__(self, broker: ReplicationHost) -> None:
        self._broker = broker
        self._queue: collections.deque[tuple[str, int, uuid.UUID]] = collections.deque()
        self._workers = 0

    def add(self, topic: str, index: int, topic_id: uuid.UUID) -> None:
        self._queue.append((topic, index, topic_id))
        if self._workers < self._CONCURRENCY:
            self._workers += 1
            self._broker.spawn(self._drain())

    async def _drain(self) -> None:
        try:
            while self._queue:
                topic, index, topic_id = self._queue.popleft()
                await self._broker.tiering.delete_partition(topic, topic_id, index)
        finally:
            self._workers -= 1
