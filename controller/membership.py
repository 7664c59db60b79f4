"""Broker membership: registration, heartbeats, sessions, fencing (Kafka's cluster control).

* **Registration** (:func:`register_broker`, Kafka's BrokerRegistration): a new
  incarnation of a node gets a new broker epoch (the revision of the metadata
  write that registers it) and starts fenced; the previous incarnation's
  leaderships and ISR places go away in the same write. The same incarnation
  registering again only amends its endpoints and rack. A node id held by a
  broker with a live session and another incarnation is refused
  (``DuplicateBrokerRegistrationError``): two processes cannot share a node.id.
  A restart of that very broker is told apart by ``previous_broker_epoch``
  (Kafka's field of that name): the epoch its previous incarnation was
  registered with, which only a process holding that broker's data dir knows
  (it is kept there); such a registration replaces the old one at once instead
  of waiting for its session to expire.
* **Heartbeats** (:func:`next_state`, Kafka's BrokerHeartbeat): a fenced broker
  that asks to be unfenced is unfenced once it has loaded the metadata revision
  of its own registration; an unfenced broker may ask to be fenced, or to shut
  down (controlled shutdown: its leaderships move first; it may exit once it
  leads nothing).
* **Sessions** (:class:`BrokerHeartbeatTracker`): a broker whose last heartbeat
  is older than ``broker.session.timeout.ms`` on the controller's monotonic clock
  is fenced by the controller. Sessions live in the active controller's memory
  only; a new controller starts a fresh session for every unfenced broker, as
  Kafka does, so a failover never fences a broker that keeps heartbeating.

Pure functions over :class:`ClusterMetadata`, plus the tracker (not thread-safe:
the controller calls it under its lock).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from common.errors import InvalidRequestError
from controller.document import ClusterMetadata
from controller.errors import DuplicateBrokerRegistrationError, InconsistentClusterIdError
from controller.registrations import BrokerRegistration, Endpoint
from controller.replication_control import (
    UncleanPolicy,
    fence_broker,
    start_controlled_shutdown,
    unfence_broker,
)

__all__ = [
    "BrokerControlState",
    "BrokerHeartbeatTracker",
    "HeartbeatReply",
    "RegistrationRequest",
    "apply_state",
    "current_state",
    "next_state",
    "register_broker",
]

Clock = Callable[[], float]


class BrokerHeartbeatTracker:
    """When each broker last heartbeated, in ms of ``monotonic`` (see the module docstring).

    Thread-safe: heartbeats touch it without waiting for the controller's commit lock."""

    def __init__(self, session_timeout_ms: int, monotonic: Clock) -> None:
        self._timeout_ms = session_timeout_ms
        self._monotonic = monotonic
        self._last_contact: dict[int, float] = {}
        self._guard = threading.Lock()

    @property
    def session_timeout_ms(self) -> int:
        return self._timeout_ms

    def touch(self, node_id: int) -> None:
        with self._guard:
            self._last_contact[node_id] = self._monotonic()

    def remove(self, node_id: int) -> None:
        with self._guard:
            self._last_contact.pop(node_id, None)

    def reset(self, node_ids: Iterable[int]) -> None:
        """Start a fresh session for each of ``node_ids`` and forget every other broker."""
        now = self._monotonic()
        fresh = {node_id: now for node_id in node_ids}
        with self._guard:
            self._last_contact = fresh

    def age_ms(self, node_id: int) -> float | None:
        """Milliseconds since ``node_id`` last heartbeated, None if it has no session."""
        with self._guard:
            last = self._last_contact.get(node_id)
        return None if last is None else self._monotonic() - last

    def has_valid_session(self, node_id: int) -> bool:
        age = self.age_ms(node_id)
        return age is not None and age < self._timeout_ms

    def cut_short(self, node_id: int, remaining_ms: float) -> None:
        """Let ``node_id``'s session run out ``remaining_ms`` from now, unless it heartbeats
        again meanwhile (its heartbeat connection closed: the process is likely gone)."""
        with self._guard:
            last = self._last_contact.get(node_id)
            if last is None:
                return
            self._last_contact[node_id] = min(last, self._monotonic() + remaining_ms - self._timeout_ms)

    def expired(self) -> list[int]:
        """Brokers with a session that ran out, by node id."""
        with self._guard:
            nodes = list(self._last_contact)
        return sorted(n for n in nodes if not self.has_valid_session(n))


@dataclass(frozen=True, slots=True)
class RegistrationRequest:
    """Kafka's BrokerRegistrationRequest, the fields Strata uses."""

    broker_id: int
    cluster_id: str
    incarnation_id: uuid.UUID
    listeners: tuple[Endpoint, ...]
    rack: str | None = None
    # the broker epoch this node had before it restarted (Kafka's PreviousBrokerEpoch),
    # -1 when unknown; see register_broker
    previous_broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """Kafka's BrokerHeartbeatResponse fields."""

    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


