"""Kafka's metadata records for one change, and their replay onto an image.

The controller validates an operation against its image as before and computes the
next image; :func:`records_between` then says the difference in Kafka's vocabulary
(``TopicRecord``, ``PartitionRecord``, ``PartitionChangeRecord``, ``ConfigRecord``,
``RemoveTopicRecord``, ``RegisterBrokerRecord``, ``BrokerRegistrationChangeRecord``,
``UnregisterBrokerRecord``, ``ProducerIdsRecord``, and Strata's ``SectionRecord``), and
:class:`ImageBuilder` replays records onto an image. Every broker builds its next image
by that replay; the controller keeps the image its operation computed, which the test
suite proves equal to the replay at every commit of every test
(``STRATA_VERIFY_METADATA_REPLAY``), so they cannot disagree without a test failing.

Walking a change costs the topics and partitions it touched: unchanged topics are
recognised by identity (an image shares unchanged topics and partition tuples with
the one it was made from), and replay edits copies of only what records name.

Field names are format 2's (``docs/adr/0010-cluster-metadata-v2.md``); the record
fields and replay rules are in ``docs/adr/0025-metadata-log.md`` §3. Pure; thread-safe.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from controller.document import ClusterMetadata
from controller.document_codec import (
    broker_from_json,
    broker_json,
    partition_changed,
    partition_from_json,
    partition_json,
)
from controller.metadata_log_format import Batch, MetadataLogError
from controller.records import TopicInfo
from controller.registrations import BrokerRegistration, PartitionRegistration

__all__ = ["ImageBuilder", "records_between", "replay"]

_TOPIC_CONFIG = 2  # Kafka's ConfigResource.Type.TOPIC
Record = dict[str, Any]


def records_between(base: ClusterMetadata, updated: ClusterMetadata) -> list[Record]:
    """The records that turn ``base`` into ``updated`` (except revision and controller,
    which a batch's header carries)."""
    records: list[Record] = []
    for topic in base.topics.values():
        if updated.topic_by_id(topic.topic_id) is None:
            records.append({"type": "RemoveTopicRecord", "topic_id": str(topic.topic_id)})
    changed = []
    for topic in updated.topics.values():
        out = _topic_records(base, updated, topic)
        if out:
            changed.append((str(topic.topic_id), out))
    # one order whatever the order of the images' topics (a node started from a snapshot has
    # them by name, one that created or replayed them in creation order): two nodes that
    # compute the same change write the same bytes (controller.fence_ahead)
    changed.sort(key=lambda c: c[0])
    for _, out in changed:
        records.extend(out)
    records.extend(_broker_records(base, updated))
    if updated.next_producer_id != base.next_producer_id:
        records.append({"type": "ProducerIdsRecord", "next_producer_id": updated.next_producer_id})
    for name in sorted(set(base.sections) | set(updated.sections)):
        text = updated.sections.get(name)
        if text != base.sections.get(name):
            value = None if text is None else json.loads(text)
            records.append({"type": "SectionRecord", "name": name, "value": value})
    return records


def _topic_records(base: ClusterMetadata, updated: ClusterMetadata, topic: TopicInfo) -> list[Record]:
    tid = str(topic.topic_id)
    now = updated.partitions[topic.topic_id]
    old = base.topic_by_id(topic.topic_id)
    if old is None:
        out: list[Record] = [_topic_record(topic)]
        out.extend(_config_record(topic.name, k, v) for k, v in sorted(topic.configs.items()))
        out.extend(_partition_record(tid, i, p) for i, p in enumerate(now))
        return out
    was = base.partitions[topic.topic_id]
    if old is topic and was is now:
        return []
    out = []
    if (old.name, old.created_ms) != (topic.name, topic.created_ms):
        out.append(_topic_record(topic))
    for key in sorted(set(old.configs) | set(topic.configs)):
        if old.configs.get(key) != topic.configs.get(key):
            out.append(_config_record(topic.name, key, topic.configs.get(key)))
    if was is not now:
        for index, registration in enumerate(now):
            if index >= len(was):
                out.append(_partition_record(tid, index, registration))
            elif was[index] is not registration and was[index] != registration:
                out.append(_partition_change(tid, index, was[index], registration))
    return out


def _topic_record(topic: TopicInfo) -> Record:
    return {"type": "TopicRecord", "name": topic.name, "topic_id": str(topic.topic_id),
            "created_ms": topic.created_ms}


def _config_record(topic: str, key: str, value: str | None) -> Record:
    return {"type": "ConfigRecord", "resource_type": _TOPIC_CONFIG, "resource_name": topic,
            "name": key, "value": value}


def _partition_record(tid: str, index: int, registration: PartitionRegistration) -> Record:
    return {"type": "PartitionRecord", "topic_id": tid, **partition_json(index, registration)}


def _partition_change(tid: str, index: int, was: PartitionRegistration,
                      now: PartitionRegistration) -> Record:
    """The fields of ``now`` that differ from ``was`` (absent ones are unchanged)."""
    record: Record = {"type": "PartitionChangeRecord", "topic_id": tid, "partition": index}
    if now.replicas != was.replicas:
        record["replicas"] = list(now.replicas)
    if now.isr != was.isr:
        record["isr"] = list(now.isr)
    if now.leader != was.leader:
        record["leader"] = now.leader
    if now.leader_epoch != was.leader_epoch:
        record["leader_epoch"] = now.leader_epoch
    if now.partition_epoch != was.partition_epoch:
        record["partition_epoch"] = now.partition_epoch
    if now.adding_replicas != was.adding_replicas:
        record["adding_replicas"] = list(now.adding_replicas)
    if now.removing_replicas != was.removing_replicas:
        record["removing_replicas"] = list(now.removing_replicas)
    if now.leader_recovery_state != was.leader_recovery_state:
        record["leader_recovery_state"] = int(now.leader_recovery_state)
    return record


def _broker_records(base: ClusterMetadata, updated: ClusterMetadata) -> list[Record]:
    out: list[Record] = []
    for node_id in sorted(set(base.brokers) | set(updated.brokers)):
        was, now = base.brokers.get(node_id), updated.brokers.get(node_id)
        if was is now or was == now:
            continue
        if now is None:
            assert was is not None
            out.append({"type": "UnregisterBrokerRecord", "node_id": node_id,
                        "broker_epoch": was.broker_epoch})
        elif was is None or replace(was, fenced=now.fenced,
                                    in_controlled_shutdown=now.in_controlled_shutdown) != now:
            out.append({"type": "RegisterBrokerRecord", **broker_json(now)})
        else:
            out.append({
                "type": "BrokerRegistrationChangeRecord", "node_id": node_id,
                "broker_epoch": now.broker_epoch,
                "fenced": _flag(was.fenced, now.fenced),
                "in_controlled_shutdown": _flag(was.in_controlled_shutdown, now.in_controlled_shutdown),
            })
    return out


def _flag(was: bool, now: bool) -> int:
    """Kafka's BrokerRegistrationFencingChange: 1 set, -1 cleared, 0 unchanged (Strata uses the
    same three values for ``in_controlled_shutdown``, which Kafka can only set)."""
    return 0 if was == now else (1 if now else -1)


class ImageBuilder:
    """Replays batches onto an image; :meth:`build` makes the resulting image once.

    Not thread-safe (a builder belongs to the thread replaying)."""

    def __init__(self, image: ClusterMetadata) -> None:
        self._image = image
        self.revision = image.revision
        self._topics = dict(image.topics)
        self._names = {t.topic_id: name for name, t in image.topics.items()}
        self._partitions = dict(image.partitions)
        self._editing: dict[uuid.UUID, list[PartitionRegistration]] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._brokers = dict(image.brokers)
        self._sections = dict(image.sections)
        self._next_producer_id = image.next_producer_id
        self._controller = (image.controller_id, image.controller_epoch)
        self.changed = False
        self._apply: dict[str, Callable[[Record], None]] = {
            "TopicRecord": self._topic, "PartitionRecord": self._partition,
            "PartitionChangeRecord": self._partition_change, "ConfigRecord": self._config,
            "RemoveTopicRecord": self._remove_topic, "RegisterBrokerRecord": self._register,
            "BrokerRegistrationChangeRecord": self._broker_change,
            "UnregisterBrokerRecord": self._unregister, "ProducerIdsRecord": self._producer_ids,
            "SectionRecord": self._section, "FeatureLevelRecord": _ignore, "NoOpRecord": _ignore,
        }

    def apply(self, batch: Batch) -> None:
        """Apply ``batch``, which must be the next slot; :class:`MetadataLogError` if it is
        not, or names something the image does not have (a gap, or a replay bug)."""
        if batch.revision != self.revision + 1:
            raise MetadataLogError(f"metadata batch {batch.revision} does not follow {self.revision}")
        for record in batch.records:
            handler = self._apply.get(record["type"])
            if handler is None:
                raise MetadataLogError(
                    f"metadata batch {batch.revision} has a record of type {record['type']!r} this "
                    "Strata does not know; upgrade Strata"
                )
            try:
                handler(record)
            except (KeyError, IndexError, TypeError, ValueError) as err:
                raise MetadataLogError(
                    f"metadata batch {batch.revision}: cannot apply {record!r}: {err!r}"
                ) from err
        self.revision = batch.revision
        self._controller = (batch.controller_id, batch.controller_epoch)
        self.changed = True

    def build(self) -> ClusterMetadata:
        """The image after every applied batch."""
        if not self.changed:
            return self._image
        for tid, registrations in self._editing.items():
            self._partitions[tid] = tuple(registrations)
            name = self._names[tid]
            if self._topics[name].partitions != len(registrations):
                self._topics[name] = replace(self._topics[name], partitions=len(registrations))
        self._editing.clear()
        image = ClusterMetadata(
            cluster_id=self._image.cluster_id, revision=self.revision, topics=self._topics,
            brokers=self._brokers, partitions=self._partitions,
            controller_id=self._controller[0], controller_epoch=self._controller[1],
            next_producer_id=self._next_producer_id, sections=self._sections,
        )
        self._image, self.changed = image, False
        return image

    # -- records ------------------------------------------------------------------------

    def _topic_id(self, text: str) -> uuid.UUID:
        """The topic id a record names (parsed once per batch and topic)."""
        tid = self._topic_ids.get(text)
        if tid is None:
            tid = self._topic_ids[text] = uuid.UUID(text)
        return tid

    def _registrations(self, tid: uuid.UUID) -> list[PartitionRegistration]:
        editing = self._editing.get(tid)
        if editing is None:
            editing = self._editing[tid] = list(self._partitions[tid])
        return editing

    def _topic(self, r: Record) -> None:
        tid = uuid.UUID(r["topic_id"])
        old = self._names.get(tid)
        if old is None:
            self._partitions[tid] = ()
            self._topics[r["name"]] = TopicInfo(r["name"], tid, 0, {}, r["created_ms"])
        else:
            topic = self._topics.pop(old)
            self._topics[r["name"]] = replace(topic, name=r["name"], created_ms=r["created_ms"])
        self._names[tid] = r["name"]

    def _partition(self, r: Record) -> None:
        registrations = self._registrations(self._topic_id(r["topic_id"]))
        index = r["partition"]
        if index != len(registrations):
            raise ValueError(f"partition {index} is not the next of {len(registrations)}")
        registrations.append(partition_from_json(index, r))

    def _partition_change(self, r: Record) -> None:
        registrations = self._registrations(self._topic_id(r["topic_id"]))
        index = r["partition"]
        if type(index) is not int or not 0 <= index < len(registrations):
            raise IndexError(f"partition {index} of a topic of {len(registrations)}")
        was = registrations[index]
        now = partition_changed(was, r)
        if "partition_epoch" in r and now.partition_epoch <= was.partition_epoch:
            raise ValueError(f"partition epoch {now.partition_epoch} after {was.partition_epoch}")
        registrations[index] = now

    def _config(self, r: Record) -> None:
        if r["resource_type"] != _TOPIC_CONFIG:
            raise ValueError(f"config resource type {r['resource_type']} is not a topic")
        topic = self._topics[r["resource_name"]]
        configs = {k: v for k, v in topic.configs.items() if k != r["name"]}
        if r["value"] is not None:
            configs[r["name"]] = str(r["value"])
        self._topics[topic.name] = replace(topic, configs=configs)

    def _remove_topic(self, r: Record) -> None:
        tid = uuid.UUID(r["topic_id"])
        name = self._names.pop(tid)
        del self._topics[name]
        del self._partitions[tid]
        self._editing.pop(tid, None)

    def _register(self, r: Record) -> None:
        broker = broker_from_json(r)
        self._brokers[broker.node_id] = broker

    def _broker_change(self, r: Record) -> None:
        was: BrokerRegistration = self._brokers[r["node_id"]]
        fenced = {1: True, -1: False}.get(r["fenced"], was.fenced)
        shutting = {1: True, -1: False}.get(r["in_controlled_shutdown"], was.in_controlled_shutdown)
        self._brokers[was.node_id] = replace(
            was, broker_epoch=r["broker_epoch"], fenced=fenced, in_controlled_shutdown=shutting
        )

    def _unregister(self, r: Record) -> None:
        del self._brokers[r["node_id"]]

    def _producer_ids(self, r: Record) -> None:
        self._next_producer_id = r["next_producer_id"]

    def _section(self, r: Record) -> None:
        if r["value"] is None:
            self._sections.pop(r["name"], None)
        else:
            self._sections[r["name"]] = json.dumps(r["value"], sort_keys=True, separators=(",", ":"))


def _ignore(_record: Record) -> None:
    """Records with no effect on the image (the format level, a new controller's no-op)."""


def replay(image: ClusterMetadata, *batches: Batch) -> ClusterMetadata:
    """``image`` with ``batches`` applied in order."""
    builder = ImageBuilder(image)
    for batch in batches:
        builder.apply(batch)
    return builder.build()
