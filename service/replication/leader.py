"""The leader's side of a follower's Fetch: :func:`read_for_follower`.

A Fetch with ``replica_id`` >= 0 comes from a follower (Kafka's replica fetch):

* each partition is checked before anything is noted
  (:meth:`ReplicaManager.record_follower_fetch`): the leader epoch; the
  follower's last fetched epoch against this leader's history, so a follower
  whose log diverged is answered with the epoch and end offset to truncate to
  (Fetch v12 ``diverging_epoch``, KIP-320) and is neither sent records nor
  counted; a fetch offset beyond this leader's log end is
  ``OFFSET_OUT_OF_RANGE``;
* then the fetch offset, the follower's log end offset, is recorded: the high
  watermark may move (producers waiting for ``acks=all`` wake), a caught-up
  replica may be proposed for the ISR;
* records are read up to the leader's *log end offset*, not the high watermark
  (a consumer's limit), from local segments only: an offset below the leader's
  local log start answers ``OFFSET_MOVED_TO_TIERED_STORAGE`` (the follower starts
  after what the bucket holds instead, KIP-405), never a read from the bucket;
* like a consumer's, the fetch long-polls until ``min_bytes`` or ``max_wait``.

A follower may hold an incremental fetch session (KIP-227, as Kafka's replica fetchers
do): after the full fetch that opens it, a request names only the partitions whose fetch
position changed, and the answer carries only those with records, an error, or a new high
watermark or log start. The session's :class:`fetch.waiter.Watch` collects the partitions
that changed here (an append, a high watermark, a leadership, a log start) and those an
answer had no room for, so a request reads the partitions it names and the touched ones,
never the whole session: an idle follower of 10,000 partitions costs its leader the same as
one of ten. The watch is on before the full fetch that opens the session is read, and that
read, like every read of many partitions, gives the loop a turn every
:data:`~fetch.planner.PARTITIONS_PER_TURN` partitions.

The response is encoded by the same code as a consumer's (sendfile of file
regions). Not thread-safe: the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from common.errors import ErrorCode, KafkaError
from fetch.planner import PARTITIONS_PER_TURN, PartitionData, PartitionFetch
from fetch.sessions import FINAL_EPOCH, INVALID_SESSION_ID, FetchSessionCache, Kind
from fetch.waiter import AppendWaiters, Watch
from service.replication.replica_manager import FollowerFetch, ReplicaManager

__all__ = ["FollowerAnswer", "LeaderHost", "read_for_follower"]

TopicPartition = tuple[str, int]
Wanted = list[tuple[FollowerFetch, int]]  # each partition with its partition_max_bytes


class LeaderHost(Protocol):
    """What the leader's side of a follower fetch needs of the broker."""

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def waiters(self) -> AppendWaiters: ...

    @property
    def fetch_max_bytes(self) -> int: ...

    @property
    def fetch_sessions(self) -> FetchSessionCache: ...


@dataclass(slots=True)
class FollowerAnswer:
    """The partitions to send, the top-level error and the session id of the response."""

    partitions: list[PartitionData]
    error_code: ErrorCode = ErrorCode.none
    session_id: int = INVALID_SESSION_ID


@dataclass(slots=True)
class _SessionState:
    """What a follower's session holds beside the generic one: each partition's last
    fetch as the follower sent it, and the watch of the partitions touched here."""

    watch: Watch
    fetches: dict[TopicPartition, tuple[FollowerFetch, int]] = field(default_factory=dict)

    def update(self, wanted: Wanted, forgotten: list[TopicPartition]) -> None:
        for fetch, partition_max in wanted:
            self.fetches[(fetch.topic, fetch.partition)] = (fetch, partition_max)
        for key in forgotten:
            self.fetches.pop(key, None)
        self.watch.add((f.topic, f.partition) for f, _ in wanted)
        self.watch.remove(forgotten)

    def close(self) -> None:
        self.watch.close()


def _fetches(request: Any, replica_id: int) -> list[tuple[FollowerFetch, int]]:
    """Each partition of the request, with its ``partition_max_bytes``."""
    state = getattr(request, "replica_state", None)  # v15+
    broker_epoch = int(getattr(state, "replica_epoch", -1)) if state is not None else -1
    return [
        (
            FollowerFetch(
                t.topic,
                int(p.partition),
                replica_id,
                int(p.fetch_offset),
                int(getattr(p, "current_leader_epoch", -1)),
                int(getattr(p, "last_fetched_epoch", -1)),
                int(getattr(p, "log_start_offset", -1)),
                broker_epoch,
                getattr(t, "topic_id", None),  # v13+
            ),
            int(p.partition_max_bytes),
        )
        for t in request.topics
        for p in t.partitions
    ]


