"""Reads below the local log start, from the bucket (Kafka's RemoteLogReader).

:class:`TieredReader` owns the tiered-fetch threads (:class:`fetch.remote_reader.RemoteReader`:
a bounded pool, chunk cache, read-ahead), so the read path is one way down:
``service/handlers/fetch.py`` → ``fetch/planner.py`` (the plan: the remote segment that
holds the offset, from :meth:`remote_tier.log_manager.RemoteLogManager.plan_remote_read`)
→ here → ``remote_tier/storage_manager.py`` ranged reads on the reader's threads.

read_committed reads also need the aborted transactions overlapping what was read. They
come from the ``.txnindex`` objects uploaded with the segments (only for segments whose
manifest entry says they have one), searched from the segment read onwards, then from
the local segments past the bucket's end, as Kafka's ``RemoteStorageManager`` does. Index
objects are small and cached decoded, per upload
(:class:`remote_tier.txn_indexes.RemoteTxnIndexes`, read on an executor thread).

Thread-safety: the coroutines run on the event loop; every object-store call runs on the
reader's threads or an executor thread and touches no :class:`~local_tier.log.Log`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING

from common.config.configdef import parse_cpu_list
from common.errors import KafkaStorageError
from common.latency import REMOTE_READ_BUCKETS, LatencyHistograms
from fetch.remote_reader import RemoteReader, RemoteReadResult, TimestampMatch
from local_tier.segment import FileRegion
from local_tier.txn_index import TxnSearch
from remote_tier.errors import ObjectStoreError, RemoteStorageError
from remote_tier.log_manager import RemoteFetch

if TYPE_CHECKING:
    from common.config import BrokerConfig
    from local_tier.log import Log
    from remote_tier.filesystem import ObjectFile
    from remote_tier.log_manager import RemoteLogManager
    from remote_tier.storage_manager import RemoteStorageManager

__all__ = ["TieredReader"]


class _Source:
    """Adapts the remote storage manager to the reader's segment source (blocking calls)."""

    def __init__(self, rsm: RemoteStorageManager) -> None:
        self._rsm = rsm

    def cache_key(self, segment: object) -> Hashable:
        assert isinstance(segment, RemoteFetch)
        return (segment.topic_id, segment.partition, segment.segment.upload_id)

    def get_range(self, segment: object, start: int, end: int) -> bytes:
        assert isinstance(segment, RemoteFetch)
        return self._rsm.read_range(segment.segment, segment.topic_id, segment.partition, start, end)

    def open_log(self, segment: object) -> ObjectFile | None:
        assert isinstance(segment, RemoteFetch)
        return self._rsm.open_log(segment.segment, segment.topic_id, segment.partition)

    def get_offset_index(self, segment: object) -> bytes:
        assert isinstance(segment, RemoteFetch)
        return self._rsm.read_index(segment.segment, segment.topic_id, segment.partition, "offset")

    def get_time_index(self, segment: object) -> bytes:
        assert isinstance(segment, RemoteFetch)
        return self._rsm.read_index(segment.segment, segment.topic_id, segment.partition, "time")


class TieredReader:
    """The broker's reads of tiered history: Fetch, read_committed Fetch, ListOffsets by time."""

    def __init__(self, tiering: RemoteLogManager, config: BrokerConfig) -> None:
        self.tiering = tiering
        self.read_latency = LatencyHistograms(REMOTE_READ_BUCKETS)
        self.reader = RemoteReader(
            _Source(tiering.rsm),
            threads=config.get_int("remote.log.reader.threads"),
            chunk_bytes=config.get_int("remote.fetch.chunk.bytes"),
            cache_bytes=config.get_int("remote.fetch.chunk.cache.bytes"),
            read_ahead_chunks=config.get_int("remote.fetch.read.ahead.chunks"),
            cpus=parse_cpu_list(config.get("remote.log.reader.cpus") or ""),
            max_scan_bytes=config.get_int("remote.fetch.timestamp.scan.max.bytes"),
        )

    def close(self) -> None:
        self.reader.close()

    @property
    def fetch_max_wait_ms(self) -> int:
        """``remote.fetch.max.wait.ms``: how long a Fetch waits for its remote reads."""
        return self.tiering.fetch_max_wait_ms

    def _submit(
        self, fetch: RemoteFetch, offset: int, max_bytes: int, min_one_message: bool
    ) -> asyncio.Future[RemoteReadResult]:
        """The read on the tiered-fetch threads, as a future of the loop."""
        return asyncio.wrap_future(
            self.reader.submit(fetch, fetch.segment.size_bytes, offset, max_bytes, min_one_message)
        )

    async def read(
        self, fetch: RemoteFetch, offset: int, max_bytes: int, min_one_message: bool
    ) -> tuple[memoryview | FileRegion, ...]:
        """Whole batches from ``offset``, never copied: a region of the object's file to
        ``sendfile``, or views of cached chunks (see :class:`RemoteReadResult`)."""
        started = time.perf_counter()
        result = await self._submit(fetch, offset, max_bytes, min_one_message)
        self.read_latency.observe("fetch", time.perf_counter() - started)
        return result.parts

    async def read_committed(
        self, fetch: RemoteFetch, offset: int, max_bytes: int, min_one_message: bool, local: Log
    ) -> tuple[tuple[memoryview | FileRegion, ...], list[tuple[int, int]]]:
        """:meth:`read` plus ``(producer id, first offset)`` of the aborted transactions
        overlapping what was read: the list a read of the same offsets from local disk gives."""
        started = time.perf_counter()
        result = await self._submit(fetch, offset, max_bytes, min_one_message)
        aborted: list[tuple[int, int]] = []
        if result.parts and result.next_offset > offset:
            search = TxnSearch(offset, result.next_offset, [])
            state = self.tiering.state(local.topic, local.partition)
            manifest = state.manifest if state is not None else None
            if manifest is not None:
                later = [s for s in manifest.segments if s.base_offset >= fetch.segment.base_offset]
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(
                    None, self.tiering.txn_indexes.collect, fetch.topic_id, fetch.partition, later, search
                )
                if not search.complete:
                    local.collect_aborted_txns(search, min_base=manifest.next_offset)
            aborted = [(t.producer_id, t.first_offset) for t in search.found]
        self.read_latency.observe("fetch", time.perf_counter() - started)
        return result.parts, aborted

    async def offset_for_timestamp(
        self, topic: str, partition: int, timestamp: int, local: Log
    ) -> TimestampMatch | None:
        """ListOffsets by time over the remote segments older than the local log: the first
        record at or after the log start with a timestamp ≥ ``timestamp``, or None when the
        answer is not in the bucket (the local log has it, or nobody does).

        Each segment is looked up on the tiered-fetch threads with its indexes and a
        bounded ranged read; a later segment is asked only when every qualifying record
        of the first lies below the log start (DeleteRecords inside it).
        KAFKA_STORAGE_ERROR when the bucket cannot be read.
        """
        start = self.tiering.log_start_offset(topic, partition, local)
        started = time.perf_counter()
        try:
            for target in self.tiering.plan_timestamp_reads(topic, partition, timestamp, local, start):
                found = await asyncio.wrap_future(
                    self.reader.submit_time_lookup(target, target.segment.size_bytes, timestamp, start)
                )
                if found is not None:
                    return found
            return None
        except (ObjectStoreError, RemoteStorageError, OSError) as exc:
            raise KafkaStorageError(
                f"cannot read the tiered part of {topic}-{partition} to find timestamp {timestamp}: {exc}"
            ) from exc
        finally:
            self.read_latency.observe("list_offsets", time.perf_counter() - started)
