"""The cluster metadata as the rest of the broker reads it: :class:`MetadataImage`.

Handlers, the group and transaction coordinators, tiering and the HTTP side
read topics, brokers and configs through ``broker.controller``; in a cluster
that is this read-only image of the newest snapshot the broker's
:class:`controller.MetadataView` has (Kafka's ``MetadataCache``), never the
controller itself: any broker answers reads, and only the active controller
writes (:mod:`service.cluster.controller_client`).

``add_listener`` hears topic and broker events on the event loop, in the
order the broker applies snapshots (the broker calls :meth:`publish`); partition
changes reach the replica manager, which reads them from the snapshot itself.

Thread-safety: reads return values of an immutable snapshot; ``publish`` and the
listeners run on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from common.config.broker import BrokerConfig
from controller.commit import Snapshot
from controller.document import ClusterMetadata
from controller.errors import NotControllerError
from controller.events import MetadataEvent, MetadataListener, diff_metadata
from controller.metadata_reads import MetadataReads
from controller.records import BrokerInfo
from controller.registrations import NO_LEADER

__all__ = ["MetadataImage", "SnapshotSource"]


class SnapshotSource(Protocol):
    def snapshot(self) -> Snapshot | None: ...


class MetadataImage(MetadataReads):
    """Reads over the newest snapshot (see the module docstring)."""

    def __init__(
        self,
        view: SnapshotSource,
        config: BrokerConfig,
        controller_id: Callable[[], int] = lambda: NO_LEADER,
    ) -> None:
        self._view = view
        self._config = config
        self.node_id = config.node_id  # this broker
        self._controller_id = controller_id
        self._listeners: list[MetadataListener] = []
        self._published: ClusterMetadata | None = None

    @property
    def metadata(self) -> ClusterMetadata:
        snapshot = self._view.snapshot()
        if snapshot is None:
            raise NotControllerError("the cluster metadata has not been read yet")
        return snapshot.metadata

    @property
    def revision(self) -> int:
        snapshot = self._view.snapshot()
        return -1 if snapshot is None else snapshot.revision

    @property
    def cluster_id(self) -> str:
        return self.metadata.cluster_id

    @property
    def controller_id(self) -> int:
        """The active controller (Metadata's and DescribeCluster's ``controller_id``)."""
        return self._controller_id()

    # -- brokers ----------------------------------------------------------------------

    def brokers(self, listener: str = "") -> list[BrokerInfo]:
        """The live brokers (registered and unfenced), by node id, as Metadata lists them:
        at their endpoint of ``listener`` (the one the client connected on; brokers without
        it are left out, as Kafka does), or their first endpoint for ``""``."""
        found = (b.listener_info(listener) for b in self.metadata.active_brokers())
        return [info for info in found if info is not None]

    def registered_brokers(self) -> int:
        """How many brokers are registered (fenced ones too): the default replication
        factor's bound (:func:`controller.topic_changes.default_replication_factor`)."""
        return len(self.metadata.brokers)

    def broker(self, node_id: int, listener: str = "") -> BrokerInfo | None:
        registration = self.metadata.brokers.get(node_id)
        return None if registration is None else registration.listener_info(listener)

    def is_live(self, node_id: int) -> bool:
        return self.metadata.is_active(node_id)

    # -- events -------------------------------------------------------------------------

    def add_listener(self, listener: MetadataListener) -> None:
        """Hear the events of each snapshot the broker applies, on the event loop."""
        self._listeners.append(listener)

    def publish(self, md: ClusterMetadata) -> list[MetadataEvent]:
        """The broker applied ``md``: tell listeners what changed since the last one."""
        previous, self._published = self._published, md
        if previous is None:
            return []
        events = diff_metadata(previous, md, partitions=False)
        for event in events:
            for listener in list(self._listeners):
                listener(event)
        return events
