"""DescribeProducers on an in-process broker: a partition's producer state, and
NOT_LEADER_OR_FOLLOWER for a partition the metadata has but this broker does not host
(the end-to-end tests cover the other errors; a single node hosts every partition)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest

from common.config import BrokerConfig
from common.errors import ErrorCode
from common.protocol.codec import RequestHeader
from common.record.batch import build_batch
from controller.registrations import Endpoint
from service.broker import Broker
from service.cli.main import UP_DEFAULTS
from service.handlers.context import RequestContext
from service.handlers.router import api_table
from service.handlers.transactions import handle_describe_producers


def test_producer_state_and_a_partition_not_hosted_here(tmp_path: Path) -> None:
    async def body() -> None:
        broker = Broker(data_dir=tmp_path, config=BrokerConfig(dict(UP_DEFAULTS)),
                        advertised_listeners=(Endpoint("PLAINTEXT", "127.0.0.1", 9092),))
        versions = {spec.key: spec.max_version for spec in api_table().values()}
        await broker.start(versions, 10.0)  # a cluster of one, its lease in DATA_DIR/bucket
        try:
            await broker.create_topic("t", num_partitions=1)
            await broker.create_topic("moved", num_partitions=1)
            batch = build_batch([(None, b"v", (), 1_700_000_000_000)] * 3,
                                producer_id=7, producer_epoch=2, base_sequence=0, is_transactional=True)
            broker.append("t", 0, batch)
            broker.logs.delete_logs("moved")  # as if its replica had moved to another broker
            header = RequestHeader(61, 0, 1, "test", True)
            request = DescribeProducersRequest(topics=(TopicRequest(name="t", partition_indexes=(0,)),
                                                       TopicRequest(name="moved", partition_indexes=(0,))))
            answer = handle_describe_producers(RequestContext(header, broker, None), request)
            hosted, moved = answer.topics[0].partitions[0], answer.topics[1].partitions[0]
            assert (hosted.error_code, moved.error_code) == (ErrorCode.none, ErrorCode.not_leader_or_follower)
            (state,) = hosted.active_producers
            assert (state.producer_id, state.producer_epoch, state.last_sequence) == (7, 2, 2)
            assert (state.current_txn_start_offset, state.coordinator_epoch) == (0, -1)
            assert state.last_timestamp == 1_700_000_000_000
        finally:
            await broker.stop()
            broker.close()

    asyncio.run(body())
