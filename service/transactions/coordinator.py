"""The transaction coordinator: Kafka's ``TransactionCoordinator`` (transaction version 1).

It answers InitProducerId (with a transactional id), AddPartitionsToTxn (and
the verify-only form brokers send, KIP-890), AddOffsetsToTxn, EndTxn,
DescribeTransactions and ListTransactions. Every state change is written to
``__transaction_state`` (:mod:`.state`) before it takes effect or is answered.
Committing or aborting is two-phase, as in Kafka:

1. EndTxn writes PrepareCommit/PrepareAbort and answers the client once the
   record is on the in-sync replicas of ``__transaction_state`` (a write that
   does not get there is abandoned: the transaction stays Ongoing, and the
   client's retry of the commit, or its abort, is answered as Kafka does);
2. :mod:`.completion` writes a COMMIT/ABORT marker into every partition of the
   transaction (through the :class:`~service.transactions.seams.MarkerWriter`),
   then CompleteCommit/CompleteAbort.

A broker that dies between 1 and 2 finds the Prepare record when it loads the
partition again and writes the markers then. A second producer with the same
transactional id (InitProducerId) bumps the epoch, which fences the first: an
ongoing transaction of the old epoch is aborted first. Transactions open longer
than their timeout are aborted the same way, on a timer.

Errors per request version (PRODUCER_FENCED vs INVALID_PRODUCER_EPOCH) are the
handlers' business; this class answers in Kafka's newest vocabulary.
Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from common.errors import ErrorCode, KafkaError
from service.groups.seams import Timer
from service.replication.txn_markers import InitProducerIdResult as InitResult
from service.transactions.completion import MarkerCompletion
from service.transactions.metadata import (
    NO_PRODUCER_EPOCH,
    TopicPartition,
    TransactionMetadata,
    TxnState,
)
from service.transactions.seams import MarkerWriter, ProducerIds, TxnConfig, TxnStateLog
from service.transactions.state import TxnPartition, TxnStateStore, rebuild

__all__ = ["TransactionCoordinator", "TxnDescription"]

log = logging.getLogger("strata.transactions")
E = ErrorCode
S = TxnState


@dataclass(frozen=True, slots=True)
class TxnDescription:
    """DescribeTransactions' answer for one id. An error carries the schema's zero
    defaults, as Kafka's does (no -1 start time or producer id)."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
    timeout_ms: int = 0
    start_ms: int = 0
    partitions: tuple[TopicPartition, ...] = ()


