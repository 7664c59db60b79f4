"""Followers copying from leaders: :class:`ReplicaFetcher` and :class:`ReplicaFetcherManager`.

Shaped as Kafka's ``AbstractFetcherManager`` / ``ReplicaFetcherThread``: one
fetcher per source broker (``num.replica.fetchers`` = 1), an asyncio task that
serves every partition this broker follows on that leader. Each partition goes
through three states (``PartitionFetchState``):

1. **bootstrapping** -- a new, empty replica of a tiered topic starts after what
   the bucket holds: the log is started empty at the manifest's next offset
   (KIP-405's follower from remote storage), so only the leader's untiered tail is
   copied, never the history;
2. **truncating** -- before fetching under a new leader epoch, the follower asks
   the leader where its own last epoch ends (OffsetForLeaderEpoch, KIP-101/279)
   and truncates its log there, so a diverging suffix of a deposed leader goes;
3. **fetching** -- Fetch requests with this broker's ``replica_id`` from the log
   end offset; the leader answers up to its log end and long-polls like for a
   consumer (``replica.fetch.wait.max.ms``, ``replica.fetch.min.bytes``); the
   batches are appended as they are (:meth:`local_tier.log.Log.append_as_follower`)
   and the follower's high watermark follows the leader's. The requests go in an
   incremental fetch session (:mod:`service.replication.fetch_session`, ADR 0026).

Truncation follows Kafka's rules (KIP-101/279): the leader answers where its copy
of the follower's last epoch ends; the follower cuts its log at the smaller of
that and where its own copy of the epoch the leader named ends, and asks again
when the two epochs differ (its remaining history may still diverge). A leader
that knows no epoch up to the follower's leaves the follower its high
watermark. A fetch the leader finds diverging (Fetch v12 ``diverging_epoch``)
is truncated the same way.

Errors: FENCED_LEADER_EPOCH parks the partition until the metadata names its
new leadership (the replica manager then re-adds it); OFFSET_MOVED_TO_TIERED_STORAGE
(the leader no longer holds the offset locally) bootstraps it again from the
bucket; OFFSET_OUT_OF_RANGE starts it at the leader's log start when that is
beyond its log end, else cuts it to the leader's high watermark (a follower
ahead of its leader without epochs to compare); anything else --
NOT_LEADER_OR_FOLLOWER from a leader that has not applied the same metadata yet,
UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_ID from a leader that has not read this
incarnation of the topic (Fetch v13+ names topics by id, KIP-516), a failed request --
backs off ``replica.fetch.backoff.ms`` and tries again. The follower's log start follows the leader's (DeleteRecords,
retention) on topics that are not tiered; a tiered one's follows the manifest.

Not thread-safe: the event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from common.errors import ErrorCode, KafkaError, OffsetOutOfRangeError, UnsupportedVersionError
from common.protocol.codec import build
from service.cluster.channel import PeerChannels
from service.cluster.wire import request_module
from service.replication.fetch_session import FollowerSession, TopicIds, fetch_request
from service.replication.fetch_state import PartitionFetchState, Roster, State, truncate_to_leader
from service.replication.partition import Partition

__all__ = [
    "FetcherConfig",
    "PartitionFetchState",
    "ReplicaFetcher",
    "ReplicaFetcherManager",
    "truncate_to_leader",
]

_log = logging.getLogger("strata.replication.fetcher")
_API_FETCH = 1
_API_OFFSET_FOR_LEADER_EPOCH = 23
TopicPartition = tuple[str, int]
# this follower's leader epoch is older than the leader's: the metadata will name a newer
# leadership, and the replica manager adds the partition again then (Kafka's onPartitionFenced)
_PARKING_ERRORS = {ErrorCode.fenced_leader_epoch}
_RETRY_QUIETLY = {  # the leader's metadata is behind or ahead of this broker's for a moment
    ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.unknown_topic_or_partition,
}


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    node_id: int
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    partition_max_bytes: int = 8 * 1024 * 1024  # replica.fetch.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    request_timeout_ms: int = 30_000


class RemoteStart(Protocol):
    """Where a replica starts after what the bucket holds (``remote_tier.log_manager.RemoteStart``)."""

    @property
    def offset(self) -> int: ...

    @property
    def epochs(self) -> list[tuple[int, int]]: ...

    @property
    def producer_snapshot(self) -> bytes | None: ...


class Bootstrap(Protocol):
    """Where a new replica of a tiered topic starts: after what the bucket holds, with
    that part's leader epochs and producer state (None: nothing there, start at 0).
    Blocking work runs off the loop."""

    def __call__(self, partition: Partition) -> Awaitable[RemoteStart | None]: ...


class ReplicaFetcher:
    """Copies every partition it is given from one source broker (see module docstring)."""

    def __init__(
        self,
        source_id: int,
        config: FetcherConfig,
        peers: PeerChannels,
        bootstrap: Bootstrap,
        on_appended: Callable[[Partition], None],
    ) -> None:
        self.source_id = source_id
        self._config = config
        self._peers = peers
        self._bootstrap = bootstrap
        self._on_appended = on_appended
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.fetched_bytes = 0
        self.fetch_requests = 0
        self._session = FollowerSession()
        self._roster = Roster()
        self._fetching: list[PartitionFetchState] = []  # as of the last rescan
        self._ids = TopicIds()

    def add(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        log = partition.log
        empty = log.log_end_offset == log.log_start_offset and not any(s.size for s in log.segments)
        state = State.BOOTSTRAPPING if empty else State.TRUNCATING
        self.partitions[key] = PartitionFetchState(partition, partition.leader_epoch, state, self._roster)
        self._ids.note(partition.topic, partition.topic_id)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.source_id}")

    def remove(self, keys: Iterable[TopicPartition]) -> None:
        for key in keys:
            if self.partitions.pop(key, None) is not None:
                self._roster.rescan = True

    def touch(self, key: TopicPartition) -> None:
        """The log of ``key`` changed: its fetch position may have."""
        if key in self.partitions:
            self._roster.touched.add(key)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- the loop -----------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self._do_work()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one bad round must not end replication
                _log.exception("replica fetcher for broker %d failed a round", self.source_id)
                await asyncio.sleep(self._config.backoff_ms / 1000)

    async def _do_work(self) -> None:
        now = time.monotonic()
        roster = self._roster
        if not roster.rescan and now < roster.next_ready:  # the same partitions fetch as last round
            if self._fetching:
                await self._fetch(self._fetching, rescanned=False)
            else:
                await self._idle(now)
            return
        roster.rescan = False
        self._ids.prune(lambda: {key[0] for key in self.partitions} | {key[0] for key in self._session.sent})
        fetching: list[PartitionFetchState] = []
        others: list[PartitionFetchState] = []  # bootstrapping or truncating
        next_ready = float("inf")
        for s in self.partitions.values():
            if s.state is State.PARKED:
                continue
            if s.delayed_until > now:
                next_ready = min(next_ready, s.delayed_until)
            elif s.state is State.FETCHING:
                fetching.append(s)
            else:
                others.append(s)
        roster.next_ready = next_ready
        self._fetching = fetching
        if not fetching and not others:
            await self._idle(now)
            return
        if others:
            for state in [s for s in others if s.state is State.BOOTSTRAPPING]:
                await self._start_from_bucket(state)
            truncating = [s for s in others if s.state is State.TRUNCATING]
            if truncating:
                await self._truncate(truncating)
            # those whose truncation completed fetch in this round too (the next rescans)
            fetching = [s for s in fetching + others if s.state is State.FETCHING and s.key in self.partitions]
        if fetching:
            await self._fetch(fetching, rescanned=True)

    async def _idle(self, now: float) -> None:
        self._wake.clear()
        if self._roster.rescan:
            return
        next_ready = self._roster.next_ready
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), None if next_ready == float("inf") else next_ready - now)

    def _delay(self, states: Iterable[PartitionFetchState]) -> None:
        until = time.monotonic() + self._config.backoff_ms / 1000
        for state in states:
            state.delayed_until = until

    # -- bootstrapping --------------------------------------------------------------------

    async def _start_from_bucket(self, state: PartitionFetchState) -> None:
        partition = state.partition
        try:
            start = await self._bootstrap(partition)
        except Exception as exc:  # noqa: BLE001 - retried after the backoff
            _log.warning("%s: cannot read the bucket to start the replica: %s", partition.name, exc)
            self._delay([state])
            return
        if state.key not in self.partitions:
            return
        log = partition.log
        if start is not None and start.offset > log.log_end_offset:
            log.start_from_remote(start.offset, start.epochs, start.producer_snapshot)
            _log.info("%s: the replica starts at offset %d, after the tiered part", partition.name,
                      start.offset)
        state.state = State.TRUNCATING

    # -- truncation (KIP-101/279) --------------------------------------------------------------

    async def _truncate(self, states: list[PartitionFetchState]) -> None:
        need = [s for s in states if s.partition.log.leader_epoch_cache.latest_epoch >= 0]
        for s in states:
            if s not in need:
                s.state = State.FETCHING  # an empty log has nothing to truncate
        if not need:
            return
        try:
            channel = self._peers.channel(self.source_id)
            _, answer = await channel.request(
                _API_OFFSET_FOR_LEADER_EPOCH,
                lambda v: self._epoch_request(v, need),
                timeout_s=self._config.request_timeout_ms / 1000,
            )
        except UnsupportedVersionError:  # a broker without OffsetForLeaderEpoch
            for s in need:
                s.state = State.FETCHING
            return
        except KafkaError as exc:
            _log.info("OffsetForLeaderEpoch to broker %d failed: %s", self.source_id, exc)
            self._delay(need)
            return
        by_key = {s.key: s for s in need}
        for topic in answer.topics:
            for p in topic.partitions:
                state = by_key.get((topic.topic, int(p.partition)))
                if state is None or state.key not in self.partitions:
                    continue
                code = ErrorCode(p.error_code)
                if code != ErrorCode.none:
                    self._on_error(state, code)
                    continue
                complete = truncate_to_leader(state.partition, int(p.leader_epoch), int(p.end_offset))
                state.state = State.FETCHING if complete else State.TRUNCATING

    def _epoch_request(self, version: int, states: list[PartitionFetchState]) -> Any:
        mod = request_module(_API_OFFSET_FOR_LEADER_EPOCH, version)
        topics: dict[str, list[Any]] = {}
        for s in states:
            topics.setdefault(s.partition.topic, []).append(
                build(
                    mod.OffsetForLeaderPartition,
                    partition=s.partition.index,
                    current_leader_epoch=s.leader_epoch,
                    leader_epoch=s.partition.log.leader_epoch_cache.latest_epoch,
                )
            )
        return build(
            mod.OffsetForLeaderEpochRequest,
            replica_id=self._config.node_id,
            topics=tuple(
                build(mod.OffsetForLeaderTopic, topic=t, partitions=tuple(ps)) for t, ps in topics.items()
            ),
        )

    # -- fetching ---------------------------------------------------------------------------

    async def _fetch(self, states: list[PartitionFetchState], *, rescanned: bool) -> None:
        """One Fetch for ``states``; unless ``rescanned`` (the list may differ from the last
        round's), only the partitions whose logs changed are looked at for new positions."""
        config = self._config
        session = self._session
        members = {s.key: s for s in states} if rescanned or session.members is None else session.members
        touched = self._roster.take_touched()
        plan = session.plan(members, PartitionFetchState.position, None if rescanned else touched)
        with_session: list[bool] = []  # whether the request went out with the session (v7+)

        def request(version: int) -> Any:
            with_session.append(version >= 7)
            return fetch_request(version, plan, with_session[-1], self._config, self._ids.ids)

        try:
            _, answer = await self._peers.request(
                self.source_id, _API_FETCH, request,
                timeout_s=(config.max_wait_ms + config.request_timeout_ms) / 1000,
            )
        except KafkaError as exc:
            session.failed()
            _log.info("fetch from broker %d failed: %s", self.source_id, exc)
            self._delay(states)
            return
        self.fetch_requests += 1
        error = ErrorCode(int(answer.error_code))
        if with_session and not with_session[-1]:
            session.failed()  # a peer without sessions (Fetch < v7): every request in full
        elif with_session and not session.answered(plan, error, int(getattr(answer, "session_id", 0))):
            _log.info("broker %d answered %s; starting a new fetch session", self.source_id,
                      error.name.upper())
            return  # the next round is a full fetch
        if error != ErrorCode.none:
            self._delay(states)
            return
        asked = plan.members
        names = self._ids.names
        for topic in answer.responses:
            name = topic.topic if hasattr(topic, "topic") else names.get(topic.topic_id)
            for p in topic.partitions:
                key = (name, int(p.partition_index))
                state = self.partitions.get(key)
                if state is None or key not in asked or state.state is not State.FETCHING:
                    continue  # not asked for, or removed or re-added while the fetch was in flight
                self._process(state, p)

    def _process(self, state: PartitionFetchState, data: Any) -> None:
        code = ErrorCode(data.error_code)
        partition = state.partition
        log = partition.log
        if code == ErrorCode.offset_out_of_range:
            self._out_of_range(state, int(data.log_start_offset), int(data.high_watermark))
            return
        if code != ErrorCode.none:
            self._on_error(state, code)
            return
        diverging = getattr(data, "diverging_epoch", None)
        if diverging is not None and (int(diverging.epoch) >= 0 or int(diverging.end_offset) >= 0):
            _log.info("%s: the leader finds this log diverging at epoch %d (ends at %d); truncating",
                      partition.name, int(diverging.epoch), int(diverging.end_offset))
            complete = truncate_to_leader(partition, int(diverging.epoch), int(diverging.end_offset))
            state.state = State.FETCHING if complete else State.TRUNCATING
            return
        records = data.records
        if records:
            try:
                info = log.append_as_follower(bytes(records))
            except OffsetOutOfRangeError as exc:
                _log.warning("%s: %s; truncating again", partition.name, exc)
                state.state = State.TRUNCATING
                return
            except KafkaError as exc:
                _log.warning("%s: cannot append fetched records: %s", partition.name, exc)
                self._delay([state])
                return
            if info is not None:
                self.fetched_bytes += info.size
        log.update_high_watermark(min(int(data.high_watermark), log.log_end_offset))
        leader_start = int(data.log_start_offset)
        if not log.config.remote_storage_enable and leader_start > log.log_start_offset:
            # DeleteRecords or retention moved the leader's log start: records below it
            # are gone from the partition (a tiered log follows its manifest instead)
            log.maybe_increment_log_start_offset(min(leader_start, log.high_watermark))
        self._on_appended(partition)

    def _out_of_range(self, state: PartitionFetchState, leader_start: int, leader_hw: int) -> None:
        """OFFSET_OUT_OF_RANGE (Kafka's ``handleOutOfRangeError``): below the leader's log
        start, start there (a tiered topic from the bucket); else this log is ahead of the
        leader's and had no epochs to compare: keep what the leader committed."""
        partition = state.partition
        log = partition.log
        if leader_start > log.log_end_offset:
            if log.config.remote_storage_enable:
                state.state = State.BOOTSTRAPPING
                return
            _log.warning("%s: the leader's log starts at %d, after this log's end %d; starting "
                         "there", partition.name, leader_start, log.log_end_offset)
            log.truncate_fully_and_start_at(leader_start)
        elif 0 <= leader_hw < log.log_end_offset:
            _log.warning("%s: this log ends after the leader's (high watermark %d); truncating",
                         partition.name, leader_hw)
            log.truncate_to(leader_hw)
        else:
            self._delay([state])
            return
        state.state = State.FETCHING

    def _on_error(self, state: PartitionFetchState, code: ErrorCode) -> None:
        name = state.partition.name
        if code in _PARKING_ERRORS:
            _log.info("%s: broker %d answered %s; waiting for new metadata", name, self.source_id,
                      code.name.upper())
            state.state = State.PARKED
        elif code == ErrorCode.unknown_topic_id:  # its session did not take it: named again
            _log.debug("%s: broker %d does not know this topic's id yet", name, self.source_id)
            self._session.unsend(state.key)
            self.touch(state.key)
            self._delay([state])
        elif code in _RETRY_QUIETLY:
            _log.debug("%s: broker %d answered %s; retrying", name, self.source_id, code.name.upper())
            self._delay([state])
        elif code == ErrorCode.offset_moved_to_tiered_storage:
            _log.warning("%s: broker %d answered %s; starting the replica again from the bucket",
                         name, self.source_id, code.name.upper())
            state.state = State.BOOTSTRAPPING
        else:
            _log.warning("%s: broker %d answered %s", name, self.source_id, code.name.upper())
            self._delay([state])


class ReplicaFetcherManager:
    """One :class:`ReplicaFetcher` per leader this broker follows (Kafka's
    ``ReplicaFetcherManager``); the replica manager adds and removes partitions."""

    def __init__(
        self,
        config: FetcherConfig,
        peers: PeerChannels,
        bootstrap: Bootstrap,
        on_appended: Callable[[Partition], None],
    ) -> None:
        self._config = config
        self._peers = peers
        self._bootstrap = bootstrap
        self._on_appended = on_appended
        self.fetchers: dict[int, ReplicaFetcher] = {}

    def add(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        self.remove([key])
        fetcher = self.fetchers.get(partition.leader_id)
        if fetcher is None:
            fetcher = ReplicaFetcher(
                partition.leader_id, self._config, self._peers, self._bootstrap, self._on_appended
            )
            self.fetchers[partition.leader_id] = fetcher
        fetcher.add(partition)

    def remove(self, keys: Iterable[TopicPartition]) -> None:
        keys = list(keys)
        for fetcher in self.fetchers.values():
            fetcher.remove(keys)

    def touch(self, topic: str, index: int) -> None:
        """The log of ``(topic, index)`` changed (``LogManager.change_listeners``)."""
        for fetcher in self.fetchers.values():
            fetcher.touch((topic, index))

    def state(self, topic: str, index: int) -> PartitionFetchState | None:
        for fetcher in self.fetchers.values():
            found = fetcher.partitions.get((topic, index))
            if found is not None:
                return found
        return None

    async def close(self) -> None:
        fetchers, self.fetchers = self.fetchers, {}
        for fetcher in fetchers.values():
            await fetcher.close()
