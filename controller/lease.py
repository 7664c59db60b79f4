"""The controller lease: one object in the bucket, taken and renewed with conditional PUTs.

``cluster/controller-lease`` holds the holder's node id and incarnation, the
controller epoch (it grows at every acquisition, so at every change of holder),
the lease duration the holder uses and a renewal counter (every renewal changes
the bytes, hence the etag). ``docs/adr/0009-controller-lease.md`` gives the
protocol and why it is safe; in short, with ``T`` = ``controller.lease.ms``:

* **Acquire**: ``put_if_absent`` on an empty bucket; a released lease (holder
  -1), one's own (same incarnation) or one naming this node's *previous*
  incarnation (a restart after a crash: the data dir lock proves that process
  is gone, ADR 0009) is taken at once with ``put_if_match``.
  Anyone else's is taken only after this node has seen the *same etag* for
  ``max(T, holder's T) + controller.lease.clock.skew.ms``, timed from the read
  that first returned it, on this node's own monotonic clock; then with
  ``put_if_match`` on that etag, so a renewal in between makes the takeover fail.
* **Renew**: the holder ``put_if_match``-es a new renewal count every
  ``controller.lease.renew.ms``. Its lease is valid until ``t0 + T -
  controller.lease.safety.margin.ms``, ``t0`` being its monotonic time *before*
  it sent the last successful renewal (or acquisition); past that instant it
  considers itself deposed (:meth:`ControllerLease.holds` is False) and must not
  act, even if no one else has taken over yet.
* Another machine's wall clock is never used: ``renewed_wall_ms`` is written for
  people reading the object, and ignored.

The lease alone does not make writes safe (a paused process can act after its
lease ran out); the controller epoch in every metadata write does
(:mod:`controller.commit`).

Not thread-safe: the controller calls it under its lease lock. Blocking (one
object store request per :meth:`ControllerLease.step` at most).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from enum import Enum

from common.spell_log import SpellLog
from controller.lease_record import NO_HOLDER, LeaseRecord, LeaseTimings, monotonic_ms, wall_ms
from remote_tier.store import (
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    PreconditionFailed,
    get_with_etag,
)

__all__ = [
    "LEASE_KEY",
    "NO_HOLDER",
    "ControllerLease",
    "LeaseEvent",
    "LeaseRecord",
    "LeaseTimings",
    "monotonic_ms",
]

_log = logging.getLogger(__name__)
LEASE_KEY = "cluster/controller-lease"
#: a candidate that cannot read the lease says so at the first failure, then this often
READ_FAILURE_LOG_EVERY_S = 10.0
Clock = Callable[[], float]


class LeaseEvent(Enum):
    """What one :meth:`ControllerLease.step` did."""

    NONE = "none"
    ACQUIRED = "acquired"  # this node now holds the lease, at a new epoch
    RENEWED = "renewed"
    LOST = "lost"  # this node held it and no longer may act


class ControllerLease:
    """One node's side of the controller lease (see the module docstring).

    Invariant: while :meth:`holds` is True, this node's last successful
    acquisition or renewal was sent less than ``lease_ms - safety_margin_ms``
    ago on its monotonic clock, and no other node can have taken the lease over
    (a takeover needs the etag unchanged for ``lease_ms + clock_skew_ms``).
    """

    def __init__(
        self,
        store: ObjectStore,
        node_id: int,
        incarnation_id: str,
        timings: LeaseTimings,
        *,
        monotonic: Clock = monotonic_ms,
        wall_clock: Callable[[], int] = wall_ms,
        key: str = LEASE_KEY,
        previous_incarnation_id: str | None = None,
    ) -> None:
        self._store = store
        self._node_id = node_id
        self._incarnation = incarnation_id
        # the incarnation this node ran as before its restart (read from its data dir
        # under the data dir lock): a lease it still names is taken over at once
        self._previous_incarnation = previous_incarnation_id or None
        #: at the last acquisition, the node whose expired lease this one replaced (else -1)
        self.taken_over_from = NO_HOLDER
        #: at the last acquisition, another node that had given the lease up before this one
        #: took it (it released it, or its process was found gone), else -1: that node no
        #: longer acts as controller nor as a partition leader, so it may be fenced at once
        self.stepped_down = NO_HOLDER
        #: the last acquisition took back a lease this node itself had released to stand
        #: down, and nobody else took it meanwhile
        self.retook_own_release = False
        #: the last acquisition took the lease from this node's previous incarnation
        self.retook_previous_incarnation = False
        # no acquisition before this monotonic instant (a controller that stood down)
        self._stand_down_until = 0.0
        self._stood_down = False
        self._timings = timings
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._key = key
        # holding
        self._record: LeaseRecord | None = None
        self._etag = ""
        self._deadline = 0.0
        self._next_renew = 0.0
        # observing
        self._observed: LeaseRecord | None = None
        self._observed_etag: str | None = None
        self._observed_since = 0.0
        self._next_poll = 0.0
        # a bucket outage (ADR 0031): this node's last read of the lease failed, or the one
        # in flight (started at _read_started) has lasted longer than _slow_read_ms
        self._read_failing = False
        self._read_failures = 0  # in a row
        self._read_started: float | None = None
        self._slow_read_ms = max(timings.poll_ms, timings.lease_ms // 4)
        self._read_spell = SpellLog(READ_FAILURE_LOG_EVERY_S)
        # a renewal's outcome is unknown: someone else may have written the lease
        self._renew_conflict = False
        # a renewal failed unanswered since the last one that succeeded, or one is in flight
        self._renew_failed = False
        self._renewing = False
        # the deadline of a holding that ran out with only failed requests since (else None)
        self._lapsed_at: float | None = None

    @property
    def timings(self) -> LeaseTimings:
        return self._timings

    @property
    def key(self) -> str:
        return self._key

    @property
    def epoch(self) -> int:
        """The controller epoch of this node's holding; 0 when it holds nothing."""
        return self._record.epoch if self._record is not None else 0

    @property
    def observed(self) -> LeaseRecord | None:
        """The lease as last read or written by this node (who holds it, at what epoch)."""
        return self._record if self._record is not None else self._observed

    @property
    def read_failing(self) -> bool:
        """This node's last read of the lease failed, or the one in flight has gone
        unanswered for a while: any takeover by it now needs the lease's whole wait from
        a later read that succeeds (ADR 0031). Any thread."""
        started = self._read_started
        return self._read_failing or (started is not None and self._monotonic() - started > self._slow_read_ms)

    @property
    def lapsed_at(self) -> float | None:
        """The monotonic instant this node's holding ran out, when every request it made of
        the lease since its last renewal failed or went unanswered (the bucket did not
        answer: nobody it could see took the lease over); None otherwise (ADR 0031). Any
        thread: a renewal hanging past the deadline counts before it fails."""
        if self._record is not None:
            deadline = self._deadline
            return deadline if self._monotonic() >= deadline and self._lapsed_unanswered() else None
        return self._lapsed_at

    def _lapsed_unanswered(self) -> bool:
        return (self._renew_failed or self._renewing) and not self._renew_conflict

    def holds(self) -> bool:
        """Whether this node holds the lease and may act now (its deadline is ahead)."""
        return self._record is not None and self._monotonic() < self._deadline

    def remaining_ms(self) -> float:
        """Milliseconds this node may still act; 0 when it does not hold the lease."""
        if self._record is None:
            return 0.0
        return max(0.0, self._deadline - self._monotonic())

    def next_step_in_ms(self) -> float:
        """When :meth:`step` has something to do next."""
        now = self._monotonic()
        due = min(self._next_renew, self._deadline) if self._record else self._next_poll
        return max(0.0, due - now)

    def step(self, min_epoch: int = 0, eligible: bool | None = None) -> LeaseEvent:
        """Renew, give up, observe or take over, whichever is due; at most one request.

        ``min_epoch``: a new acquisition takes an epoch above it (the highest
        controller epoch seen in the metadata) as well as above the lease's.
        ``eligible``: whether this node is registered and unfenced in the newest metadata
        (the caller reads it when :meth:`waited_out_soon`; None: it does not matter). A held
        lease waited out is taken only by such a node; another waits ``outage_hold_max_ms``
        and a hold's grant more (a holding controller did not ask it, ADR 0031).
        """
        if self._record is not None:
            now = self._monotonic()
            if now >= self._deadline:
                self._drop(f"no renewal succeeded within {self._timings.valid_for_ms} ms",
                           lapsed_at=self._deadline if self._lapsed_unanswered() else None)
                return LeaseEvent.LOST
            if now < self._next_renew:
                return LeaseEvent.NONE
            return self._renew(now)
        return self._observe(min_epoch, eligible)

    def abandon(self, why: str) -> None:
        """Stop holding without touching the object (the metadata showed a newer controller)."""
        self._drop(why)

    def release(self, stand_down_ms: float = 0.0) -> None:
        """Stop acting, then hand the lease back (holder -1, ``released_by`` this node) so
        a candidate takes it at once; with ``stand_down_ms``, this node does not take it
        again for that long (it stood down so that another would)."""
        record, etag = self._record, self._etag
        if record is None:
            return
        self._drop("released")
        self._stand_down_until = self._monotonic() + stand_down_ms
        self._stood_down = stand_down_ms > 0
        released = replace(
            record,
            holder=NO_HOLDER,
            incarnation_id="",
            renewals=record.renewals + 1,
            renewed_wall_ms=self._wall_clock(),
            released_by=self._node_id,
        )
        try:
            self._store.put_if_match(self._key, released.encode(), etag)
        except ObjectStoreError as err:
            _log.warning("could not release the controller lease (it will expire): %s", err)

    # -- holder ---------------------------------------------------------------------------

    def _renew(self, t0: float) -> LeaseEvent:
        assert self._record is not None
        renewed = replace(
            self._record, renewals=self._record.renewals + 1, renewed_wall_ms=self._wall_clock()
        )
        self._renewing = True
        try:
            etag = self._store.put_if_match(self._key, renewed.encode(), self._etag)
        except PreconditionFailed:
            return self._after_lost_renewal(t0)
        except ObjectStoreError as err:
            _log.warning(
                "controller lease renewal failed (%.0f ms left): %s", self.remaining_ms(), err
            )
            self._renew_failed = True
            self._next_renew = t0 + self._timings.poll_ms
            return LeaseEvent.NONE
        finally:
            self._renewing = False
        self._record, self._etag = renewed, etag
        self._renew_conflict = self._renew_failed = False
        self._deadline = t0 + self._timings.valid_for_ms
        self._next_renew = t0 + self._timings.renew_ms
        return LeaseEvent.RENEWED

    def _after_lost_renewal(self, t0: float) -> LeaseEvent:
        """The etag moved: someone took over, or an earlier renewal whose answer was
        lost did land (then it is ours: adopt its etag and renew again at once)."""
        try:
            data, etag = get_with_etag(self._store, self._key)
            current: LeaseRecord | None = LeaseRecord.decode(data)
        except ObjectNotFound:
            current, etag = None, ""
        except (ObjectStoreError, ValueError) as err:
            _log.warning("controller lease changed and cannot be read: %s", err)
            self._renew_conflict = True
            self._next_renew = t0 + self._timings.poll_ms
            return LeaseEvent.NONE
        if current is not None and self._is_mine(current) and current.epoch == self.epoch:
            self._record, self._etag = current, etag
            self._renew_conflict = False
            self._next_renew = t0
            return LeaseEvent.NONE
        self._drop(
            "the lease object is gone"
            if current is None
            else f"node {current.holder} holds it at epoch {current.epoch}"
        )
        if current is not None:
            self._start_observing(current, etag, self._monotonic())
        return LeaseEvent.LOST

    def _drop(self, why: str, lapsed_at: float | None = None) -> None:
        self._lapsed_at = lapsed_at  # (before the record goes: lapsed_at reads both)
        if self._record is not None:
            _log.warning(
                "node %d is no longer the controller (epoch %d): %s",
                self._node_id,
                self._record.epoch,
                why,
            )
            self._observed = self._record
        self._record = None
        self._etag = ""
        self._deadline = self._next_renew = 0.0
        self._observed_etag = None
        self._next_poll = 0.0
        self._renew_conflict = self._renew_failed = False

    # -- candidate ------------------------------------------------------------------------

    def _observe(self, min_epoch: int, eligible: bool | None) -> LeaseEvent:
        if self._monotonic() < self._next_poll:
            return LeaseEvent.NONE
        self._next_poll = self._monotonic() + self._timings.poll_ms
        current: LeaseRecord | None
        try:
            data, etag = self._read()
        except ObjectNotFound:
            return self._acquire(None, None, min_epoch)
        except ObjectStoreError as err:
            if self._read_spell.failed():  # a bucket outage: at its start, then every 10 s
                _log.warning("cannot read the controller lease (%d attempt(s) so far): %s",
                             self._read_spell.count, err)
            return LeaseEvent.NONE
        if failures := self._read_spell.ended():
            _log.info("node %d reads the controller lease again after %d failed attempt(s)",
                      self._node_id, failures)
        seen_at = self._monotonic()  # after the read: never earlier than the write it saw
        try:
            current = LeaseRecord.decode(data)
        except ValueError as err:
            _log.error("%s; it will be taken over once it stays unchanged for a lease", err)
            current = None
        if current is not None and current.holder == NO_HOLDER and seen_at < self._stand_down_until:
            self._start_observing(current, etag, seen_at)
            return LeaseEvent.NONE
        if current is not None and (
            current.holder == NO_HOLDER or self._is_mine(current) or self._was_mine(current)
        ):
            return self._acquire(current, etag, min_epoch)
        if etag != self._observed_etag:
            self._start_observing(current, etag, seen_at)
            return LeaseEvent.NONE
        holder_ms = current.lease_ms if current is not None else 0
        wait = max(holder_ms, self._timings.lease_ms) + self._timings.clock_skew_ms
        waited = seen_at - self._observed_since
        if waited < wait:
            return LeaseEvent.NONE
        if eligible is False and waited < wait + self._timings.outage_hold_max_ms + self._timings.hold_grant_ms:
            return LeaseEvent.NONE
        return self._acquire(current, etag, min_epoch)

    def _read(self) -> tuple[bytes, str]:
        """Read the lease object (raises as ``get_with_etag``). A second failed read in a row
        restarts the wait of a takeover and keeps :attr:`read_failing` set until a read
        succeeds."""
        started = self._read_started = self._monotonic()
        try:
            data, etag = get_with_etag(self._store, self._key)
        except ObjectNotFound:
            self._answered(started)
            raise
        except ObjectStoreError:
            # one quick failure alone (a store answering 500 now and then) changes nothing:
            # failing is a second in a row, or one that was in flight long (and may have
            # been reported meanwhile)
            self._read_failures += 1
            if self._read_failures >= 2 or self._monotonic() - started > self._slow_read_ms:
                self._read_failing = True
                self._observed_etag = None
            raise
        finally:
            self._read_started = None
        self._answered(started)
        return data, etag

    def _answered(self, started: float) -> None:
        if self._monotonic() - started > self._slow_read_ms:  # it was read_failing meanwhile
            self._observed_etag = None
        self._read_failing, self._read_failures, self._lapsed_at = False, 0, None

    def waited_out_soon(self) -> bool:
        """A held lease this node observes will have gone unrenewed long enough for a
        takeover by the next poll (the caller then says whether this node may take it)."""
        observed = self._observed
        if self._record is not None or self._observed_etag is None or observed is None or self._read_failures:
            return False
        wait = max(observed.lease_ms, self._timings.lease_ms) + self._timings.clock_skew_ms
        return self._monotonic() + self._timings.poll_ms >= self._observed_since + wait

    def take_over_if_gone(self, is_gone: Callable[[int], bool], min_epoch: int = 0) -> LeaseEvent:
        """Take the lease at once, without waiting it out, when its holder's process is
        gone: read the lease, then ask ``is_gone(holder)`` (the caller probes the holder's
        listener, ADR 0009's update of issue #31), then ``put_if_match`` on the etag read
        *before* the probe. A process listens from before it competes for the lease until
        it stops, so a holder refusing connections after its etag was read did not write
        anything since, and never will; a renewal or restart in between fails the match.
        One GET, at most one PUT. Nothing happens while this node holds the lease."""
        if self._record is not None:
            return LeaseEvent.NONE
        try:
            data, etag = self._read()
            current = LeaseRecord.decode(data)
        except (ObjectStoreError, ValueError) as err:
            _log.info("cannot read the controller lease to check its holder: %s", err)
            return LeaseEvent.NONE
        if etag != self._observed_etag:
            self._start_observing(current, etag, self._monotonic())
        if current.holder in (NO_HOLDER, self._node_id) or not is_gone(current.holder):
            return LeaseEvent.NONE
        _log.warning("the controller (node %d, epoch %d) is gone: its listener refuses "
                     "connections; taking the lease over without waiting it out",
                     current.holder, current.epoch)
        event = self._acquire(current, etag, min_epoch)
        if event is LeaseEvent.ACQUIRED:
            self.taken_over_from = NO_HOLDER
            self.stepped_down = current.holder
        return event

    def _start_observing(self, record: LeaseRecord | None, etag: str, seen_at: float) -> None:
        self._observed, self._observed_etag, self._observed_since = record, etag, seen_at

    def _acquire(
        self, previous: LeaseRecord | None, etag: str | None, min_epoch: int
    ) -> LeaseEvent:
        epoch = max(previous.epoch if previous is not None else 0, min_epoch) + 1
        record = LeaseRecord(
            self._node_id,
            epoch,
            self._incarnation,
            self._timings.lease_ms,
            renewals=0,
            renewed_wall_ms=self._wall_clock(),
        )
        t0 = self._monotonic()
        try:
            if etag is None:
                new_etag = self._store.put_if_absent(self._key, record.encode())
            else:
                new_etag = self._store.put_if_match(self._key, record.encode(), etag)
        except PreconditionFailed:
            landed = self._landed(record)  # a retry of the request finding its own write?
            if landed is None:
                self._observed_etag = None  # someone else moved first: observe afresh
                self._next_poll = t0
                return LeaseEvent.NONE
            new_etag = landed
        except ObjectStoreError as err:
            _log.warning("could not take the controller lease: %s", err)
            return LeaseEvent.NONE
        self._record, self._etag = record, new_etag
        # the node whose lease ran out (not one that released it, nor this node): gone,
        # or cut off from the bucket for a whole lease
        expired = previous is not None and previous.holder not in (NO_HOLDER, self._node_id)
        self.taken_over_from = previous.holder if expired and previous is not None else NO_HOLDER
        released_by = previous.released_by if previous is not None and not expired else NO_HOLDER
        self.stepped_down = released_by if released_by != self._node_id else NO_HOLDER
        self.retook_own_release = released_by == self._node_id and self._stood_down
        self.retook_previous_incarnation = previous is not None and self._was_mine(previous)
        self._stand_down_until, self._stood_down = 0.0, False
        self._deadline = t0 + self._timings.valid_for_ms
        self._next_renew = t0 + self._timings.renew_ms
        _log.info("node %d holds the controller lease at epoch %d", self._node_id, epoch)
        return LeaseEvent.ACQUIRED

    def _landed(self, record: LeaseRecord) -> str | None:
        """The etag of the lease object when it is exactly ``record`` (an acquisition whose
        request landed and whose retry then found the object changed: by itself); None when
        it is anything else or cannot be read."""
        try:
            data, etag = get_with_etag(self._store, self._key)
            stored = LeaseRecord.decode(data)
        except (ObjectStoreError, ValueError):
            return None
        return etag if stored == record else None

    def _is_mine(self, record: LeaseRecord) -> bool:
        return record.holder == self._node_id and record.incarnation_id == self._incarnation

    def _was_mine(self, record: LeaseRecord) -> bool:
        """The lease names this node's previous incarnation: that process is gone (its
        successor holds the data dir lock it held), so no one renews it any more."""
        return (
            self._previous_incarnation is not None
            and record.holder == self._node_id
            and record.incarnation_id == self._previous_incarnation
        )
