"""A follower's half of an incremental fetch session with one leader: :class:`FollowerSession`.

Kafka's replica fetchers use fetch sessions (KIP-227, its ``FetchSessionHandler``); so does
this broker's :class:`~service.replication.fetcher.ReplicaFetcher`. The first request is a
full fetch that asks for a session (epoch 0); if the leader opens one, each later request
names only the partitions whose fetch position (offset, leader epoch, last fetched epoch,
log start) changed since it was last sent, and lists as forgotten the partitions no longer
fetched (parked, backing off, moved to another leader). The leader answers only the
partitions with something to say, so an idle follower of thousands of partitions sends
and receives almost nothing.

The session starts over with a full fetch when the leader does not know it
(FETCH_SESSION_ID_NOT_FOUND: restarted, or evicted it), when the epochs disagree
(INVALID_FETCH_SESSION_EPOCH), and after any failed request (what was sent is then
unknown); a leader that opens no session (session id 0 in the answer) gets a full fetch
each time, as before sessions.

Not thread-safe: the fetcher's task on the event loop.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from common.errors import ErrorCode
from common.protocol.codec import build
from fetch.sessions import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from service.cluster.wire import request_module

__all__ = ["FetchLimits", "FetchPlan", "FollowerSession", "Position", "TopicIds", "fetch_request"]

TopicPartition = tuple[str, int]
#: what a request says of a partition: fetch offset, current leader epoch, last fetched
#: epoch and log start offset
Position = tuple[int, int, int, int]
_API_FETCH = 1
_RESTART = {ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch}


class FetchLimits(Protocol):
    """The fetcher's settings a request carries (``FetcherConfig``)."""

    @property
    def node_id(self) -> int: ...

    @property
    def max_wait_ms(self) -> int: ...

    @property
    def min_bytes(self) -> int: ...

    @property
    def max_bytes(self) -> int: ...

    @property
    def partition_max_bytes(self) -> int: ...


@dataclass(slots=True)
class FetchPlan:
    """One request: its session id and epoch, the partitions to name (with their positions)
    and to forget, and every partition it fetches (``members``: the leader's session after
    it, ``position`` of each)."""

    session_id: int
    epoch: int
    send: list[TopicPartition]
    forgotten: list[TopicPartition]
    positions: dict[TopicPartition, Position]
    members: Mapping[TopicPartition, Any]
    position: Callable[[Any], Position]

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FollowerSession:
    """See the module docstring."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        #: what the leader's session holds for each partition, as last sent
        self._sent: dict[TopicPartition, Position] = {}
        #: the partitions of the last answered request (None: the next one is full)
        self.members: Mapping[TopicPartition, Any] | None = None
        self.full_fetches = 0
        self.incremental_fetches = 0

    def plan(self, members: Mapping[TopicPartition, Any], position: Callable[[Any], Position],
             changed: Iterable[TopicPartition] | None = None) -> FetchPlan:
        """The next request for ``members``, the partitions to fetch now. ``changed``: the
        only ones whose position may differ from what was sent (the same members as the
        last request); None: look at every one."""
        if self.epoch == INITIAL_EPOCH:
            positions = {key: position(m) for key, m in members.items()}
            return FetchPlan(self.session_id, INITIAL_EPOCH, list(positions), [], positions, members, position)
        sent = self._sent
        send: list[TopicPartition] = []
        positions = {}
        for key in members if changed is None else changed:
            member = members.get(key)
            if member is None:
                continue
            pos = position(member)
            if sent.get(key) != pos:
                send.append(key)
                positions[key] = pos
        forgotten = [key for key in sent if key not in members] if changed is None else []
        return FetchPlan(self.session_id, self.epoch, send, forgotten, positions, members, position)

    def answered(self, plan: FetchPlan, error: ErrorCode, session_id: int) -> bool:
        """The leader's answer to ``plan``; False when its partitions are to be ignored
        (a session error: the next request is a full fetch)."""
        if error in _RESTART:
            self.reset(keep_id=error != ErrorCode.fetch_session_id_not_found)
            return False
        if plan.full:
            self.full_fetches += 1
            if session_id == INVALID_SESSION_ID:  # the leader keeps no session: full next time too
                self.session_id, self.epoch, self._sent = INVALID_SESSION_ID, INITIAL_EPOCH, {}
                return True
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
            self._sent = dict(plan.positions)
            self.members = plan.members
            return True
        self.incremental_fetches += 1
        self.epoch = next_epoch(self.epoch)
        for key in plan.forgotten:
            self._sent.pop(key, None)
        for key in plan.send:
            self._sent[key] = plan.positions[key]
        self.members = plan.members
        return True

    @property
    def sent(self) -> Iterable[TopicPartition]:
        """The partitions the leader's session holds, as last sent."""
        return self._sent.keys()

    def unsend(self, key: TopicPartition) -> None:
        """The leader's session did not take ``key`` (UNKNOWN_TOPIC_ID): name it in the next
        request again."""
        self._sent.pop(key, None)

    def failed(self) -> None:
        """The request got no answer: the leader may or may not have applied it."""
        self.reset(keep_id=True)

    def reset(self, *, keep_id: bool) -> None:
        """Start over with a full fetch; ``keep_id``: name the old session so the leader
        closes it."""
        if not keep_id:
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._sent = {}
        self.members = None


