"""What the HTTP listener may see of the broker: three narrow, read-mostly views.

:class:`service.broker.Broker` satisfies all three structurally; nothing under
:mod:`service.http` imports it, so the listener can be tested against anything
with these few members, and the broker can change everything else freely.

* :class:`PartitionsView` — partition and group-lag state (:mod:`service.http.state`);
* :class:`MetricsView` — that, plus the counters ``/metrics`` exports
  (:mod:`service.http.metrics`);
* :class:`AdminView` — that, plus the cluster metadata (:class:`ClusterView`: what
  a single-node ``Controller`` and a ``ClusterController`` both answer) and the
  topic operations of the admin API (:mod:`service.http.admin`).

Members are read-only properties: the listener never rebinds them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from common.latency import LatencyHistograms
from controller.metadata import (
    BrokerInfo,
    ClusterMetadata,
    ConfigEntry,
    PartitionRegistration,
    TopicInfo,
)
from fetch.sessions import FetchSessionCache
from fetch.tiered import TieredReader
from local_tier.log import Log
from local_tier.manager import LogManager
from remote_tier.log_manager import RemoteLogManager
from remote_tier.store import ObjectStore
from service.diskless.node import DisklessNode
from service.groups import GroupCoordinator
from service.loop_lag import LoopLagProbe
from service.replication.replica_manager import ReplicaManager

__all__ = ["AdminView", "ClusterView", "MetricsView", "PartitionsView"]


class PartitionsView(Protocol):
    @property
    def logs(self) -> LogManager: ...

    @property
    def tiering(self) -> RemoteLogManager: ...

    @property
    def tiered_reads(self) -> TieredReader: ...

    def log_for(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Log:
        """The local log of a partition this broker leads, or the KafkaError saying why not."""
        ...


class MetricsView(PartitionsView, Protocol):
    @property
    def groups(self) -> GroupCoordinator | None:
        """None until the broker has loaded its logs."""
        ...

    @property
    def requests(self) -> Mapping[str, int]: ...

    @property
    def errors(self) -> Mapping[tuple[str, str], int]: ...

    @property
    def bytes_in(self) -> Mapping[str, int]: ...

    @property
    def bytes_out(self) -> Mapping[str, int]: ...

    @property
    def records_in(self) -> Mapping[str, int]: ...

    @property
    def records_out(self) -> Mapping[str, int]: ...

    @property
    def request_latency(self) -> LatencyHistograms: ...

    @property
    def loop_lag(self) -> LoopLagProbe: ...

    @property
    def fetch_sessions(self) -> FetchSessionCache: ...

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def diskless(self) -> DisklessNode: ...

    def is_active_controller(self) -> bool: ...


class ClusterView(Protocol):
    """The cluster metadata as this broker knows it (brokers, controller, topics, partitions)."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int: ...

    @property
    def node_id(self) -> int:
        """This broker's id."""
        ...

    @property
    def metadata(self) -> ClusterMetadata:
        """The last committed metadata: broker registrations (fenced or not), partition
        leaders, replicas and ISRs."""
        ...

    def brokers(self) -> list[BrokerInfo]: ...

    def topics(self) -> list[TopicInfo]: ...

    def topic(self, name: str) -> TopicInfo | None: ...

    def partitions(self, name: str) -> tuple[PartitionRegistration, ...]: ...

    def describe_topic_config(self, name: str) -> list[ConfigEntry]: ...


class AdminView(MetricsView, Protocol):
    @property
    def controller(self) -> ClusterView: ...

    @property
    def object_store(self) -> ObjectStore: ...

    async def create_topic(
        self,
        name: str,
        *,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
    ) -> TopicInfo: ...

    async def delete_topic(self, name: str) -> TopicInfo: ...

    async def alter_topic_configs(
        self, name: str, ops: Sequence[tuple[str, int, str | None]], validate_only: bool
    ) -> TopicInfo: ...
