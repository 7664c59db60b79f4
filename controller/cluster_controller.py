"""The active-controller role of a broker in a cluster: :class:`ClusterController`.

Over 500 lines because taking the lease, the first write at a new epoch, the loop that
renews it and fences brokers, and the controller APIs it serves all decide on the same
"still active at this epoch" state; the decisions themselves are apart (membership,
placement, partition changes, topic changes, the commit rule).

Every broker runs one. It competes for the controller lease
(:mod:`controller.lease`); the one that holds it is the *active controller*:

1. On acquiring the lease at epoch ``e``, its first act is a metadata write
   stamped with ``e`` (which also upgrades a format-1 document and re-elects
   partitions whose leader may not lead). From then on every write of a
   deposed controller is refused (:mod:`controller.commit`). Only then does it
   serve requests, and every unfenced broker gets a fresh heartbeat session.
2. While active it renews the lease, fences brokers whose session expired
   (``broker.session.timeout.ms``), and serves the controller APIs below. Before
   every write it checks that its lease still holds on its own monotonic clock;
   once it does not, or a write finds a higher epoch, it stops (``is_active``
   False, ``NotControllerError`` to callers).
3. When its lease runs out because the bucket answers nobody, it may *hold* the cluster
   as it is (:mod:`controller.outage_hold`, ADR 0031): it answers heartbeats that change
   nothing, writes nothing, and every broker goes on leading what it led.

The methods map 1:1 onto Kafka's controller APIs, for the broker side to wire
in phase 2: BrokerRegistration -> :meth:`register_broker`, BrokerHeartbeat ->
:meth:`broker_heartbeat`, UnregisterBroker -> :meth:`unregister_broker`,
AlterPartition -> :meth:`alter_partition`, AllocateProducerIds ->
:meth:`allocate_producer_ids`, AlterPartitionReassignments ->
:meth:`alter_partition_reassignments`, ListPartitionReassignments ->
:meth:`list_partition_reassignments`, ElectLeaders -> :meth:`elect_leaders`,
CreateTopics / DeleteTopics / CreatePartitions / IncrementalAlterConfigs -> the
:class:`controller.writer.MetadataWriter` methods.

Thread-safety: thread-safe. Mutations serialise on the commit lock; the lease
on its own lock, so a slow metadata write never delays a renewal (lock order:
the commit lock may take the lease lock, never the reverse). Blocking
(object store I/O): call from worker threads, never on the event loop;
:meth:`start` runs :meth:`tick` on a thread of its own.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from common.config.broker import BrokerConfig
from common.errors import KafkaError
from controller.document import ClusterMetadata
from controller.errors import (
    BrokerIdNotRegisteredError,
    ControllerFencedError,
    ElectionNotNeededError,
    NotControllerError,
)
from controller.fence_ahead import FenceAhead
from controller.fence_plans import FencePlans
from controller.lease import LEASE_KEY, ControllerLease, LeaseEvent, LeaseTimings, monotonic_ms
from controller.liveness import Suspects, quorum_lost
from controller.membership import (
    BrokerControlState,
    BrokerHeartbeatTracker,
    HeartbeatReply,
    RegistrationRequest,
    apply_state,
    current_state,
    next_state,
    register_broker,
)
from controller.metadata_store import ObjectStoreMetadataStore
from controller.outage_hold import OutageHold
from controller.partition_change import Election
from controller.placement import PlacementBroker
from controller.records import TopicInfo
from controller.registrations import NO_LEADER, BrokerRegistration, ProducerIdsBlock
from controller.replication_control import (
    AlterPartitionResult,
    PartitionStateChange,
    alter_partition,
    check_broker_epoch,
    drop_fenced_from_isrs,
    elect_leader,
    fence_broker,
    leads_any,
    reassign_partition,
    reconcile_leaders,
)
from controller.topic_changes import Placement, require
from controller.writer import MetadataWriter
from remote_tier.store import ObjectStore

__all__ = ["ClusterController", "Reassignment"]

_log = logging.getLogger(__name__)
METADATA_KEY = "cluster/metadata.json"
TopicPartition = tuple[str, int]
#: the fencing plans are prepared once the metadata has been still this long (ms) ...
PLANS_QUIET_MS = 2_000
#: ... or this long after their last prepare while it keeps changing
PLANS_LATEST_MS = 10_000
#: the tick's pace while a prepare goes on, a bounded number of elections at a time
PLANS_STEP_MS = 50.0
#: the renewal thread's pace while the tick thread is stuck and the lease is left to lapse
STUCK_LOOK_MS = 20.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A reassignment in progress (a ListPartitionReassignments entry)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


class ClusterController(MetadataWriter):
    """A broker's controller role over a shared bucket (see the module docstring).

    Invariants: ``is_active`` implies this node holds the lease (on its own
    monotonic clock) and has committed a metadata write at its epoch; every
    metadata write it sends carries that epoch.
    """

    def __init__(
        self,
        store: ObjectStore,
        config: BrokerConfig,
        *,
        incarnation_id: uuid.UUID | None = None,
        clock: Callable[[], int] = _now_ms,
        monotonic: Callable[[], float] = monotonic_ms,
        placement_seed: int | None = None,
        metadata_key: str = METADATA_KEY,
        lease_key: str = LEASE_KEY,
        previous_incarnation_id: uuid.UUID | None = None,
    ) -> None:
        self._incarnation_id = incarnation_id or uuid.uuid4()
        self._monotonic = monotonic
        self._lease = ControllerLease(
            store,
            config.node_id,
            str(self._incarnation_id),
            LeaseTimings.from_config(config),
            monotonic=monotonic,
            wall_clock=clock,
            key=lease_key,
            previous_incarnation_id=(
                None if previous_incarnation_id is None else str(previous_incarnation_id)
            ),
        )
        self._lease_lock = threading.Lock()
        self._hold = OutageHold(self._lease.timings, monotonic)
        self._held = False  # a hold was logged as begun (ADR 0031)
        self._reported_at: float | None = None  # this node's broker last reported an outage
        self._epoch = 0  # the epoch of the last acquisition; stamped on every write
        self._active = False
        self._sessions = BrokerHeartbeatTracker(
            config.get_int("broker.session.timeout.ms"), monotonic
        )
        self._stop = threading.Event()
        self._wake = threading.Event()  # a tick is due now (or the role stops)
        self._thread: threading.Thread | None = None
        self._renewer: threading.Thread | None = None
        self._last_tick_ms = monotonic()  # when the tick thread last finished a step
        self._connection_loss_ms = config.get_int("broker.session.connection.loss.ms")
        self._quorum_timeout_ms = config.get_int("controller.quorum.timeout.ms")
        # the last activation took back the lease this node released to stand down and
        # nobody else took: its peers are gone, not it, so it fences them after all
        self._quorum_waived = False
        self._suspects = Suspects(self._wake.set, monotonic)
        #: ``probe_gone(node_id)``: True when that broker's listener refuses connections
        #: (set by the broker; blocking, called on this role's thread)
        self.probe_gone: Callable[[int], bool] | None = None
        #: ``peer_request_age_ms(node_id)``: how long ago a request of that broker's other
        #: than a heartbeat (a follower fetch) reached this one, None if never (set by the
        #: broker; read on this role's thread)
        self.peer_request_age_ms: Callable[[int], float | None] | None = None
        #: a fencing's second batch (its ISR places) is still to be written
        self._isr_places_due = False
        #: the elections each broker's fencing will need, computed between changes
        self._plans = FencePlans()
        self._ahead = FenceAhead()  # both batches of each broker's fencing, made in quiet time
        self._plans_seen: ClusterMetadata | None = None
        self._plans_seen_at = self._plans_prepared_ms = 0.0
        #: called on this role's thread before it stands down (the broker stops leading
        #: partitions first: a successor fences it at once)
        self.before_stand_down: Callable[[], None] | None = None
        self._auto_rebalance = config.get_bool("auto.leader.rebalance.enable")
        self._rebalance_interval_ms = config.get_int("leader.imbalance.check.interval.seconds") * 1000
        self._imbalance_pct = config.get_int("leader.imbalance.per.broker.percentage")
        self._next_rebalance_ms = monotonic() + self._rebalance_interval_ms
        super().__init__(
            ObjectStoreMetadataStore(store, metadata_key),
            config,
            clock=clock,
            placement_seed=placement_seed,
        )
        self._committer.ahead = self._ahead

    # -- the role -------------------------------------------------------------------------

    @property
    def incarnation_id(self) -> uuid.UUID:
        return self._incarnation_id

    @property
    def is_active(self) -> bool:
        """Whether this node is the active controller right now (not while a broker may
        still rely on a hold's grant, ADR 0031)."""
        return self._active and self._lease.holds() and self._monotonic() >= self._hold.promised_until

    @property
    def fence_ahead(self) -> FenceAhead:
        """The fencings this controller made ahead (its own: read by its broker's apply plans)."""
        return self._ahead

    @property
    def epoch(self) -> int:
        """This node's controller epoch while active, else 0."""
        return self._epoch if self.is_active else 0

    @property
    def controller_id(self) -> int:
        """The active controller's node id as far as this node knows (-1: none known)."""
        if self.answers_heartbeats:
            return self.node_id
        seen = self._lease.observed
        mine = seen is not None and seen.incarnation_id == str(self._incarnation_id)
        if seen is not None and seen.holder != NO_LEADER and not mine:
            return seen.holder  # may be this node id held by another process: a duplicate
        named = self.metadata.controller_id
        return NO_LEADER if named == self.node_id else named

    def live_brokers(self) -> list[int]:
        """The brokers this active controller considers alive: registered, unfenced, not
        shutting down, and heartbeating within ``broker.session.timeout.ms``."""
        self._require_active()
        with self._lock:
            return [
                b.node_id
                for b in self.metadata.active_brokers()
                if self._sessions.has_valid_session(b.node_id)
            ]

    def lease_remaining_ms(self) -> float:
        """How much longer this node may act as controller without a renewal (or waits, its
        lease held, for the grants of a hold to run out), or hold the cluster as it is
        through a bucket outage (0: none of these)."""
        if self.is_active or self._awaiting_grants():
            return self._lease.remaining_ms()
        return self.hold_remaining_ms()

    @property
    def answers_heartbeats(self) -> bool:
        """Active, holding the cluster through a bucket outage, or holding the lease while
        the grants of a hold run out: heartbeats that change nothing are answered here."""
        return self.is_active or self.holding or self._awaiting_grants()

    def _awaiting_grants(self) -> bool:
        """The lease is this node's, but a broker may still lead on a hold's grant: nothing
        is written until it runs out, and nobody else can act either."""
        return self._lease.holds() and self._monotonic() < self._hold.promised_until

    # -- a bucket outage every broker sees (ADR 0031) -----------------------------------------

    def hold_remaining_ms(self) -> float:
        """How much longer this node holds the cluster as it is (0: it does not): its lease
        ran out unanswered at the epoch the metadata names, and every other registered,
        unfenced broker reports that it cannot read the lease either. Any thread."""
        if self.is_active:
            return 0.0
        md = self.metadata
        if (md.controller_id, md.controller_epoch) != (self.node_id, self._epoch):
            return 0.0
        others = (n for n, b in md.brokers.items() if not b.fenced and n != self.node_id)
        return self._hold.remaining_ms(self._lease.lapsed_at, self._committer.in_doubt, others)

    @property
    def holding(self) -> bool:
        return self.hold_remaining_ms() > 0

    @property
    def hold_grant_ms(self) -> int:
        """How long a broker answered "hold" may lead without reading the metadata, from
        before it asked (0: this cluster never holds)."""
        return self._lease.timings.hold_grant_ms if self._hold.enabled else 0

    def lease_lapsed(self) -> bool:
        """This node's own lease ran out unanswered: it answers its broker's reports itself."""
        return self._lease.lapsed_at is not None

    def outage_report(self) -> bool:
        """Whether this node's broker is to report now that it cannot read the lease (it
        cannot, or its own lease ran out unanswered); the instant is kept: a lease this node
        takes within ``3T/4`` of a report waits that long before acting (the controller it
        reported to may have told others to lead on, and may be gone since)."""
        lapsed = self._lease.lapsed_at is not None  # (then it reports to itself, tracked apart)
        blind = (self._lease.read_failing or lapsed) and not self._lease.holds()
        if blind and not lapsed:
            self._reported_at = self._monotonic()
        return blind

    def hold_answer(self, broker_id: int, broker_epoch: int, revision: int, token: int) -> tuple[bool, int, int]:
        """A broker that cannot read the lease says so, echoing the token of this node's
        last answer to it (0: none): whether this node holds the cluster as it is, a token
        for the broker's next report, and for how long (ms) from its request the broker may
        lead on this answer. Counted only from a registered, unfenced broker at its current
        epoch that has loaded this node's metadata revision. Never blocks."""
        md = self.metadata
        registration = md.brokers.get(broker_id)
        counts = (registration is not None and not registration.fenced
                  and registration.broker_epoch == broker_epoch and revision == md.revision)
        if counts and broker_id != self.node_id:
            self._hold.report(broker_id, token)
        holds = False
        if counts and self.holding:
            self._hold.grant()  # first: a lease retaken meanwhile then waits for it ...
            holds = self.holding  # ... and this answer says "hold" only if it still holds
        return holds, self._hold.token(), self._lease.timings.hold_grant_ms

    def _may_take_over(self) -> bool:
        """Whether this node, registered and unfenced in the newest metadata (read now), is
        one a holding controller asks: else it takes a lease over only after the longest
        hold too. Called outside the lease lock (it reads the metadata under the commit lock)."""
        try:
            self.refresh()
        except Exception as err:  # noqa: BLE001 - any failure: not now, ask again next poll
            _log.info("cannot read the cluster metadata before taking the lease over: %s", err)
            return False
        registration = self.metadata.brokers.get(self.node_id)
        return registration is not None and not registration.fenced

    def _acquired(self) -> None:
        """This node took the lease at a new epoch: it acts once its first write is in, and
        not before any hold's grant it may have let a broker rely on has run out: one its
        previous incarnation answered (a restart), or one a controller this node reported
        to within ``3T/4`` did (that controller may be gone; ADR 0031)."""
        self._epoch = self._lease.epoch
        self._active = False
        if not self._hold.enabled:
            return
        timings = self._lease.timings
        if self._lease.retook_previous_incarnation:
            self._hold.promise_until(self._monotonic() + timings.hold_grant_ms)
        if self._reported_at is not None:
            self._hold.promise_until(self._reported_at + timings.hold_report_ms + timings.hold_grant_ms)

    def _say_hold(self) -> None:
        held = self.holding
        if held and not self._held:
            _log.warning("node %d holds the cluster as it is: neither it nor any other broker "
                         "reaches the bucket. Every broker goes on leading what it led; nothing "
                         "is written to the metadata until the bucket answers (at most %d s)",
                         self.node_id, self._lease.timings.outage_hold_max_ms // 1000)
        elif self._held and not held:
            _log.warning("node %d no longer holds the cluster as it is (%s)", self.node_id,
                         "the lease is its again" if self._lease.holds() else
                         "a broker reads the bucket, or stopped reporting, or the hold's bound passed")
        self._held = held

    def peer_unreachable(self, node_id: int) -> None:
        """A connection to or from ``node_id`` dropped: probe it on this role's thread (a
        dead controller's lease is taken over, a dead broker fenced, at once)."""
        self._suspects.add(node_id)

    def tick(self) -> float:
        """Do what is due (renew or compete for the lease, activate, fence expired
        brokers); returns the milliseconds until the next call is useful."""
        event = self._probe_suspects()
        if event is not LeaseEvent.ACQUIRED:
            eligible = (self._lease.waited_out_soon() and self._may_take_over()) if self._hold.enabled else None
            with self._lease_lock:
                event = self._lease.step(min_epoch=self.metadata.controller_epoch, eligible=eligible)
        if event is LeaseEvent.ACQUIRED:
            self._acquired()
        if event is LeaseEvent.LOST or (self._active and not self._lease.holds()):
            self._deactivate("lost the controller lease")
        self._say_hold()
        # after a hold, no leadership moves while a broker may rely on its last answer
        promised_ms = self._hold.promised_until - self._monotonic()
        if self._lease.holds() and not self._active and promised_ms <= 0:
            self._activate()
        if self.is_active and self._quorum_lost():
            self._stand_down()
        if self.is_active:
            self._drop_fenced_from_isrs()
            try:
                self._fence_expired_brokers()
            except KafkaError as err:
                _log.warning("could not fence expired brokers: %s", err)
            try:
                self._maybe_rebalance_leaders()
            except KafkaError as err:
                _log.warning("could not move leaders back to their preferred replicas: %s", err)
            self._maybe_prepare_plans()
        return min(self._lease.next_step_in_ms(), float(self._lease.timings.poll_ms),
                   self._suspects.next_due_ms(), self._plans_due_ms(),
                   promised_ms if promised_ms > 0 else float("inf"))

    def _probe_suspects(self) -> LeaseEvent:
        """Probe the peers whose connection dropped: fence the dead ones (active), or take
        over the lease of a dead controller (not active)."""
        suspects, probe = self._suspects.take(), self.probe_gone
        if not suspects or probe is None:
            return LeaseEvent.NONE
        if not self.is_active:
            holder = None if self._lease.observed is None else self._lease.observed.holder
            for n in suspects - {holder}:
                self._suspects.settled(n)
            if holder not in suspects:
                return LeaseEvent.NONE
            with self._lease_lock:
                event = self._lease.take_over_if_gone(probe, self.metadata.controller_epoch)
            if event is LeaseEvent.ACQUIRED:
                self._acquired()
                self._suspects.settled(holder)
            elif holder is not None and not self._suspects.still_listening(holder):
                _log.info("the controller's connection dropped but node %d still listens: its "
                          "lease decides", holder)
            return event
        md = self.metadata
        gone = []
        for n in sorted(suspects):
            if n == self.node_id or n not in md.brokers or md.brokers[n].fenced:
                self._suspects.settled(n)
            elif probe(n):
                self._suspects.settled(n)
                gone.append(n)
            elif not self._suspects.still_listening(n):
                _log.info("broker %d's connection dropped but its listener still accepts connections: "
                          "its session decides", n)
        if gone:
            _log.warning("fencing broker(s) %s: the listener refuses connections (process gone)",
                         gone)
            try:
                taken = self._ahead.taken
                self._commit(lambda md: (self._fence_all(md, gone), None))
                self._log_fenced(gone, made_ahead=self._ahead.taken > taken)
            except KafkaError as err:
                _log.warning("could not fence broker(s) %s: %s", gone, err)
            self._drop_fenced_from_isrs()
        return LeaseEvent.NONE

    def _fence_all(self, md: ClusterMetadata, node_ids: Sequence[int]) -> ClusterMetadata:
        """Fence ``node_ids`` and move their leaderships; their ISR places go in the next
        batch (:meth:`_drop_fenced_from_isrs`), so the new leaders learn of theirs sooner."""
        for node_id in node_ids:
            broker = md.brokers.get(node_id)
            if broker is not None and not broker.fenced:
                made = self._ahead.fence(md, node_id)
                md = made if made is not None else fence_broker(
                    md, node_id, self._unclean, isr_places=False, plans=self._plans)
                self._isr_places_due = True
        return md

    def _maybe_prepare_plans(self) -> None:
        """Bring the fencing plans up to date in quiet time: once the metadata has not
        changed for :data:`PLANS_QUIET_MS`, or :data:`PLANS_LATEST_MS` after the last
        prepare when it keeps changing. Never right after a change: a death's first
        batch changes who may lead, and replanning every partition then would compete
        with the survivors taking over; never between a fencing's two batches."""
        md, now = self.metadata, self._monotonic()
        if md is not self._plans_seen:
            self._plans_seen, self._plans_seen_at = md, now
        if self._isr_places_due:
            return
        if md is self._plans.prepared_at and self._plans.complete:
            if self._ahead.prepared_for is not md or not self._ahead.complete:  # then the batches, a broker a tick
                self._ahead.prepare(md, self._unclean, self._plans, skip=(self.node_id,), brokers_per_call=1)
                if self.metadata is not md:  # changed meanwhile (perhaps the unclean policy): not these
                    self._ahead.clear()
            return
        if (now - self._plans_seen_at >= PLANS_QUIET_MS
                or now - self._plans_prepared_ms >= PLANS_LATEST_MS):
            self._plans.prepare(md)
            self._plans_prepared_ms = now

    def _plans_due_ms(self) -> float:
        """Soon while a prepare is under way (it goes on in bounded steps), else never."""
        plans = self._plans
        if self.is_active and plans.prepared_at is not None and (
                not plans.complete or self.metadata is plans.prepared_at and (
                    self._ahead.prepared_for is not plans.prepared_at or not self._ahead.complete)):
            return PLANS_STEP_MS
        return float("inf")

    def _log_fenced(self, node_ids: Sequence[int], *, made_ahead: bool = False) -> None:
        md = self.metadata
        fenced = [n for n in node_ids if n in md.brokers and md.brokers[n].fenced]
        if fenced:
            _log.info("broker(s) %s fenced at metadata revision %d; their leaderships moved%s",
                      fenced, md.revision, " (the batch made ahead)" if made_ahead else "")

    def _drop_fenced_from_isrs(self) -> None:
        """The second batch of a fencing: fenced brokers out of the ISRs they are still in
        (a failed write is tried again at the next tick; a new controller does it at once)."""
        if not self._isr_places_due or not self.is_active:
            return
        try:
            self._commit(lambda md: (self._ahead.drop_from_isrs(md)
                                     or drop_fenced_from_isrs(md, self._unclean, self._plans), None))
        except KafkaError as err:
            _log.warning("could not take fenced brokers out of the ISRs: %s", err)
            return
        self._isr_places_due = False

    def _quorum_lost(self) -> bool:
        """Nothing heard from a majority within ``controller.quorum.timeout.ms``: no heartbeat,
        and no other request either. A follower fetch counts, as KRaft's
        check-quorum counts a voter's fetches: three brokers creating 30,000 partitions on
        two cores heartbeated 1.5-2 s apart while their fetches kept arriving, and the
        controller stood down (fencing its own broker) though nothing was cut off."""
        if self._quorum_waived or self._quorum_timeout_ms < 0:
            return False
        requests = self.peer_request_age_ms

        def age_ms(node_id: int) -> float | None:
            ages = [a for a in (self._sessions.age_ms(node_id),
                                None if requests is None else requests(node_id)) if a is not None]
            return min(ages) if ages else None

        with self._lock:
            live = [b.node_id for b in self.metadata.active_brokers()]
            return quorum_lost(self.node_id, live, age_ms, self._quorum_timeout_ms)

    def _stand_down(self) -> None:
        """Cut off from a majority of the brokers: stop leading partitions, then hand the
        lease back and leave it for ``broker.session.timeout.ms`` to a broker that can
        reach the others; that successor fences this one in its first write."""
        _log.warning("node %d stands down as controller: no heartbeat from a majority of the "
                     "brokers within controller.quorum.timeout.ms (%d ms); this node is the "
                     "one cut off", self.node_id, self._quorum_timeout_ms)
        if self.before_stand_down is not None:
            self.before_stand_down()
        self._deactivate("stood down")
        with self._lease_lock:
            self._lease.release(stand_down_ms=self._sessions.session_timeout_ms)

    def _maybe_rebalance_leaders(self) -> None:
        """``auto.leader.rebalance.enable``: every ``leader.imbalance.check.interval.seconds``,
        a broker that leads fewer than its share of the partitions it is the preferred
        (first) replica of -- more than ``leader.imbalance.per.broker.percentage`` of them
        led elsewhere -- gets those back where it is in the ISR (a preferred election)."""
        if not self._auto_rebalance:
            return
        now = self._monotonic()
        if now < self._next_rebalance_ms:
            return
        self._next_rebalance_ms = now + self._rebalance_interval_ms
        md = self.metadata
        preferred: dict[int, list[TopicPartition]] = {}
        elsewhere: dict[int, list[TopicPartition]] = {}
        for topic, index, p in md.iter_partitions():
            if not p.replicas or p.is_reassigning:
                continue
            first = p.replicas[0]
            preferred.setdefault(first, []).append((topic.name, index))
            if p.leader != first and first in p.isr and md.is_active(first):
                elsewhere.setdefault(first, []).append((topic.name, index))
        moves = [
            tp
            for broker, moved in elsewhere.items()
            if len(moved) * 100 > self._imbalance_pct * len(preferred[broker])
            for tp in moved
        ]
        if moves:
            _log.info("moving the leadership of %d partition(s) back to their preferred replicas",
                      len(moves))
            self.elect_leaders(Election.PREFERRED, moves)

    def start(self) -> None:
        """Run :meth:`tick` on a daemon thread until :meth:`close`."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"strata-controller-{self.node_id}", daemon=True
        )
        self._thread.start()
        self._renewer = threading.Thread(
            target=self._renew_while_held, name=f"strata-lease-{self.node_id}", daemon=True
        )
        self._renewer.start()

    def close(self, release: bool = True) -> None:
        """Stop the tick thread; with ``release``, stop acting and hand the lease back so
        another broker takes over at once (a clean shutdown). ``release=False`` leaves
        the lease to expire, like a crash."""
        self._stop.set()
        self._wake.set()
        for thread in (self._thread, self._renewer):
            if thread is not None:
                thread.join(timeout=30)
        self._thread = self._renewer = None
        if release:
            self._deactivate("shutting down")
            with self._lease_lock:
                self._lease.release()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                delay_ms = self.tick()
            except Exception:  # noqa: BLE001 - the role must outlive a failed step
                _log.exception("controller tick failed")
                delay_ms = float(self._lease.timings.poll_ms)
            self._last_tick_ms = self._monotonic()
            self._wake.wait(max(delay_ms, 1.0) / 1000)
            self._wake.clear()

    def _renew_while_held(self) -> None:
        """Renew the held lease on a thread that does nothing else: the tick thread's own
        writes (fencing 30,000 partitions took 0.9 s) or a wait for the commit lock behind a
        large create must not let it run out. A lost lease wakes the tick thread, which
        stops acting."""
        told = False  # the current stuck spell has been logged
        while not self._stop.is_set():
            # a tick thread stuck for a whole session (a store call that never returns) fences
            # nobody: the lease lapses then, and a broker that can act takes it
            stuck = self._monotonic() - self._last_tick_ms > self._sessions.session_timeout_ms
            if stuck and not told and self._lease.holds():
                _log.warning("node %d's controller thread has not finished a step for %d ms; "
                             "its lease is left to lapse", self.node_id, self._sessions.session_timeout_ms)
            told = stuck and (told or self._lease.holds())
            with self._lease_lock:
                held = self._lease.holds()
                event = self._lease.step() if held and not stuck else LeaseEvent.NONE
                # stuck, the renewal it skips is overdue: look again shortly (the tick thread may
                # come back before the lease runs out), not at once in a loop
                due_ms = (min(STUCK_LOOK_MS, self._lease.remaining_ms()) if stuck
                          else self._lease.next_step_in_ms()) if held else None
            if event is LeaseEvent.LOST:
                self._wake.set()
            wait_ms = self._lease.timings.renew_ms if due_ms is None else max(due_ms, 1.0)
            self._stop.wait(min(wait_ms, self._lease.timings.renew_ms) / 1000)

    def connection_lost(self, broker_id: int) -> None:
        """The connection ``broker_id`` heartbeats on closed: its process may have died (a
        killed process's sockets are closed by its kernel at once). Its listener is probed
        on this role's thread: refused, the broker is fenced at once, so its partitions move
        without waiting out ``broker.session.timeout.ms``. A connection dropped for a slow
        answer (the broker's process is alive and listening) changes nothing: cutting its
        session short fenced live brokers whenever the controller was slow (issue #31)."""
        if self.is_active:
            _log.info("the connection broker %d heartbeats on closed; probing its listener", broker_id)
            self._suspects.add(broker_id)

    def _activate(self) -> None:
        epoch = self._epoch

        # a predecessor that gave the lease up (stood down, or its process is gone) leads
        # nothing any more: fence it in this very write, so its partitions move now
        stepped_down = self._lease.stepped_down

        def change(md: ClusterMetadata) -> tuple[ClusterMetadata, None]:
            claimed = replace(md, controller_epoch=epoch, controller_id=self.node_id)
            if stepped_down != NO_LEADER:
                claimed = self._fence_all(claimed, [stepped_down])
            return reconcile_leaders(claimed, self._unclean), None

        try:
            self._commit(change)
        except KafkaError as err:
            _log.warning(
                "node %d could not claim controller epoch %d: %s", self.node_id, epoch, err
            )
            return
        with self._lock:  # fresh sessions for unfenced brokers only, as Kafka's activate()
            self._sessions.reset(n for n, b in self.metadata.brokers.items() if not b.fenced)
            # but not the controller whose lease ran out: a live one renews it, so its
            # process is gone or cut off from the bucket; its partitions move at once
            # (after the connection-loss grace) rather than after a whole new session
            gone = self._lease.taken_over_from
            if gone != NO_LEADER and self._connection_loss_ms >= 0:
                self._sessions.cut_short(gone, self._connection_loss_ms)
            self._quorum_waived = self._lease.retook_own_release
            self._active = True
        _log.info("node %d is the active controller at epoch %d", self.node_id, epoch)
        self._isr_places_due = True  # a predecessor may have died between the two batches
        self._drop_fenced_from_isrs()

    def _deactivate(self, why: str) -> None:
        with self._lock:
            if self._active:
                _log.warning("node %d stops acting as controller: %s", self.node_id, why)
            self._active = False
            self._sessions.reset(())
            self._plans = FencePlans()
            self._ahead = self._committer.ahead = FenceAhead()

    def _fence_expired_brokers(self) -> None:
        with self._lock:
            md = self.metadata
            expired = [
                n for n in self._sessions.expired() if n in md.brokers and not md.brokers[n].fenced
            ]
        if not expired:
            return

        def change(md: ClusterMetadata) -> tuple[ClusterMetadata, None]:
            # a broker that heartbeated meanwhile keeps its place
            silent = [n for n in expired if not self._sessions.has_valid_session(n)]
            return self._fence_all(md, silent), None

        _log.warning("fencing broker(s) %s: no heartbeat within the session timeout", expired)
        taken = self._ahead.taken
        self._commit(change)
        self._log_fenced(expired, made_ahead=self._ahead.taken > taken)
        self._drop_fenced_from_isrs()

    # -- hooks of MetadataWriter --------------------------------------------------------------

    def _writer_epoch(self) -> int:
        return self._epoch

    def _writer_id(self) -> int:
        return self.node_id

    def _require_active(self) -> None:
        if not self.is_active:
            raise NotControllerError(
                f"node {self.node_id} is not the active controller (the controller is "
                f"node {self.controller_id})"
            )

    def _check_lease(self) -> None:
        if not self._lease.holds():
            self._deactivate("its lease ran out before the write")
            raise NotControllerError(
                f"node {self.node_id} is no longer the controller: its lease ran out"
            )
        if self._monotonic() < self._hold.promised_until:  # a renewal that hung, then landed
            raise NotControllerError(f"node {self.node_id} does not act while a broker may still "
                                     "lead on its answer during a bucket outage")

    def _on_fenced(self, error: ControllerFencedError) -> None:
        with self._lease_lock:
            self._lease.abandon(str(error))
        self._deactivate(str(error))
        try:  # learn the higher epoch, so a later acquisition takes one above it
            self.refresh()
        except KafkaError as err:
            _log.warning("could not re-read the cluster metadata: %s", err)

    def _placement(self, md: ClusterMetadata) -> Placement:
        usable = tuple(PlacementBroker(b.node_id, b.rack) for b in md.active_brokers())
        return Placement(usable, frozenset(md.brokers))

    def _unclean(self, topic: TopicInfo) -> bool:
        return self._changes.unclean_election_enabled(topic)

    # -- broker lifecycle (BrokerRegistration, BrokerHeartbeat, UnregisterBroker) ---------------

    def register_broker(self, request: RegistrationRequest) -> BrokerRegistration:
        """Kafka's BrokerRegistration; the registration's ``broker_epoch`` is the answer.

        ``DuplicateBrokerRegistrationError`` if a live broker of another incarnation
        holds the node id; ``InconsistentClusterIdError`` for another cluster's broker.
        """
        self._require_active()

        def change(md: ClusterMetadata) -> tuple[ClusterMetadata, BrokerRegistration]:
            return register_broker(
                md,
                request,
                has_valid_session=self._sessions.has_valid_session,
                session_age_ms=self._sessions.age_ms,
                unclean=self._unclean,
            )

        with self._lock:
            registration = self._commit(change)
            self._sessions.touch(registration.node_id)
        return registration

    def broker_heartbeat(
        self,
        broker_id: int,
        broker_epoch: int,
        current_metadata_offset: int,
        want_fence: bool = False,
        want_shut_down: bool = False,
    ) -> HeartbeatReply:
        """Kafka's BrokerHeartbeat. ``current_metadata_offset`` is the metadata revision
        the broker has loaded; a fenced broker is unfenced once it has loaded the
        revision of its registration. Writes only when the broker's state changes."""
        unchanged = self.heartbeat_without_change(
            broker_id, broker_epoch, current_metadata_offset, want_fence, want_shut_down
        )
        if unchanged is not None:
            return unchanged

        def change(md: ClusterMetadata) -> tuple[ClusterMetadata, HeartbeatReply]:
            check_broker_epoch(md, broker_id, broker_epoch)
            self._sessions.touch(broker_id)
            registration = md.brokers[broker_id]
            leads = want_shut_down or registration.in_controlled_shutdown
            target = next_state(
                registration,
                current_metadata_offset=current_metadata_offset,
                want_fence=want_fence,
                want_shut_down=want_shut_down,
                leads_partitions=leads and leads_any(md, broker_id),
            )
            reply = HeartbeatReply(
                is_caught_up=current_metadata_offset >= registration.broker_epoch,
                is_fenced=target.fenced,
                should_shut_down=target is BrokerControlState.SHUTDOWN_NOW,
            )
            return apply_state(md, broker_id, target, self._unclean), reply

        return self._commit(change)

    def heartbeat_without_change(
        self,
        broker_id: int,
        broker_epoch: int,
        offset: int,
        want_fence: bool = False,
        want_shut_down: bool = False,
    ) -> HeartbeatReply | None:
        """A BrokerHeartbeat that leaves the broker's state as it is, answered without a
        write and without the commit lock (a metadata write holds it while the bucket is
        slow): the broker is alive as of now. None when the heartbeat changes something
        (:meth:`broker_heartbeat` then writes it). Answered during a hold too. Never blocks."""
        if not self.answers_heartbeats:
            self._require_active()
        registration = self.metadata.brokers.get(broker_id)
        if registration is None or registration.broker_epoch != broker_epoch:
            return None
        self._sessions.touch(broker_id)
        if want_shut_down or registration.in_controlled_shutdown:
            return None
        target = next_state(registration, current_metadata_offset=offset, want_fence=want_fence,
                            want_shut_down=False, leads_partitions=False)
        if target is not current_state(registration):
            return None
        return HeartbeatReply(is_caught_up=offset >= registration.broker_epoch,
                              is_fenced=target.fenced, should_shut_down=False)

    def unregister_broker(self, broker_id: int) -> None:
        """Kafka's UnregisterBroker: fence the broker and forget its registration."""
        self._require_active()

        def change(md: ClusterMetadata) -> tuple[ClusterMetadata, None]:
            if broker_id not in md.brokers:
                raise BrokerIdNotRegisteredError(f"Broker ID {broker_id} is not registered.")
            return fence_broker(md, broker_id, self._unclean).without_broker(broker_id), None

        with self._lock:
            self._commit(change)
            self._sessions.remove(broker_id)

    # -- partitions (AlterPartition, reassignments, elections) ---------------------------------

    def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: Sequence[PartitionStateChange]
    ) -> list[AlterPartitionResult]:
        """Kafka's AlterPartition: ISR changes from partition leaders, one write for all."""
        self._require_active()
        return self._commit(
            lambda md: alter_partition(md, broker_id, broker_epoch, changes, self._unclean)
        )

    def alter_partition_reassignments(
        self, reassignments: Sequence[tuple[str, int, Sequence[int] | None]]
    ) -> list[KafkaError | None]:
        """Kafka's AlterPartitionReassignments: ``(topic, partition, replicas)``, replicas
        None cancels; one error (or None) per entry, all successful ones in one write."""
        self._require_active()

        def change(md: ClusterMetadata) -> tuple[ClusterMetadata, list[KafkaError | None]]:
            errors: list[KafkaError | None] = []
            for name, index, replicas in reassignments:
                try:
                    md = reassign_partition(md, require(md, name), index, replicas, self._unclean)
                    errors.append(None)
                except KafkaError as err:
                    errors.append(err)
            return md, errors

        return self._commit(change)

    def list_partition_reassignments(
        self, topics: Mapping[str, Sequence[int]] | None = None
    ) -> list[Reassignment]:
        """Kafka's ListPartitionReassignments: every reassignment in progress, or those of
        the given topics' partitions (unknown ones are left out, as Kafka does)."""
        self._require_active()
        out: list[Reassignment] = []
        for topic, index, p in self.metadata.iter_partitions():
            wanted = topics is None or index in topics.get(topic.name, ())
            if wanted and p.is_reassigning:
                out.append(
                    Reassignment(
                        topic.name, index, p.replicas, p.adding_replicas, p.removing_replicas
                    )
                )
        return out

    def elect_leaders(
        self, election: Election, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, KafkaError | None]:
        """Kafka's ElectLeaders (``PREFERRED`` or ``UNCLEAN``). With ``partitions`` None,
        every partition is tried and only the ones that changed or failed are reported."""
        self._require_active()

        def change(
            md: ClusterMetadata,
        ) -> tuple[ClusterMetadata, dict[TopicPartition, KafkaError | None]]:
            wanted = partitions
            if wanted is None:
                wanted = [(t.name, i) for t, i, _ in md.iter_partitions()]
            results: dict[TopicPartition, KafkaError | None] = {}
            for name, index in wanted:
                try:
                    md = elect_leader(md, require(md, name), index, election)
                    results[(name, index)] = None
                except KafkaError as err:
                    if partitions is not None or not isinstance(err, ElectionNotNeededError):
                        results[(name, index)] = err
            return md, results

        return self._commit(change)

    # -- producer ids (AllocateProducerIds) ------------------------------------------------------

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdsBlock:
        """Kafka's AllocateProducerIds: the next 1000 ids, durably taken before returning."""
        self._require_active()
        return self._allocate_producer_ids(broker_id, broker_epoch)