class BrokerControlState(Enum):
    """Kafka's BrokerControlState."""

    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"

    @property
    def fenced(self) -> bool:
        return self in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW)


def register_broker(
    md: ClusterMetadata,
    request: RegistrationRequest,
    *,
    has_valid_session: Callable[[int], bool],
    session_age_ms: Callable[[int], float | None],
    unclean: UncleanPolicy,
) -> tuple[ClusterMetadata, BrokerRegistration]:
    """The metadata with ``request`` registered, and the registration (see module docstring).

    Raises ``InconsistentClusterIdError``, ``DuplicateBrokerRegistrationError`` or
    ``InvalidRequestError`` (no listener).
    """
    if request.cluster_id != md.cluster_id:
        raise InconsistentClusterIdError(
            f"Expected cluster ID {md.cluster_id}, but got cluster ID {request.cluster_id}: "
            "this broker's data belongs to another cluster than the one in this bucket"
        )
    if not request.listeners:
        raise InvalidRequestError(f"broker {request.broker_id} registered without a listener")
    existing = md.brokers.get(request.broker_id)
    if existing is not None and existing.incarnation_id == request.incarnation_id:
        amended = BrokerRegistration(
            request.broker_id,
            request.incarnation_id,
            existing.broker_epoch,
            request.listeners,
            request.rack,
            fenced=existing.fenced,
            in_controlled_shutdown=existing.in_controlled_shutdown,
        )
        return md.with_broker(amended), amended
    restarted = (
        existing is not None
        and request.previous_broker_epoch >= 0
        and existing.broker_epoch == request.previous_broker_epoch
    )
    if existing is not None and not restarted and has_valid_session(request.broker_id):
        age = session_age_ms(request.broker_id) or 0.0
        raise DuplicateBrokerRegistrationError(
            f"node.id {request.broker_id} is held by a live broker (incarnation "
            f"{existing.incarnation_id}, last heartbeat {age:.0f} ms ago): two brokers cannot "
            "share a node.id. Give this broker another --node-id; if it is a restart of that "
            "broker, it can register once the old one's session expires "
            "(broker.session.timeout.ms after its last heartbeat)."
        )
    if existing is not None:
        md = fence_broker(md, request.broker_id, unclean)
    registration = BrokerRegistration(
        request.broker_id,
        request.incarnation_id,
        md.revision + 1,  # the revision of the write that registers it
        request.listeners,
        request.rack,
        fenced=True,
    )
    return md.with_broker(registration), registration


def current_state(registration: BrokerRegistration) -> BrokerControlState:
    if registration.in_controlled_shutdown:
        return BrokerControlState.CONTROLLED_SHUTDOWN
    return BrokerControlState.FENCED if registration.fenced else BrokerControlState.UNFENCED


def next_state(
    registration: BrokerRegistration,
    *,
    current_metadata_offset: int,
    want_fence: bool,
    want_shut_down: bool,
    leads_partitions: bool,
) -> BrokerControlState:
    """Where a heartbeat takes a broker (Kafka's ``calculateNextBrokerState``).

    Controlled shutdown ends (SHUTDOWN_NOW) as soon as the broker leads nothing;
    Kafka also waits for every broker to have seen that change, which the
    broker side does here by waiting for the metadata revision before exiting.
    """
    state = current_state(registration)
    if state is BrokerControlState.FENCED:
        if want_shut_down:
            return BrokerControlState.SHUTDOWN_NOW
        if not want_fence and current_metadata_offset >= registration.broker_epoch:
            return BrokerControlState.UNFENCED
        return BrokerControlState.FENCED
    if state is BrokerControlState.UNFENCED:
        if want_fence:
            return BrokerControlState.SHUTDOWN_NOW if want_shut_down else BrokerControlState.FENCED
        if want_shut_down:
            return (
                BrokerControlState.CONTROLLED_SHUTDOWN
                if leads_partitions
                else BrokerControlState.SHUTDOWN_NOW
            )
        return BrokerControlState.UNFENCED
    if leads_partitions:
        return BrokerControlState.CONTROLLED_SHUTDOWN
    return BrokerControlState.SHUTDOWN_NOW


def apply_state(
    md: ClusterMetadata, broker_id: int, target: BrokerControlState, unclean: UncleanPolicy
) -> ClusterMetadata:
    """The metadata with ``broker_id`` moved to ``target`` (unchanged if it is there)."""
    registration = md.brokers[broker_id]
    state = current_state(registration)
    if target is state:
        return md
    if target is BrokerControlState.UNFENCED:
        return unfence_broker(md, broker_id, unclean)
    if target is BrokerControlState.CONTROLLED_SHUTDOWN:
        return start_controlled_shutdown(md, broker_id, unclean)
    if target is BrokerControlState.SHUTDOWN_NOW and state is BrokerControlState.FENCED:
        return md
    return fence_broker(md, broker_id, unclean)
