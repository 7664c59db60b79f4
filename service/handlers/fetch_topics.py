"""Fetch v13+ names topics by id (KIP-516): :func:`by_name` reads such a request as one
that names them, and gives the ids its answer must carry.

A consumer or a follower that asks by id is answered for that incarnation of the topic
only. An id this broker's metadata does not know (a topic deleted, or created again and
not yet seen here) is answered UNKNOWN_TOPIC_ID and reads nothing. Before, followers
fetched by name: one that had applied a topic's deletion and re-creation could copy the
deleted topic's records from a leader that had not, both at leader epoch 0.

v15+ carries the follower's id in ``replica_state`` (KIP-903) instead of ``replica_id``;
the request read here has ``replica_id`` at every version.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from common.errors import ErrorCode
from controller.records import TopicInfo
from fetch.planner import PartitionData

__all__ = ["TopicLookup", "by_name", "replica_id_of"]

_NO_ID = uuid.UUID(int=0)


class TopicLookup(Protocol):
    """The broker's metadata, as far as names and ids go."""

    def topic(self, name: str) -> TopicInfo | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...


@dataclass(frozen=True, slots=True)
class _Named:
    topic: str
    partitions: Sequence[Any]
    topic_id: uuid.UUID | None = None  # the incarnation asked for: a follower's is checked


class _NamedRequest:
    """The request, with named topics and forgotten topics and a ``replica_id``."""

    __slots__ = ("_request", "forgotten_topics_data", "replica_id", "topics")

    def __init__(self, request: Any, topics: tuple[_Named, ...], forgotten: tuple[_Named, ...]) -> None:
        self._request = request
        self.topics = topics
        self.forgotten_topics_data = forgotten
        self.replica_id = replica_id_of(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)


def replica_id_of(request: Any) -> int:
    """The follower's broker id (-1: a consumer), at any version."""
    state = getattr(request, "replica_state", None)  # v15+
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


def by_name(
    request: Any, version: int, metadata: TopicLookup
) -> tuple[Any, Callable[[str], uuid.UUID] | None, list[PartitionData]]:
    """``request`` as one that names its topics; the id of each topic name for the answer
    (None below v13); and the answers of partitions whose topic id is unknown here."""
    if version < 13:
        return request, None, []
    ids: dict[str, uuid.UUID] = {}
    topics: list[_Named] = []
    unknown: list[PartitionData] = []
    for t in request.topics:
        info = metadata.topic_by_id(t.topic_id)
        if info is None:
            name = f"<unknown topic id {t.topic_id}>"  # no topic's name: '<' is not allowed in one
            ids[name] = t.topic_id
            unknown.extend(PartitionData(name, int(p.partition), ErrorCode.unknown_topic_id) for p in t.partitions)
            continue
        ids[info.name] = info.topic_id
        topics.append(_Named(info.name, t.partitions, info.topic_id))
    forgotten: list[_Named] = []
    for t in getattr(request, "forgotten_topics_data", ()):
        info = metadata.topic_by_id(t.topic_id)
        if info is not None:  # an unknown one is in no session here
            forgotten.append(_Named(info.name, t.partitions))

    def topic_id(name: str) -> uuid.UUID:
        known = ids.get(name)
        if known is not None:
            return known
        info = metadata.topic(name)  # a partition a session answers without the request naming it
        return _NO_ID if info is None else info.topic_id

    return _NamedRequest(request, tuple(topics), tuple(forgotten)), topic_id, unknown
