"""A consumer Fetch of many partitions, read in turns of the loop, still wakes for an append
that lands between its slices (stop 68's review): the parked wait registers after the read,
so an append to a partition already read, while the later ones were, woke nobody and the
Fetch slept its whole max_wait with the record there. On an in-process broker."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path

from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic

from common.config import BrokerConfig
from common.protocol.codec import RequestHeader
from common.record.batch import build_batch
from controller.registrations import Endpoint
from fetch.planner import PARTITIONS_PER_TURN
from service.broker import Broker
from service.cli.main import UP_DEFAULTS
from service.handlers.context import RequestContext
from service.handlers.fetch import handle_fetch
from service.handlers.router import api_table
from tests.service.inprocess import created

WIDE = 3 * PARTITIONS_PER_TURN + 8
MAX_WAIT_S = 5.0


def test_an_append_between_the_slices_of_a_wide_fetch_wakes_it(tmp_path: Path) -> None:
    async def body() -> None:
        broker = Broker(data_dir=tmp_path, config=BrokerConfig(dict(UP_DEFAULTS)),
                        advertised_listeners=(Endpoint("PLAINTEXT", "127.0.0.1", 9092),))
        await broker.start({spec.key: spec.max_version for spec in api_table().values()}, 10.0)
        try:
            await broker.create_topic("wide", num_partitions=WIDE)
            await created(broker, "wide", WIDE)
            request = FetchRequest(
                replica_id=-1, max_wait=datetime.timedelta(seconds=MAX_WAIT_S), min_bytes=1,
                max_bytes=1 << 20, isolation_level=0,
                topics=(FetchTopic(topic="wide", partitions=tuple(
                    FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in range(WIDE))),))
            ctx = RequestContext(RequestHeader(1, 4, 7, "test", True), broker, object())
            started = time.monotonic()
            fetch = asyncio.ensure_future(handle_fetch(ctx, request))
            await asyncio.sleep(0)  # the fetch read its first slice and gave the loop a turn
            assert not fetch.done()
            broker.append("wide", 0, build_batch([(None, b"between", (), 1_700_000_000_000)]))
            await asyncio.wait_for(fetch, MAX_WAIT_S + 5)
            took = time.monotonic() - started
            assert took < MAX_WAIT_S / 2, f"the fetch slept {took:.1f} s with the record there"
            answer = b"".join(bytes(part) if isinstance(part, (bytes, bytearray, memoryview)) else part.read_bytes()
                              for part in fetch.result())  # the records go as sendfile regions
            assert b"between" in answer
        finally:
            await broker.stop()
            broker.close()

    asyncio.run(body())
