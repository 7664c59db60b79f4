"""How one partition's registration changes: elections, ISR changes, reassignment steps.

:func:`change_partition` is Strata's counterpart of Kafka's
``PartitionChangeBuilder`` (without eligible leader replicas, KIP-966): given the
current :class:`PartitionRegistration`, the targets of the change and which
brokers may lead, it returns the next registration, or None when nothing
changes. The rules:

* **Reassignment completes** when the target ISR contains every target replica
  (``replicas`` minus ``removing_replicas``) and at least one of them; the
  removing replicas then leave the replicas and the ISR.
* **Election**: the current leader stays if it is in the target ISR and may
  lead; else the first replica (in assignment order) that is in the target ISR
  and may lead. ``PREFERRED`` tries the preferred replica (``replicas[0]``)
  first. ``UNCLEAN`` falls back to any replica that may lead, and then the ISR
  becomes that leader alone and ``leader_recovery_state`` RECOVERING. If no
  replica qualifies, the leader is ``NO_LEADER``: the partition is offline.
* **ISR**: the target ISR replaces the current one, except that an empty
  target leaves the ISR as it is (an offline partition keeps its last ISR
  member, which must come back for the partition to return without data loss).
* **Epochs**: any change bumps ``partition_epoch``; a change of leader (to or
  from ``NO_LEADER`` included) bumps ``leader_epoch``, and so does a
  reassignment step that drops replicas even when the leader stays (the dropped
  replicas must stop fetching).

Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum

from controller.registrations import NO_LEADER, LeaderRecoveryState, PartitionRegistration

__all__ = [
    "Election",
    "LeaderAcceptor",
    "change_partition",
    "without_replica",
    "revert_reassignment",
    "start_reassignment",
]

LeaderAcceptor = Callable[[int], bool]
"""Whether a broker may lead now (registered, unfenced, not shutting down)."""


class Election(Enum):
    """Kafka's election types of the partition change builder."""

    PREFERRED = "preferred"  # the preferred replica first, if it is in the ISR and may lead
    ONLINE = "online"  # keep the partition online from the ISR
    UNCLEAN = "unclean"  # and, failing that, from any replica (may lose data)


def change_partition(
    current: PartitionRegistration,
    is_acceptable_leader: LeaderAcceptor,
    *,
    election: Election = Election.ONLINE,
    target_isr: Sequence[int] | None = None,
    target_replicas: Sequence[int] | None = None,
    target_adding: Sequence[int] | None = None,
    target_removing: Sequence[int] | None = None,
    target_recovery: LeaderRecoveryState | None = None,
) -> PartitionRegistration | None:
    """The registration after the change, or None if it changes nothing (see module docstring)."""
    isr = current.isr if target_isr is None else tuple(target_isr)
    replicas = current.replicas if target_replicas is None else tuple(target_replicas)
    adding = current.adding_replicas if target_adding is None else tuple(target_adding)
    removing = current.removing_replicas if target_removing is None else tuple(target_removing)
    recovery = current.leader_recovery_state if target_recovery is None else target_recovery

    if adding or removing:
        completed = _complete_reassignment(replicas, removing, isr)
        if completed is not None:
            replicas, isr = tuple(completed[0]), tuple(completed[1])
            adding, removing = (), ()

    leader, unclean = _elect(current, replicas, isr, is_acceptable_leader, election)
    if unclean:
        isr = (leader,)
        recovery = LeaderRecoveryState.RECOVERING
    if not isr:
        isr = current.isr  # no ELR: an offline partition keeps its last ISR
    if (
        leader == current.leader
        and isr == current.isr
        and replicas == current.replicas
        and adding == current.adding_replicas
        and removing == current.removing_replicas
        and recovery == current.leader_recovery_state
    ):
        return None
    bump_leader_epoch = leader != current.leader or (
        replicas != current.replicas and not set(current.replicas) <= set(replicas)
    )
    return PartitionRegistration(
        replicas=replicas,
        isr=isr,
        leader=leader,
        leader_epoch=current.leader_epoch + (1 if bump_leader_epoch else 0),
        partition_epoch=current.partition_epoch + 1,
        adding_replicas=adding,
        removing_replicas=removing,
        leader_recovery_state=recovery,
    )


def without_replica(
    current: PartitionRegistration, replica: int, is_acceptable_leader: LeaderAcceptor,
    election: Election = Election.ONLINE,
) -> PartitionRegistration | None:
    """``current`` with ``replica`` out of the ISR, and a leader elected again if it led: the
    change a fencing or controlled shutdown makes (Kafka's ``generateLeaderAndIsrUpdates``)."""
    return change_partition(current, is_acceptable_leader, election=election,
                            target_isr=[r for r in current.isr if r != replica])


def _elect(
    current: PartitionRegistration,
    replicas: Sequence[int],
    isr: Sequence[int],
    acceptable: LeaderAcceptor,
    election: Election,
) -> tuple[int, bool]:
    """``(leader, unclean)`` by the rules of the module docstring."""

    def valid(replica: int) -> bool:
        return replica in isr and acceptable(replica)

    if election is Election.PREFERRED and replicas and valid(replicas[0]):
        return replicas[0], False
    if current.leader != NO_LEADER and current.leader in replicas and valid(current.leader):
        return current.leader, False
    for replica in replicas:
        if valid(replica):
            return replica, False
    if election is Election.UNCLEAN:
        for replica in replicas:
            if acceptable(replica):
                return replica, True
    return NO_LEADER, False


def _complete_reassignment(
    replicas: Sequence[int], removing: Sequence[int], isr: Sequence[int]
) -> tuple[list[int], list[int]] | None:
    """``(replicas, isr)`` once the reassignment can complete, else None (Kafka's
    ``PartitionReassignmentReplicas.maybeCompleteReassignment``)."""
    new_isr = [r for r in isr if r not in removing]
    new_replicas = [r for r in replicas if r not in removing]
    if not new_isr or not new_replicas or not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


def start_reassignment(
    current: PartitionRegistration, target: Sequence[int]
) -> tuple[list[int], list[int], list[int]]:
    """``(replicas, adding, removing)`` of the first step of moving to ``target``
    (Kafka's ``PartitionReassignmentReplicas``): the target replicas, then the ones
    being removed, which stay until the new ones are in the ISR."""
    removing = sorted(set(current.replicas) - set(target))
    adding = sorted(set(target) - set(current.replicas))
    return [*target, *removing], adding, removing


def revert_reassignment(current: PartitionRegistration) -> tuple[list[int], list[int], bool]:
    """``(replicas, isr, unclean)`` after cancelling the reassignment in progress
    (Kafka's ``PartitionReassignmentRevert``): the added replicas leave; if that
    empties the ISR, the first original replica is put in it, which is an
    unclean election (allowed only with ``unclean.leader.election.enable``)."""
    replicas = list(current.original_replicas())
    isr = [r for r in current.isr if r not in current.adding_replicas]
    if isr:
        return replicas, isr, False
    return replicas, [replicas[0]], True
