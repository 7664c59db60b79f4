"""Helpers for cluster tests: a fake clock, controllers electing, brokers joining."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from controller import (
    BrokerConfig,
    BrokerRegistration,
    ClusterController,
    Endpoint,
    RegistrationRequest,
)
from controller.lease import LeaseTimings
from remote_tier import ObjectStore


class FakeClock:
    """A monotonic clock in milliseconds that moves only when told (shared by "machines")."""

    def __init__(self, start_ms: float = 1_000_000.0) -> None:
        self.now = start_ms

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: float) -> None:
        self.now += ms


TIMINGS = LeaseTimings()  # the defaults: lease 5 s, renew 1 s, margin 1.5 s, skew 0.5 s, poll 0.5 s
TAKEOVER_MS = TIMINGS.lease_ms + TIMINGS.clock_skew_ms
SESSION_MS = 9_000  # broker.session.timeout.ms's default


def make_cluster_controller(
    store: ObjectStore,
    clock: FakeClock,
    node_id: int,
    *,
    seed: int | None = 7,
    overrides: Mapping[str, str] | None = None,
) -> ClusterController:
    # the hold through a bucket outage (ADR 0031) is off unless a test turns it on: with it,
    # a node not registered -- most controllers here have no broker -- takes a lease over
    # only after the longest hold too (tests/controller/test_outage_hold.py)
    config = BrokerConfig({"node.id": str(node_id), "controller.bucket.outage.hold.ms": "0",
                           **(overrides or {})})
    return ClusterController(store, config, monotonic=clock, placement_seed=seed)


def tick_until_active(
    clock: FakeClock, controllers: Sequence[ClusterController], max_ms: float = 60_000
) -> ClusterController:
    """Tick every controller, moving the clock a poll interval at a time, until one is
    active; that one."""
    waited = 0.0
    while waited <= max_ms:
        for c in controllers:
            c.tick()
            if c.is_active:
                return c
        clock.advance(TIMINGS.poll_ms)
        waited += TIMINGS.poll_ms
    raise AssertionError(f"no controller became active within {max_ms} ms")


def register(
    ctl: ClusterController,
    node_id: int,
    rack: str | None = None,
    incarnation: uuid.UUID | None = None,
) -> BrokerRegistration:
    listener = Endpoint("PLAINTEXT", "127.0.0.1", 9090 + node_id)
    request = RegistrationRequest(
        node_id, ctl.cluster_id, incarnation or uuid.uuid4(), (listener,), rack
    )
    return ctl.register_broker(request)


def join(ctl: ClusterController, node_id: int, rack: str | None = None) -> BrokerRegistration:
    """Register ``node_id`` and heartbeat it unfenced (it has loaded the newest revision)."""
    registration = register(ctl, node_id, rack)
    reply = ctl.broker_heartbeat(node_id, registration.broker_epoch, ctl.snapshot.revision)
    assert not reply.is_fenced
    return ctl.metadata.brokers[node_id]


def heartbeat_all(ctl: ClusterController, *node_ids: int) -> None:
    for node_id in node_ids:
        broker = ctl.metadata.brokers[node_id]
        ctl.broker_heartbeat(node_id, broker.broker_epoch, ctl.snapshot.revision)
