"""What changed in the cluster metadata, told to listeners after a commit.

Events are derived by comparing two committed snapshots (:func:`diff`), so a
change made by another controller and picked up on a re-read is reported the
same way as one made here. Frozen; thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from controller.records import TopicInfo

__all__ = [
    "MetadataEvent",
    "MetadataListener",
    "PartitionsCreated",
    "TopicConfigChanged",
    "TopicCreated",
    "TopicDeleted",
    "diff",
]


@dataclass(frozen=True, slots=True)
class TopicCreated:
    topic: TopicInfo


@dataclass(frozen=True, slots=True)
class TopicDeleted:
    topic: TopicInfo


@dataclass(frozen=True, slots=True)
class PartitionsCreated:
    """``topic`` now has partitions ``old_count .. topic.partitions - 1`` as well."""

    topic: TopicInfo
    old_count: int


@dataclass(frozen=True, slots=True)
class TopicConfigChanged:
    """The overrides of ``topic`` changed (``topic.configs`` holds the new ones)."""

    topic: TopicInfo


MetadataEvent = TopicCreated | TopicDeleted | PartitionsCreated | TopicConfigChanged
MetadataListener = Callable[[MetadataEvent], None]


def diff(old: Iterable[TopicInfo], new: Iterable[TopicInfo]) -> list[MetadataEvent]:
    """The events that lead from topics ``old`` to topics ``new``: deletions first,
    then creations and changes. Topics are matched by topic id, so a topic deleted
    and created again under its name shows as TopicDeleted + TopicCreated."""
    before = {t.topic_id: t for t in old}
    after = {t.topic_id: t for t in new}
    events: list[MetadataEvent] = [TopicDeleted(t) for tid, t in before.items() if tid not in after]
    for tid, topic in after.items():
        previous = before.get(tid)
        if previous is None:
            events.append(TopicCreated(topic))
            continue
        if topic.partitions > previous.partitions:
            events.append(PartitionsCreated(topic, previous.partitions))
        if dict(topic.configs) != dict(previous.configs):
            events.append(TopicConfigChanged(topic))
    return events
