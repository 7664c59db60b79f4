"""A broker's write-ahead objects of diskless topics: :class:`WalWriter`.

ADR 0027, sections 2 and 3. Produced batches of any diskless partition, from any
connection, go into the broker's one open object; it closes ``diskless.batch.ms`` after
its first batch or once it holds ``diskless.batch.bytes``, goes to the bucket with one PUT
(on a blocking-I/O thread), and only then is each batch proposed to its partition's
sequencer (``propose``: this broker's own, or another's over the wire). A batch's
:meth:`WalWriter.write` returns its committed entry (offsets) or raises the Kafka error
that refused it. A PUT that fails fails the object's batches (KAFKA_STORAGE_ERROR,
retriable); commits not finished within ``diskless.commit.deadline.ms`` of the object's
close (the time in its key) fail with REQUEST_TIMED_OUT, so a late commit can never
reference an object the collector may already have deleted.

At most ``max_inflight`` objects (``diskless.max.inflight.objects``) are between their
close and their producers' answers. While that many are, the open object does not close
(it keeps filling up to ``diskless.batch.bytes``), and once it is full further batches
wait, in arrival order (a partition's batches keep their order): a slow bucket bounds
what the broker buffers at (``max_inflight`` + 1) objects, and the producers feel it as
slower answers. A batch that waits in the queue longer than the commit deadline leaves it
and fails with KAFKA_STORAGE_ERROR (retriable), as do the batches of an object held open
that long; none of them is written.

Not thread-safe: the event loop owns it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from common.errors import KafkaError, KafkaStorageError, RequestTimedOutError
from common.record.batch import BatchHeader
from remote_tier.diskless.commits import CommitEntry
from remote_tier.diskless.wal import WalKey, WalObjectBuilder
from service.diskless.reader import WalCache
from service.diskless.sequence import Proposal

__all__ = ["Propose", "WalWriter"]

_log = logging.getLogger("strata.diskless")

#: proposals to the sequencers, an entry or the error for each, in order
Propose = Callable[[Sequence[Proposal]], Awaitable[Sequence[CommitEntry | KafkaError]]]


@dataclass(slots=True)
class _Open:
    """The object being filled: its builder and each batch's waiter; its key once it closes."""

    #: done once this object's proposals are issued (or will never be): the next object's wait
    issued: asyncio.Future[None]
    #: named when it closes: the commit deadline counts from then, not from its first batch
    key: WalKey | None = None
    builder: WalObjectBuilder = field(default_factory=WalObjectBuilder)
    batches: list[tuple[uuid.UUID, int, int, BatchHeader, asyncio.Future[CommitEntry]]] = field(
        default_factory=list)  # topic id, partition, leader epoch, header, waiter
    timer: asyncio.TimerHandle | None = None
    due: bool = False  # its time came while the objects in flight were at the bound
    #: held open at the bound: its batches fail once it has waited a whole commit deadline
    abandon: asyncio.TimerHandle | None = None


#: a batch waiting for room: topic id, partition, leader epoch, bytes, header, waiter
_Waiting = tuple[uuid.UUID, int, int, bytes, BatchHeader, "asyncio.Future[CommitEntry]"]


@dataclass(slots=True)
class _Queued:
    """A batch in the queue, and the timer that fails it at the commit deadline."""

    item: _Waiting
    timer: asyncio.TimerHandle | None = None


