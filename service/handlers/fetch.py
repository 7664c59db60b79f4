"""Fetch (key 1): read local logs, long-poll for min_bytes, send records with sendfile."""

from __future__ import annotations

import asyncio
from typing import Any

from fetch.planner import READ_COMMITTED, PartitionFetch, read_partitions
from local_tier.errors import ErrorCode
from service.fetch_codec import encode_fetch_response
from service.handlers.router import RequestContext
from service.protocol import timedelta_to_ms

__all__ = ["handle_fetch"]


async def handle_fetch(ctx: RequestContext, request: Any) -> list[Any]:
    broker = ctx.broker
    wanted = [
        PartitionFetch(
            topic.topic,
            int(p.partition),
            int(p.fetch_offset),
            int(p.partition_max_bytes),
            int(getattr(p, "current_leader_epoch", -1)),
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    max_bytes = min(int(getattr(request, "max_bytes", 2**31 - 1)), broker.fetch_max_bytes)
    isolation = int(getattr(request, "isolation_level", 0))
    min_bytes = int(request.min_bytes)
    max_wait_ms = timedelta_to_ms(request.max_wait)

    def read() -> tuple[list[Any], int, bool]:
        data, total = read_partitions(broker, wanted, max_bytes=max_bytes, isolation_level=isolation)
        errors = any(d.error_code != ErrorCode.none for d in data)
        return data, total, errors

    data, total, errors = read()
    if wanted and not errors and total < min_bytes and max_wait_ms > 0:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        keys = [(w.topic, w.partition) for w in wanted]
        while True:
            await broker.waiters.wait(keys, deadline - loop.time())
            data, total, errors = read()
            if errors or total >= min_bytes or loop.time() >= deadline:
                break
    broker.metrics_fetch(data)
    return encode_fetch_response(
        ctx.version,
        ctx.header.correlation_id,
        data,
        read_committed=isolation == READ_COMMITTED,
    )
