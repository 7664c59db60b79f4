"""What changed in the cluster metadata, told to listeners after a commit.

Events are derived by comparing two committed snapshots (:func:`diff_metadata`),
so a change made by another controller and picked up on a re-read is reported
the same way as one made here. Topic events come first (deletions, then
creations and changes), then partition changes (leader, ISR, replicas of
partitions that existed before and still do), then broker changes. Frozen;
thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from controller.records import TopicInfo
from controller.registrations import BrokerRegistration, PartitionRegistration

if TYPE_CHECKING:
    from controller.document import ClusterMetadata

__all__ = [
    "BrokerChanged",
    "MetadataEvent",
    "MetadataListener",
    "PartitionChanged",
    "PartitionsCreated",
    "TopicConfigChanged",
    "TopicCreated",
    "TopicDeleted",
    "diff",
    "diff_metadata",
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


@dataclass(frozen=True, slots=True)
class PartitionChanged:
    """Partition ``partition`` of ``topic`` changed leader, ISR or replicas."""

    topic: TopicInfo
    partition: int
    previous: PartitionRegistration
    registration: PartitionRegistration


@dataclass(frozen=True, slots=True)
class BrokerChanged:
    """Broker ``node_id`` registered, changed (fenced, unfenced...) or left
    (``registration`` None)."""

    node_id: int
    previous: BrokerRegistration | None
    registration: BrokerRegistration | None


MetadataEvent = (
    TopicCreated
    | TopicDeleted
    | PartitionsCreated
    | TopicConfigChanged
    | PartitionChanged
    | BrokerChanged
)
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
        if previous is topic:
            continue
        if previous is None:
            events.append(TopicCreated(topic))
            continue
        if topic.partitions > previous.partitions:
            events.append(PartitionsCreated(topic, previous.partitions))
        if dict(topic.configs) != dict(previous.configs):
            events.append(TopicConfigChanged(topic))
    return events


def diff_metadata(
    old: ClusterMetadata, new: ClusterMetadata, *, partitions: bool = True
) -> list[MetadataEvent]:
    """The events that lead from snapshot ``old`` to snapshot ``new`` (module docstring order);
    without ``partitions``, no ``PartitionChanged`` (a broker's death changes every partition
    it hosted: thousands of events nobody may want)."""
    events = diff(old.topics.values(), new.topics.values())
    for topic in sorted(new.topics.values(), key=lambda t: t.name) if partitions else ():
        before, after = old.partitions.get(topic.topic_id), new.partitions[topic.topic_id]
        if before is None or before is after:
            continue
        for index, (was, now) in enumerate(zip(before, after, strict=False)):
            if was != now:
                events.append(PartitionChanged(topic, index, was, now))
    for node_id in sorted(set(old.brokers) | set(new.brokers)):
        was_broker, now_broker = old.brokers.get(node_id), new.brokers.get(node_id)
        if was_broker != now_broker:
            events.append(BrokerChanged(node_id, was_broker, now_broker))
    return events
