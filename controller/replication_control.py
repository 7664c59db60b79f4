"""Cluster-wide partition changes: fencing, unfencing, AlterPartition, reassignment, elections.

Strata's counterpart of Kafka's ``ReplicationControlManager``: pure functions from
one :class:`ClusterMetadata` to the next, built on
:func:`controller.partition_change.change_partition`. Which brokers may lead is
read from the metadata itself (registered, unfenced, not in controlled
shutdown); the controller turns missed heartbeats into ``fenced`` flags before
it calls these.

``UncleanPolicy`` answers ``unclean.leader.election.enable`` for a topic (its
override, else the broker default).

Pure functions; thread-safe.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from common.errors import (
    InvalidRequestError,
    KafkaError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from controller.document import ClusterMetadata
from controller.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidReplicaAssignmentError,
    InvalidUpdateVersionError,
    NewLeaderElectedError,
    NoReassignmentInProgressError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    StaleBrokerEpochError,
)
from controller.fence_plans import NO_PLAN, FencePlans, PlanKind
from controller.partition_change import (
    Election,
    LeaderAcceptor,
    change_partition,
    revert_reassignment,
    start_reassignment,
    without_replica,
)
from controller.placement import validate_manual_assignment
from controller.records import TopicInfo
from controller.registrations import NO_LEADER, LeaderRecoveryState, PartitionRegistration

__all__ = [
    "AlterPartitionResult",
    "BrokerState",
    "PartitionStateChange",
    "UncleanPolicy",
    "alter_partition",
    "check_broker_epoch",
    "elect_leader",
    "drop_fenced_from_isrs",
    "fence_broker",
    "leads_any",
    "new_partition",
    "reassign_partition",
    "reconcile_leaders",
    "start_controlled_shutdown",
    "unfence_broker",
]

UncleanPolicy = Callable[[TopicInfo], bool]
_PartitionKey = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class BrokerState:
    """An ISR member of an AlterPartition request; ``broker_epoch`` -1 skips its check."""

    broker_id: int
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class PartitionStateChange:
    """One partition of an AlterPartition request (its ``PartitionData``)."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    new_isr: tuple[BrokerState, ...]
    partition_epoch: int
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """The answer for one partition: an error, or the registration now in force."""

    topic_id: uuid.UUID
    partition: int
    error: KafkaError | None = None
    registration: PartitionRegistration | None = None


def acceptor(
    md: ClusterMetadata, *, exclude: int = NO_LEADER, include: int = NO_LEADER
) -> LeaderAcceptor:
    """Who may lead: active brokers, plus ``include``, minus ``exclude`` (Kafka's
    ``isAcceptableLeader`` while a broker is being fenced or unfenced)."""
    active = frozenset(b.node_id for b in md.active_brokers())
    return lambda r: r != exclude and (r == include or r in active)


def new_partition(replicas: Sequence[int], live: Collection[int]) -> PartitionRegistration:
    """A new partition on ``replicas``: ISR = its ``live`` replicas, leader the first of them."""
    isr = tuple(r for r in replicas if r in live)
    return PartitionRegistration(
        replicas=tuple(replicas), isr=isr, leader=isr[0] if isr else NO_LEADER
    )


def check_broker_epoch(md: ClusterMetadata, broker_id: int, broker_epoch: int) -> None:
    """``StaleBrokerEpochError`` unless ``broker_id`` is registered with ``broker_epoch``."""
    registration = md.brokers.get(broker_id)
    if registration is None:
        raise StaleBrokerEpochError(f"No broker registration found for broker id {broker_id}")
    if registration.broker_epoch != broker_epoch:
        raise StaleBrokerEpochError(
            f"Expected broker epoch {registration.broker_epoch}, but got broker epoch "
            f"{broker_epoch}"
        )


def leads_any(md: ClusterMetadata, broker_id: int) -> bool:
    return any(p.leader == broker_id for _, _, p in md.iter_partitions())


# -- membership changes -----------------------------------------------------------------------


