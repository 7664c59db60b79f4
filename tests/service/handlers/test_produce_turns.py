"""A Produce for many partitions gives the event loop turns between its partitions.

On an in-process broker: kafka-python and the Java client put every partition a broker
leads into one request, and the first produce to 600 new partitions held the loop for
115-275 ms in one go (``tests/e2e/test_first_appends.py`` measures that from outside).
Here a ticker task counts the loop's turns while one request is handled: a wide request
lets it run between every :data:`PARTITIONS_PER_TURN` partitions and still appends every
partition in the order sent, a narrow one is answered without a turn, and a connection's
next request still appends after a wide one that came before it.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from pathlib import Path
from typing import Any

from common.config import BrokerConfig
from common.protocol.codec import RequestHeader
from common.record.batch import build_batch
from controller.registrations import Endpoint
from service.broker import Broker
from service.cli.main import UP_DEFAULTS
from service.handlers.context import RequestContext
from service.handlers.produce import PARTITIONS_PER_TURN, handle_produce
from service.handlers.produce_codec import ProducePartition, ProduceRequestData, ProduceTopic
from service.handlers.router import api_table
from tests.service.inprocess import created

WIDE = 4 * PARTITIONS_PER_TURN + 5


def _request(topic: str, partitions: range, value: bytes) -> ProduceRequestData:
    batch = memoryview(build_batch([(None, value, (), 1_700_000_000_000)]))
    return ProduceRequestData(None, 1, 30_000, (ProduceTopic(topic, tuple(
        ProducePartition(p, batch) for p in partitions)),))


class _Connection:
    """What the handler keys a connection's pending appends by (any hashable object that
    takes attributes)."""


def test_a_wide_produce_gives_the_loop_a_turn_every_few_partitions_and_appends_them_all_in_order(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        broker = Broker(data_dir=tmp_path, config=BrokerConfig(dict(UP_DEFAULTS)),
                        advertised_listeners=(Endpoint("PLAINTEXT", "127.0.0.1", 9092),))
        versions = {spec.key: spec.max_version for spec in api_table().values()}
        await broker.start(versions, 10.0)
        turns = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal turns
            while not stop.is_set():
                turns += 1
                await asyncio.sleep(0)

        try:
            await broker.create_topic("wide", num_partitions=WIDE)
            await created(broker, "wide", WIDE)
            conn = _Connection()
            header = RequestHeader(0, 9, 1, "test", True)
            ctx = RequestContext(header, broker, conn)

            narrow = handle_produce(ctx, _request("wide", range(PARTITIONS_PER_TURN), b"n"))
            assert isinstance(narrow, bytes), "a narrow request is answered at once"

            tick = asyncio.ensure_future(ticker())
            await asyncio.sleep(0)
            before = turns
            first = handle_produce(ctx, _request("wide", range(WIDE), b"a"))
            second = handle_produce(ctx, _request("wide", range(PARTITIONS_PER_TURN), b"b"))  # same connection
            assert inspect.isawaitable(first) and inspect.isawaitable(second)
            await asyncio.gather(first, second)
            during = turns - before
            stop.set()
            await tick
            # the wide request's checks and appends each take WIDE / PARTITIONS_PER_TURN turns
            assert during >= 2 * (WIDE // PARTITIONS_PER_TURN), f"only {during} turns of the loop"
            # the narrow, the wide and the second request in the first partitions; the wide alone after
            ends = [broker.log_for("wide", p).log_end_offset for p in range(WIDE)]
            assert ends == [3] * PARTITIONS_PER_TURN + [1] * (WIDE - PARTITIONS_PER_TURN)
            values = [bytes(r.value) for r in _records(broker, "wide", 0)]
            assert values == [b"n", b"a", b"b"], "the connection's second request appended before the first"
        finally:
            stop.set()
            await broker.stop()
            broker.close()

    asyncio.run(body())


def _records(broker: Broker, topic: str, partition: int) -> list[Any]:
    from common.record.batch import decode_batch

    log = broker.log_for(topic, partition)
    info = log.read(0, 1 << 20, max_offset=log.log_end_offset)
    out: list[Any] = []
    for region in info.regions:
        data = os.pread(region.file.fileno(), region.length, region.position)
        pos = 0
        while pos < len(data):
            header, records = decode_batch(data, pos)
            out.extend(records)
            pos += header.size
    return out
