"""A sequencer's group commits into its chain in the bucket: :class:`GroupCommitter`.

ADR 0027, section 4. The entries the broker's :class:`~service.diskless.sequence.PartitionSequence`
objects accept wait for the next slot of the broker's commit chain. One slot is written
at a time, on a blocking-I/O thread; whatever is accepted meanwhile goes into the next one,
so under load a slot carries the entries of many write-ahead objects (the PUT count the ADR
bounds). A writer's :meth:`GroupCommitter.wait_durable` returns once its entry's slot is in
the bucket and raises KAFKA_STORAGE_ERROR (retriable) when the write failed: every entry
of the slot's partitions not durable is then dropped from its sequence and offered again by
the writers' retries, so offsets stay dense. A slot found taken by a batch not ours means another process writes
this chain: the committer stops and fails everything (NOT_LEADER_OR_FOLLOWER); the broker
must not sequence with it again.

Not thread-safe: the event loop calls it; only the store calls leave the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from common.errors import KafkaError, KafkaStorageError, NotLeaderOrFollowerError
from remote_tier.diskless.commits import CommitBatch, CommitChain, CommitEntry
from service.diskless.sequence import PartitionSequence

__all__ = ["GroupCommitter"]

_log = logging.getLogger("strata.diskless")

RunBlocking = Callable[..., Awaitable[Any]]

_UNCONFIRMED = ("this broker cannot confirm it still sequences these partitions: propose again to the "
                "partition's sequencer")


class GroupCommitter:
    """Writes the accepted entries of its sequences to ``chain`` from ``next_slot`` on."""

    def __init__(self, chain: CommitChain, next_slot: int, run_blocking: RunBlocking,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 may_answer: Callable[[], bool] = lambda: True) -> None:
        self.chain = chain
        #: whether this broker may still act as a sequencer (its leadership lease, ADR 0024):
        #: asked before a slot is written and again before anyone is answered (ADR 0027, section 4)
        self._may_answer = may_answer
        self.next_slot = next_slot
        self._run_blocking = run_blocking
        self._clock_ms = clock_ms
        self._dirty: dict[int, PartitionSequence] = {}  # by id, in the order they got entries
        self._waiters: dict[int, tuple[CommitEntry, list[asyncio.Future[None]]]] = {}  # by id(entry)
        self._writing: asyncio.Task[None] | None = None
        self.broken: str | None = None
        self.slots_written = 0

    def wait_durable(self, sequence: PartitionSequence, entry: CommitEntry) -> Awaitable[None]:
        """Resolves once ``entry`` (returned by ``sequence.accept``) is in the bucket."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.broken is not None:
            future.set_exception(NotLeaderOrFollowerError(self.broken))
        elif entry.last_offset < sequence.committed_end:
            future.set_result(None)
        else:
            self._waiters.setdefault(id(entry), (entry, []))[1].append(future)
            if sequence.pending:
                self._dirty[id(sequence)] = sequence
            if self._writing is None:
                self._writing = asyncio.get_running_loop().create_task(self._write_slots())
        return future

    async def _write_slots(self) -> None:
        try:
            while self._dirty and self.broken is None:
                sequences = list(self._dirty.values())
                self._dirty.clear()
                taken = [(s, s.take_pending()) for s in sequences]
                entries = tuple(e for _, group in taken for e in group)
                if not entries:
                    continue
                involved = [s for s, _ in taken]
                if not self._may_answer():  # no slot from a sequencer that may have been replaced
                    self._roll_back(NotLeaderOrFollowerError(_UNCONFIRMED), involved)
                    continue
                resigned = [s for s in involved if s.resigned]
                if resigned:  # no entry of a partition sequenced elsewhere now
                    self._roll_back(NotLeaderOrFollowerError(_UNCONFIRMED), resigned)
                    taken = [(s, group) for s, group in taken if not s.resigned]
                    involved = [s for s, _ in taken]
                    entries = tuple(e for _, group in taken for e in group)
                    if not entries:
                        continue
                batch = CommitBatch(self.chain.chain, self.next_slot, uuid.uuid4().hex, self._clock_ms(), entries)
                try:
                    landed = await self._run_blocking(self.chain.append, batch)
                except Exception as exc:  # noqa: BLE001 - the bucket: fail this slot's writers
                    _log.warning("diskless commit slot %d of chain %s failed: %s", batch.slot, self.chain.chain, exc)
                    self._roll_back(KafkaStorageError(f"the commit of a diskless produce failed: {exc}"), involved)
                    continue
                if not landed:
                    self.broken = (f"slot {batch.slot} of diskless commit chain {self.chain.chain} was written "
                                   "by another process: this broker stops sequencing")
                    _log.error("%s", self.broken)
                    self._roll_back(NotLeaderOrFollowerError(self.broken), [*involved, *self._dirty.values()])
                    return
                self.next_slot += 1
                self.slots_written += 1
                answer = None if self._may_answer() else NotLeaderOrFollowerError(
                    f"{_UNCONFIRMED} (the commit is kept: it answers with these offsets)")
                for sequence, group in taken:
                    sequence.made_durable(group)
                    for entry in group:
                        self._resolve(entry, answer if not sequence.resigned else NotLeaderOrFollowerError(
                            f"{sequence.name} was resigned while its commit was written: propose again"))
        finally:
            self._writing = None

    def _roll_back(self, error: KafkaError, sequences: list[PartitionSequence]) -> None:
        """``sequences`` (those of a slot not written, whether still led here or not) drop
        every entry not durable; their writers get ``error``. Other partitions' entries do
        not follow these offsets and wait for the next slot."""
        doomed: list[CommitEntry] = []
        for sequence in {id(s): s for s in sequences}.values():
            doomed.extend(sequence.roll_back())
            self._dirty.pop(id(sequence), None)
        for entry in doomed:
            self._resolve(entry, error)

    def _resolve(self, entry: CommitEntry, error: KafkaError | None) -> None:
        for future in self._waiters.pop(id(entry), (entry, []))[1]:
            if future.done():
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