def _leader_and_isr_updates(
    md: ClusterMetadata,
    unclean: UncleanPolicy,
    partitions: Iterable[tuple[TopicInfo, int, PartitionRegistration]],
    *,
    remove: int = NO_LEADER,
    add: int = NO_LEADER,
    planned: Mapping[_PartitionKey, tuple[PartitionRegistration, PartitionRegistration]] = NO_PLAN,
) -> ClusterMetadata:
    """Kafka's ``generateLeaderAndIsrUpdates``: drop ``remove`` from the ISRs, re-elect.
    ``planned``: elections computed ahead, each used only for the registration it names."""
    accept = acceptor(md, exclude=remove, include=add)
    changes: dict[_PartitionKey, PartitionRegistration] = {}
    elections: dict[str, Election] = {}  # per topic: its configs are read once
    for topic, index, current in partitions:
        entry = planned.get((topic.topic_id, index))
        if entry is not None and entry[0] is current:  # computed ahead (FencePlans)
            changes[(topic.topic_id, index)] = entry[1]
            continue
        election = elections.get(topic.name)
        if election is None:
            election = elections[topic.name] = Election.UNCLEAN if unclean(topic) else Election.ONLINE
        changed = without_replica(current, remove, accept, election)
        if changed is not None:
            changes[(topic.topic_id, index)] = changed
    return md.with_partitions(changes)


def fence_broker(
    md: ClusterMetadata, broker_id: int, unclean: UncleanPolicy, *, isr_places: bool = True,
    plans: FencePlans | None = None,
) -> ClusterMetadata:
    """Fence ``broker_id``: new leaders where it led, registration fenced and, with
    ``isr_places``, out of every ISR. Without, its places in the ISRs of the partitions it
    followed stay for :func:`drop_fenced_from_isrs`, the next batch: a death's first batch
    then moves leaderships only (a third of the records at RF 3), and the new leaders hear
    of it sooner. ``plans``: elections computed ahead (:mod:`controller.fence_plans`)."""
    registration = md.brokers[broker_id]
    involved = [
        x for x in md.iter_partitions()
        if x[2].leader == broker_id or (isr_places and broker_id in x[2].isr)
    ]
    planned = NO_PLAN if plans is None or isr_places else plans.planned(PlanKind.LEAD, broker_id, md)
    md = _leader_and_isr_updates(md, unclean, involved, remove=broker_id, planned=planned)
    return md.with_broker(replace(registration, fenced=True, in_controlled_shutdown=False))


def drop_fenced_from_isrs(
    md: ClusterMetadata, unclean: UncleanPolicy, plans: FencePlans | None = None
) -> ClusterMetadata:
    """Every fenced broker out of the ISRs it is still in (the second batch of a fencing
    without ``isr_places``); unchanged, the same object, when there are none."""
    fenced = {n for n, b in md.brokers.items() if b.fenced}
    if not fenced:
        return md
    involved: dict[int, list[tuple[TopicInfo, int, PartitionRegistration]]] = {}
    for x in md.iter_partitions():
        isr = x[2].isr
        for node_id in fenced:
            if node_id in isr:
                involved.setdefault(node_id, []).append(x)
    for node_id, partitions in sorted(involved.items()):
        current = [(t, i, md.partitions[t.topic_id][i]) for t, i, _ in partitions]
        planned = NO_PLAN if plans is None else plans.planned(PlanKind.ISR, node_id, md)
        md = _leader_and_isr_updates(md, unclean, current, remove=node_id, planned=planned)
    return md


def unfence_broker(md: ClusterMetadata, broker_id: int, unclean: UncleanPolicy) -> ClusterMetadata:
    """Unfence ``broker_id`` and elect leaders for offline partitions it can lead."""
    md = md.with_broker(replace(md.brokers[broker_id], fenced=False))
    offline = [x for x in md.iter_partitions() if not x[2].has_leader]
    return _leader_and_isr_updates(md, unclean, offline, add=broker_id)


def start_controlled_shutdown(
    md: ClusterMetadata, broker_id: int, unclean: UncleanPolicy
) -> ClusterMetadata:
    """Mark ``broker_id`` shutting down and move its leaderships and ISR places away."""
    md = md.with_broker(replace(md.brokers[broker_id], in_controlled_shutdown=True))
    involved = [x for x in md.iter_partitions() if broker_id in x[2].isr]
    return _leader_and_isr_updates(md, unclean, involved, remove=broker_id)


