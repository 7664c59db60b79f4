"""The elections a broker's fencing will need, computed before the broker dies.

When a broker dies the controller must, at once, elect a new leader for every partition
it led (the first batch of a fencing) and then take it out of every ISR it was in (the
second). At 10,000 partitions on three brokers that is 3,300 and 6,700 elections, computed
in Python at the very moment every survivor is waiting for them (issue 33).

Yet each of those elections is a pure function of what the partition's registration is
now and of which brokers may lead, and both rarely change. :class:`FencePlans` keeps, for
every active broker ``B``, what :func:`controller.partition_change.change_partition` would
give for each partition when ``B`` is fenced:

* ``LEAD`` plans: the partitions ``B`` leads, with ``B`` out of the ISR and a new leader;
* ``ISR`` plans: the partitions ``B`` is in the ISR of but does not lead, without ``B``.

:meth:`prepare` brings them up to date in the controller's quiet time (the controller calls
it once the metadata has been still for a while, never right after a change): topics whose
tuple of registrations is the one already planned are skipped, and in the others an
election is computed only for a partition whose registration object is not the one its
entry was computed from (the image shares the objects of what did not change), so the cost
follows what changed. A change of the brokers that may lead replans everything, a bounded
number of elections per call. Memory: an entry per ISR member of every partition (30,000
at 10,000 partitions of RF 3), each a registration. A
fencing then takes an entry only when the partition's registration is that very object
and the brokers that may lead are the ones the plan was made for; any other partition is
computed as before. So a plan is a cache that is never wrong: at worst it is not used.

Only elections that keep the partition online are kept: an election that finds no
acceptable ISR member depends on the topic's unclean election policy, which may change
without a new registration, so it is always computed at the fencing.

Not thread-safe: the controller's tick thread prepares and uses the plans.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType

from controller.document import ClusterMetadata
from controller.partition_change import without_replica
from controller.registrations import NO_LEADER, PartitionRegistration

__all__ = ["NO_PLAN", "FencePlans", "PlanKind"]

_Key = tuple[uuid.UUID, int]
_Entry = tuple[PartitionRegistration, PartitionRegistration]


class PlanKind(Enum):
    LEAD = "lead"  # the partitions the broker leads: new leaders, the broker out of the ISR
    ISR = "isr"  # the partitions it follows in the ISR: the broker out of the ISR


class FencePlans:
    """What fencing each active broker would change (module docstring)."""

    def __init__(self, *, max_elections_per_prepare: int = 2_000) -> None:
        self._max = max_elections_per_prepare
        self._plans: dict[tuple[PlanKind, int], dict[_Key, _Entry]] = {}
        self._may_lead: frozenset[int] = frozenset()
        #: each topic's registrations as last planned (the image's own tuple: unchanged
        #: topics are skipped by identity)
        self._topics: dict[uuid.UUID, tuple[PartitionRegistration, ...]] = {}
        self.prepared_at: ClusterMetadata | None = None  # the image the last prepare was of
        self.complete = False  # the last prepare left nothing to compute

    def prepare(self, md: ClusterMetadata) -> int:
        """Bring the plans up to ``md``; returns the elections computed. Topics whose
        registrations are the objects already planned are skipped; a topic is planned
        whole, and no more topics once ``max_elections_per_prepare`` elections were
        computed in this call (the rest at the next), so that one call never holds the
        tick thread long."""
        if md is self.prepared_at and self.complete:
            return 0
        may_lead = frozenset(b.node_id for b in md.active_brokers())
        if may_lead != self._may_lead:  # who may lead changed: every election may differ
            self._plans = {(kind, b): {} for b in may_lead for kind in PlanKind}
            self._topics = {}
            self._may_lead = may_lead
        computed = 0
        for topic_id in [t for t in self._topics if t not in md.partitions]:  # deleted
            self._forget(topic_id, self._topics.pop(topic_id), 0)
        for topic_id, registrations in md.partitions.items():
            planned = self._topics.get(topic_id, ())
            if planned is registrations:
                continue
            if computed >= self._max:
                break
            computed += self._plan_topic(topic_id, planned, registrations)
            self._topics[topic_id] = registrations
        else:
            self.prepared_at = md
            self.complete = True
            return computed
        self.complete = False
        return computed

    def _plan_topic(self, topic_id: uuid.UUID, planned: tuple[PartitionRegistration, ...],
                    registrations: tuple[PartitionRegistration, ...]) -> int:
        """Plan the partitions of one topic that changed since ``planned``."""
        self._forget(topic_id, planned, len(registrations))
        plans, may_lead = self._plans, self._may_lead
        computed = 0
        for index, current in enumerate(registrations):
            if index < len(planned) and planned[index] is current:
                continue
            key = (topic_id, index)
            if index < len(planned):
                self._drop(key, planned[index])
            for broker in current.isr:
                if broker in may_lead:
                    computed += 1
                    entry = _plan(current, broker, may_lead)
                    if entry is not None:
                        plans[(_kind(current, broker), broker)][key] = entry
        return computed

    def _forget(self, topic_id: uuid.UUID, planned: tuple[PartitionRegistration, ...],
                keep: int) -> None:
        """Drop the entries of the topic's partitions from index ``keep`` on (gone)."""
        for index in range(keep, len(planned)):
            self._drop((topic_id, index), planned[index])

    def _drop(self, key: _Key, was: PartitionRegistration) -> None:
        """Drop the entries planned for the partition ``key`` when it was ``was``."""
        for broker in was.isr:
            plan = self._plans.get((_kind(was, broker), broker))
            if plan is not None:
                plan.pop(key, None)

    def planned(self, kind: PlanKind, broker: int, md: ClusterMetadata) -> Mapping[_Key, _Entry]:
        """The entries of ``broker``'s plan of ``kind``, if it was made for the brokers that
        may lead in ``md`` (``broker`` itself excepted: it is the one being fenced); else
        none. A caller uses an entry only for the registration object it names."""
        may_lead = frozenset(b.node_id for b in md.active_brokers()) | {broker}
        if may_lead != self._may_lead:
            return NO_PLAN
        return self._plans.get((kind, broker), NO_PLAN)

    def entries(self) -> int:
        return sum(len(p) for p in self._plans.values())


#: no elections planned
NO_PLAN: Mapping[_Key, _Entry] = MappingProxyType({})


def _kind(registration: PartitionRegistration, broker: int) -> PlanKind:
    return PlanKind.LEAD if broker == registration.leader else PlanKind.ISR


def _plan(current: PartitionRegistration, broker: int, may_lead: frozenset[int]) -> _Entry | None:
    """What fencing ``broker`` changes in ``current`` (the fencing's own election), or None
    when that election keeps nothing online or changes nothing."""
    changed = without_replica(current, broker, lambda r: r != broker and r in may_lead)
    if changed is None or changed.leader == NO_LEADER:
        return None
    return current, changed
