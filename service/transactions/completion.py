"""Second phase of a commit or abort: markers into every partition, then Complete*.

:meth:`MarkerCompletion.send_markers` starts one task per prepared
transaction (Kafka's ``TransactionMarkerChannelManager``), once its Prepare
record is on the in-sync replicas of ``__transaction_state``: it writes the
COMMIT/ABORT marker into every partition the transaction added, through the
:class:`~service.transactions.seams.MarkerWriter`, retrying only the partitions
that failed, with a pause that doubles from ``marker_retry_ms`` up to
``marker_retry_max_ms`` (a partition whose topic was deleted is dropped), and
then writes CompleteCommit/CompleteAbort to ``__transaction_state``. A retry
never appends a marker twice: the partition leader answers a marker it already
has without appending (:mod:`service.replication.txn_markers`). Until then
the transactional id stays in PrepareCommit/PrepareAbort and its producer is
answered ``CONCURRENT_TRANSACTIONS``. The task stops if the partition of the
id is unloaded (another coordinator takes over and finishes the job from the
log).

``transaction.markers.delay.ms`` holds the markers back after the Prepare
record: a test hook that makes "the broker died between EndTxn and the
markers" deterministic. It is 0 unless a test sets it.

Also here: the two periodic timers (abort of timed-out transactions, expiry of
idle transactional ids). Not thread-safe: runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable
from typing import Any

from common.errors import ErrorCode
from service.groups.seams import Timer, cancel
from service.transactions.metadata import TransactionMetadata, TxnState
from service.transactions.seams import MarkerWriter, TxnConfig
from service.transactions.state import TxnPartition, TxnStateStore

__all__ = ["MarkerCompletion"]

log = logging.getLogger("strata.transactions")

#: Errors after which a partition is left out: the topic (or partition) is gone.
_GONE = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id})


class MarkerCompletion:
    def __init__(
        self, store: TxnStateStore, markers: MarkerWriter, timer: Timer, config: TxnConfig
    ) -> None:
        self._store = store
        self._markers = markers
        self._timer = timer
        self._config = config
        self._tasks: dict[str, tuple[int, asyncio.Task[None]]] = {}
        self._timers: list[Any] = []
        self._closed = False

    # ------------------------------------------------------------------ markers

    def send_markers(self, entry: TxnPartition, meta: TransactionMetadata) -> None:
        """Complete ``meta``'s prepared transaction in the background."""
        assert meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        # a context of its own: the EndTxn that started it must not wait for its writes
        task = asyncio.get_running_loop().create_task(self._complete(entry, meta), context=contextvars.Context())
        self._tasks[meta.transactional_id] = (entry.partition, task)
        task.add_done_callback(functools.partial(self._forget, meta.transactional_id))

    def _forget(self, transactional_id: str, task: asyncio.Task[None]) -> None:
        current = self._tasks.get(transactional_id)
        if current is not None and current[1] is task:
            del self._tasks[transactional_id]

    def in_flight(self) -> int:
        return len(self._tasks)

    def _owned(self, entry: TxnPartition, meta: TransactionMetadata) -> bool:
        """True while this coordinator still owns the id's partition and metadata."""
        return (
            self._store.partitions.get(entry.partition) is entry
            and entry.transactions.get(meta.transactional_id) is meta
        )

    async def _complete(self, entry: TxnPartition, meta: TransactionMetadata) -> None:
        commit = meta.state is TxnState.PREPARE_COMMIT
        pid, epoch = meta.producer_id, meta.producer_epoch
        if self._config.markers_delay_ms > 0:
            await asyncio.sleep(self._config.markers_delay_ms / 1000)
        remaining = sorted(meta.partitions)
        backoff = _Backoff(self._config.marker_retry_ms, self._config.marker_retry_max_ms)
        while remaining and self._owned(entry, meta):
            try:
                results = await self._markers.write_markers(
                    pid, epoch, entry.coordinator_epoch, commit, remaining
                )
            except Exception:  # a bug in a writer must not leave the transaction hanging
                log.exception("%s: writing markers failed", meta.transactional_id)
                results = {}
            failed = []
            for tp in remaining:
                code = results.get(tp, ErrorCode.unknown_server_error)
                if code in _GONE:
                    log.warning("%s: %s-%d is gone, no marker written there", meta.transactional_id, *tp)
                elif code != ErrorCode.none:
                    failed.append(tp)
            if failed:
                delay = backoff.next_s()
                log.info(
                    "%s: markers failed on %d partition(s) (%s), retrying in %.0f ms", meta.transactional_id,
                    len(failed), ", ".join(sorted({results.get(tp, ErrorCode.unknown_server_error).name
                                                   for tp in failed})), delay * 1000,
                )
                await asyncio.sleep(delay)
            remaining = failed
        backoff = _Backoff(self._config.marker_retry_ms, self._config.marker_retry_max_ms)
        while self._owned(entry, meta) and meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            if not meta.pending_transition:
                written = await self._store.write(meta, meta.prepare_complete(self._timer.now_ms()))
                if written == ErrorCode.none:
                    log.debug("%s: %s", meta.transactional_id, meta.state.state_name)
                    return
            await asyncio.sleep(backoff.next_s())

    def cancel_partition(self, partition: int) -> None:
        for tid, (p, task) in list(self._tasks.items()):
            if p == partition:
                task.cancel()
                self._tasks.pop(tid, None)

    # ------------------------------------------------------------------ timers

    def start_timers(self, abort_timed_out: Callable[[], None], expire_ids: Callable[[], None]) -> None:
        self._every(self._config.abort_interval_ms, abort_timed_out)
        self._every(self._config.expiration_interval_ms, expire_ids)

    def _every(self, interval_ms: int, job: Callable[[], None]) -> None:
        slot = len(self._timers)
        self._timers.append(None)

        def tick() -> None:
            if self._closed:
                return
            try:
                job()
            except Exception:  # one failing pass must not stop the schedule
                log.exception("transaction coordinator timer failed")
            self._timers[slot] = self._timer.call_later(interval_ms, tick)

        self._timers[slot] = self._timer.call_later(interval_ms, tick)

    def shutdown(self) -> None:
        self._closed = True
        for handle in self._timers:
            cancel(handle)
        for _, task in self._tasks.values():
            task.cancel()
        self._tasks.clear()


class _Backoff:
    """Pauses that double from ``first_ms`` up to ``max_ms``."""

    def __init__(self, first_ms: int, max_ms: int) -> None:
        self._next_ms = max(first_ms, 1)
        self._max_ms = max(max_ms, self._next_ms)

    def next_s(self) -> float:
        delay = self._next_ms
        self._next_ms = min(delay * 2, self._max_ms)
        return delay / 1000
