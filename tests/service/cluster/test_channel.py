"""The inter-broker channel against a small Kafka-speaking server of the test's own.

The server answers ApiVersions at once and holds DescribeCluster answers for a
delay named in the request's client id, so answers come back out of order,
late, or never.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from common.errors import BrokerNotAvailableError, RequestTimedOutError
from common.protocol.codec import build, decode_request, encode_response, response_module
from service.cluster.channel import BrokerChannel, ChannelConfig

VERSIONS = {18: 3, 60: 1}


class FakeBroker:
    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.connections = 0
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                header, body = decode_request(await reader.readexactly(size))
                asyncio.ensure_future(self._answer(writer, header, body))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, header, body) -> None:  # type: ignore[no-untyped-def]
        if header.api_key == 18:
            mod = response_module(18, header.api_version)
            keys = tuple(build(mod.ApiVersion, api_key=k, min_version=0, max_version=v)
                         for k, v in VERSIONS.items())
            answer = build(mod.ApiVersionsResponse, error_code=0, api_keys=keys, throttle_time=0)
        else:
            delay = float((header.client_id or "0").rpartition("-")[2] or 0)
            await asyncio.sleep(delay)
            mod = response_module(60, header.api_version)
            answer = build(mod.DescribeClusterResponse, throttle_time=0, error_code=0,
                           error_message=None, endpoint_type=1, cluster_id=f"after-{delay}",
                           controller_id=7, brokers=(), cluster_authorized_operations=0)
        if not writer.is_closing():
            writer.write(encode_response(header, answer))


async def started() -> FakeBroker:
    broker = FakeBroker()
    await broker.start()
    return broker


def channel(fake: FakeBroker, client_id: str) -> BrokerChannel:
    return BrokerChannel(9, "127.0.0.1", fake.port, ChannelConfig(client_id, backoff_s=0.01), VERSIONS)


async def describe(ch: BrokerChannel, timeout_s: float = 5.0) -> str:
    _, answer = await ch.request(60, {"include_cluster_authorized_operations": False},
                                 timeout_s=timeout_s)
    return str(answer.cluster_id)


def test_pipelined_answers_are_matched_by_correlation_id() -> None:
    async def run() -> None:
        fake = await started()
        ch = channel(fake, "x-0.3")
        # one connection: the slow answer is overtaken by the fast one
        first = asyncio.ensure_future(describe(ch))
        await asyncio.sleep(0.05)
        ch._config = ChannelConfig("x-0", backoff_s=0.01)
        second = await describe(ch)
        assert second == "after-0.0" and not first.done()
        assert await first == "after-0.3"
        assert fake.connections == 1 and ch.version_for(60) == 1
        await ch.close()
        await fake.stop()

    asyncio.run(run())


def test_a_request_timeout_drops_the_connection_and_the_next_request_reconnects() -> None:
    async def run() -> None:
        fake = await started()
        ch = channel(fake, "x-1.0")
        with pytest.raises(RequestTimedOutError):
            await describe(ch, timeout_s=0.2)
        assert not ch.connected
        ch._config = ChannelConfig("x-0", backoff_s=0.01)
        assert await describe(ch) == "after-0.0"
        assert fake.connections == 2
        await ch.close()
        await fake.stop()

    asyncio.run(run())


def test_an_unreachable_peer_is_broker_not_available() -> None:
    async def run() -> None:
        fake = await started()
        await fake.stop()
        ch = channel(fake, "x-0")
        with pytest.raises(BrokerNotAvailableError):
            await describe(ch, timeout_s=1)
        await fake.start()  # the same port again
        assert await describe(ch) == "after-0.0"
        await ch.close()
        await fake.stop()

    asyncio.run(run())


def test_a_dropped_connection_is_reported_with_the_peers_node_id() -> None:
    """The broker heartbeats at once when its connection to the controller drops (the
    controller gives it broker.session.connection.loss.ms before fencing it), so the channel
    says when its connection goes: a request timeout here."""
    async def run() -> None:
        fake = await started()
        dropped: list[int] = []
        ch = BrokerChannel(9, "127.0.0.1", fake.port, ChannelConfig("x-1.0", backoff_s=0.01), VERSIONS,
                           on_drop=dropped.append)
        with pytest.raises(RequestTimedOutError):
            await describe(ch, timeout_s=0.2)
        assert dropped == [9]
        ch._config = ChannelConfig("x-0", backoff_s=0.01)
        assert await describe(ch) == "after-0.0" and dropped == [9]  # reconnected: nothing new
        await ch.close()
        await fake.stop()

    asyncio.run(run())