async def read_for_follower(
    broker: LeaderHost, request: Any, replica_id: int, max_wait_ms: int
) -> FollowerAnswer:
    """The answer to a follower's Fetch (see the module docstring)."""
    replicas = broker.replicas
    replicas.note_follower_request(replica_id)
    wanted = _fetches(request, replica_id)
    session_id = int(getattr(request, "session_id", INVALID_SESSION_ID))  # v7+
    epoch = int(getattr(request, "session_epoch", FINAL_EPOCH))
    if session_id == INVALID_SESSION_ID and epoch == FINAL_EPOCH:
        watch = _watching(broker, wanted)
        try:
            return FollowerAnswer((await _read_all(broker, request, wanted, max_wait_ms, watch))[0])
        finally:
            watch.close()
    forgotten = [(t.topic, int(p)) for t in getattr(request, "forgotten_topics_data", ()) for p in t.partitions]
    cache = broker.fetch_sessions
    ctx = cache.new_context(session_id, epoch, [_as_partition_fetch(f, m) for f, m in wanted], forgotten,
                            privileged=True, listed=False)
    if ctx.kind is Kind.ERROR:
        return FollowerAnswer([], ctx.error)
    if ctx.kind is not Kind.INCREMENTAL:
        # the session's watch is on before the read, which gives the loop turns: what is
        # touched meanwhile, and what had no room in this answer, is read in the next ones
        watch = _watching(broker, wanted)
        try:
            data, skipped = await _read_all(broker, request, wanted, max_wait_ms, watch)
            error, new_id, data = cache.respond(ctx, data)
        except BaseException:
            watch.close()
            raise
        session = cache.get(new_id) if new_id != INVALID_SESSION_ID else None
        if session is None:
            watch.close()
        else:
            for key in skipped:
                watch.mark(key)
            state = _SessionState(watch)
            state.update(wanted, [])
            session.attached = state
        return FollowerAnswer(data, error, new_id)
    session = ctx.session
    assert session is not None
    state = session.attached
    if not isinstance(state, _SessionState):  # a session a consumer opened: read all of it once
        state = session.attached = _SessionState(broker.waiters.watch())
        state.update([(_from_partition_fetch(f, replica_id), f.max_bytes) for f in session.requests()], [])
        state.watch.dirty.update(state.fetches)
    state.update(wanted, forgotten)
    data = await _read_session(broker, request, state, wanted, max_wait_ms, session.partitions)
    error, _, data = cache.respond(ctx, data)
    return FollowerAnswer(data, error, session.id)


def _watching(broker: LeaderHost, wanted: Wanted) -> Watch:
    watch = broker.waiters.watch()
    watch.add((f.topic, f.partition) for f, _ in wanted)
    return watch


async def _read_all(
    broker: LeaderHost, request: Any, wanted: Wanted, max_wait_ms: int, watch: Watch
) -> tuple[list[PartitionData], list[TopicPartition]]:
    """Every partition the request names (a full fetch), and those left unread for lack of
    room; long-polls on ``watch``, which holds them all."""
    replicas = broker.replicas
    answered = await _record_in_turns(replicas, [f for f, _ in wanted])
    max_bytes = min(int(getattr(request, "max_bytes", 2**31 - 1)), broker.fetch_max_bytes)
    min_bytes = int(request.min_bytes)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    woken = False
    while True:
        watch.take()  # what is touched from here on wakes the wait below at once
        data, total, skipped = await _read_in_turns(replicas, wanted, answered, max_bytes)
        if answered or skipped or total >= min_bytes or max_wait_ms <= 0:
            return data, skipped
        if woken and any(d.error_code != ErrorCode.none for d in data):
            return data, skipped
        if not await watch.wait(deadline - loop.time()):  # nothing touched: read as it was
            return data, skipped
        woken = True


async def _read_session(
    broker: LeaderHost, request: Any, state: _SessionState, wanted: Wanted, max_wait_ms: int,
    cached: Any,
) -> list[PartitionData]:
    """An incremental fetch: the partitions the request names and those touched since the
    last one; long-polls on the session's watch while none of them has anything to say."""
    replicas = broker.replicas
    max_bytes = min(int(getattr(request, "max_bytes", 2**31 - 1)), broker.fetch_max_bytes)
    min_bytes = int(request.min_bytes)
    named = {(f.topic, f.partition) for f, _ in wanted}
    touched = [state.fetches[key] for key in state.watch.take() if key not in named and key in state.fetches]
    # a touched partition is fetched again from where the follower stands (Kafka's fetch of
    # every session partition): its high watermark may now admit it to the ISR
    answered = await _record_in_turns(replicas, [f for f, _ in wanted + touched])
    out: dict[TopicPartition, PartitionData] = {}
    total = _merge(state, out, *await _read_in_turns(replicas, wanted + touched, answered, max_bytes))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    while (not answered and total < min_bytes and max_wait_ms > 0
           and not any(_says_something(d, cached) for d in out.values())):
        if not await state.watch.wait(deadline - loop.time()):
            break
        touched = [state.fetches[key] for key in state.watch.take() if key in state.fetches]
        answered.update(await _record_in_turns(replicas, [f for f, _ in touched]))
        data, total, skipped = await _read_in_turns(replicas, touched, answered, max_bytes, total)
        _merge(state, out, data, total, skipped)
        if skipped:  # no room left: answer now (the watch holds them for the next fetch)
            break
    return list(out.values())


