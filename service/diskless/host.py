"""What the diskless topics need of their broker: :class:`DisklessHost`.

A protocol, so ``service.diskless`` never imports ``service.broker`` (which imports it).
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any, Protocol

from common.config import BrokerConfig
from local_tier.config import LogConfig
from remote_tier.store import ObjectStore

__all__ = ["DisklessHost"]


class DisklessHost(Protocol):
    """The parts of the broker the diskless topics use (:class:`service.broker.Broker`)."""

    config: BrokerConfig
    node_id: int
    object_store: ObjectStore
    controller: Any  # MetadataImage: .metadata, .topic(name)
    cluster: Any  # ClusterNode | None: .broker_epoch, .diskless_peers
    replicas: Any  # ReplicaManager: .may_lead()
    tiering: Any  # RemoteLogManager: .rsm
    tiered_reads: Any  # TieredReader
    data_dir: Path

    @property
    def closing(self) -> bool: ...

    def spawn(self, coro: Awaitable[Any]) -> None: ...

    def is_active_controller(self) -> bool: ...

    def log_config(self, topic: str) -> LogConfig: ...