class TopicIds:
    """The id of each topic a fetcher follows, and back: Fetch v13+ names topics by id. A
    removed topic's id stays until :meth:`prune` finds none of its partitions followed or
    in the leader's session (those forgotten there are named by it)."""

    def __init__(self) -> None:
        self.ids: dict[str, uuid.UUID] = {}
        self.names: dict[uuid.UUID, str] = {}

    def note(self, name: str, topic_id: uuid.UUID) -> None:
        old = self.ids.get(name)
        if old != topic_id:
            if old is not None:
                self.names.pop(old, None)  # the topic was created again: its old answers are ignored
            self.ids[name] = topic_id
            self.names[topic_id] = name

    def prune(self, live: Callable[[], set[str]], keep: int = 64) -> None:
        """Drop the ids of topics not in ``live()`` once there are more than ``keep``."""
        if len(self.ids) <= keep:
            return
        names = live()
        for name in [name for name in self.ids if name not in names]:
            self.names.pop(self.ids.pop(name), None)


def fetch_request(version: int, plan: FetchPlan, with_session: bool, config: FetchLimits,
                  topic_ids: Mapping[str, uuid.UUID]) -> Any:
    """The Fetch request of ``plan`` at ``version``: with the session (v7+) it names the
    partitions to send and forget, without it every partition; from v13 each topic by its
    id in ``topic_ids`` (KIP-516), so a leader that does not know this incarnation of a
    topic answers UNKNOWN_TOPIC_ID instead of another's records."""
    mod = request_module(_API_FETCH, version)
    by_id = version >= 13
    topics: dict[str, list[Any]] = {}
    for key in plan.send if with_session else plan.members:
        known = plan.positions.get(key)
        fetch_offset, leader_epoch, last_fetched_epoch, log_start = (
            known if known is not None else plan.position(plan.members[key]))
        topics.setdefault(key[0], []).append(
            build(
                mod.FetchPartition,
                partition=key[1],
                current_leader_epoch=leader_epoch,
                fetch_offset=fetch_offset,
                last_fetched_epoch=last_fetched_epoch,
                log_start_offset=log_start,
                partition_max_bytes=config.partition_max_bytes,
            )
        )
    forgotten: dict[str, list[int]] = {}
    for topic, index in plan.forgotten if with_session else ():
        if not by_id or topic in topic_ids:
            forgotten.setdefault(topic, []).append(index)

    def name(topic: str) -> dict[str, Any]:
        return {"topic_id": topic_ids[topic]} if by_id else {"topic": topic}

    return build(
        mod.FetchRequest,
        replica_id=config.node_id,  # v15+: in replica_state (KIP-903)
        replica_state=build(mod.ReplicaState, replica_id=config.node_id, replica_epoch=-1)
        if version >= 15 else None,
        max_wait=config.max_wait_ms,
        min_bytes=config.min_bytes,
        max_bytes=config.max_bytes,
        isolation_level=0,
        session_id=plan.session_id if with_session else 0,
        session_epoch=plan.epoch if with_session else -1,
        topics=tuple(build(mod.FetchTopic, **name(t), partitions=tuple(ps)) for t, ps in topics.items()),
        forgotten_topics_data=tuple(
            build(mod.ForgottenTopic, **name(t), partitions=tuple(ps)) for t, ps in forgotten.items()
        ),
        rack_id="",
    )
