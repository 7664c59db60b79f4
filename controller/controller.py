"""The metadata authority of a single-node cluster: :class:`Controller`, without a lease.

It writes the cluster metadata at controller epoch 0: any number of them may
share a store and their changes merge through the compare-and-set cycle
(:mod:`controller.writer`), but none may write a document that an elected
controller (:class:`controller.ClusterController`, epoch >= 1) has written: the
bucket then belongs to a cluster, and ``ControllerFencedError`` says so.

Every broker it knows counts as live (there are no heartbeats): partitions go on
the registered brokers and this node.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from common.config.broker import BrokerConfig
from controller.document import ClusterMetadata
from controller.metadata_store import MetadataStore
from controller.placement import PlacementBroker
from controller.records import BrokerInfo
from controller.registrations import BrokerRegistration, Endpoint, ProducerIdsBlock
from controller.topic_changes import AlterConfigOp, Placement, new_cluster_id
from controller.writer import MetadataWriter

__all__ = ["AlterConfigOp", "Controller", "new_cluster_id"]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Controller(MetadataWriter):
    """Topics, topic ids, partitions, configs and brokers of a single-node cluster.

    Invariants: those of :class:`MetadataWriter`; its commits carry controller
    epoch 0. Thread-safety: as :class:`MetadataWriter` (the broker calls it from
    its event loop thread; its store I/O is blocking, acceptable with a local
    filesystem store, and :class:`controller.ClusterController` replaces it in a
    cluster).
    """

    def __init__(
        self,
        store: MetadataStore,
        config: BrokerConfig,
        *,
        clock: Callable[[], int] = _now_ms,
        placement_seed: int | None = None,
    ) -> None:
        self._incarnation_id = uuid.uuid4()
        super().__init__(store, config, clock=clock, placement_seed=placement_seed)

    @property
    def controller_id(self) -> int:
        """The active controller's node id: this node in single-node mode."""
        return self._config.node_id

    def register_broker(self, host: str, port: int, rack: str | None = None) -> BrokerInfo:
        """Persist this node's endpoint (listener ``PLAINTEXT``), replacing its previous one."""
        endpoint = Endpoint("PLAINTEXT", host, port)

        def change(md: ClusterMetadata) -> tuple[ClusterMetadata, BrokerInfo]:
            existing = md.brokers.get(self.node_id)
            epoch = md.revision + 1  # a new incarnation: the revision of this write
            if existing is not None and existing.incarnation_id == self._incarnation_id:
                epoch = existing.broker_epoch
            registration = BrokerRegistration(
                self.node_id,
                self._incarnation_id,
                epoch,
                (endpoint,),
                rack,
                fenced=False,
            )
            return md.with_broker(registration), registration.as_broker_info()

        return self._commit(change)

    def allocate_producer_ids(self) -> ProducerIdsBlock:
        """A new block of producer ids for this node, durably taken from the metadata."""
        return self._allocate_producer_ids(self.node_id, None)

    def _placement(self, md: ClusterMetadata) -> Placement:
        brokers = {b.node_id: PlacementBroker(b.node_id, b.rack) for b in md.brokers.values()}
        brokers.setdefault(self.node_id, PlacementBroker(self.node_id))
        return Placement(tuple(brokers.values()), frozenset(brokers))
