"""The cluster metadata snapshot and its JSON document (format version 1).

::

    {"version": 1, "cluster_id": "<22 chars>", "revision": 7,
     "topics": [{"name": "t", "topic_id": "<uuid>", "partitions": 3,
                 "configs": {"retention.ms": "3600000"}, "created_ms": 1700000000000}],
     "brokers": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": null}]}

``revision`` grows by one on every committed write, so no two versions of the
document have the same bytes (the metadata store's consistent read relies on it).
Topics and brokers are written sorted, so equal snapshots encode to equal bytes.
A reader refuses a ``version`` it does not know rather than guess.

:class:`ClusterMetadata` is frozen; every change returns a new snapshot.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from controller.records import BrokerInfo, TopicInfo

__all__ = ["FORMAT_VERSION", "ClusterMetadata", "decode", "encode"]

FORMAT_VERSION = 1


def _frozen(mapping: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """One committed state of the cluster. Invariant: topic names and ids are unique."""

    cluster_id: str
    revision: int = 0
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    brokers: Mapping[int, BrokerInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", _frozen(self.topics))
        object.__setattr__(self, "brokers", _frozen(self.brokers))

    def with_topic(self, topic: TopicInfo) -> ClusterMetadata:
        return replace(self, topics={**self.topics, topic.name: topic})

    def without_topic(self, name: str) -> ClusterMetadata:
        return replace(self, topics={k: t for k, t in self.topics.items() if k != name})

    def with_broker(self, broker: BrokerInfo) -> ClusterMetadata:
        return replace(self, brokers={**self.brokers, broker.node_id: broker})

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)


def encode(metadata: ClusterMetadata) -> bytes:
    document = {
        "version": FORMAT_VERSION,
        "cluster_id": metadata.cluster_id,
        "revision": metadata.revision,
        "topics": [
            {
                "name": t.name,
                "topic_id": str(t.topic_id),
                "partitions": t.partitions,
                "configs": dict(sorted(t.configs.items())),
                "created_ms": t.created_ms,
            }
            for t in sorted(metadata.topics.values(), key=lambda t: t.name)
        ],
        "brokers": [
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
            for b in sorted(metadata.brokers.values(), key=lambda b: b.node_id)
        ],
    }
    return json.dumps(document, indent=1).encode()


def decode(data: bytes) -> ClusterMetadata:
    """Parse a document; ``ValueError`` saying what is wrong if it is not one."""
    try:
        document = json.loads(data)
        version = document["version"]
        if version != FORMAT_VERSION:
            raise ValueError(
                f"format version {version!r} is not supported by this Strata "
                f"(it reads version {FORMAT_VERSION}); upgrade Strata"
            )
        topics = [
            TopicInfo(
                name=str(t["name"]),
                topic_id=uuid.UUID(t["topic_id"]),
                partitions=int(t["partitions"]),
                configs={str(k): str(v) for k, v in t["configs"].items()},
                created_ms=int(t["created_ms"]),
            )
            for t in document["topics"]
        ]
        brokers = [
            BrokerInfo(int(b["node_id"]), str(b["host"]), int(b["port"]), b.get("rack"))
            for b in document["brokers"]
        ]
        return ClusterMetadata(
            cluster_id=str(document["cluster_id"]),
            revision=int(document["revision"]),
            topics={t.name: t for t in topics},
            brokers={b.node_id: b for b in brokers},
        )
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as err:
        raise ValueError(f"cluster metadata document is malformed: {err!r}") from err
    except ValueError as err:
        raise ValueError(f"cluster metadata document is not usable: {err}") from err