def reconcile_leaders(md: ClusterMetadata, unclean: UncleanPolicy) -> ClusterMetadata:
    """Re-elect every partition whose leader may not lead, or that has none (e.g. a
    format-1 document's partitions, led by a broker that has not registered again);
    a new controller runs this in its first write, so that every leader is an
    active broker, or ``NO_LEADER`` when no ISR member can lead."""
    changes: dict[_PartitionKey, PartitionRegistration] = {}
    for topic, index, current in md.iter_partitions():
        if current.has_leader and md.is_active(current.leader):
            continue
        gone = current.leader
        changed = change_partition(
            current,
            acceptor(md, exclude=gone),
            election=Election.UNCLEAN if unclean(topic) else Election.ONLINE,
            target_isr=[r for r in current.isr if r != gone],
        )
        if changed is not None:
            changes[(topic.topic_id, index)] = changed
    return md.with_partitions(changes)


# -- AlterPartition ---------------------------------------------------------------------------


def alter_partition(
    md: ClusterMetadata,
    broker_id: int,
    broker_epoch: int,
    changes: Sequence[PartitionStateChange],
    unclean: UncleanPolicy,
) -> tuple[ClusterMetadata, list[AlterPartitionResult]]:
    """Kafka's AlterPartition (ISR changes proposed by a partition's leader).

    ``StaleBrokerEpochError`` (for the whole request) unless the sender is
    registered with ``broker_epoch``; per partition, the errors Kafka returns, in
    Kafka's order of checks (see ``_validate``). An ISR change that completes a
    reassignment may move the leadership: it is applied, and the sender gets
    ``NewLeaderElectedError``.
    """
    check_broker_epoch(md, broker_id, broker_epoch)
    results: list[AlterPartitionResult] = []
    # the changes so far, applied to the image once at the end: an image per change copied
    # every topic's registrations each time (a broker back at 10,000 partitions sends
    # thousands of ISR expansions at once: 0.8 s of the controller's commit lock per request)
    done: dict[_PartitionKey, PartitionRegistration] = {}
    accept = acceptor(md)  # who may lead: the brokers do not change in this request
    for change in changes:
        key = (change.topic_id, change.partition)
        topic = md.topic_by_id(change.topic_id)
        current = done.get(key)
        if current is None:
            current = md.partition(change.topic_id, change.partition)
        error = _validate(md, broker_id, topic, current, change)
        if error is not None or topic is None or current is None:
            results.append(AlterPartitionResult(change.topic_id, change.partition, error))
            continue
        changed = change_partition(
            current,
            accept,
            election=Election.UNCLEAN if unclean(topic) else Election.ONLINE,
            target_isr=[s.broker_id for s in change.new_isr],
            target_recovery=change.leader_recovery_state,
        )
        if changed is None:
            results.append(AlterPartitionResult(change.topic_id, change.partition, None, current))
            continue
        done[key] = changed
        if changed.leader != broker_id:
            error = NewLeaderElectedError(
                f"the ISR change of {topic.name}-{change.partition} completed its reassignment "
                f"and moved the leadership to {changed.leader}"
            )
            results.append(AlterPartitionResult(change.topic_id, change.partition, error))
        else:
            results.append(AlterPartitionResult(change.topic_id, change.partition, None, changed))
    return md.with_partitions(done), results


def _validate(
    md: ClusterMetadata,
    broker_id: int,
    topic: TopicInfo | None,
    current: PartitionRegistration | None,
    change: PartitionStateChange,
) -> KafkaError | None:
    if topic is None:
        return UnknownTopicIdError(f"Unknown topic id {change.topic_id}")
    where = f"{topic.name}-{change.partition}"
    if current is None:
        return UnknownTopicOrPartitionError(f"Unknown partition {where}")
    if (
        change.leader_epoch > current.leader_epoch
        or change.partition_epoch > current.partition_epoch
    ):
        return NotControllerError(
            f"{where} is at leader epoch {current.leader_epoch} and partition epoch "
            f"{current.partition_epoch}, behind the request: this controller is stale"
        )
    if change.leader_epoch < current.leader_epoch:
        return FencedLeaderEpochError(
            f"{where}: the leader epoch is {current.leader_epoch}, not {change.leader_epoch}"
        )
    if broker_id != current.leader:
        return InvalidRequestError(f"{where}: the leader is {current.leader}, not {broker_id}")
    if change.partition_epoch < current.partition_epoch:
        return InvalidUpdateVersionError(
            f"{where}: the partition epoch is {current.partition_epoch}, not "
            f"{change.partition_epoch}"
        )
    isr = [s.broker_id for s in change.new_isr]
    if len(set(isr)) != len(isr) or not set(isr) <= set(current.replicas):
        return InvalidRequestError(
            f"{where}: invalid ISR {isr} for replicas {list(current.replicas)}"
        )
    if current.leader not in isr:
        return InvalidRequestError(f"{where}: the ISR {isr} does not include the leader")
    recovering = LeaderRecoveryState.RECOVERING
    if change.leader_recovery_state == recovering and len(isr) > 1:
        return InvalidRequestError(f"{where}: a recovering leader cannot have an ISR of {isr}")
    if current.leader_recovery_state != recovering and change.leader_recovery_state == recovering:
        return InvalidRequestError(f"{where}: the leader cannot go from RECOVERED to RECOVERING")
    ineligible = [_ineligible(md, s) for s in change.new_isr]
    reasons = [r for r in ineligible if r is not None]
    if reasons:
        return IneligibleReplicaError(
            f"{where}: ineligible replicas in the ISR: {', '.join(reasons)}"
        )
    return None