class WalWriter:
    """See the module docstring. ``put(key, data)`` runs the PUT off the loop."""

    def __init__(self, prefix: str, broker_id: int, put: Callable[[str, bytes], Awaitable[object]],
                 propose: Propose, *, batch_ms: int, batch_bytes: int, commit_deadline_ms: int,
                 max_inflight: int = 4, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 cache: WalCache | None = None) -> None:
        self._prefix = prefix
        self._cache = cache  # the objects written go in: this broker's reads of them need no GET
        self._broker_id = broker_id
        self._put = put
        self._propose = propose
        self._batch_s = batch_ms / 1000
        self._batch_bytes = batch_bytes
        self._deadline_ms = commit_deadline_ms
        self._max_inflight = max(1, max_inflight)
        self.inflight = 0  # objects closed whose producers are not all answered
        self._waiting: deque[_Queued] = deque()
        self._clock_ms = clock_ms
        self._open: _Open | None = None
        self._last_issued: asyncio.Future[None] | None = None  # the newest closed object's
        self._tasks: set[asyncio.Task[None]] = set()
        self.objects_written = 0
        self.bytes_written = 0

    def write(self, topic_id: uuid.UUID, partition: int, leader_epoch: int, batch: bytes,
              header: BatchHeader) -> Awaitable[CommitEntry]:
        """Add one validated batch (its bytes as produced) to the open object, or queue it
        while the open object is full and the objects in flight are at the bound."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[CommitEntry] = loop.create_future()
        item = (topic_id, partition, leader_epoch, batch, header, waiter)
        if self._waiting or self._stuck():
            queued = _Queued(item)
            queued.timer = loop.call_later(self._deadline_ms / 1000, self._expire, queued)
            self._waiting.append(queued)
        else:
            self._add(item)
        return waiter

    @property
    def waiting(self) -> int:
        """Batches waiting for room (the bucket is slower than the producers)."""
        return len(self._waiting)

    def _stuck(self) -> bool:
        """The open object is full and cannot close: as many objects are in flight as allowed."""
        return self._open is not None and self._open.builder.size >= self._batch_bytes

    def _add(self, item: _Waiting) -> None:
        topic_id, partition, leader_epoch, batch, header, waiter = item
        current = self._open
        if current is None:
            loop = asyncio.get_running_loop()
            current = self._open = _Open(loop.create_future())
            current.timer = loop.call_later(self._batch_s, self._close, current)
        current.builder.add(topic_id, partition, batch)
        current.batches.append((topic_id, partition, leader_epoch, header, waiter))
        if current.builder.size >= self._batch_bytes:
            self._close(current)

    def _stalled(self) -> KafkaStorageError:
        return KafkaStorageError(
            f"the bucket has not taken this broker's diskless writes for {self._deadline_ms} ms "
            f"({self._max_inflight} objects in flight, diskless.max.inflight.objects): produce again")

    def _expire(self, queued: _Queued) -> None:
        """A queued batch's deadline: out of the queue (its bytes with it), its producer told."""
        try:
            self._waiting.remove(queued)
        except ValueError:
            return  # admitted meanwhile
        waiter = queued.item[5]
        if not waiter.done():
            waiter.set_exception(self._stalled())

    def _abandon(self, held: _Open) -> None:
        """An object held open at the bound for a whole commit deadline: nothing of it is
        written; its batches fail as queued ones do."""
        if self._open is not held:
            return
        self._open = None
        if held.timer is not None:
            held.timer.cancel()
        self._fail(held.batches, self._stalled())
        self._admit()

    def _admit(self) -> None:
        """An object in flight was answered: close the open one if it was due, then let
        waiting batches in while there is room."""
        current = self._open
        if current is not None and (current.due or current.builder.size >= self._batch_bytes):
            self._close(current)
        while self._waiting and not self._stuck():
            queued = self._waiting.popleft()
            if queued.timer is not None:
                queued.timer.cancel()
            if not queued.item[5].done():
                self._add(queued.item)

    def _close(self, closing: _Open) -> None:
        if self._open is not closing:
            return  # closed already (full before its timer)
        if self.inflight >= self._max_inflight:
            if not closing.due:  # closes when an object in flight is answered (_admit)
                closing.due = True
                closing.abandon = asyncio.get_running_loop().call_later(
                    self._deadline_ms / 1000, self._abandon, closing)
            return
        self._open = None
        self.inflight += 1
        if closing.abandon is not None:
            closing.abandon.cancel()
        closing.key = WalKey.new(self._prefix, self._broker_id, self._clock_ms())
        if closing.timer is not None:
            closing.timer.cancel()
        previous, self._last_issued = self._last_issued, closing.issued
        task = asyncio.get_running_loop().create_task(self._flush(closing, previous))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush(self, obj: _Open, previous: asyncio.Future[None] | None) -> None:
        """PUT the object (PUTs of several objects overlap), then propose its batches, but
        never before the previous object's were proposed: a partition's batches from one
        producer keep their order, as on a classic leader."""
        try:
            await self._write_and_propose(obj, previous)
        finally:
            if not obj.issued.done():
                obj.issued.set_result(None)
            self.inflight -= 1
            self._admit()

    async def _write_and_propose(self, obj: _Open, previous: asyncio.Future[None] | None) -> None:
        assert obj.key is not None  # named by _close
        key = obj.key
        data, _, positions = obj.builder.build()
        try:
            await self._put(key.key, data)
        except Exception as exc:  # noqa: BLE001 - the bucket: every batch of the object fails
            _log.warning("diskless write-ahead object %s not written: %s", key.key, exc)
            self._fail(obj.batches, KafkaStorageError(f"the bucket refused a diskless write: {exc}"))
            return
        if previous is not None:
            await asyncio.shield(previous)
        self.objects_written += 1
        self.bytes_written += len(data)
        if self._cache is not None:
            self._cache.put(key.key, data)
        proposals = [
            Proposal(topic_id, partition, epoch, key.key, position, header.size, header.last_offset_delta + 1,
                     header.max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence,
                     header.is_transactional)
            for (topic_id, partition, epoch, header, _), position in zip(obj.batches, positions, strict=True)]
        left_s = (key.created_ms + self._deadline_ms - self._clock_ms()) / 1000
        proposing = asyncio.ensure_future(self._propose(proposals))  # runs before the next object's
        obj.issued.set_result(None)
        try:
            answers = await asyncio.wait_for(proposing, max(0.0, left_s))
        except (asyncio.TimeoutError, TimeoutError):
            self._fail(obj.batches, RequestTimedOutError(
                f"the commit of a diskless write did not finish within {self._deadline_ms} ms"))
            return
        except KafkaError as exc:
            self._fail(obj.batches, exc)
            return
        except Exception as exc:  # noqa: BLE001 - a peer's connection, a bug: never leave a producer waiting
            _log.warning("diskless commit of %s failed: %r", key.key, exc)
            self._fail(obj.batches, KafkaStorageError(f"the commit of a diskless write failed: {exc!r}"))
            return
        if len(answers) != len(obj.batches):
            self._fail(obj.batches, KafkaStorageError(
                f"the sequencers answered {len(answers)} of {len(obj.batches)} batches"))
            return
        for (*_, waiter), answer in zip(obj.batches, answers, strict=True):
            if waiter.done():
                continue
            if isinstance(answer, KafkaError):
                waiter.set_exception(answer)
            else:
                waiter.set_result(answer)

    @staticmethod
    def _fail(batches: list, error: KafkaError) -> None:  # type: ignore[type-arg]
        for *_, waiter in batches:
            if not waiter.done():
                waiter.set_exception(error)

    async def close(self) -> None:
        """Write what is open or waiting and wait for every object in flight (a clean stop)."""
        while True:
            if self._open is not None:
                self._open.due = True
                self._close(self._open)
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            elif self._open is None and self.waiting:
                self._admit()
            elif self._open is None:
                return
