"""Incremental fetch sessions (KIP-227): the broker remembers what a consumer fetches.

A consumer of many partitions would otherwise send every partition in every
Fetch and get every partition back, changed or not. With a session, the broker
keeps the partition list (and each partition's fetch offset and limits); later
requests carry only the partitions whose fetch position changed, plus the ones
to forget, and responses carry only the partitions with records, an error, or a
new high watermark or log start offset. Kafka's ``FetchSession.scala`` is the
reference; the rules, by the request's ``(session_id, session_epoch)``:

* ``(0, -1)``: a full fetch without a session (what clients send when sessions
  are off, or before Fetch v7);
* ``(any, 0)``: a full fetch that closes the given session, if any, and asks for
  a new one; the response carries its id (or 0 when the cache has no room);
* ``(id, -1)``: a full fetch that closes session ``id``, with no new one;
* ``(id, n > 0)``: an incremental fetch; an unknown id is
  FETCH_SESSION_ID_NOT_FOUND, an epoch other than the session's expected one is
  INVALID_FETCH_SESSION_EPOCH (both with no partitions); epochs wrap to 1.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions.
When full, a new session may evict one that has been unused for 2 minutes
(Kafka's ``MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``), else the least valuable
one created over 2 minutes ago if the new one has more partitions (followers'
sessions are privileged: only a follower may evict them before that).

Sessions live in memory only: a restarted broker answers FETCH_SESSION_ID_NOT_FOUND
and the client starts a new session with a full fetch. Nothing here does I/O.
Not thread-safe: used on the event loop only.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from common.errors import ErrorCode
from fetch.planner import PartitionData, PartitionFetch

__all__ = [
    "EVICTION_MS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "Kind",
    "next_epoch",
]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
_INT32_MAX = 2**31 - 1

TopicPartition = tuple[str, int]


def next_epoch(epoch: int) -> int:
    """Kafka's ``FetchMetadata.nextEpoch``: +1, wrapping to 1; a final epoch stays final."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the client's last request for it, our last answer."""

    request: PartitionFetch
    high_watermark: int = -1
    log_start_offset: int = -1

    def would_respond(self, data: PartitionData) -> bool:
        """Whether ``data`` goes in an incremental response (nothing noted)."""
        return (data.size > 0 or data.error_code != ErrorCode.none
                or data.diverging_epoch is not None or data.preferred_read_replica >= 0
                or data.high_watermark != self.high_watermark
                or data.log_start_offset != self.log_start_offset)

    def must_respond(self, data: PartitionData) -> bool:
        """Whether ``data`` goes in an incremental response; records what was answered."""
        changed = self.would_respond(data)
        self.high_watermark = data.high_watermark
        self.log_start_offset = data.log_start_offset
        if data.error_code != ErrorCode.none:
            self.high_watermark = -1  # so the partition is sent again once the error clears
        return changed


@dataclass(slots=True)
class FetchSession:
    """A session's partitions in fetch order (partitions that returned records move last).

    ``epoch`` is the epoch the next incremental request must carry.
    """

    id: int
    privileged: bool
    partitions: dict[TopicPartition, CachedPartition]
    creation_ms: int
    last_used_ms: int
    epoch: int
    #: what the broker keeps beside the session (a follower's :class:`fetch.waiter.Watch`),
    #: closed when the session ends
    attached: Any = None

    def requests(self) -> list[PartitionFetch]:
        return [cached.request for cached in self.partitions.values()]

    def update(self, fetches: Iterable[PartitionFetch], forgotten: Iterable[TopicPartition]) -> None:
        """Add or update the partitions the request names; drop the forgotten ones."""
        partitions = self.partitions
        for f in fetches:
            cached = partitions.get((f.topic, f.partition))
            if cached is None:
                partitions[(f.topic, f.partition)] = CachedPartition(f)
            else:
                cached.request = f
        for tp in forgotten:
            partitions.pop(tp, None)

    def close(self) -> None:
        if self.attached is not None:
            self.attached.close()
            self.attached = None

    def _evictable_key(self) -> tuple[bool, int, int]:
        return self.privileged, len(self.partitions), self.id


class Kind(Enum):
    SESSIONLESS = "sessionless"  # full fetch, no session wanted
    FULL = "full"  # full fetch that asks for a new session
    INCREMENTAL = "incremental"
    ERROR = "error"


@dataclass(slots=True)
class FetchContext:
    """What one Fetch request is, in session terms; built by :meth:`FetchSessionCache.new_context`."""

    kind: Kind
    partitions: list[PartitionFetch]
    request_epoch: int = FINAL_EPOCH
    session: FetchSession | None = None
    error: ErrorCode = ErrorCode.none
    privileged: bool = False


class FetchSessionCache:
    """Every fetch session of this broker, bounded by ``max_entries`` (see the module)."""

    def __init__(
        self,
        max_entries: int,
        *,
        eviction_ms: int = EVICTION_MS,
        clock_ms: Callable[[], int] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._clock = clock_ms or (lambda: int(time.monotonic() * 1000))
        self._rng = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self.incremental_fetches = 0

    # -- inspection ---------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def cached_partitions(self) -> int:
        return sum(len(s.partitions) for s in self._sessions.values())

    # -- a request ------------------------------------------------------------------

    def new_context(
        self,
        session_id: int,
        epoch: int,
        fetches: list[PartitionFetch],
        forgotten: Sequence[TopicPartition],
        *,
        privileged: bool = False,
        listed: bool = True,
    ) -> FetchContext:
        """Classify a Fetch request (Kafka's ``FetchManager.newContext``). ``listed``:
        an incremental context lists the session's partitions (a reader that tracks
        what changed itself, a follower's, does without that walk of the session)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            # a full fetch closes the session it names, if any
            self._drop(session_id)
            kind = Kind.SESSIONLESS if epoch == FINAL_EPOCH else Kind.FULL
            return FetchContext(kind, fetches, epoch, privileged=privileged)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(Kind.ERROR, [], epoch, error=ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext(Kind.ERROR, [], epoch, error=ErrorCode.invalid_fetch_session_epoch)
        session.update(fetches, forgotten)
        if not session.partitions:
            self._drop(session.id)  # nothing left to fetch: the session ends
            return FetchContext(Kind.SESSIONLESS, fetches, epoch)
        session.last_used_ms = self._clock()
        session.epoch = next_epoch(session.epoch)
        self.incremental_fetches += 1
        return FetchContext(Kind.INCREMENTAL, session.requests() if listed else [], epoch, session=session)

    def respond(
        self, ctx: FetchContext, data: list[PartitionData]
    ) -> tuple[ErrorCode, int, list[PartitionData]]:
        """``(error, session id, partitions to send)`` for the read ``data`` of ``ctx``."""
        if ctx.kind is Kind.SESSIONLESS:
            return ErrorCode.none, INVALID_SESSION_ID, data
        if ctx.kind is Kind.ERROR:
            return ctx.error, INVALID_SESSION_ID, []
        if ctx.kind is Kind.FULL:
            return ErrorCode.none, self._maybe_create(ctx, data), data
        session = ctx.session
        assert session is not None
        if session.epoch != next_epoch(ctx.request_epoch):  # a duplicate raced this one
            return ErrorCode.invalid_fetch_session_epoch, session.id, []
        out = []
        partitions = session.partitions
        for d in data:
            key = (d.topic, d.partition)
            cached = partitions.get(key)
            if cached is None or not cached.must_respond(d):
                continue
            out.append(d)
            if d.size > 0:  # fairness: partitions that got records are read last next time
                partitions[key] = partitions.pop(key)
        return ErrorCode.none, session.id, out

    # -- the cache ------------------------------------------------------------------

    def _maybe_create(self, ctx: FetchContext, data: Sequence[PartitionData]) -> int:
        now = self._clock()
        size = len(ctx.partitions)
        if len(self._sessions) >= self.max_entries and not self._try_evict(ctx.privileged, size, now):
            return INVALID_SESSION_ID
        partitions: dict[TopicPartition, CachedPartition] = {}
        answered = {(d.topic, d.partition): d for d in data}
        for f in ctx.partitions:
            d = answered.get((f.topic, f.partition))
            partitions[(f.topic, f.partition)] = CachedPartition(
                f,
                d.high_watermark if d is not None and d.error_code == ErrorCode.none else -1,
                d.log_start_offset if d is not None else -1,
            )
        session = FetchSession(
            self._new_id(), ctx.privileged, partitions, now, now, next_epoch(INITIAL_EPOCH)
        )
        self._sessions[session.id] = session
        return session.id

    def _new_id(self) -> int:
        while True:
            candidate = self._rng.randint(1, _INT32_MAX)
            if candidate not in self._sessions:
                return candidate

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's ``tryEvict``: a stale session, else a less valuable old one."""
        if not self._sessions:
            return False
        stale = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stale.last_used_ms > self.eviction_ms:
            self._evict(stale)
            return True
        old = [s for s in self._sessions.values() if now - s.creation_ms > self.eviction_ms]
        if privileged:
            old += [
                s for s in self._sessions.values()
                if not s.privileged and now - s.creation_ms <= self.eviction_ms
            ]
        if not old:
            return False
        weakest = min(old, key=FetchSession._evictable_key)
        if (privileged, size, 0) < weakest._evictable_key():
            return False
        self._evict(weakest)
        return True

    def _evict(self, session: FetchSession) -> None:
        self._drop(session.id)
        self.evictions += 1

    def _drop(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def close(self) -> None:
        """Every session ends (the broker stops)."""
        for session_id in list(self._sessions):
            self._drop(session_id)
