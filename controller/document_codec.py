"""The cluster metadata document's bytes: JSON, format version 2.

``docs/adr/0010-cluster-metadata-v2.md`` describes the format; in short::

    {"version": 2, "cluster_id": "<22 chars>", "revision": 7,
     "controller": {"node_id": 1, "epoch": 3},
     "producer_ids": {"next_producer_id": 2000},
     "brokers": [{"node_id": 1, "incarnation_id": "<uuid>", "broker_epoch": 5,
                  "rack": null, "fenced": false, "in_controlled_shutdown": false,
                  "endpoints": [{"name": "PLAINTEXT", "host": "h", "port": 9092,
                                 "security_protocol": 0}]}],
     "topics": [{"name": "orders", "topic_id": "<uuid>", "partitions": 1,
                 "configs": {}, "created_ms": 1700000000000,
                 "partition_states": [{"partition": 0, "replicas": [1], "isr": [1],
                                       "leader": 1, "leader_epoch": 0,
                                       "partition_epoch": 0}]}],
     "sections": {}}

``adding_replicas``, ``removing_replicas`` (default ``[]``) and
``leader_recovery_state`` (default 0) are written only when they differ from
their default. The fields a format-1 reader used (``topics[].name``,
``topic_id``, ``partitions``, ``configs``, ``created_ms``) keep their names and
meaning, so the Spark reader, which reads only those, reads both formats.

:func:`decode` reads format 1 too and upgrades it (:func:`_from_v1`); it refuses a
version it does not know rather than guess. :func:`encode` always writes format 2.
Pure functions; thread-safe.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from controller.document import ClusterMetadata
from controller.records import TopicInfo
from controller.registrations import (
    BrokerRegistration,
    Endpoint,
    LeaderRecoveryState,
    PartitionRegistration,
)

__all__ = [
    "FORMAT_VERSION",
    "broker_from_json",
    "broker_json",
    "decode",
    "encode",
    "partition_from_json",
    "partition_json",
    "topic_from_json",
]

FORMAT_VERSION = 2
_V1 = 1
_V1_DEFAULT_NODE_ID = 1  # node.id's default: the node a format-1 (single-node) cluster ran on


def encode(metadata: ClusterMetadata) -> bytes:
    """Format-2 bytes of ``metadata`` (compact JSON; keys in a fixed order)."""
    document = {
        "version": FORMAT_VERSION,
        "cluster_id": metadata.cluster_id,
        "revision": metadata.revision,
        "controller": {"node_id": metadata.controller_id, "epoch": metadata.controller_epoch},
        "producer_ids": {"next_producer_id": metadata.next_producer_id},
        "brokers": [broker_json(b) for _, b in sorted(metadata.brokers.items())],
        "topics": [
            {
                "name": t.name,
                "topic_id": str(t.topic_id),
                "partitions": t.partitions,
                "configs": dict(sorted(t.configs.items())),
                "created_ms": t.created_ms,
                "partition_states": [
                    partition_json(i, p) for i, p in enumerate(metadata.partitions[t.topic_id])
                ],
            }
            for t in sorted(metadata.topics.values(), key=lambda t: t.name)
        ],
        "sections": {k: json.loads(v) for k, v in sorted(metadata.sections.items())},
    }
    return json.dumps(document, separators=(",", ":")).encode()


def decode(data: bytes) -> ClusterMetadata:
    """Parse a format 1 or 2 document; ``ValueError`` saying what is wrong if it is not one."""
    try:
        document = json.loads(data)
        version = document["version"]
        if version == _V1:
            return _from_v1(document)
        if version != FORMAT_VERSION:
            raise ValueError(
                f"format version {version!r} is not supported by this Strata "
                f"(it reads versions {_V1} and {FORMAT_VERSION}); upgrade Strata"
            )
        return _from_v2(document)
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as err:
        raise ValueError(f"cluster metadata document is malformed: {err!r}") from err
    except ValueError as err:
        raise ValueError(f"cluster metadata document is not usable: {err}") from err


# -- format 2 ----------------------------------------------------------------------------


def broker_json(b: BrokerRegistration) -> dict[str, Any]:
    return {
        "node_id": b.node_id,
        "incarnation_id": None if b.incarnation_id is None else str(b.incarnation_id),
        "broker_epoch": b.broker_epoch,
        "rack": b.rack,
        "fenced": b.fenced,
        "in_controlled_shutdown": b.in_controlled_shutdown,
        "endpoints": [
            {
                "name": e.name,
                "host": e.host,
                "port": e.port,
                "security_protocol": e.security_protocol,
            }
            for e in b.endpoints
        ],
    }


def partition_json(index: int, p: PartitionRegistration) -> dict[str, Any]:
    out: dict[str, Any] = {
        "partition": index,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch,
    }
    if p.adding_replicas:
        out["adding_replicas"] = list(p.adding_replicas)
    if p.removing_replicas:
        out["removing_replicas"] = list(p.removing_replicas)
    if p.leader_recovery_state != LeaderRecoveryState.RECOVERED:
        out["leader_recovery_state"] = int(p.leader_recovery_state)
    return out


def _from_v2(document: dict[str, Any]) -> ClusterMetadata:
    topics: dict[str, TopicInfo] = {}
    partitions: dict[uuid.UUID, tuple[PartitionRegistration, ...]] = {}
    for t in document["topics"]:
        topic = topic_from_json(t)
        states = t["partition_states"]
        registrations = tuple(partition_from_json(i, s) for i, s in enumerate(states))
        topics[topic.name] = topic
        partitions[topic.topic_id] = registrations
    brokers = [broker_from_json(b) for b in document["brokers"]]
    controller = document["controller"]
    sections = document.get("sections") or {}
    if not isinstance(sections, dict):
        raise ValueError("sections is not an object")
    return ClusterMetadata(
        cluster_id=str(document["cluster_id"]),
        revision=_int(document["revision"], "revision"),
        topics=topics,
        brokers={b.node_id: b for b in brokers},
        partitions=partitions,
        controller_id=_int(controller["node_id"], "controller.node_id"),
        controller_epoch=_int(controller["epoch"], "controller.epoch"),
        next_producer_id=_int(
            document["producer_ids"]["next_producer_id"], "producer_ids.next_producer_id"
        ),
        sections={
            str(k): json.dumps(v, sort_keys=True, separators=(",", ":"))
            for k, v in sections.items()
        },
    )


def topic_from_json(t: dict[str, Any]) -> TopicInfo:
    return TopicInfo(
        name=str(t["name"]),
        topic_id=uuid.UUID(t["topic_id"]),
        partitions=_int(t["partitions"], "partitions"),
        configs={str(k): str(v) for k, v in t["configs"].items()},
        created_ms=_int(t["created_ms"], "created_ms"),
    )


def partition_from_json(index: int, s: dict[str, Any]) -> PartitionRegistration:
    if _int(s["partition"], "partition") != index:
        raise ValueError(f"partition state {s['partition']!r} is listed at position {index}")
    return PartitionRegistration(
        replicas=_ints(s["replicas"], "replicas"),
        isr=_ints(s["isr"], "isr"),
        leader=_int(s["leader"], "leader"),
        leader_epoch=_int(s["leader_epoch"], "leader_epoch"),
        partition_epoch=_int(s["partition_epoch"], "partition_epoch"),
        adding_replicas=_ints(s.get("adding_replicas", []), "adding_replicas"),
        removing_replicas=_ints(s.get("removing_replicas", []), "removing_replicas"),
        leader_recovery_state=LeaderRecoveryState(
            _int(s.get("leader_recovery_state", 0), "leader_recovery_state")
        ),
    )


def partition_changed(was: PartitionRegistration, change: dict[str, Any]) -> PartitionRegistration:
    """``was`` with the fields a PartitionChangeRecord names (each checked as
    :func:`partition_from_json` checks it); the rest kept as they are."""
    get = change.get
    replicas, isr = get("replicas", _KEEP), get("isr", _KEEP)
    leader, leader_epoch = get("leader", _KEEP), get("leader_epoch", _KEEP)
    partition_epoch = get("partition_epoch", _KEEP)
    adding, removing = get("adding_replicas", _KEEP), get("removing_replicas", _KEEP)
    recovery = get("leader_recovery_state", _KEEP)
    return PartitionRegistration(
        was.replicas if replicas is _KEEP else _ints(replicas, "replicas"),
        was.isr if isr is _KEEP else _ints(isr, "isr"),
        was.leader if leader is _KEEP else _int(leader, "leader"),
        was.leader_epoch if leader_epoch is _KEEP else _int(leader_epoch, "leader_epoch"),
        was.partition_epoch if partition_epoch is _KEEP else _int(partition_epoch, "partition_epoch"),
        was.adding_replicas if adding is _KEEP else _ints(adding, "adding_replicas"),
        was.removing_replicas if removing is _KEEP else _ints(removing, "removing_replicas"),
        (was.leader_recovery_state if recovery is _KEEP
         else LeaderRecoveryState(_int(recovery, "leader_recovery_state"))),
    )


#: a field a change record leaves out (``None`` is a value: an invalid one, refused)
_KEEP: Any = object()


def broker_from_json(b: dict[str, Any]) -> BrokerRegistration:
    incarnation = b["incarnation_id"]
    rack = b["rack"]
    return BrokerRegistration(
        node_id=_int(b["node_id"], "node_id"),
        incarnation_id=None if incarnation is None else uuid.UUID(incarnation),
        broker_epoch=_int(b["broker_epoch"], "broker_epoch"),
        endpoints=tuple(
            Endpoint(
                str(e["name"]),
                str(e["host"]),
                _int(e["port"], "port"),
                _int(e["security_protocol"], "security_protocol"),
            )
            for e in b["endpoints"]
        ),
        rack=None if rack is None else str(rack),
        fenced=_bool(b["fenced"], "fenced"),
        in_controlled_shutdown=_bool(b["in_controlled_shutdown"], "in_controlled_shutdown"),
    )


def _int(value: Any, what: str) -> int:
    if type(value) is not int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{what} is {value!r}, not an integer")
    return value


def _ints(values: Any, what: str) -> tuple[int, ...]:
    if not isinstance(values, list):
        raise ValueError(f"{what} is {values!r}, not a list")
    out = tuple(values)
    if not _PLAIN_INT.issuperset(map(type, out)):  # the common case checked in C
        for v in out:
            _int(v, what)
    return out


_PLAIN_INT = frozenset({int})


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} is {value!r}, not a boolean")
    return value


# -- format 1: read and upgrade ----------------------------------------------------------------


def _from_v1(document: dict[str, Any]) -> ClusterMetadata:
    """A format-1 document as format 2.

    Format 1 was written by single-node Strata, where every partition lived on the
    one broker. The upgrade puts each partition on the lowest registered node id
    (``node.id``'s default, 1, when none registered) as sole replica, leader and
    ISR, at epoch 0. Brokers become registrations without an incarnation, fenced
    until they register again; the controller epoch is 0 and producer ids start
    at 0 (format 1 never allocated any).
    """
    brokers = [
        BrokerRegistration(
            node_id=_int(b["node_id"], "node_id"),
            incarnation_id=None,
            broker_epoch=-1,
            endpoints=(Endpoint("PLAINTEXT", str(b["host"]), _int(b["port"], "port")),),
            rack=None if b.get("rack") is None else str(b["rack"]),
            fenced=True,
        )
        for b in document["brokers"]
    ]
    owner = min((b.node_id for b in brokers), default=_V1_DEFAULT_NODE_ID)
    sole = PartitionRegistration(replicas=(owner,), isr=(owner,), leader=owner)
    topics = [topic_from_json(t) for t in document["topics"]]
    return ClusterMetadata(
        cluster_id=str(document["cluster_id"]),
        revision=_int(document["revision"], "revision"),
        topics={t.name: t for t in topics},
        brokers={b.node_id: b for b in brokers},
        partitions={t.topic_id: (sole,) * t.partitions for t in topics},
    )
