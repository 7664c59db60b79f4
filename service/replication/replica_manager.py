"""Every partition this broker hosts, kept in line with the cluster metadata: :class:`ReplicaManager`.

Over 500 lines because applying the metadata (open, lead, follow, stop, in slices of the loop)
and the leader's side of replication (follower fetches, ISR changes) share one partition table
with one owner, the event loop.

Kafka's ``ReplicaManager`` (its ``applyDelta``): :meth:`ReplicaManager.apply`
takes a metadata snapshot and reconciles the broker with it, so applying the
same snapshot twice, or skipping one, ends in the same state:

* a partition whose replicas include this broker gets its local log (created
  empty when new) and becomes leader or follower as the registration says:
  leaders stamp their leader epoch into every batch they append; followers are
  handed to the :class:`~service.replication.fetcher.ReplicaFetcherManager`,
  which copies from the leader;
* a partition of a topic that no longer exists, or whose replicas no longer
  include this broker (a reassignment moved it), is stopped and its local log
  deleted ("stray" logs found at start-up go the same way);
* listeners hear when this broker starts and stops leading a partition: the
  group and transaction coordinators load and unload the state of their
  internal topics' partitions, tiering starts and stops uploading.

New partitions open :data:`OPEN_SLICE` per loop turn (about 1 ms each, for at most
:data:`OPEN_SLICE_S`), changed ones for :data:`TAKE_SLICE_S` (a death changes every
partition the broker hosted), the rest at the next turns' :meth:`apply`. Unchanged ones are
skipped. An apply that changes more than :data:`TAKE_ON_USE` (a takeover in bulk) takes none
at once: until its slice comes, the first request naming a partition takes it
(:meth:`ReplicaManager.get_partition`), so each new leadership serves from the apply on
instead of answering NOT_LEADER_OR_FOLLOWER
(and costing the client a metadata refresh and a retry backoff) until its slice. What an
apply changes starts from a diff of the images (:func:`~service.replication.apply_plan.diff`);
for a fencing made ahead, the diff was worked out ahead too (:mod:`~service.replication.apply_plan`).

Each partition directory holds Kafka's ``partition.metadata`` file (the topic id),
so a log left from a deleted topic is never taken for a new topic of the same name.

Requests reach logs through :meth:`ReplicaManager.leader_log` (the leadership
and leader-epoch checks of :meth:`Partition.check_leader`); followers' fetches
through :meth:`ReplicaManager.record_follower_fetch`, which moves the high
watermark and asks the controller (AlterPartition) to add caught-up replicas
to the ISR.

When the log directory fails (:meth:`ReplicaManager.go_offline`), every hosted
partition is offline here: requests for it answer KAFKA_STORAGE_ERROR, its
follower fetches stop and its acks=all produces fail, as in Kafka's
``handleLogDirFailure``; the controller moves the leaderships (ADR 0007).

Not thread-safe: everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from common.errors import (
    KafkaStorageError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from controller.document import ClusterMetadata
from controller.registrations import PartitionRegistration
from fetch.waiter import AppendWaiters
from local_tier.config import LogConfig
from local_tier.log import Log
from local_tier.manager import LogManager
from service.replication.apply_plan import ApplyPlans, TopicPartition, diff, leaderships_first
from service.replication.apply_plan import Wanted as _Wanted
from service.replication.contracts import FollowerFetch, Followers, IsrChanges, LeadershipListener
from service.replication.delayed_produce import ProduceWaiters
from service.replication.isr_watch import IsrWatch
from service.replication.partition import Partition, Transition, monotonic_ms
from service.replication.partition_metadata import PARTITION_METADATA, read_topic_id, write_topic_id
from service.replication.stops import Stop, Stops

__all__ = [
    "PARTITION_METADATA",
    "FollowerFetch",
    "LeadershipListener",
    "ReplicaManager",
    "read_topic_id",
]

_log = logging.getLogger("strata.replication")
#: deleted logs closed and renamed per turn of the event loop
RETIRE_SLICE = 50
#: new partitions opened per turn of the event loop (module docstring)
OPEN_SLICE = 100
#: ... and for at most this long: on a busy disk 100 took 200-500 ms, long enough for
#: three brokers on two cores to miss one another's heartbeats during a large create; 50 ms
#: slices held the loop 42-51 ms nine times in a 600-partition create (bench/wide_requests.py)
OPEN_SLICE_S = 0.02
#: a slice that opens no log (a death's takeover: changes of ~20-50 us each) holds the loop at
#: most about this long: a request naming a partition the takeover has not reached takes it at
#: once, but only between slices (50 ms slices held a first write after a failover that long)
TAKE_SLICE_S = 0.005
#: an apply changing more partitions than this (a death's takeover) takes none at once: a request
#: takes the one it names on arrival (:meth:`ReplicaManager._take_now`), slices take the rest
TAKE_ON_USE = 100
#: the next slice waits this long: a timer, so I/O and timers run in between (uvloop may run call_soon's back to back)
NEXT_TURN_S = 0.001


def _loop_running() -> bool:  # start-up and tests apply without a running loop: all at once
    with contextlib.suppress(RuntimeError):
        return asyncio.get_running_loop() is not None
    return False


class _OpensOnUse:
    """How long requests may spend creating new logs in one turn of the loop: the turn's first
    create, then more until OPEN_SLICE_S after it. A producer's first request to a new
    500-partition topic names every partition; each log created is a directory and four files
    (1-4 ms on this machine's disk), so creating them all for it held the loop up to 2.7 s."""

    __slots__ = ("_turn",)

    def __init__(self) -> None:
        self._turn: tuple[asyncio.AbstractEventLoop, float] | None = None  # its loop, its first create

    def may_open(self) -> bool:
        if not _loop_running():
            return True
        loop, now = asyncio.get_running_loop(), time.monotonic()
        if self._turn is None or self._turn[0] is not loop:  # a loop that stopped never ended its turn
            self._turn = (loop, now)
            loop.call_soon(self._end_turn)  # runs at the loop's next turn
            return True
        return now - self._turn[1] < OPEN_SLICE_S

    def _end_turn(self) -> None:
        self._turn = None


@dataclass(slots=True)
class _Taking:
    """Leader and follower transitions of the metadata being applied, since ``started``."""

    started: float
    revision: int = -1
    leaders: int = 0
    followers: int = 0
    #: when every leadership took effect: all taken (they go first), or all pending, each
    #: taken by the first request naming it (a takeover in bulk)
    leaders_at: float | None = None
    on_use: int = 0  # how many a request took before their slice did
    planned: bool = False  # the apply took a plan made ahead (service/replication/apply_plan.py)

    def count(self, transition: Transition) -> None:
        if transition is Transition.LEADER:
            self.leaders += 1
        elif transition is Transition.FOLLOWER:
            self.followers += 1


class ReplicaManager:
    """The partitions of this broker (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        logs: LogManager,
        config_for: Callable[[str], LogConfig],
        waiters: AppendWaiters,
    ) -> None:
        self.node_id = node_id
        self._logs = logs
        self._config_for = config_for
        self._waiters = waiters
        self.partitions: dict[TopicPartition, Partition] = {}
        #: the applies of the fencings made ahead, worked out ahead (:mod:`~service.replication.apply_plan`)
        self.plans = ApplyPlans(node_id)
        self.metadata: ClusterMetadata | None = None
        self._listeners: list[LeadershipListener] = []
        self.followers: Followers | None = None
        self.isr_changes: IsrChanges | None = None
        self.on_log_deleted: Callable[[str, int, uuid.UUID, bool], None] | None = None
        self.produce_waiters = ProduceWaiters()
        #: partitions the metadata gives this broker whose log cannot be opened (a full
        #: disk): why; Produce and Fetch answer KAFKA_STORAGE_ERROR, and
        #: :meth:`retry_offline` tries them again (issue #36)
        self.unopened: dict[TopicPartition, str] = {}
        #: a later turn of the loop opens the partitions this apply left (OPEN_SLICE), of
        #: these topics
        self._opening_more = False
        self._opening_topics: set[str] = set()
        #: the partitions of the reconcile under way not taken yet, in the order to take them: the
        #: slices go on with them, and a request for one takes it at once (:meth:`_take_now`) ...
        self._pending: dict[TopicPartition, _Wanted] = {}
        self._opens_on_use = _OpensOnUse()  # ... within a budget per turn when that creates its log
        #: ... of this metadata (and whether its brokers changed); None when none is pending
        self._resume: tuple[ClusterMetadata, bool] | None = None
        self._taking: _Taking | None = None  # the leaderships moving until the reconcile is done
        #: whether this broker may act as a leader right now (the cluster node sets it)
        self.may_lead: Callable[[], bool] = lambda: True
        #: ISR changes this broker asked for, as a leader (the metrics' counters)
        self.isr_shrinks = 0
        self.isr_expands = 0
        self._stray_topic_ids: dict[TopicPartition, tuple[Log, uuid.UUID | None]] = {}
        #: the partitions that left the table and are not stopped yet (:mod:`~service.replication.stops`)
        self._stops = Stops(self._stop, self._retire_deleted_logs)
        #: the led partitions the ISR check (:meth:`shrink_isrs`) looks at
        self.isr_watch = IsrWatch()
        #: when each follower broker's latest Fetch reached this leader (monotonic ms)
        self.follower_requests_ms: dict[int, float] = {}
        # a follower session hears of every change of a log (its log start, say)
        logs.change_listeners.append(waiters.touch)

    def add_listener(self, listener: LeadershipListener) -> None:
        self._listeners.append(listener)

    # -- applying the metadata -------------------------------------------------------------

    def apply(self, md: ClusterMetadata) -> None:
        """Reconcile the hosted partitions with ``md`` (module docstring): the topics whose
        registrations changed since the last ``md``, or every topic when the brokers did."""
        started = time.monotonic()
        previous, self.metadata = self.metadata, md
        whole = self._opening_topics | {key[0] for key in self.unopened}
        plan = None if whole else self.plans.find(previous, md)  # a fencing made ahead
        if plan is not None:
            scope, moved, wanted = set(), plan.away, plan.pending  # moved away (the rest stay here)
        else:
            scope, moved, wanted = diff(previous, md, self.node_id, whole)  # type: ignore[assignment]
        if self._taking is None:
            self._taking = _Taking(started)
        self._taking.planned |= plan is not None
        self._taking.revision = md.revision
        self._delete_unwanted(md, wanted, scope, moved)
        if previous is not None:
            for name in md.topics if scope is None else scope & md.topics.keys():
                old, info = previous.topics.get(name), md.topics[name]
                if old is not None and old.topic_id == info.topic_id and old.configs != info.configs:
                    self._logs.update_config(name, self._config_for(name))
        self.unopened = {k: why for k, why in self.unopened.items() if k in wanted}
        if plan is not None:  # every partition of it changed: none is filtered out
            self._pending = dict(plan.pending)
        else:
            items = list(wanted.items())
            if scope is not None:  # no broker is back: a partition whose registration is the same object needs nothing
                hosted = self.partitions
                items = [x for x in items if (p := hosted.get(x[0])) is None or p.registration is not x[1][1]]
            # leaderships first: a partition takes writes once its leader is in effect
            self._pending = dict(leaderships_first(items, self.node_id))
        self._resume = (md, scope is None)
        if len(self._pending) > TAKE_ON_USE and _loop_running():  # in bulk (a death): on use, and in slices
            if self._taking.leaders_at is None:  # a newer apply keeps them pending: still served
                self._taking.leaders_at = time.monotonic()
            self._opening_topics = set(plan.topics) if plan is not None else {key[0] for key in self._pending}
            self._open_more_soon()
            return
        self._reconcile(*self._resume)

    def _reconcile(self, md: ClusterMetadata, brokers_changed: bool) -> None:
        """Open, lead or follow the pending partitions of ``md`` for one slice of the loop; a
        later turn goes on with the rest (not the whole of ``md`` again: at 10,000 partitions a
        start re-read every one at each of its slices)."""
        became_followers: list[Partition] = []
        pending = self._pending
        items = list(pending.items())
        opened, room = 0, OPEN_SLICE if _loop_running() else len(items)
        started = time.monotonic() if _loop_running() else float("inf")
        slice_ends, changes_end = started + OPEN_SLICE_S, started + TAKE_SLICE_S
        skipped = False  # a new partition left for a later turn (OPEN_SLICE)
        taking = self._taking
        leaders_left = taking is not None and taking.leaders_at is None
        for n, (key, wanted) in enumerate(items):
            reg = wanted[1]
            if leaders_left and reg.leader != self.node_id:  # past the leaderships (they come first)
                leaders_left = False
                if not skipped:
                    taking.leaders_at = time.monotonic()  # type: ignore[union-attr]
            found = self.partitions.get(key)
            if found is not None and found.registration is reg:  # unchanged, or a request took it
                pending.pop(key, None)
                if brokers_changed and found.is_leader and len(found.isr) < len(found.replicas):
                    self._maybe_expand_isr(found)  # a broker is back: an idle follower's fetch names nothing
                continue
            if (found is None and opened) or n & 63 == 63:  # an open costs ~1 ms, a change ~20 us
                now = time.monotonic()
                if now > slice_ends or (not opened and now > changes_end):  # this turn is used up:
                    break  # the next one goes on
            if found is None and opened >= room:
                skipped = True
                continue
            if found is None:
                opened += 1
            pending.pop(key, None)
            follower = self._take_wanted(key, wanted, found)
            if follower is not None:
                became_followers.append(follower)
        self._opening_topics = {key[0] for key in pending}
        self._resume = (md, brokers_changed) if pending else None
        if pending:
            self._open_more_soon()
        else:  # every wanted log is open: the stray check reads no more
            self._stray_topic_ids.clear()
            self._took_effect()
        self._follow(md, became_followers)

    def _take(self, partition: Partition, reg: PartitionRegistration) -> Transition:
        """``partition`` takes ``reg``: leads or follows as it says (its fetcher is the caller's)."""
        transition = partition.update(reg)
        if self._taking is not None:
            self._taking.count(transition)
        key = (partition.topic, partition.index)
        if transition is Transition.LEADER:
            _log.debug("%s: leader at epoch %d", partition.name, partition.leader_epoch)
            if self.followers is not None:
                self.followers.remove([key])
            for listener in self._listeners:
                listener.on_leader(partition)
            self._changed(partition)
        elif transition is Transition.FOLLOWER:
            _log.debug("%s: follower of broker %d at epoch %d", partition.name,
                       partition.leader_id, partition.leader_epoch)
            for listener in self._listeners:
                listener.on_resign(key[0], key[1], False)
            self._changed(partition)
        if partition.is_leader:  # touched: a new replica whose fetch came first re-reads it
            # the metadata shrank the ISR (a new leader moved its high watermark already)
            if transition is not Transition.LEADER and partition.maybe_increment_high_watermark():
                self._changed(partition)
            self._waiters.touch(partition.topic, partition.index)
            self._maybe_expand_isr(partition)
            self.isr_watch.add(partition)
        return transition

    def _follow(self, md: ClusterMetadata, became_followers: Iterable[Partition]) -> None:
        if self.followers is not None and not self._logs.offline:
            for partition in became_followers:
                if partition.leader_id >= 0 and md.is_active(partition.leader_id):
                    self.followers.add(partition)
                else:
                    self.followers.remove([(partition.topic, partition.index)])

    def _take_wanted(self, key: TopicPartition, wanted: _Wanted, found: Partition | None) -> Partition | None:
        """``key`` (``found``, or opened now) takes its registration; the partition when it
        became a follower (the caller hands it to the fetchers)."""
        partition = self._open(key, wanted[0]) if found is None else found
        if partition is not None and self._take(partition, wanted[1]) is Transition.FOLLOWER:
            return partition
        return None

    def _take_now(self, key: TopicPartition) -> None:
        """A request names ``key``, which the reconcile under way has not reached: take it now,
        unless that creates its log past this turn's :class:`_OpensOnUse`: then a slice opens it,
        and the request meanwhile finds it not hosted (NOT_LEADER_OR_FOLLOWER, which clients retry)."""
        wanted = self._pending.get(key)
        if wanted is None:
            return
        found = self.partitions.get(key)
        if (found is None and self._resume is not None and self._logs.get_log(*key) is None
                and not self._opens_on_use.may_open()):
            return
        del self._pending[key]
        if self._resume is None:
            return
        if found is not None and found.registration is wanted[1]:
            return
        if self._taking is not None:
            self._taking.on_use += 1
        follower = self._take_wanted(key, wanted, found)
        if follower is not None:
            self._follow(self._resume[0], [follower])

    def _took_effect(self) -> None:
        """Every leadership of the applied metadata is in effect here: say so when some moved
        (a death's new leaders; bench/metadata_scale.py times a failover by this line)."""
        taking, self._taking = self._taking, None
        if taking is not None and (taking.leaders or taking.followers):
            now = time.monotonic()
            _log.info("metadata revision %d in effect after %.0f ms (its leaderships after %.0f ms): "
                      "leader of %d more partition(s), follower of %d%s%s", taking.revision,
                      (now - taking.started) * 1000, ((taking.leaders_at or now) - taking.started) * 1000,
                      taking.leaders, taking.followers,
                      f"; {taking.on_use} taken by the first request naming them" if taking.on_use else "",
                      "; its changes worked out ahead" if taking.planned else "")

    def _delete_unwanted(self, md: ClusterMetadata, wanted: Mapping[TopicPartition, _Wanted],
                         scope: set[str] | None, moved: Iterable[TopicPartition] = ()) -> None:
        """Stop and delete the partitions of the ``scope`` topics (None: all, and stray logs),
        and the ``moved`` ones, that ``md`` no longer places here, or places under a new topic
        id. They leave the table now, and stop a slice of the loop at a time
        (:mod:`~service.replication.stops`); the checkpoints are written once for all of them
        (per partition, a 1,000-partition topic delete wrote and fsynced them 1,000 times on
        the event loop), one log line per topic."""
        stopped: Counter[str] = Counter()
        gone = [] if scope is not None and not scope else [
            k for k, p in self.partitions.items() if (scope is None or k[0] in scope)
            and (k not in wanted or wanted[k][0] != p.topic_id)]  # a name deleted and created again
        leaving = gone + [k for k in moved if k in self.partitions and k not in wanted]
        for key in leaving:
            partition = self.partitions.pop(key)
            info = md.topics.get(key[0])
            deleted = info is None or info.topic_id != partition.topic_id
            reason = "topic deleted" if deleted else "reassigned away"
            self._stops.add(Stop(key, partition, deleted, reason))
            stopped[f"{key[0]} ({reason})"] += 1
        if leaving and self.followers is not None:
            self.followers.remove(leaving)  # one pass over the fetchers for all of them
        for what, count in sorted(stopped.items()):
            _log.info("%d partition(s) of %s stopped; local logs deleted", count, what)
        for key, log in self._logs.all_logs().items() if scope is None else ():  # never made partitions
            if key in self.partitions or key in self._stops:
                continue
            topic_id = self._topic_id_of(key, log)
            info = md.topics.get(key[0])
            if key not in wanted or (topic_id is not None and info is not None
                                     and topic_id != info.topic_id):
                deleted = info is None or (topic_id is not None and topic_id != info.topic_id)
                _log.warning("deleting local log %s: %s", log.name,
                             "its topic no longer exists" if deleted else "not a replica here")
                self._delete_log(key, topic_id, deleted)
        self._stops.run()  # and then the deleted logs are retired

    def _topic_id_of(self, key: TopicPartition, log: Log) -> uuid.UUID | None:
        """The topic id in ``log``'s ``partition.metadata``, read once per log: a start opens partitions
        in slices and looked at the unopened logs at every one (50 million reads at 10,000)."""
        known = self._stray_topic_ids.get(key)
        if known is not None and known[0] is log:
            return known[1]
        topic_id = read_topic_id(log.dir)
        self._stray_topic_ids[key] = (log, topic_id)
        return topic_id

    def _retire_deleted_logs(self) -> None:
        """Close and rename the deleted logs :data:`RETIRE_SLICE` per loop turn (they left the manager:
        nothing reads them meanwhile; one opened again under its name settles first); all at once without a loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._logs.finish_deletes()
            return
        self._retire_some(loop)

    def _retire_some(self, loop: asyncio.AbstractEventLoop) -> None:
        """One slice of :meth:`_retire_deleted_logs` (a method, not a closure calling itself:
        that would be a reference cycle per delete)."""
        if self._logs.retire(RETIRE_SLICE):
            loop.call_later(NEXT_TURN_S, self._retire_some, loop)

    def _open(self, key: TopicPartition, topic_id: uuid.UUID) -> Partition | None:
        """The partition, its log opened (created); None when the disk refuses: offline here
        until :meth:`retry_offline` opens it (Kafka serves its other log directories' partitions)."""
        self._stops.settle(key)  # a predecessor of the same name stops first
        try:
            log = self._logs.get_or_create_log(key[0], key[1], self._config_for(key[0]))
            write_topic_id(log.dir, topic_id)
        except (OSError, KafkaStorageError) as exc:
            if key not in self.unopened:
                _log.error("%s-%d: cannot open its log (%s); offline on this broker until it can be "
                           "(free space: delete topics, lower retention)", key[0], key[1], exc)
            self.unopened[key] = str(exc)
            return None
        if self.unopened.pop(key, None) is not None:
            _log.info("%s-%d: its log is open again", key[0], key[1])
        partition = Partition(key[0], key[1], topic_id, log, self.node_id, lambda: self.may_lead())
        self.partitions[key] = partition
        return partition

    def _open_more_soon(self) -> None:
        """Apply the latest metadata again on the loop's next turn (more partitions to open)."""
        if self._opening_more:
            return
        loop = asyncio.get_running_loop()
        self._opening_more = True

        def more() -> None:
            self._opening_more = False
            resume = self._resume
            if resume is not None and resume[0] is self.metadata:
                self._reconcile(*resume)
            elif self.metadata is not None:
                self.apply(self.metadata)

        loop.call_later(NEXT_TURN_S, more)

    def retry_offline(self) -> None:
        """Try again to open the partitions that could not be (no work when none)."""
        if self.unopened and self.metadata is not None:
            self.apply(self.metadata)

    def _stop(self, stop: Stop) -> None:
        """One partition that left the table (:meth:`_delete_unwanted`) stops here."""
        key, partition, deleted, reason = stop
        _log.debug("%s: stops (%s); deleting its local log", partition.name, reason)
        for listener in self._listeners:
            listener.on_resign(key[0], key[1], deleted)
        self._delete_log(key, partition.topic_id, deleted)
        self._waiters.notify(*key)
        self.produce_waiters.fail(key, f"{partition.name} is no longer hosted here ({reason})")

    def _delete_log(self, key: TopicPartition, topic_id: uuid.UUID | None, deleted: bool) -> None:
        """The local log goes; a deleted topic's data in the bucket too, from every replica
        that held it (the deletes are idempotent). Only its leader deleting it left the
        bucket's copy for good when the topic was deleted while it had no leader: a
        leader fenced for a moment, or down."""
        self._logs.delete_log(*key, defer=True)  # the caller finishes the deletes once
        if self.on_log_deleted is not None and topic_id is not None:
            self.on_log_deleted(key[0], key[1], topic_id, deleted)

    def shutdown(self) -> None:
        self._stops.finish()
        if self.followers is not None:
            self.followers.remove(list(self.partitions))

    async def close(self) -> None:
        """Stop the fetchers' and the ISR manager's tasks."""
        for part in (self.followers, self.isr_changes):
            closer = getattr(part, "close", None)
            if closer is not None:
                await closer()

    # -- reads for requests ---------------------------------------------------------------------

    def partition(self, topic: str, index: int) -> Partition | None:
        """As the reconcile left it: background work (tiering's rounds over every partition)
        never takes one on use, which would take them all in one turn of the loop."""
        return self.partitions.get((topic, index))

    def go_offline(self, reason: str) -> None:
        """The log directory failed: stop fetching as a follower and fail the acks=all
        produces waiting, with KAFKA_STORAGE_ERROR (see the module docstring)."""
        keys = list(self.partitions)
        if self.followers is not None:
            self.followers.remove(keys)
        for key in keys:
            self.produce_waiters.fail(key, f"the log directory failed: {reason}", KafkaStorageError)
            self._waiters.notify(*key)

    def get_partition(self, topic: str, index: int) -> Partition:
        """The hosted partition; ``NOT_LEADER_OR_FOLLOWER`` when the metadata has it
        elsewhere, ``UNKNOWN_TOPIC_OR_PARTITION`` when it does not exist at all,
        ``KAFKA_STORAGE_ERROR`` when its log directory failed or its log cannot be opened."""
        if self._pending:
            self._take_now((topic, index))
        partition = self.partitions.get((topic, index))
        if partition is not None:
            self._logs.failure.check(partition.name)
            return partition
        if (why := self.unopened.get((topic, index))) is not None:
            raise KafkaStorageError(f"broker {self.node_id} cannot open the log of {topic}-{index}: {why}")
        md = self.metadata
        info = md.topics.get(topic) if md is not None else None
        if info is not None and 0 <= index < info.partitions:
            raise NotLeaderOrFollowerError(
                f"broker {self.node_id} does not host partition {index} of topic {topic!r}"
            )
        raise UnknownTopicOrPartitionError(
            f"this server does not host partition {index} of topic {topic!r}"
        )

    def leader_log(self, topic: str, index: int, current_leader_epoch: int = -1) -> Log:
        """The log of a partition this broker leads (leader epoch checked); see module docstring."""
        return self.get_partition(topic, index).check_leader(current_leader_epoch)

    def leader_epoch(self, topic: str, index: int) -> int:
        partition = self.partitions.get((topic, index))
        return partition.leader_epoch if partition is not None else -1

    def led(self) -> list[Partition]:
        return [p for p in self.partitions.values() if p.is_leader]

    # -- the leader side of replication ---------------------------------------------------------

    def note_follower_request(self, replica_id: int) -> None:  # a Fetch of it came, naming anything
        self.follower_requests_ms[replica_id] = monotonic_ms()

    def after_append(self, partition: Partition) -> None:
        """A leader appended: move the high watermark and wake fetches (followers' too)."""
        partition.note_append(self.follower_requests_ms)
        if partition.maybe_increment_high_watermark():
            self.produce_waiters.wake(partition)
        self._waiters.notify(partition.topic, partition.index)
        self.isr_watch.add(partition)

    def _changed(self, partition: Partition) -> None:
        """The partition's high watermark, ISR or leadership changed: wake the fetches and
        the acks=all produce requests waiting on it."""
        self._waiters.notify(partition.topic, partition.index)
        self.produce_waiters.wake(partition)

    async def wait_replicated(self, topic: str, index: int, offset: int, timeout_ms: int) -> None:
        """Until the ISR holds every offset below ``offset`` (acks=all); REQUEST_TIMED_OUT,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND or NOT_LEADER_OR_FOLLOWER else
        (:mod:`service.replication.delayed_produce`)."""
        await self.produce_waiters.wait(self.get_partition(topic, index), offset, timeout_ms)

    def after_follower_append(self, partition: Partition) -> None:
        """A follower appended what it fetched (its high watermark may have moved)."""
        self._waiters.notify(partition.topic, partition.index)

    def record_follower_fetch(self, fetch: FollowerFetch) -> tuple[int, int] | None:
        """A follower's fetch reached this leader. Checked first, as Kafka's
        ``fetchRecords`` does: its leader epoch; its last fetched epoch against this
        leader's history (a diverging follower gets ``(epoch, end offset)`` back to
        truncate to, and is not counted); a fetch offset beyond this leader's log end
        is ``OFFSET_OUT_OF_RANGE``. Then its position is noted: the high watermark may
        move (waking producers waiting for acks=all) and the ISR widen."""
        partition = self.get_partition(fetch.topic, fetch.partition)
        if fetch.topic_id is not None and fetch.topic_id != partition.topic_id:
            # another incarnation of the topic: a session's entry from before it was created again
            raise UnknownTopicIdError(f"{partition.name}: topic id {fetch.topic_id} is not this "
                                      f"partition's ({partition.topic_id})")
        log = partition.check_leader(fetch.current_leader_epoch, follower=True)
        partition.follower(fetch.replica_id)
        if fetch.last_fetched_epoch >= 0:
            epoch, end = log.leader_epoch_cache.end_offset_for(fetch.last_fetched_epoch)
            if epoch != fetch.last_fetched_epoch or end < fetch.fetch_offset:
                return epoch, end
        if fetch.fetch_offset > log.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{partition.name}: broker {fetch.replica_id} fetches from offset "
                f"{fetch.fetch_offset}, beyond this leader's log end {log.log_end_offset}"
            )
        moved = partition.record_follower_fetch(
            fetch.replica_id, fetch.fetch_offset, fetch.log_start_offset, fetch.broker_epoch,
            monotonic_ms(),
        )
        if moved:
            self._changed(partition)
        self._maybe_expand_isr(partition)
        if fetch.fetch_offset < log.log_end_offset:
            self.isr_watch.add(partition)
        return None

    def after_isr_change(self, partition: Partition, high_watermark_moved: bool) -> None:
        """The controller committed an ISR change this leader asked for; a follower caught up
        meanwhile (not proposed while one was pending; idle, it names nothing) is proposed now."""
        if high_watermark_moved:
            self._changed(partition)
        else:  # a shrink below min.insync.replicas answers waiting requests all the same
            self.produce_waiters.wake(partition)
        self._maybe_expand_isr(partition)

    def after_isr_change_dropped(self, partition: Partition) -> None:
        """An ISR change this leader asked for was refused or lost: the follower sessions read
        the partition again at their next request, which proposes again (Kafka's leader does
        at every fetch; an idle follower in a session names nothing)."""
        self._waiters.touch(partition.topic, partition.index)

    def shrink_isrs(self, max_lag_ms: int) -> int:
        """Ask the controller to drop from the ISRs this broker leads the followers lagging for
        ``max_lag_ms`` (Kafka's ``maybeShrinkIsr``); how many partitions it asked for."""
        if self.isr_changes is None:
            return 0
        asked = self.isr_watch.shrink(self.partitions, self.isr_changes.submit, monotonic_ms(), max_lag_ms)
        self.isr_shrinks += asked
        return asked

    def _maybe_expand_isr(self, partition: Partition) -> None:
        if self.isr_changes is None:
            return
        candidates = [r for r in partition.expansion_candidates() if self._isr_eligible(partition, r)]
        if candidates:
            new_isr = tuple(sorted(set(partition.isr) | set(candidates), key=partition.replicas.index))
            partition.pending_isr = new_isr
            partition.maybe_increment_high_watermark()
            _log.debug("%s: asking to add %s to the ISR %s", partition.name, candidates,
                       list(partition.isr))
            self.isr_changes.submit(partition, new_isr)
            self.isr_expands += 1

    def _isr_eligible(self, partition: Partition, replica: int) -> bool:
        """Whether the controller would take ``replica`` into an ISR (Kafka's
        ``isReplicaIsrEligible``): registered, unfenced, not shutting down, and fetching with
        the broker epoch it is registered with. A dead broker's replica looks caught up
        here; proposing it back would be refused, and at 10,000 partitions flood the
        controller just when it moves leaderships."""
        md = self.metadata
        registration = md.brokers.get(replica) if md is not None else None
        if registration is None or not registration.is_active:
            return False
        epoch = partition.followers[replica].broker_epoch
        return epoch == -1 or epoch == registration.broker_epoch
