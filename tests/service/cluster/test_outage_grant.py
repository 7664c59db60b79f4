"""A broker's side of a hold through a bucket outage (ADR 0031): it reports while it cannot
read the lease, echoing the controller's tokens, and leads blind only for the grant of an
answer "hold", counted from before it asked."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from controller.membership import HeartbeatReply
from service.cluster import hold_rpc, lifecycle
from service.cluster.identity import NodeIdentity
from service.cluster.lifecycle import BrokerLifecycle

GRANT_MS = 1875
SESSION_MS = 9000


class _Controller:
    """The controller over the wire: answers OutageHold with ``hold`` and a new token each
    time, and every heartbeat caught up and unfenced."""

    def __init__(self, clock: list[float]) -> None:
        self.hold = True
        self.clock = clock
        self.tokens: list[int] = []  # echoed, in order
        self.heartbeats: list[dict[str, Any]] = []
        self.took_s = 0.0  # how long an OutageHold answer takes

    async def call(self, api: int, fields: Any, *, local: Any = None, answer: Any, timeout_s: float,
                   once: bool = False) -> Any:
        if api == hold_rpc.OUTAGE_HOLD:
            self.tokens.append(hold_rpc.decode_request(fields).token)
            self.clock[0] += self.took_s * 1000
            return answer(0, hold_rpc.encode_answer(self.hold, 100 + len(self.tokens), GRANT_MS))
        self.heartbeats.append(dict(fields))
        return HeartbeatReply(True, False, False)


class _Local:
    def __init__(self) -> None:
        self.blind = [True]  # what outage_report answers, in turn (the last one repeats)

    def outage_report(self) -> bool:
        return self.blind.pop(0) if len(self.blind) > 1 else self.blind[0]

    def lease_lapsed(self) -> bool:
        return False


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1_000_000.0]
    monkeypatch.setattr(lifecycle, "monotonic_ms", lambda: now[0])
    return now


def _broker(tmp_path: Path, controller: _Controller, local: _Local, age_s: list[float]) -> BrokerLifecycle:
    broker = BrokerLifecycle(
        node_id=2, cluster_id="c", incarnation_id=uuid.uuid4(), listeners=(), rack=None,
        identity=NodeIdentity(2), data_dir=tmp_path, client=controller, local=local,  # type: ignore[arg-type]
        metadata_revision=lambda: 5, heartbeat_interval_ms=500, session_timeout_ms=SESSION_MS,
        metadata_age_s=lambda: age_s[0], hold_grant_ms=GRANT_MS,
    )
    broker.broker_epoch = 4
    return broker


def test_a_blind_broker_answered_hold_leads_on_for_the_grant_from_before_it_asked(
    tmp_path: Path, clock: list[float]
) -> None:
    controller, local, age = _Controller(clock), _Local(), [7.0]  # past 2/3 of a session
    broker = _broker(tmp_path, controller, local, age)
    controller.took_s = 0.5
    asyncio.run(broker.heartbeat())
    assert controller.tokens == [0, 101]  # the first report asks twice, echoing the token
    assert controller.heartbeats[-1]["want_fence"] is False
    assert broker.may_lead() and not broker.blind()
    asked_at = clock[0] - 500  # the second request left before its 0.5 s answer
    clock[0] = asked_at + GRANT_MS - 1
    assert broker.may_lead()
    clock[0] = asked_at + GRANT_MS
    assert broker.blind() and not broker.may_lead()
    asyncio.run(broker.heartbeat())  # asked again: one request, echoing the last token
    assert controller.tokens == [0, 101, 102] and broker.may_lead()


def test_a_blind_broker_not_answered_hold_stops_leading_and_asks_to_be_fenced(
    tmp_path: Path, clock: list[float]
) -> None:
    controller, local, age = _Controller(clock), _Local(), [7.0]
    controller.hold = False
    broker = _broker(tmp_path, controller, local, age)
    asyncio.run(broker.heartbeat())
    assert controller.heartbeats[-1]["want_fence"] is True and not broker.may_lead()


def test_a_broker_that_reads_the_lease_again_between_its_two_first_asks_sends_only_one(
    tmp_path: Path, clock: list[float]
) -> None:
    controller, local, age = _Controller(clock), _Local(), [1.0]
    local.blind = [True, False]
    broker = _broker(tmp_path, controller, local, age)
    asyncio.run(broker.heartbeat())
    assert controller.tokens == [0]  # the second would echo a token newer than its check
    asyncio.run(broker.heartbeat())
    assert controller.tokens == [0]
