"""One committed state of the cluster metadata: :class:`ClusterMetadata`.

Its bytes in the bucket are :mod:`controller.document_codec` (format 2; format 1
documents are read and upgraded), described in
``docs/adr/0010-cluster-metadata-v2.md``.

:class:`ClusterMetadata` is frozen; every change returns a new snapshot. Frozen
and therefore thread-safe.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from controller.records import TopicInfo
from controller.registrations import BrokerRegistration, PartitionRegistration

__all__ = ["ClusterMetadata"]


def _frozen(mapping: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """One committed state of the cluster.

    Invariants (checked on construction): topic names and ids are unique; every
    topic has exactly ``topic.partitions`` partition registrations, indexed from
    0 (``partitions[topic_id][i]`` is partition ``i``); ``controller_epoch`` is
    the epoch of the controller that wrote this state (0: written without a
    lease, by a single-node controller); ``next_producer_id`` is the first id of
    the next producer-id block and never decreases. ``sections`` maps a section
    name (``acls``, ``scram_credentials``, ``client_quotas``...) to canonical
    JSON text: later features add sections without a format change, and a
    reader that does not know a section keeps it as it is.
    """

    cluster_id: str
    revision: int = 0
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=dict)
    partitions: Mapping[uuid.UUID, tuple[PartitionRegistration, ...]] = field(default_factory=dict)
    controller_id: int = -1
    controller_epoch: int = 0
    next_producer_id: int = 0
    sections: Mapping[str, str] = field(default_factory=dict)
    _by_id: Mapping[uuid.UUID, str] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", _frozen(self.topics))
        object.__setattr__(self, "brokers", _frozen(self.brokers))
        object.__setattr__(
            self, "partitions", _frozen({k: tuple(v) for k, v in self.partitions.items()})
        )
        object.__setattr__(self, "sections", _frozen(self.sections))
        by_id = {t.topic_id: name for name, t in self.topics.items()}
        object.__setattr__(self, "_by_id", MappingProxyType(by_id))
        if len(by_id) != len(self.topics):
            raise ValueError("two topics share a topic id")
        if set(self.partitions) != set(by_id):
            raise ValueError("partition registrations do not match the topics")
        for topic in self.topics.values():
            if len(self.partitions[topic.topic_id]) != topic.partitions:
                raise ValueError(
                    f"topic {topic.name!r} has {topic.partitions} partitions but "
                    f"{len(self.partitions[topic.topic_id])} registrations"
                )

    # -- topics -----------------------------------------------------------------------

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        name = self._by_id.get(topic_id)
        return None if name is None else self.topics[name]

    def with_topic(
        self, topic: TopicInfo, partitions: Sequence[PartitionRegistration] | None = None
    ) -> ClusterMetadata:
        """Add or replace ``topic``; ``partitions`` None keeps its registrations."""
        registrations = (
            self.partitions.get(topic.topic_id, ()) if partitions is None else partitions
        )
        return replace(
            self,
            topics={**self.topics, topic.name: topic},
            partitions={**self.partitions, topic.topic_id: tuple(registrations)},
        )

    def without_topic(self, name: str) -> ClusterMetadata:
        gone = self.topics[name].topic_id
        return replace(
            self,
            topics={k: t for k, t in self.topics.items() if k != name},
            partitions={k: p for k, p in self.partitions.items() if k != gone},
        )

    # -- partitions ------------------------------------------------------------------------

    def partition(self, topic_id: uuid.UUID, index: int) -> PartitionRegistration | None:
        registrations = self.partitions.get(topic_id, ())
        return registrations[index] if 0 <= index < len(registrations) else None

    def iter_partitions(
        self, names: Iterable[str] | None = None
    ) -> Iterator[tuple[TopicInfo, int, PartitionRegistration]]:
        """Every partition as ``(topic, index, registration)``, topics by name; only those
        of the topics ``names`` when given (names of no topic are skipped)."""
        for name in sorted(self.topics if names is None else names):
            topic = self.topics.get(name)
            if topic is None:
                continue
            for index, registration in enumerate(self.partitions[topic.topic_id]):
                yield topic, index, registration

    def with_partitions(
        self, changes: Mapping[tuple[uuid.UUID, int], PartitionRegistration]
    ) -> ClusterMetadata:
        """Replace the registrations of existing partitions ``(topic_id, index)``."""
        if not changes:
            return self
        touched = {t for t, _ in changes}  # once: per topic it cost O(changes) x topics
        updated = {k: list(self.partitions[k]) for k in touched}
        for (topic_id, index), registration in changes.items():
            updated[topic_id][index] = registration
        return replace(
            self, partitions={**self.partitions, **{k: tuple(v) for k, v in updated.items()}}
        )

    # -- brokers ------------------------------------------------------------------------

    def with_broker(self, broker: BrokerRegistration) -> ClusterMetadata:
        return replace(self, brokers={**self.brokers, broker.node_id: broker})

    def without_broker(self, node_id: int) -> ClusterMetadata:
        return replace(self, brokers={k: b for k, b in self.brokers.items() if k != node_id})

    def active_brokers(self) -> list[BrokerRegistration]:
        """Registered brokers that are unfenced and not shutting down, by node id."""
        return [b for _, b in sorted(self.brokers.items()) if b.is_active]

    def is_active(self, node_id: int) -> bool:
        broker = self.brokers.get(node_id)
        return broker is not None and broker.is_active

    # -- sections -----------------------------------------------------------------------

    def section(self, name: str) -> Any:
        """The parsed JSON value of section ``name``, or None when absent."""
        text = self.sections.get(name)
        return None if text is None else json.loads(text)

    def with_section(self, name: str, value: Any) -> ClusterMetadata:
        """Set section ``name`` to the JSON-serialisable ``value`` (None removes it)."""
        sections = {k: v for k, v in self.sections.items() if k != name}
        if value is not None:
            sections[name] = json.dumps(value, sort_keys=True, separators=(",", ":"))
        return replace(self, sections=sections)
