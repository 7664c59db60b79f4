"""The broker's cleaners: the local log cleaner and the remote cleaner draw on one I/O budget."""

from __future__ import annotations

import asyncio
from pathlib import Path

from common.config import BrokerConfig
from controller.registrations import Endpoint
from service.broker import Broker
from service.cli.main import UP_DEFAULTS
from service.handlers.router import api_table


def test_the_local_and_remote_cleaners_share_one_io_budget(tmp_path: Path) -> None:
    """log.cleaner.io.max.bytes.per.second bounds both tiers' cleaning together (one
    Throttler), not each (which let a broker use twice the rate)."""

    async def body() -> None:
        config = BrokerConfig({**UP_DEFAULTS, "log.cleaner.io.max.bytes.per.second": "1048576"})
        broker = Broker(data_dir=tmp_path, config=config,
                        advertised_listeners=(Endpoint("PLAINTEXT", "127.0.0.1", 9092),))
        await broker.start({spec.key: spec.max_version for spec in api_table().values()}, 10.0)
        try:
            broker.start_log_cleaner()
            assert broker.logs.cleaner is not None
            assert broker.logs.cleaner.throttler is broker.remote_cleaner.throttler
            assert broker.remote_cleaner.throttler.rate == 1048576
        finally:
            await broker.stop()
            broker.close()

    asyncio.run(body())
