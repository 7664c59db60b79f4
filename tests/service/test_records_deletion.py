"""DeleteRecords for many partitions on an in-process broker: every start moves, one
checkpoint makes them all durable before the answer (one per partition took 5.9 s for
600 partitions), and a failed checkpoint fails exactly the partitions whose start moved.
``tests/e2e/test_log_admin.py`` drives the same through the AdminClient and a kill -9."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from pathlib import Path

from common.config import BrokerConfig
from common.errors import KafkaError, KafkaStorageError, OffsetOutOfRangeError
from common.record.batch import build_batch
from controller.registrations import Endpoint
from service.broker import Broker
from service.cli.main import UP_DEFAULTS
from service.handlers.router import api_table
from service.records_deletion import delete_records
from tests.service.inprocess import created

PARTITIONS = 40


def test_one_request_moves_every_start_and_checkpoints_once(tmp_path: Path) -> None:
    async def body() -> None:
        broker = Broker(data_dir=tmp_path, config=BrokerConfig(dict(UP_DEFAULTS)),
                        advertised_listeners=(Endpoint("PLAINTEXT", "127.0.0.1", 9092),))
        versions = {spec.key: spec.max_version for spec in api_table().values()}
        await broker.start(versions, 10.0)
        try:
            await broker.create_topic("t", num_partitions=PARTITIONS)
            await created(broker, "t", PARTITIONS)
            batch = build_batch([(None, b"v", (), 1_700_000_000_000)] * 5)
            for p in range(PARTITIONS):
                broker.append("t", p, batch)
            checkpoint = broker.logs.checkpoint
            calls: list[bool] = []
            fail = False

            def counted() -> Future[bool]:
                if fail:
                    done: Future[bool] = Future()
                    done.set_result(False)
                    calls.append(False)
                    return done
                calls.append(True)
                return checkpoint()

            broker.logs.checkpoint = counted  # type: ignore[method-assign]
            wanted = [("t", p, p % 5) for p in range(PARTITIONS)] + [("t", 0, 9)]
            results = await delete_records(broker, wanted)
            assert results[:PARTITIONS] == [p % 5 for p in range(PARTITIONS)]
            assert isinstance(results[-1], OffsetOutOfRangeError)  # beyond the high watermark
            assert calls == [True], f"{len(calls)} checkpoints for one request"
            assert [broker.log_for("t", p).log_start_offset for p in range(PARTITIONS)] == \
                [p % 5 for p in range(PARTITIONS)]
            # what the checkpoint wrote is what a restart would read
            starts = (tmp_path / "logs" / "log-start-offset-checkpoint").read_text().split("\n")
            assert {f"t {p} {p % 5}" for p in range(PARTITIONS) if p % 5} <= set(starts)

            calls.clear()
            fail = True  # the flush thread could not write it: only the moved starts fail
            results = await delete_records(broker, [("t", 1, 1), ("t", 2, 4), ("t", 3, 5)])
            assert results[0] == 1  # already there: nothing moved, nothing to make durable
            assert all(isinstance(r, KafkaStorageError) for r in results[1:]), results
            assert calls == [False]
            assert not any(isinstance(r, KafkaError) for r in await delete_records(broker, [("t", 4, 2)]))
        finally:
            await broker.stop()
            broker.close()

    asyncio.run(body())