def _ineligible(md: ClusterMetadata, state: BrokerState) -> str | None:
    registration = md.brokers.get(state.broker_id)
    if registration is None:
        return f"{state.broker_id} (not registered)"
    if registration.in_controlled_shutdown:
        return f"{state.broker_id} (shutting down)"
    if registration.fenced:
        return f"{state.broker_id} (fenced)"
    if state.broker_epoch != -1 and state.broker_epoch != registration.broker_epoch:
        expected = registration.broker_epoch
        return f"{state.broker_id} (broker epoch {state.broker_epoch}, not {expected})"
    return None


# -- reassignment and elections ---------------------------------------------------------------


def reassign_partition(
    md: ClusterMetadata,
    topic: TopicInfo,
    index: int,
    target: Sequence[int] | None,
    unclean: UncleanPolicy,
) -> ClusterMetadata:
    """Kafka's AlterPartitionReassignments for one partition: move it to ``target``
    (first step: the new replicas join, ``adding``/``removing`` set; the move
    completes when an ISR change brings every target replica into the ISR), or
    cancel the move in progress when ``target`` is None."""
    current = md.partition(topic.topic_id, index)
    if current is None:
        raise UnknownTopicOrPartitionError(f"Unable to find partition {topic.name}-{index}.")
    election = Election.UNCLEAN if unclean(topic) else Election.ONLINE
    if target is None:
        if not current.is_reassigning:
            raise NoReassignmentInProgressError(
                f"No reassignment is in progress for partition {topic.name}-{index}."
            )
        replicas, isr, needs_unclean = revert_reassignment(current)
        if needs_unclean and not unclean(topic):
            raise InvalidReplicaAssignmentError(
                f"Unable to revert partition assignment for {topic.name}:{index} because it "
                "would require an unclean leader election."
            )
        changed = change_partition(
            current,
            acceptor(md),
            election=election,
            target_isr=isr,
            target_replicas=replicas,
            target_adding=(),
            target_removing=(),
        )
    else:
        validate_manual_assignment(target, frozenset(md.brokers))
        replicas, adding, removing = start_reassignment(current, target)
        changed = change_partition(
            current,
            acceptor(md),
            election=election,
            target_replicas=replicas,
            target_adding=adding,
            target_removing=removing,
        )
    return md if changed is None else md.with_partitions({(topic.topic_id, index): changed})


def elect_leader(
    md: ClusterMetadata, topic: TopicInfo, index: int, election: Election
) -> ClusterMetadata:
    """Kafka's ElectLeaders for one partition (``PREFERRED`` or ``UNCLEAN``)."""
    current = md.partition(topic.topic_id, index)
    if current is None:
        raise UnknownTopicOrPartitionError(f"No such partition as {topic.name}-{index}")
    if (election is Election.PREFERRED and current.leader == current.preferred_leader) or (
        election is Election.UNCLEAN and current.has_leader
    ):
        raise ElectionNotNeededError(f"{topic.name}-{index} needs no election")
    changed = change_partition(current, acceptor(md), election=election)
    if changed is None:
        if election is Election.PREFERRED:
            raise PreferredLeaderNotAvailableError(
                f"the preferred leader of {topic.name}-{index} cannot lead now"
            )
        raise EligibleLeadersNotAvailableError(f"no replica of {topic.name}-{index} can lead")
    return md.with_partitions({(topic.topic_id, index): changed})