class TransactionCoordinator:
    def __init__(
        self,
        log_: TxnStateLog,
        markers: MarkerWriter,
        producer_ids: ProducerIds,
        timer: Timer,
        config: TxnConfig | None = None,
        may_lead: Callable[[], bool] = lambda: True,
    ) -> None:
        self.config = config or TxnConfig()
        self._timer = timer
        self._ids = producer_ids
        self.store = TxnStateStore(log_, may_lead)
        self.completion = MarkerCompletion(self.store, markers, timer, self.config)
        self._jobs: set[asyncio.Future[Any]] = set()

    # ================================================================== lifecycle

    def startup(self) -> None:
        """Load every hosted partition (finishing prepared transactions) and start the timers."""
        for partition in self.store_partitions():
            self.load(partition, 0)
        self.completion.start_timers(self._abort_timed_out, self._expire_ids)

    def store_partitions(self) -> list[int]:
        """The hosted partitions of ``__transaction_state`` (none until the topic exists)."""
        return self.store.existing_partitions()

    def load(self, partition: int, coordinator_epoch: int) -> None:
        """Become the coordinator of ``partition``: rebuild it and finish what was prepared."""
        self._finish_prepared(self.store.load(partition, coordinator_epoch))

    async def load_off_loop(self, partition: int, coordinator_epoch: int, retry_s: float = 1.0) -> None:
        """:meth:`load`, the log read and decoded on a worker thread: a broker taking over a
        partition of 20,000 ids stalled its event loop for 0.7 s replaying it inside the metadata
        apply. Its ids answer COORDINATOR_LOAD_IN_PROGRESS meanwhile (clients retry); a read that
        fails is logged and tried again, until the partition is unloaded or loaded anew."""
        token = self.store.begin_loading(partition)
        while self.store.still_loading(partition, token):
            records = self.store.replay(partition)  # the log's segments as of now, on the loop
            try:
                transactions = await asyncio.to_thread(rebuild, partition, records)
            except Exception:  # noqa: BLE001 - a load must not die silently: its ids would stay loading
                log.exception("loading __transaction_state-%d failed; retrying in %.0f s", partition, retry_s)
                await asyncio.sleep(retry_s)
                continue
            entry = self.store.finish_loading(partition, token, coordinator_epoch, transactions)
            if entry is not None:
                self._finish_prepared(entry)
            return

    def _finish_prepared(self, entry: TxnPartition) -> None:
        for meta in list(entry.transactions.values()):
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                log.info(
                    "%s: %s found at load, writing its markers", meta.transactional_id, meta.state.state_name
                )
                self.completion.send_markers(entry, meta)

    def unload(self, partition: int) -> None:
        """Stop coordinating ``partition`` (its marker writes in flight are cancelled)."""
        self.completion.cancel_partition(partition)
        self.store.unload(partition)

    def shutdown(self) -> None:
        self.completion.shutdown()
        for job in self._jobs:
            job.cancel()

    def ensure_topic(self) -> int:
        return self.store.ensure_topic()

    # ================================================================== InitProducerId

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1
    ) -> InitResult:
        """A producer id and epoch for ``transactional_id`` (:class:`service.replication.txn_markers.TransactionalInit`).

        ``producer_id``/``producer_epoch`` (InitProducerId v3+, KIP-360) are the
        ones the producer holds, or -1.
        """
        expected = (producer_id, producer_epoch) if producer_id >= 0 else None
        if not transactional_id:
            return InitResult(E.invalid_request)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitResult(E.invalid_transaction_timeout)
        error, entry = self.store.lookup(transactional_id)
        if entry is None:
            return InitResult(error)
        meta = entry.transactions.get(transactional_id)
        if meta is None:
            try:
                new_id = await self._ids.next_producer_id()
            except KafkaError as exc:
                return InitResult(exc.code)
            meta = entry.transactions.setdefault(
                transactional_id, TransactionMetadata(transactional_id, new_id, timeout_ms=timeout_ms)
            )
        if meta.pending_transition:
            return InitResult(E.concurrent_transactions)
        if expected is not None and not (
            meta.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == meta.producer_id
            or (expected[0] == meta.prev_producer_id and expected[1] >= 0x7FFE)
        ):
            return InitResult(E.producer_fenced)
        now = self._timer.now_ms()
        if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return InitResult(E.concurrent_transactions)
        if meta.state is S.ONGOING:
            # Fence the current producer: abort its transaction at a bumped epoch. The
            # client retries on CONCURRENT_TRANSACTIONS and gets a new epoch once aborted.
            error = await self._end(meta, entry, commit=False, fence=True, now=now)
            return InitResult(error if error != E.none else E.concurrent_transactions)
        if meta.epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
            try:
                new_id = await self._ids.next_producer_id()
            except KafkaError as exc:
                return InitResult(exc.code)
            if meta.pending_transition:
                return InitResult(E.concurrent_transactions)
            transit = meta.prepare_rotate_producer_id(new_id, timeout_ms, now, expected is not None)
        else:
            bumped = meta.prepare_increment_epoch(
                timeout_ms, None if expected is None else expected[1], now
            )
            if bumped is None:
                return InitResult(E.producer_fenced)
            transit = bumped
        error = await self.store.write(meta, transit)
        if error != E.none:
            return InitResult(error)
        log.info(
            "initialized %s: producer id %d epoch %d", transactional_id, meta.producer_id, meta.producer_epoch
        )
        return InitResult(E.none, meta.producer_id, meta.producer_epoch)

    # ================================================================== AddPartitions, AddOffsets

    def _active(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, TransactionMetadata | None]:
        """The id's metadata if (producer id, epoch) hold it and no transition is pending."""
        if not transactional_id:
            return E.invalid_request, None
        error, entry = self.store.lookup(transactional_id)
        if entry is None:
            return error, None
        meta = entry.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return E.invalid_producer_id_mapping, None
        if meta.producer_epoch != producer_epoch:
            return E.producer_fenced, None
        if meta.pending_transition or meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return E.concurrent_transactions, None
        return E.none, meta

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> ErrorCode:
        """Add ``partitions`` to the ongoing transaction (starting it if there is none)."""
        error, meta = self._active(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return error
        added = set(partitions)
        if meta.state is S.ONGOING and added <= meta.partitions:
            return E.none
        return await self.store.write(meta, meta.prepare_add_partitions(added, self._timer.now_ms()))

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 verification: is each partition in the transaction (TRANSACTION_ABORTABLE if not)?"""
        wanted = list(partitions)
        error, meta = self._active(transactional_id, producer_id, producer_epoch)
        if meta is None and error == E.concurrent_transactions:
            # Kafka answers a pending transition by the state only (Prepare* → concurrent).
            error, meta = self._verify_lenient(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return dict.fromkeys(wanted, error)
        return {tp: E.none if tp in meta.partitions else E.transaction_abortable for tp in wanted}

    def _verify_lenient(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, TransactionMetadata | None]:
        _, entry = self.store.lookup(transactional_id)
        meta = entry.transactions.get(transactional_id) if entry is not None else None
        if meta is None or meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return E.concurrent_transactions, None
        return E.none, meta

    def transaction_includes(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partition: TopicPartition
    ) -> ErrorCode:
        """For TxnOffsetCommit: NONE if the producer holds the id and ``partition`` is in its transaction."""
        error, meta = self._active(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return error
        if meta.state is not S.ONGOING or partition not in meta.partitions:
            return E.invalid_txn_state
        return E.none

    # ================================================================== EndTxn

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        """Write PrepareCommit/PrepareAbort (markers follow in the background); the client's answer.

        A retry of an end already under way or done is answered as Kafka does:
        CONCURRENT_TRANSACTIONS (retriable) while its markers are being written,
        NONE once complete; the other outcome is INVALID_TXN_STATE."""
        if not transactional_id:
            return E.invalid_request
        error, entry = self.store.lookup(transactional_id)
        if entry is None:
            return error
        meta = entry.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return E.invalid_producer_id_mapping
        if producer_epoch != meta.producer_epoch:
            return E.producer_fenced
        if meta.pending_transition:
            return E.concurrent_transactions
        state = meta.state
        if state is S.ONGOING:
            return await self._end(meta, entry, commit=commit, fence=False, now=self._timer.now_ms())
        if state is S.COMPLETE_COMMIT:
            return E.none if commit else E.invalid_txn_state
        if state is S.COMPLETE_ABORT:
            return E.invalid_txn_state if commit else E.none
        if state is S.PREPARE_COMMIT:
            return E.concurrent_transactions if commit else E.invalid_txn_state
        if state is S.PREPARE_ABORT:
            return E.invalid_txn_state if commit else E.concurrent_transactions
        return E.invalid_txn_state  # Empty: nothing to end

    async def _end(
        self, meta: TransactionMetadata, entry: TxnPartition, *, commit: bool, fence: bool, now: int
    ) -> ErrorCode:
        """Prepare* written and replicated, then the markers in the background."""
        if meta.pending_transition:  # a timer's job may start after another request's write
            return E.concurrent_transactions
        transit = meta.prepare_fence_abort(now) if fence else meta.prepare_end(commit, now)
        error = await self.store.write(meta, transit)
        if error != E.none:
            if fence:
                meta.failed_epoch_fence = True
            return error
        self.completion.send_markers(entry, meta)
        return E.none

    # ================================================================== timers

    def _abort_timed_out(self) -> None:
        """Abort (fencing the producer) every transaction open longer than its timeout."""
        now = self._timer.now_ms()
        for entry, meta in self.store.all():
            if (
                meta.state is S.ONGOING
                and not meta.pending_transition
                and meta.start_ms + meta.timeout_ms < now
            ):
                log.info(
                    "aborting %s: open for %d ms, its timeout is %d ms",
                    meta.transactional_id, now - meta.start_ms, meta.timeout_ms,
                )
                self._spawn(self._end(meta, entry, commit=False, fence=True, now=now))

    def _expire_ids(self) -> None:
        """Forget ids idle longer than ``transactional.id.expiration.ms`` (tombstones)."""
        self._spawn(self._expire_ids_now())

    def _spawn(self, job: Coroutine[Any, Any, Any]) -> None:
        """Run a timer's write in the background (its answer goes nowhere)."""
        task = asyncio.ensure_future(job)
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

    async def _expire_ids_now(self) -> None:
        now = self._timer.now_ms()
        for entry, meta in self.store.all():
            if (
                meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                and not meta.pending_transition
                and meta.last_update_ms + self.config.id_expiration_ms <= now
            ):
                meta.prepare_dead()
                if await self.store.remove(entry, meta):
                    log.info("expired transactional id %s", meta.transactional_id)

    # ================================================================== admin

    def describe(self, transactional_id: str) -> TxnDescription:
        if not transactional_id:
            return TxnDescription(transactional_id, E.invalid_request)
        error, entry = self.store.lookup(transactional_id)
        if entry is None:
            return TxnDescription(transactional_id, error)
        meta = entry.transactions.get(transactional_id)
        if meta is None or meta.state is S.DEAD:
            return TxnDescription(transactional_id, E.transactional_id_not_found)
        return TxnDescription(
            transactional_id, E.none, meta.state.state_name, meta.producer_id, meta.producer_epoch,
            meta.timeout_ms, meta.start_ms, tuple(sorted(meta.partitions)),
        )

    def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        min_duration_ms: int = -1,
        pattern: str | None = None,
    ) -> tuple[ErrorCode, list[str], list[tuple[str, int, str]]]:
        """(error, unknown state filters, [(transactional id, producer id, state)])."""
        wanted_states: set[TxnState] = set()
        unknown: list[str] = []
        state_names = list(states)
        for name in state_names:
            state = TxnState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted_states.add(state)
        try:
            regex = re.compile(pattern) if pattern else None
        except re.error:
            return E.invalid_regular_expression, unknown, []
        if not self.store.may_lead():  # paused or cut off: maybe replaced; every admin client retries this
            return E.coordinator_load_in_progress, unknown, []
        pids = set(producer_ids)
        now = self._timer.now_ms()
        found = []
        for _, meta in self.store.all():
            if meta.state is S.DEAD:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if state_names and meta.state not in wanted_states:
                continue
            if min_duration_ms >= 0 and now - meta.start_ms <= min_duration_ms:
                continue
            if regex is not None and not regex.fullmatch(meta.transactional_id):
                continue
            found.append((meta.transactional_id, meta.producer_id, meta.state.state_name))
        return E.none, unknown, sorted(found)
