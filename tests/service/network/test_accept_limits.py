"""The accept loops of real listeners (KafkaServer on loopback) under shared connection
limits: a connection whose set-up fails gives its slot back and the listener goes on, and a
broker's connection on the inter-broker listener closes a client's when the broker is full."""

from __future__ import annotations

import asyncio
import gc
import socket
import weakref
from typing import Any

import pytest

import service.network.server as server_module
from service.network.server import KafkaServer
from service.quotas.connections import ConnectionQuotas


def run(test: Any) -> None:
    asyncio.run(asyncio.wait_for(test(), 10))


async def eventually(predicate: Any, what: str) -> None:
    for _ in range(100):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(what)


def test_a_connection_whose_set_up_fails_gives_its_slot_back(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        quotas = ConnectionQuotas(per_ip=1)
        listener = KafkaServer(None, "127.0.0.1", 0, limits=quotas)
        await listener.start()
        real = server_module.Connection.__init__
        failures = [1]

        def first_fails(self: Any, *args: Any) -> None:
            if failures:
                failures.pop()
                raise RuntimeError("set-up failed")
            real(self, *args)

        monkeypatch.setattr(server_module.Connection, "__init__", first_fails)
        doomed = socket.create_connection(("127.0.0.1", listener.port))
        await eventually(lambda: not failures, "the first connection was not tried")
        await eventually(lambda: quotas.total == 0, "the failed connection kept its slot")
        kept = socket.create_connection(("127.0.0.1", listener.port))  # per_ip=1: only if the slot came back
        await eventually(lambda: listener.connection_count == 1 and quotas.total == 1, "the listener stopped")
        for s in (doomed, kept):
            s.close()
        await listener.close()
        assert quotas.total == 0

    run(main)


def test_a_brokers_connection_closes_the_least_recent_client_when_full() -> None:
    async def main() -> None:
        quotas = ConnectionQuotas(max_connections=1, protected="BROKER")
        clients = KafkaServer(None, "127.0.0.1", 0, listener="CLIENTS", limits=quotas)
        brokers = KafkaServer(None, "127.0.0.1", 0, listener="BROKER", limits=quotas)
        for listener in (clients, brokers):
            await listener.start()
        client = socket.create_connection(("127.0.0.1", clients.port))
        await eventually(lambda: quotas.total == 1, "the client was not served")
        peer = socket.create_connection(("127.0.0.1", brokers.port))
        await eventually(lambda: brokers.connection_count == 1 and clients.connection_count == 0,
                         "the broker's connection did not take the client's slot")
        client.settimeout(2)
        assert await asyncio.to_thread(client.recv, 1) == b""  # closed by the broker
        assert quotas.total == 1
        for s in (client, peer):
            s.close()
        for listener in (clients, brokers):
            await listener.close()

    run(main)


def test_a_closed_connection_is_freed_without_the_cyclic_collector() -> None:
    """A broker freezes what a slow full collection finds alive (service/gc_policy.py): a
    connection in a reference cycle (its tasks, its close callbacks, its transport's hook)
    then stayed in memory for good once closed (stop 72). Closed by the broker while its
    reader waits (the reader's task is cancelled), with a close callback that names it."""
    async def main() -> None:
        listener = KafkaServer(None, "127.0.0.1", 0)
        await listener.start()
        client = socket.create_connection(("127.0.0.1", listener.port))
        await eventually(lambda: listener.connection_count == 1, "the connection was not served")
        gone = _watched(listener)
        gc.collect()
        gc.freeze()
        try:
            await gone().close()  # type: ignore[union-attr]
            # the accept loop's frame holds the connection it made last until the next one
            other = socket.create_connection(("127.0.0.1", listener.port))
            await eventually(lambda: gone() is None, "the closed connection is still alive")
            other.close()
        finally:
            client.close()
            gc.unfreeze()
            await listener.close()

    run(main)


def _watched(listener: KafkaServer) -> weakref.ref[Any]:
    """A weak reference to the listener's connection, given a close callback that names it."""
    conn = next(iter(listener._connections))
    conn.add_close_callback(lambda conn=conn: conn.peer)
    return weakref.ref(conn)