def _merge(state: _SessionState, out: dict[TopicPartition, PartitionData], data: list[PartitionData],
           total: int, skipped: list[TopicPartition]) -> int:
    for d in data:
        out[(d.topic, d.partition)] = d
    for key in skipped:  # no room in this response: read again next time
        state.watch.mark(key)
    return total


def _says_something(data: PartitionData, cached: Any) -> bool:
    """Whether ``data`` would go in the incremental response (without noting it)."""
    entry = cached.get((data.topic, data.partition))
    return entry is not None and entry.would_respond(data)


def _as_partition_fetch(fetch: FollowerFetch, partition_max: int) -> PartitionFetch:
    return PartitionFetch(fetch.topic, fetch.partition, fetch.fetch_offset, partition_max,
                          fetch.current_leader_epoch)


def _from_partition_fetch(fetch: PartitionFetch, replica_id: int) -> FollowerFetch:
    return FollowerFetch(fetch.topic, fetch.partition, replica_id, fetch.fetch_offset,
                         fetch.current_leader_epoch)


def _record(
    replicas: ReplicaManager, fetches: Sequence[FollowerFetch]
) -> dict[TopicPartition, KafkaError | tuple[int, int]]:
    """Note each fetch; the partitions answered without a read (an error, or where the
    follower diverged)."""
    answered: dict[TopicPartition, KafkaError | tuple[int, int]] = {}
    for fetch in fetches:
        key = (fetch.topic, fetch.partition)
        try:
            diverging = replicas.record_follower_fetch(fetch)
        except KafkaError as exc:
            answered[key] = exc
            continue
        if diverging is not None:
            answered[key] = diverging
    return answered


async def _record_in_turns(
    replicas: ReplicaManager, fetches: list[FollowerFetch]
) -> dict[TopicPartition, KafkaError | tuple[int, int]]:
    """:func:`_record`, :data:`PARTITIONS_PER_TURN` a turn of the loop."""
    answered: dict[TopicPartition, KafkaError | tuple[int, int]] = {}
    for start in range(0, len(fetches), PARTITIONS_PER_TURN):
        if start:
            await asyncio.sleep(0)
        answered.update(_record(replicas, fetches[start:start + PARTITIONS_PER_TURN]))
    return answered


async def _read_in_turns(
    replicas: ReplicaManager, wanted: Wanted, answered: dict[TopicPartition, KafkaError | tuple[int, int]],
    max_bytes: int, already: int = 0,
) -> tuple[list[PartitionData], int, list[TopicPartition]]:
    """:func:`_read`, :data:`PARTITIONS_PER_TURN` a turn of the loop: a follower's first
    fetch of 3,000 partitions held it 120-170 ms in one go (bench/follower_fetch_hold.py)."""
    out: list[PartitionData] = []
    skipped: list[TopicPartition] = []
    total = already
    for start in range(0, len(wanted), PARTITIONS_PER_TURN):
        if start:
            await asyncio.sleep(0)
        data, total, left = _read(replicas, wanted[start:start + PARTITIONS_PER_TURN], answered, max_bytes, total)
        out += data
        skipped += left
    return out, total, skipped


def _read(
    replicas: ReplicaManager, wanted: Sequence[tuple[FollowerFetch, int]], answered: dict[TopicPartition, KafkaError | tuple[int, int]],
    max_bytes: int, already: int,
) -> tuple[list[PartitionData], int, list[TopicPartition]]:
    """The partitions' records up to the log end, at most ``max_bytes`` in all with the
    ``already`` taken; the bytes then taken, and the partitions left unread for lack of room."""
    out: list[PartitionData] = []
    skipped: list[TopicPartition] = []
    total = already
    for fetch, partition_max in wanted:
        data = PartitionData(fetch.topic, fetch.partition)
        early = answered.get((fetch.topic, fetch.partition))
        try:
            log = replicas.get_partition(fetch.topic, fetch.partition).check_leader(
                fetch.current_leader_epoch, follower=True
            )
            data.high_watermark = log.high_watermark
            data.last_stable_offset = log.high_watermark
            data.log_start_offset = log.log_start_offset
            if isinstance(early, KafkaError):
                raise early
            if early is not None:
                data.diverging_epoch = early
                out.append(data)
                continue
            offset = fetch.fetch_offset
            if offset < log.log_start_offset and log.config.remote_storage_enable:
                data.error_code = ErrorCode.offset_moved_to_tiered_storage
                out.append(data)
                continue
            budget = min(partition_max, max_bytes - total)
            if budget <= 0 and total > 0:
                if offset < log.log_end_offset:
                    skipped.append((fetch.topic, fetch.partition))
                out.append(data)
                continue
            info = log.read(offset, max(budget, 0), max_offset=log.log_end_offset,
                            min_one_message=total == 0)
            if not info.size and total and offset < log.log_end_offset:  # its next batch did not fit
                skipped.append((fetch.topic, fetch.partition))
        except KafkaError as exc:
            data.error_code, data.error_message = exc.code, exc.message
            out.append(data)
            continue
        data.regions = list(info.regions)
        data.size = info.size
        total += info.size
        out.append(data)
    return out, total, skipped
