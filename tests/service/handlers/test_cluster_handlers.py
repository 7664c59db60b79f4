"""BrokerHeartbeat's connection watch: only a heartbeat the controller took makes the
connection the broker's, so that its closing cuts that broker's session short. A refused
one (a stale or forged broker epoch) closing must not fence a live broker."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from common.protocol.codec import RequestHeader
from controller.errors import StaleBrokerEpochError
from service.handlers.cluster import handle_broker_heartbeat
from service.handlers.context import RequestContext


class _Controller:
    is_active = True

    def __init__(self, epoch: int) -> None:
        self.epoch, self.lost = epoch, []  # type: ignore[var-annotated]

    def broker_heartbeat(self, broker_id: int, epoch: int, offset: int, **_: Any) -> Any:
        if epoch != self.epoch:
            raise StaleBrokerEpochError(f"broker {broker_id}: epoch {epoch} is not {self.epoch}")
        return SimpleNamespace(is_caught_up=True, is_fenced=False, should_shut_down=False)

    def heartbeat_without_change(self, *args: Any, **kwargs: Any) -> Any:
        return None  # every heartbeat takes the slow path here

    def connection_lost(self, broker_id: int) -> None:
        self.lost.append(broker_id)


class _Connection:
    def __init__(self) -> None:
        self.heartbeat_brokers: set[int] = set()
        self.on_close: list[Any] = []

    def add_close_callback(self, callback: Any) -> None:
        self.on_close.append(callback)

    def close(self) -> None:
        for callback in self.on_close:
            callback()


def _heartbeat(controller: _Controller, conn: _Connection, epoch: int) -> int:
    broker = SimpleNamespace(cluster=SimpleNamespace(controller=controller), node_id=1,
                             metrics_error=lambda *_: None)
    ctx = RequestContext(RequestHeader(63, 1, 7, "test", True), broker, conn)  # type: ignore[arg-type]
    request = SimpleNamespace(broker_id=2, broker_epoch=epoch, current_metadata_offset=0,
                              want_fence=False, want_shut_down=False)
    return int(asyncio.run(handle_broker_heartbeat(ctx, request)).error_code)


def test_a_refused_heartbeats_connection_closing_does_not_cut_the_brokers_session() -> None:
    controller, forged = _Controller(epoch=5), _Connection()
    assert _heartbeat(controller, forged, epoch=1) == 77  # STALE_BROKER_EPOCH
    forged.close()
    assert controller.lost == []


def test_the_brokers_own_heartbeat_connection_closing_does() -> None:
    controller, own = _Controller(epoch=5), _Connection()
    assert _heartbeat(controller, own, epoch=5) == 0
    assert _heartbeat(controller, own, epoch=5) == 0  # watched once per connection
    own.close()
    assert controller.lost == [2]
