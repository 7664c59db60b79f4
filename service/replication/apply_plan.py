"""What an apply of new metadata changes on this broker, and that work done ahead for a death.

:meth:`~service.replication.replica_manager.ReplicaManager.apply` starts from a diff of the
image it applied last and the new one (:func:`diff`): the topics whose registrations changed,
the partitions in them whose registration did, those this broker hosts, leaderships first.
That is Python work in proportion to the partitions that moved. At 10,000 partitions on three
brokers a death moves 3,300 leaderships to each survivor; the diff took 4 ms on a quiet
machine and 6-25 ms in the failover itself, where the survivors share two cores with each
other and with the dead broker's teardown, at the moment every moved partition waits for it
(issue 33).

Yet every broker already holds, for each other broker, the two batches its fencing would
write, made in quiet time (:mod:`controller.fence_ahead`): the image before and after each.
The diff is a pure function of those two images and this broker's id, so :class:`ApplyPlans`
works it out then too, for each batch and for both at once (:func:`fencing_pairs`: the poll
that follows a death often reads both), one at a time on the thread that made the batches
(:meth:`ApplyPlans.make`), and the apply takes it (:meth:`ApplyPlans.find`) when the image it applied last
and the new one hold the very states the plan was made from (:func:`~controller.fence_ahead.same_state`:
the same objects, which an image read from the metadata log shares with the one made ahead).
Where nothing matches, the apply computes the diff as always: a plan is a cache that is never
wrong. Under ``STRATA_VERIFY_METADATA_REPLAY`` (the test suite) every plan taken is checked
against the diff computed afresh.

A plan is used only when the last apply is done (no partition of it still pending): the diff
of a broker still taking partitions also looks again at the topics it is taking.

Cost, at 10,000 partitions on three brokers, for each other broker: three plans holding the
registrations they change here (about 3 MB), and 15-40 ms of one thread in quiet time after
each change of the metadata (the plans of two brokers' fencings at
10,000 partitions took 57 ms in all and held 6.1 MB).

Thread-safety: :meth:`ApplyPlans.make` runs on one thread (a broker's ahead thread); it
publishes the plans whole, in one assignment, so the event loop's :meth:`ApplyPlans.find`
sees all of them or none. The images are never changed once made.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller.commit import VERIFY_REPLAY
from controller.document import ClusterMetadata
from controller.fence_ahead import Step, same_state
from controller.registrations import PartitionRegistration

__all__ = ["ApplyPlan", "ApplyPlans", "TopicPartition", "Wanted", "diff", "fencing_pairs", "hosted", "make_plan"]

TopicPartition = tuple[str, int]
Wanted = tuple[uuid.UUID, PartitionRegistration]  # a hosted partition's topic id and registration


def diff(previous: ClusterMetadata | None, md: ClusterMetadata, node_id: int,
         whole: set[str]) -> tuple[set[str] | None, dict[TopicPartition, Wanted], dict[TopicPartition, Wanted]]:
    """From ``previous`` to ``md``, for broker ``node_id``: the topics to look at whole (None:
    every topic), the partitions whose registration changed in the other changed topics, and
    the partitions of both that ``md`` places here. ``whole``: topics to look at whole anyway
    (those an earlier apply is still taking)."""
    scope = changed_topics(previous, md)
    moved: dict[TopicPartition, Wanted] = {}
    if scope is not None and previous is not None:
        scope, moved = changed_partitions(previous, md, scope - whole)
        scope |= whole
    wanted = hosted(md, node_id, scope)
    wanted.update((key, w) for key, w in moved.items() if node_id in w[1].replicas)
    return scope, moved, wanted


def leaderships_first(items: Iterable[tuple[TopicPartition, Wanted]], node_id: int) -> list[tuple[TopicPartition, Wanted]]:
    """Partitions to take, in the order to take them: those ``node_id`` leads first (a
    partition takes writes once its leader is in effect), each group in the order given."""
    return sorted(items, key=lambda x: x[1][1].leader != node_id)


def changed_topics(previous: ClusterMetadata | None, md: ClusterMetadata) -> set[str] | None:
    """The topics whose registrations or configs differ from ``previous`` (an image replayed
    from the metadata log keeps the objects of what did not change), created or deleted;
    None (all of them) when a broker became active or moved its endpoints: a follower follows
    only an active leader, and a leader asks to take a replica that is back into its ISR. A
    broker fenced or shutting down changes the registrations of what it led, so only those
    topics are looked at (at 10,000 partitions, every one of them cost a death's apply ~0.1 s)."""
    if previous is None or brokers_back(previous, md):
        return None
    changed = {name for name in previous.topics if name not in md.topics}
    for name, info in md.topics.items():
        if (previous.topics.get(name) is not info
                or previous.partitions.get(info.topic_id) is not md.partitions[info.topic_id]):
            changed.add(name)
    return changed


def changed_partitions(previous: ClusterMetadata, md: ClusterMetadata,
                       names: set[str]) -> tuple[set[str], dict[TopicPartition, Wanted]]:
    """Of the changed topics ``names``: those to look at whole (created, deleted, configs or
    partition count changed), and the partitions whose registration changed in the others
    (one ISR change in a topic of 10,000 partitions listed all of them: 17.5 ms of the loop
    against 1.0 ms, ``bench/apply_cost.py``)."""
    whole: set[str] = set()
    moved: dict[TopicPartition, Wanted] = {}
    for name in names:
        info = md.topics.get(name)
        if info is None or previous.topics.get(name) is not info:
            whole.add(name)
            continue
        if info.diskless:  # no local log: service/diskless
            continue
        old, new = previous.partitions.get(info.topic_id), md.partitions[info.topic_id]
        if old is None or len(old) != len(new):
            whole.add(name)
            continue
        tid = info.topic_id
        moved.update(((name, i), (tid, b)) for i, (a, b) in enumerate(zip(old, new)) if a is not b)
    return whole, moved


def brokers_back(previous: ClusterMetadata, md: ClusterMetadata) -> bool:
    """Whether a broker of ``md`` is active and was not in ``previous``, or listens elsewhere."""
    if previous.brokers is md.brokers:
        return False
    for node_id, broker in md.brokers.items():
        was = previous.brokers.get(node_id)
        if broker.is_active and (was is None or not was.is_active or was.endpoints != broker.endpoints):
            return True
    return False


def hosted(md: ClusterMetadata, node_id: int, scope: set[str] | None) -> dict[TopicPartition, Wanted]:
    """The partitions of the ``scope`` topics (None: all) with a local log on ``node_id``,
    in topic name order (one pass per topic: this runs over every partition of a broker's death)."""
    wanted: dict[TopicPartition, Wanted] = {}
    for name in sorted(md.topics.keys() if scope is None else scope & md.topics.keys()):
        topic = md.topics[name]
        if topic.diskless:  # no local log: service/diskless
            continue
        tid = topic.topic_id
        for index, reg in enumerate(md.partitions[tid]):
            if node_id in reg.replicas:
                wanted[(name, index)] = (tid, reg)
    return wanted


@dataclass(frozen=True, slots=True)
class ApplyPlan:
    """The diff from ``base`` to ``image`` for one broker, when it is partition by partition
    (no topic to look at whole); ``usable`` False otherwise (kept so as not to work it out again)."""

    base: ClusterMetadata
    image: ClusterMetadata
    usable: bool
    #: the partitions whose registration changed that ``image`` places here, in the order to
    #: take them (:func:`leaderships_first`) ...
    pending: dict[TopicPartition, Wanted]
    topics: frozenset[str]  # ... and their topics
    away: tuple[TopicPartition, ...]  # those whose registration changed that it no longer places here


def fencing_pairs(steps: Iterable[Step]) -> list[tuple[ClusterMetadata, ClusterMetadata]]:
    """The (image before, image after) of every apply the fencings ``steps`` may bring: each
    batch alone, and both at once (the poll that follows a death often reads the second batch
    with the first: the controller writes it a few milliseconds later)."""
    steps = list(steps)
    pairs = [(step.base, step.image) for step in steps]
    for first in steps:
        if first.first:
            pairs += [(first.base, second.image) for second in steps
                      if not second.first and second.node_id == first.node_id and second.base is first.image]
    return pairs


def make_plan(base: ClusterMetadata, image: ClusterMetadata, node_id: int) -> ApplyPlan:
    scope, moved, wanted = diff(base, image, node_id, set())
    if scope is None or scope:
        return ApplyPlan(base, image, False, {}, frozenset(), ())
    pending = dict(leaderships_first(wanted.items(), node_id))
    away = tuple(key for key in moved if key not in wanted)
    return ApplyPlan(base, image, True, pending, frozenset(key[0] for key in pending), away)


class ApplyPlans:
    """This broker's plans for the fencings made ahead (module docstring)."""

    def __init__(self, node_id: int) -> None:
        self._node_id = node_id
        self._plans: tuple[ApplyPlan, ...] = ()
        self.taken = 0  # plans used (a counter for the tests)

    def make(self, steps: Sequence[tuple[ClusterMetadata, ClusterMetadata]]) -> bool:
        """One more plan for the (image before, image after) pairs ``steps`` (the batches made
        ahead now); those of pairs no longer there are dropped. True when more are to be made."""
        kept = tuple(p for p in self._plans if any(p.base is base and p.image is image for base, image in steps))
        missing = [(base, image) for base, image in steps
                   if not any(p.base is base and p.image is image for p in kept)]
        if missing:
            kept += (make_plan(*missing[0], self._node_id),)
        self._plans = kept
        return len(missing) > 1

    def __len__(self) -> int:
        return len(self._plans)

    def find(self, previous: ClusterMetadata | None, md: ClusterMetadata) -> ApplyPlan | None:
        """The plan from ``previous`` to ``md``, if one was made for those states."""
        if previous is None:
            return None
        for plan in self._plans:
            if plan.usable and same_state(plan.image, md) and same_state(plan.base, previous):
                self.taken += 1
                if VERIFY_REPLAY:
                    _verify(plan, previous, md, self._node_id)
                return plan
        return None


def _verify(plan: ApplyPlan, previous: ClusterMetadata, md: ClusterMetadata, node_id: int) -> None:
    fresh = make_plan(previous, md, node_id)
    if not fresh.usable or list(plan.pending.items()) != list(fresh.pending.items()) or plan.away != fresh.away:
        raise AssertionError(f"the apply planned ahead for metadata revision {md.revision} is not its diff")
