"""The cluster records of metadata format 2: broker and partition registrations.

They mirror Kafka's KRaft records (``BrokerRegistration``, ``PartitionRegistration``,
``ProducerIdsBlock``) and keep only the fields Strata uses: no log directories
(one data dir per broker), no features, no eligible leader replicas (KIP-966 is
not implemented; an offline partition keeps its last ISR member, as Kafka does
without ELR).

All are frozen and therefore safe to share between threads; a change produces a
new record.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum

from controller.records import BrokerInfo

__all__ = [
    "NO_LEADER",
    "PRODUCER_ID_BLOCK_SIZE",
    "BrokerRegistration",
    "Endpoint",
    "LeaderRecoveryState",
    "PartitionRegistration",
    "ProducerIdsBlock",
]

NO_LEADER = -1
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener of a broker: its name (``PLAINTEXT``...), address and Kafka
    security protocol id (0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL)."""

    name: str
    host: str
    port: int
    security_protocol: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port {self.port} of listener {self.name!r} is not a TCP port")


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker.

    Invariants: ``node_id >= 0``; listener names are unique; ``broker_epoch`` is
    the revision of the metadata document that registered this incarnation
    (Kafka uses the offset of the registration record), so a new incarnation
    always gets a higher epoch. ``incarnation_id`` is None only for brokers
    carried over from a format-1 document. A fenced broker leads nothing and is
    in no ISR (except as the last member of an offline partition's ISR).
    """

    node_id: int
    incarnation_id: uuid.UUID | None
    broker_epoch: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False

    def __post_init__(self) -> None:
        if self.node_id < 0:
            raise ValueError(f"node id {self.node_id} is negative")
        names = [e.name for e in self.endpoints]
        if len(set(names)) != len(names):
            raise ValueError(f"broker {self.node_id} lists a listener twice: {names}")

    @property
    def is_active(self) -> bool:
        """Can lead and be placed on: unfenced and not shutting down (Kafka's ``isActive``)."""
        return not self.fenced and not self.in_controlled_shutdown

    def endpoint(self, listener: str | None = None) -> Endpoint | None:
        """The endpoint of ``listener``, or the first one when None."""
        if listener is None:
            return self.endpoints[0] if self.endpoints else None
        return next((e for e in self.endpoints if e.name == listener), None)

    def as_broker_info(self) -> BrokerInfo:
        """The first endpoint as a :class:`BrokerInfo` (the format-1 view of a broker)."""
        first = self.endpoint()
        if first is None:
            return BrokerInfo(self.node_id, "", 0, self.rack)
        return BrokerInfo(self.node_id, first.host, first.port, self.rack)

    def listener_info(self, listener: str) -> BrokerInfo | None:
        """The endpoint of ``listener`` as a :class:`BrokerInfo` (``""``: the first one);
        None when the broker has no such listener."""
        if not listener:
            return self.as_broker_info()
        found = self.endpoint(listener)
        return None if found is None else BrokerInfo(self.node_id, found.host, found.port, self.rack)


class LeaderRecoveryState(IntEnum):
    """Kafka's leader recovery state: RECOVERING after an unclean election until the
    new leader reports (AlterPartition) that its log is consistent again."""

    RECOVERED = 0
    RECOVERING = 1


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """Replica assignment, leader and ISR of one partition (Kafka's PartitionRegistration).

    Invariants (checked on construction): ``replicas`` is non-empty without
    duplicates; ``isr`` is a subset of ``replicas`` without duplicates; ``leader``
    is ``NO_LEADER`` or a member of ``isr`` (after an unclean election the ISR is
    just the leader); ``adding_replicas`` and ``removing_replicas`` are disjoint
    subsets of ``replicas`` (a reassignment in progress); epochs are >= 0.
    ``partition_epoch`` grows on every change; ``leader_epoch`` grows on every
    change of leader (including to and from ``NO_LEADER``) and when a
    reassignment removes replicas.
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem is not None:
            raise ValueError(f"invalid partition registration {self}: {problem}")

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once the reassignment in progress (if any) completes."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment in progress (if any) started."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)


def _problem(p: PartitionRegistration) -> str | None:
    replicas, isr = p.replicas, p.isr
    if not replicas:
        return "no replicas"
    members = set(replicas)
    if len(members) != len(replicas) or min(replicas) < 0:
        return "replicas repeat or are negative"
    if len(set(isr)) != len(isr) or not members.issuperset(isr):
        return "ISR repeats a replica or names a non-replica"
    if p.leader != NO_LEADER and p.leader not in isr:
        return "leader is not in the ISR"
    if p.adding_replicas or p.removing_replicas:
        if set(p.adding_replicas) & set(p.removing_replicas):
            return "a replica is both added and removed"
        if not members.issuperset(p.adding_replicas) or not members.issuperset(p.removing_replicas):
            return "adding or removing replicas are not replicas"
    if p.leader_epoch < 0 or p.partition_epoch < 0:
        return "negative epoch"
    return None


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """Producer ids ``[first_producer_id, first_producer_id + size)`` allocated to a broker.

    Ids are never reused: the controller persists the first id of the next block
    before it hands a block out (Kafka's AllocateProducerIds).
    """

    assigned_broker_id: int
    first_producer_id: int
    size: int = PRODUCER_ID_BLOCK_SIZE

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size
