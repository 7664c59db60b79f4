"""An in-process broker (its real Broker, a file:// bucket) with diskless topics, for the wiring tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from common.config import BrokerConfig
from common.record.batch import build_batch
from controller.registrations import Endpoint
from service.broker import Broker
from service.cli.main import UP_DEFAULTS
from service.handlers.router import api_table


def run(tmp_path: Path, body: Callable[[Broker], Awaitable[Any]], **sets: str) -> Any:
    async def main() -> Any:
        broker = Broker(data_dir=tmp_path, config=BrokerConfig({**UP_DEFAULTS, "diskless.batch.ms": "20", **sets}),
                        advertised_listeners=(Endpoint("PLAINTEXT", "127.0.0.1", 9092),))
        versions = {spec.key: spec.max_version for spec in api_table().values()}
        await broker.start(versions, 10.0)
        try:
            return await body(broker)
        finally:
            await broker.stop()
            broker.close()

    return asyncio.run(main())


async def diskless_topic(broker: Broker, name: str, partitions: int = 1, **configs: str) -> Any:
    """A diskless topic (with ``configs``, dots written as underscores), once this broker
    sequences every partition of it."""
    topic_configs = {"diskless.enable": "true", **{k.replace("_", "."): v for k, v in configs.items()}}
    info = await broker.create_topic(name, num_partitions=partitions, configs=topic_configs)
    for _ in range(200):  # the takeover of each partition (epoch 0: no wait)
        seq = broker.diskless.sequencer
        if seq is not None and all(seq.get(info.topic_id, p) is not None for p in range(partitions)):
            return info
        await asyncio.sleep(0.05)
    raise AssertionError("the diskless partitions were never sequenced")


def batch(values: list[bytes], ts: int) -> bytes:
    return build_batch([(None, v, (), ts + i) for i, v in enumerate(values)])
