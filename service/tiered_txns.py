"""read_committed fetches served from the bucket: the aborted transactions of what was read.

A remote read returns the same batches a local read would; what a read_committed
consumer also needs is the list of aborted transactions overlapping them. That
list comes from the ``.txnindex`` objects uploaded with the segments (only for
segments whose manifest entry says they have one), searched from the segment
read onwards, then from the local segments past the bucket's end, as Kafka's
``RemoteLogManager`` does. Index objects are small and cached decoded, per upload
(:class:`remote_tier.txn_indexes.RemoteTxnIndexes`, read on an executor thread).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from local_tier.txn_index import TxnSearch

if TYPE_CHECKING:
    from local_tier.log import Log
    from service.tiering import RemoteFetch, TieringService

__all__ = ["read_committed"]


async def read_committed(
    tiering: TieringService,
    fetch: RemoteFetch,
    offset: int,
    max_bytes: int,
    min_one_message: bool,
    local: Log,
) -> tuple[tuple[memoryview, ...], list[tuple[int, int]]]:
    """``tiering.read`` plus ``(producer id, first offset)`` of the aborted transactions
    overlapping what was read: the list a read of the same offsets from local disk gives."""
    started = time.perf_counter()
    fut = tiering.reader.submit(fetch, fetch.segment.size_bytes, offset, max_bytes, min_one_message)
    result = await asyncio.wrap_future(fut)
    aborted: list[tuple[int, int]] = []
    if result.parts and result.next_offset > offset:
        search = TxnSearch(offset, result.next_offset, [])
        state = tiering.state(local.topic, local.partition)
        manifest = state.manifest if state is not None else None
        if manifest is not None:
            later = [s for s in manifest.segments if s.base_offset >= fetch.segment.base_offset]
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(
                None, tiering.txn_indexes.collect, fetch.topic_id, fetch.partition, later, search
            )
            if not search.complete:
                local.collect_aborted_txns(search, min_base=manifest.next_offset)
        aborted = [(t.producer_id, t.first_offset) for t in search.found]
    tiering.read_latency.observe("fetch", time.perf_counter() - started)
    return result.parts, aborted
